//! Injected system-call failures, for the tests of the undo paths that no outside action can provoke (a failing fsync, rename or folder sync, a process out of descriptors): each call site of the write path asks [`check`] first. Outside `cfg(test)` it is an empty inline function.
use std::io;
use std::path::Path;

/// The system calls the write path can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Reading a file (a ref).
    Read,
    /// Creating a file (an object's temporary file, a ref's lock).
    Create,
    /// Writing a file's bytes.
    Write,
    /// fsync of a file.
    Fsync,
    /// Renaming a file into place.
    Rename,
    /// fsync of a folder.
    SyncDir,
}

/// `Err` when a test planned this call to fail, else `Ok`.
#[inline]
pub(crate) fn check(op: Op, path: &Path) -> io::Result<()> {
    #[cfg(test)]
    {
        plan::hit(op, path)
    }
    #[cfg(not(test))]
    {
        let _ = (op, path);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) use plan::inject;

#[cfg(test)]
mod plan {
    use super::Op;
    use std::cell::RefCell;
    use std::path::Path;

    /// A planned failure: the `nth` call (1-based) of `op` on a path containing `path`.
    struct Planned {
        op: Op,
        path: String,
        errno: i32,
        nth: usize,
        seen: usize,
        fired: bool,
    }

    thread_local! {
        static PLANNED: RefCell<Option<Planned>> = const { RefCell::new(None) };
    }

    /// Fails the `nth` call of `op` on a path that contains `path` (on this thread) with
    /// `errno` (every such call when `nth` is 0), until the returned guard is dropped. [`Injected::fired`] tells whether it did.
    pub(crate) fn inject(op: Op, path: &str, errno: i32, nth: usize) -> Injected {
        PLANNED.with(|p| {
            *p.borrow_mut() = Some(Planned {
                op,
                path: path.to_owned(),
                errno,
                nth,
                seen: 0,
                fired: false,
            })
        });
        Injected(())
    }

    pub(crate) struct Injected(());

    impl Injected {
        pub(crate) fn fired(&self) -> bool {
            PLANNED.with(|p| p.borrow().as_ref().is_some_and(|p| p.fired))
        }
    }

    impl Drop for Injected {
        fn drop(&mut self) {
            PLANNED.with(|p| *p.borrow_mut() = None);
        }
    }

    pub(in crate::storage) fn hit(op: Op, path: &Path) -> std::io::Result<()> {
        PLANNED.with(|p| {
            let mut p = p.borrow_mut();
            let Some(plan) = p.as_mut() else {
                return Ok(());
            };
            if plan.op != op || !path.to_string_lossy().contains(&plan.path) {
                return Ok(());
            }
            plan.seen += 1;
            if plan.nth == 0 || plan.seen == plan.nth {
                plan.fired = true;
                return Err(std::io::Error::from_raw_os_error(plan.errno));
            }
            Ok(())
        })
    }
}

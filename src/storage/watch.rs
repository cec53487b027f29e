//! `HeadWatch`: knows, without touching the disk, that a tenant's `main` has not moved since it
//! was last read, through inotify watches on the ref's folder and on `packed-refs`.
//!
//! The kernel queues an inotify event inside the rename or write that moves a ref, so draining
//! the queue before answering sees every change that finished before the request. Reading the
//! queue is a non-blocking read of an inotify descriptor, not disk I/O. When a watch cannot be
//! added (the kernel's watch limit) or the queue overflows, tenants are simply not "known" and
//! readers fall back to reading the ref file.
use crate::domain::{CommitId, TenantId};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug)]
pub struct HeadWatch {
    inner: Mutex<Option<Inner>>,
}

#[derive(Debug)]
struct Inner {
    inotify: Inotify,
    /// Which tenant each watch belongs to, and whether it watches the repository folder (where
    /// only `packed-refs` matters) rather than `refs/heads`.
    watches: HashMap<WatchDescriptor, (TenantId, bool)>,
    /// Tenants whose `main` is known to be at this commit.
    known: HashMap<TenantId, CommitId>,
    /// Where events are read into, kept so that a request does not zero a fresh buffer.
    buffer: Vec<u8>,
}

const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::MODIFY)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

impl HeadWatch {
    /// A watch; without inotify (or with no descriptors left) it knows nothing, ever.
    pub fn new() -> Self {
        let inner = Inotify::init().ok().map(|inotify| Inner {
            inotify,
            watches: HashMap::new(),
            known: HashMap::new(),
            buffer: vec![0; 16 * 1024],
        });
        Self {
            inner: Mutex::new(inner),
        }
    }

    /// A watch that never knows anything: every read checks the ref file.
    pub fn disabled() -> Self {
        Self {
            inner: Mutex::new(None),
        }
    }

    /// The commit `main` of `tenant` is known to be at, if nothing touched its refs since.
    /// Never blocks on the disk.
    pub fn known_head(&self, tenant: &TenantId) -> Option<CommitId> {
        let mut guard = self.inner.lock().expect("not poisoned");
        let inner = guard.as_mut()?;
        inner.drain();
        inner.known.get(tenant).copied()
    }

    /// Records that `main` of `tenant` (repository at `repo`) is at `commit`, if the loose ref
    /// file still says so once the watches are in place. Blocking: reads the ref file.
    pub fn note(
        &self,
        tenant: &TenantId,
        repo: &Path,
        commit: CommitId,
        read_head: impl Fn() -> Option<CommitId>,
    ) {
        let mut guard = self.inner.lock().expect("not poisoned");
        let Some(inner) = guard.as_mut() else {
            return;
        };
        inner.drain();
        if inner.known.get(tenant) == Some(&commit) {
            return;
        }
        for (path, is_repo) in [(repo.join("refs/heads"), false), (repo.to_owned(), true)] {
            match inner.inotify.watches().add(&path, MASK) {
                Ok(wd) => {
                    inner.watches.insert(wd, (tenant.clone(), is_repo));
                }
                Err(_) => return,
            }
        }
        // Watches first, then the ref: a change in between is either seen here or queued.
        if read_head() == Some(commit) {
            inner.known.insert(tenant.clone(), commit);
        }
    }
}

impl Default for HeadWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl Inner {
    /// Applies every queued event: the tenants concerned are no longer known.
    fn drain(&mut self) {
        loop {
            let events = match self.inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.known.clear();
                    return;
                }
            };
            let mut any = false;
            for event in events {
                any = true;
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    self.known.clear();
                    continue;
                }
                let Some((tenant, is_repo)) = self.watches.get(&event.wd).cloned() else {
                    continue;
                };
                let relevant = !is_repo
                    || event.name.is_none()
                    || event.name.is_some_and(|n| n == "packed-refs");
                if relevant {
                    self.known.remove(&tenant);
                }
                if event.mask.contains(EventMask::IGNORED) {
                    self.watches.remove(&event.wd);
                    self.known.remove(&tenant);
                }
            }
            if !any {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_ref_change_in_any_thread_is_seen_by_the_next_lookup_in_every_thread() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("t.git");
        std::fs::create_dir_all(repo.join("refs/heads")).unwrap();
        let tenant = TenantId::parse("t").unwrap();
        let commit = |n: u8| {
            CommitId(crate::domain::ObjectId::parse(&format!("{n:02x}").repeat(20)).unwrap())
        };
        let watch = std::sync::Arc::new(HeadWatch::new());
        watch.note(&tenant, &repo, commit(1), || Some(commit(1)));
        assert_eq!(watch.known_head(&tenant), Some(commit(1)));
        // Readers in other threads keep draining while the ref moves.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (watch, stop, tenant) = (watch.clone(), stop.clone(), tenant.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        watch.known_head(&tenant);
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            std::fs::write(repo.join("refs/heads/main.lock"), "x").unwrap();
            std::fs::rename(
                repo.join("refs/heads/main.lock"),
                repo.join("refs/heads/main"),
            )
            .unwrap();
            assert_eq!(
                watch.known_head(&tenant),
                None,
                "a moved ref was still known"
            );
            watch.note(&tenant, &repo, commit(1), || Some(commit(1)));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }
}

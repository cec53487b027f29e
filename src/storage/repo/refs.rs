//! A ref read and moved the way git itself does it: the loose file (else its line in `packed-refs`), and a compare-and-swap through `<ref>.lock` (created exclusively, the value checked, written, renamed over the ref), without libgit2's extra reads; and the fence of a tenant move, which takes the tenant's write lock and waits out the ref locks.
use super::TenantRepo;
use crate::domain::CommitId;
use crate::storage::disk::faults::{self, Op};
use crate::storage::disk::sync_dir;
use crate::storage::StorageError;
use git2::Oid;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a ref was not moved.
pub(super) enum RefMove {
    /// Someone else holds `<ref>.lock` (plain git, or a writer that died).
    Locked,
    /// The ref is not at the value expected.
    Moved,
    Failed(StorageError),
}

/// The value of ref `name` (`refs/heads/main`) in the repository at `repo`, from its loose
/// file or else its line in `packed-refs`; `None` when neither has it (for readers: anything
/// that cannot be read counts as not known).
pub(super) fn read_ref(repo: &Path, name: &str) -> Option<Oid> {
    read_ref_checked(repo, name).ok().flatten()
}

/// [`read_ref`] for writers: `Ok(None)` only when neither the loose file nor `packed-refs`
/// has the ref; a file that cannot be read (out of descriptors, an I/O error) or does not
/// hold an id is an error, never "no ref" (a writer would take that for a ref to create,
/// and start the no-op records' chain again over the old one).
pub(super) fn read_ref_checked(repo: &Path, name: &str) -> std::io::Result<Option<Oid>> {
    let not_an_id = |text: &[u8]| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{name} does not hold a commit id: {:?}",
                String::from_utf8_lossy(&text[..text.len().min(60)])
            ),
        )
    };
    let loose = repo.join(name);
    match faults::check(Op::Read, &loose).and_then(|()| std::fs::read(&loose)) {
        Ok(text) => {
            let hex = std::str::from_utf8(&text)
                .map_err(|_| not_an_id(&text))?
                .trim_end();
            match Oid::from_str(hex) {
                Ok(oid) if hex.len() == 40 => Ok(Some(oid)),
                _ => Err(not_an_id(&text)),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match std::fs::read(repo.join("packed-refs")) {
                Ok(packed) => Ok(packed_ref(&packed, name)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Ref `name`'s value in the text of a `packed-refs` file.
pub(super) fn packed_ref(packed: &[u8], name: &str) -> Option<Oid> {
    let text = std::str::from_utf8(packed).ok()?;
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .find_map(|l| {
            let (hex, n) = l.split_once(' ')?;
            (n == name).then(|| Oid::from_str(hex).ok())?
        })
}

/// [`read_ref`] of `main` as a commit id.
pub(in crate::storage) fn file_head(repo: &Path) -> Option<CommitId> {
    read_ref(repo, super::MAIN).map(|oid| CommitId(super::to_id(oid)))
}

/// The proposals' records ref as its loose file says (`None` when there is none: not made
/// yet, or packed), as [`file_head`] reads `main`.
pub(in crate::storage) fn file_records(repo: &Path) -> Option<CommitId> {
    read_ref(repo, super::proposals::RECORDS).map(|oid| CommitId(super::to_id(oid)))
}

/// A ref's lock, taken for a compare-and-swap: `<ref>.lock` created exclusively, the ref
/// checked, the new value written into the lock (and synced in fsync mode), not yet renamed
/// over the ref. Dropped without [`RefLock::commit`], the lock file is removed.
pub(super) struct RefLock {
    lock: PathBuf,
    path: PathBuf,
    folder: PathBuf,
    done: bool,
}

impl RefLock {
    /// Renames the lock over the ref. The move is durable once the ref's folder is synced
    /// (fsync mode) or after the next `syncfs` (group commit).
    pub(super) fn commit(mut self) -> Result<(), StorageError> {
        faults::check(Op::Rename, &self.path)
            .and_then(|()| std::fs::rename(&self.lock, &self.path))
            .map_err(|e| StorageError::io("move a ref", &self.path, e))?;
        self.done = true;
        Ok(())
    }

    /// The ref's folder, whose sync makes the rename durable.
    pub(super) fn folder(&self) -> &Path {
        &self.folder
    }
}

impl Drop for RefLock {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.lock);
        }
    }
}

impl TenantRepo {
    /// Takes ref `name`'s lock to move it from `old` (`None`: it must not exist) to `new`, as
    /// git does: `<name>.lock` is created exclusively (a `git update-ref` at the same moment
    /// waits on the same lock), the placement record and the ref's value are checked, and
    /// the new value is written (and, with `fsync`, synced). [`RefLock::commit`] renames it.
    /// The lock is made with [`PLANFILES_LOCK_MODE`].
    pub(super) fn lock_ref(
        &self,
        name: &str,
        old: Option<Oid>,
        new: Oid,
        fsync: bool,
    ) -> Result<RefLock, RefMove> {
        let path = self.path.join(name);
        let folder = path.parent().expect("a ref has a folder").to_owned();
        let lock = self.path.join(format!("{name}.lock"));
        let io = |op, p: &Path, e| RefMove::Failed(StorageError::io(op, p, e));
        let opened = faults::check(Op::Create, &lock).and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(PLANFILES_LOCK_MODE)
                .open(&lock)
        });
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(RefMove::Locked),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A ref in a folder that does not exist yet (`refs/planfiles/`): that folder
                // only, so that a repository archived meanwhile is not made again.
                return match crate::storage::disk::create_dir_synced(&folder) {
                    Ok(()) => self.lock_ref(name, old, new, fsync),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RefMove::Failed(
                        crate::storage::placement::missing(&self.path, &self.tenant),
                    )),
                    Err(e) => Err(io("create a ref folder", &folder, e)),
                };
            }
            Err(e) => return Err(io("create a ref lock", &lock, e)),
        };
        let held = RefLock {
            lock,
            path,
            folder,
            done: false,
        };
        // Under the lock: a tenant that began to move takes no write.
        crate::storage::placement::reread_under_lock(&self.path, &self.tenant)
            .map_err(RefMove::Failed)?;
        let now = read_ref_checked(&self.path, name)
            .map_err(|e| io("read a ref", &self.path.join(name), e))?;
        if now != old {
            return Err(RefMove::Moved);
        }
        faults::check(Op::Write, &held.lock)
            .and_then(|()| file.write_all(format!("{new}\n").as_bytes()))
            .map_err(|e| io("write a ref lock", &held.lock, e))?;
        if fsync {
            faults::check(Op::Fsync, &held.lock)
                .and_then(|()| file.sync_all())
                .map_err(|e| io("sync a ref lock", &held.lock, e))?;
        }
        Ok(held)
    }

    /// Moves ref `name` from `old` to `new` at once: [`TenantRepo::lock_ref`], the rename,
    /// and with `fsync` the folder's sync.
    pub(super) fn move_ref(
        &self,
        name: &str,
        old: Option<Oid>,
        new: Oid,
        fsync: bool,
    ) -> Result<(), RefMove> {
        let lock = self.lock_ref(name, old, new, fsync)?;
        let folder = lock.folder().to_owned();
        lock.commit().map_err(RefMove::Failed)?;
        if fsync {
            sync_dir(&folder).map_err(RefMove::Failed)?;
        }
        Ok(())
    }
}

/// The mode of the ref locks planfiles creates: git's `0644` with the sticky bit, which git
/// never sets (and Linux ignores on files). It is set by the `open` that creates the lock, so
/// it is there from the first moment and as durable as the file: a `main.lock` with it, found
/// by a writer that holds the tenant's write lock, was left by a planfiles writer that died
/// holding it (a live one would hold the write lock); one without it may be a live git
/// command's (see [`super::remove_if_abandoned`]).
const PLANFILES_LOCK_MODE: u32 = 0o1644;

/// Whether the lock file at `lock_path` is one planfiles made (see [`PLANFILES_LOCK_MODE`]).
pub(super) fn made_by_planfiles(lock_path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(lock_path).is_ok_and(|m| m.permissions().mode() & 0o1000 != 0)
}

/// How long the fence waits for the tenant's write lock, and for a ref lock held by a git
/// command, before it gives up.
const FENCE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl TenantRepo {
    /// Runs `mark` (the placement record of a move) under the tenant's write lock, which
    /// every planfiles batch holds from before its first check to after its last ref move,
    /// in any process: a batch that began before `mark` has finished, and every later one
    /// finds the record first. Then waits until no ref planfiles writes is locked by anyone
    /// else (plain git), removing a stale lock as writers do under the same lock.
    pub(in crate::storage) fn fence<T>(
        &self,
        mark: impl FnOnce() -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let _turn = self.lock_for_write(std::time::Instant::now() + FENCE_WAIT, "")?;
        let marked = mark()?;
        for name in [super::MAIN, super::NO_OPS] {
            let lock = self.path.join(format!("{name}.lock"));
            let started = std::time::Instant::now();
            loop {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(PLANFILES_LOCK_MODE)
                    .open(&lock)
                {
                    Ok(_) => {
                        std::fs::remove_file(&lock)
                            .map_err(|e| StorageError::io("drop a ref lock", &lock, e))?;
                        break;
                    }
                    // No such ref folder: no write of that ref can be under way.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        // Under the write lock: a planfiles-made lock is a dead writer's.
                        if (made_by_planfiles(&lock) && std::fs::remove_file(&lock).is_ok())
                            || super::remove_if_abandoned(&lock).is_some()
                        {
                            continue;
                        }
                        if started.elapsed() > FENCE_WAIT {
                            return Err(StorageError::io(
                                "wait for a git command that holds the ref",
                                &lock,
                                std::io::Error::new(
                                    std::io::ErrorKind::TimedOut,
                                    "the ref lock stayed held",
                                ),
                            ));
                        }
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    Err(e) => return Err(StorageError::io("take a ref lock", &lock, e)),
                }
            }
        }
        Ok(marked)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn packed_refs_name_a_ref_on_its_own_line() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let text = format!(
            "# pack-refs with: peeled fully-peeled sorted \n{b} refs/heads/mainline\n{a} refs/heads/main\n^{b}\n"
        );
        assert_eq!(
            super::packed_ref(text.as_bytes(), "refs/heads/main").map(|c| c.to_string()),
            Some(a)
        );
        assert_eq!(super::packed_ref(b"# nothing\n", "refs/heads/main"), None);
    }

    #[test]
    fn the_fence_waits_for_a_ref_lock_that_a_git_command_holds() {
        let (_dir, storage, tenant) = crate::storage::test_storage();
        let path = storage.repo_path(&tenant);
        let repo = super::TenantRepo::open(&tenant, &path).unwrap();
        let lock = path.join("refs/heads/main.lock");
        std::fs::write(&lock, "x").unwrap();
        let held = lock.clone();
        // Taken before the thread starts: the lock goes 150 ms after this at the earliest.
        let started = std::time::Instant::now();
        let git = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            std::fs::remove_file(held).unwrap();
        });
        assert_eq!(repo.fence(|| Ok(7)).unwrap(), 7);
        assert!(started.elapsed() >= std::time::Duration::from_millis(150));
        assert!(!lock.exists());
        git.join().unwrap();
    }
}

//! In-flight markers of idempotency keys: an OS lock on a file per key under the repository, so that processes sharing the data dir see each other's writes in flight.
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The folder of markers in a tenant's repository (git ignores it).
const DIR: &str = "planfiles-inflight";

/// A held marker: the file is locked while it lives, then removed.
pub(super) struct Marker {
    path: PathBuf,
    _file: File,
}

impl Marker {
    /// Locks the marker of `key` in the repository at `repo`; `None` when another holder (in
    /// any process) has it. The key is hashed for the file name, so what a client sends never
    /// names a path.
    pub(super) fn claim(repo: &Path, key: &str) -> std::io::Result<Option<Marker>> {
        let dir = repo.join(DIR);
        std::fs::create_dir_all(&dir)?;
        let digest = Sha256::digest(key.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        let path = dir.join(name);
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(e)) => return Err(e),
            }
            // A holder removes its file before it unlocks: when the file this lock is on is no
            // longer the one at `path`, it was released meanwhile; try again on the new one.
            let held = file.metadata()?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Some(Marker { path, _file: file }))
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes when the file is closed just after.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::Marker;

    #[test]
    fn a_held_marker_refuses_a_second_claim_until_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let first = Marker::claim(dir.path(), "k").unwrap().expect("free");
        assert!(Marker::claim(dir.path(), "k").unwrap().is_none());
        assert!(Marker::claim(dir.path(), "other").unwrap().is_some());
        drop(first);
        assert!(Marker::claim(dir.path(), "k").unwrap().is_some());
        // Nothing is left behind once released.
        let left = std::fs::read_dir(dir.path().join(super::DIR))
            .unwrap()
            .count();
        assert_eq!(left, 0);
    }
}

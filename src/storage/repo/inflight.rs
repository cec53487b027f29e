//! In-flight markers of idempotency keys: a one-byte OS lock per key in one file of the repository, so that processes sharing the data dir see each other's writes in flight.
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

/// The file whose bytes are locked, one per key (git ignores it). It is created once and
/// never removed: a claim changes no file or folder, so it adds nothing to the next sync.
const FILE: &str = "planfiles-inflight.lock";

/// A held marker: an open-file-description lock on the key's byte, released when the file
/// closes (on drop, or by the OS when the process dies).
pub(in crate::storage) struct Marker {
    _file: File,
}

impl Marker {
    /// Locks the byte of `key` in the repository at `repo`; `None` when another holder (in
    /// any process) has it.
    pub(in crate::storage) fn claim(repo: &Path, key: &str) -> std::io::Result<Option<Marker>> {
        let file = crate::storage::disk::open_or_create(&repo.join(FILE))?;
        let lock = byte_lock(key);
        // SAFETY: the descriptor is open for the call, and `lock` outlives it.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
        if rc == 0 {
            return Ok(Some(Marker { _file: file }));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(None),
            _ => Err(e),
        }
    }

    /// True when someone (in any process, this one included) holds the marker of `key`.
    /// Changes nothing: no lock is taken, and a missing file (no marker was ever taken
    /// here) is not created.
    pub(in crate::storage) fn held(repo: &Path, key: &str) -> std::io::Result<bool> {
        let file = match OpenOptions::new().write(true).open(repo.join(FILE)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut lock = byte_lock(key);
        // SAFETY: as in `claim`; F_OFD_GETLK writes the conflicting lock (if any) into `lock`.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(lock.l_type != libc::F_UNLCK as libc::c_short)
    }
}

/// A write lock on the one byte of `key`: its offset is a hash of the key (62 bits), so what
/// a client sends never names a path, and two keys in flight at once share a byte with a
/// chance of one in 4.6e18.
fn byte_lock(key: &str) -> libc::flock {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // SAFETY: a zeroed `flock` is a valid value; the fields set are those F_OFD_* read.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = (u64::from_be_bytes(first) >> 2) as libc::off_t;
    lock.l_len = 1;
    lock
}

#[cfg(test)]
mod tests {
    use super::Marker;

    #[test]
    fn looking_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!Marker::held(dir.path(), "k").unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_held_marker_refuses_a_second_claim_until_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let first = Marker::claim(dir.path(), "k").unwrap().expect("free");
        assert!(Marker::claim(dir.path(), "k").unwrap().is_none());
        assert!(Marker::claim(dir.path(), "other").unwrap().is_some());
        drop(first);
        // A child another test forks in the meantime holds the file's description (and so
        // its lock) until it execs, which closes it: a moment, not a leak.
        let mut again = None;
        for _ in 0..200 {
            again = Marker::claim(dir.path(), "k").unwrap();
            if again.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(again.is_some(), "released once its holder closed it");
        assert!(
            Marker::held(dir.path(), "k").unwrap(),
            "held, seen from this process too"
        );
        assert!(!Marker::held(dir.path(), "other").unwrap());
        drop(again);
        assert!(!Marker::held(dir.path(), "k").unwrap());
        // The only file is the lock file; a claim creates and removes nothing else.
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, 1);
    }
}

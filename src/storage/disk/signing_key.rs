//! The commit signing key's file: read at start, or made once (mode 0600, written aside, synced, then linked into place) when it is absent; its text is never logged.
use crate::signing::Signer;
use crate::storage::StorageError;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The key in `path` (an OpenSSH ed25519 private key), made there first when the file does
/// not exist. Processes that start together make one key: a link into place fails when
/// another made it first, and that key counts. `comment` names the key in the file.
pub(in crate::storage) fn load_or_create(
    path: &Path,
    comment: &str,
) -> Result<Signer, StorageError> {
    let io = |op, e| StorageError::io(op, path, e);
    match std::fs::read_to_string(path) {
        Ok(text) => return parse(path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("read the signing key", e)),
    }
    let dir = super::parent(path);
    super::create_dir_all_synced(dir)?;
    let signer = Signer::from_seed(&rand::random(), comment);
    let mut tmp = tempfile::Builder::new()
        .prefix(".signing-key-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(|e| io("write the signing key", e))?;
    tmp.write_all(signer.to_openssh().as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| io("write the signing key", e))?;
    match std::fs::hard_link(tmp.path(), path) {
        Ok(()) => {
            super::sync_dir(dir)?;
            Ok(signer)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let text = std::fs::read_to_string(path).map_err(|e| io("read the signing key", e))?;
            parse(path, &text)
        }
        Err(e) => Err(io("write the signing key", e)),
    }
}

fn parse(path: &Path, text: &str) -> Result<Signer, StorageError> {
    Signer::from_openssh(text).map_err(|e| {
        StorageError::io(
            "read the signing key",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/signing_key");
        let made = load_or_create(&path, "p@x").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only the service's user may read the key");
        let again = load_or_create(&path, "p@x").unwrap();
        assert_eq!(
            again.public_key(),
            made.public_key(),
            "the second start reads it"
        );
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1,
            "no temporary file is left"
        );
        std::fs::write(&path, "garbage").unwrap();
        let err = load_or_create(&path, "p@x").unwrap_err().to_string();
        assert!(
            err.contains("signing key") && !err.contains("garbage"),
            "{err}"
        );
    }

    #[test]
    fn starts_that_race_make_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signing_key");
        let barrier = std::sync::Barrier::new(8);
        let keys: Vec<String> = std::thread::scope(|s| {
            let racers: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        load_or_create(&path, "p@x").unwrap().public_key()
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:#?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}

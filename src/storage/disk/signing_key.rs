//! The commit signing key's file: read at start, or made once (mode 0600, written aside, synced, then linked into place) when it is absent and no key signed before; the public key in use, recorded in the data dir, so that a lost key is refused rather than silently made anew; its text is never logged.
use crate::signing::Signer;
use crate::storage::StorageError;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The file in the data dir that holds the public key of the last signing key used there.
pub(in crate::storage) const RECORD: &str = "signing-key-in-use.pub";

/// The key in `path` (an OpenSSH ed25519 private key), and the public key that `record` held
/// before (the key in use until now, when it differs). When the file does not exist it is
/// made first, unless `record` names a key that signed here before and that `retired` does
/// not list: then the key was lost, and making another would leave every earlier commit
/// unverified, so that is an error that says what to do. Processes that start together make
/// one key: a link into place fails when another made it first, and that key counts.
/// `comment` names the key in the file.
pub(in crate::storage) fn load_or_create(
    path: &Path,
    record: &Path,
    retired: impl Fn(&str) -> bool,
    comment: &str,
) -> Result<(Signer, Option<String>), StorageError> {
    let io = |op, e| StorageError::io(op, path, e);
    let before = std::fs::read_to_string(record)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    let signer = match std::fs::read_to_string(path) {
        Ok(text) => {
            super::warn_if_others_can_read(path, "the commit signing key");
            parse(path, &text)?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match &before {
            Some(public) if !retired(public) => {
                return Err(io(
                    "read the signing key",
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!(
                            "it is missing, but this data dir's commits were signed with {public} (recorded in {}): restore the key from a backup; or, to sign with a new key from now on, list that public key in signing.previous_public_keys (its commits keep verifying) and start again",
                            record.display(),
                        ),
                    ),
                ))
            }
            _ => create(path, comment)?,
        },
        Err(e) => return Err(io("read the signing key", e)),
    };
    let public = signer.public_key();
    if before.as_deref() == Some(public.as_str()) {
        return Ok((signer, None));
    }
    super::replace_synced(
        record,
        format!("{public}\n").as_bytes(),
        "record the signing key in use",
    )?;
    Ok((signer, before))
}

/// A new key in `path`: written aside at mode 0600, synced, linked into place and the folder
/// synced; the key another process linked first when it won the race.
fn create(path: &Path, comment: &str) -> Result<Signer, StorageError> {
    let io = |op, e| StorageError::io(op, path, e);
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
            tracing::warn!(
                key_file = %path.display(),
                fingerprint = %signer.fingerprint(),
                "made a new commit signing key (no key had signed in this data dir); back it up"
            );
            Ok(signer)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let text = std::fs::read_to_string(path).map_err(|e| io("read the signing key", e))?;
            // The process that linked it may not have synced its folder yet.
            super::sync_dir(dir)?;
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
        let record = dir.path().join(RECORD);
        let (made, before) = load_or_create(&path, &record, |_| false, "p@x").unwrap();
        assert_eq!(before, None);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only the service's user may read the key");
        let (again, _) = load_or_create(&path, &record, |_| false, "p@x").unwrap();
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
        let err = load_or_create(&path, &record, |_| false, "p@x")
            .unwrap_err()
            .to_string();
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
                        load_or_create(&path, &dir.path().join(RECORD), |_| false, "p@x")
                            .unwrap()
                            .0
                            .public_key()
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:#?}");
        // The key and the record of the key in use.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_lost_key_is_refused_and_a_new_key_file_names_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let (path, record) = (dir.path().join("signing_key"), dir.path().join(RECORD));
        let (first, _) = load_or_create(&path, &record, |_| false, "p@x").unwrap();
        std::fs::remove_file(&path).unwrap();
        let err = load_or_create(&path, &record, |_| false, "p@x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing") && err.contains(&first.public_key()),
            "{err}"
        );
        assert!(!path.exists(), "no key is made in its place");
        // Rotation by listing the lost key as retired: a new key is made.
        let old = first.public_key();
        let (made, before) = load_or_create(&path, &record, |k| k == old, "p@x").unwrap();
        assert_ne!(made.public_key(), old);
        assert_eq!(before, Some(old));
        std::fs::remove_file(&path).unwrap();
        // A new key put in place on purpose: it signs, and the key before is named.
        let other = Signer::from_seed(&[3; 32], "p@x");
        std::fs::write(&path, other.to_openssh().as_bytes()).unwrap();
        let (now, before) = load_or_create(&path, &record, |_| false, "p@x").unwrap();
        assert_eq!(now.public_key(), other.public_key());
        assert_eq!(before, Some(made.public_key()));
        let (_, before) = load_or_create(&path, &record, |_| false, "p@x").unwrap();
        assert_eq!(before, None, "recorded now");
    }
}

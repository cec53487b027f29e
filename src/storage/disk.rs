//! Files and folders planfiles makes outside libgit2: each is synced, and synced into the folder that holds it, before anything that depends on it is acknowledged.
pub(super) mod dir_key;
pub(super) mod durable;
pub(super) mod faults;
pub(super) mod signing_key;
pub(super) mod volume;

use super::StorageError;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The text of the secret file at `path` (the errors name it), made first when absent:
/// 32 random bytes as 64 hex digits, mode 0600, all or nothing (written aside, synced, linked
/// into place, the folder synced). Of processes that make it at once, the first link counts;
/// `true` when this call's link made it.
pub(in crate::storage) fn secret_text(path: &Path) -> Result<(String, bool), StorageError> {
    let io = |op, e| StorageError::io(op, path, e);
    let read = |e| io("read a secret file", e);
    match std::fs::read_to_string(path) {
        Ok(text) => return Ok((text, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(read(e)),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let key: [u8; 32] = rand::random();
    let mut tmp = tempfile::Builder::new()
        .prefix(".secret-")
        .tempfile_in(dir)
        .map_err(|e| io("write a secret file", e))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::io::Write::write_all(&mut tmp, hex.as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| io("write a secret file", e))?;
    match std::fs::hard_link(tmp.path(), path) {
        Ok(()) => {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io("sync a secret file's folder", e))?;
            Ok((hex, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read_to_string(path)
            .map(|t| (t, false))
            .map_err(read),
        Err(e) => Err(io("write a secret file", e)),
    }
}

/// A secret file (`what`) that others can read: the service uses it, and says so once, at
/// start (ssh-keygen refuses such a private key; anyone who reads a token secret signs
/// tokens).
pub(in crate::storage) fn warn_if_others_can_read(path: &Path, what: &str) {
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                key_file = %path.display(),
                mode = format!("{mode:o}"),
                "{what} can be read by other users; chmod 600 it"
            );
        }
    }
}

/// The folder that holds `path` (`.` for a bare relative name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsync of a folder: its entries (files created, renamed or removed in it) are on disk.
pub(super) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    faults::check(faults::Op::SyncDir, dir)
        .and_then(|()| File::open(dir))
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io("sync directory", dir, e))
}

/// fsync of a file's data.
pub(super) fn sync_file(file: &Path) -> Result<(), StorageError> {
    File::open(file)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io("sync a file", file, e))
}

/// Syncs every file and folder below `dir`, and `dir`, so that a repository built in a
/// temporary folder is whole on disk before it is renamed into place.
pub(super) fn sync_tree(dir: &Path) -> Result<(), StorageError> {
    for entry in std::fs::read_dir(dir).map_err(|e| StorageError::io("read directory", dir, e))? {
        let entry = entry.map_err(|e| StorageError::io("read directory", dir, e))?;
        match entry.file_type() {
            Ok(t) if t.is_dir() => sync_tree(&entry.path())?,
            Ok(t) if t.is_file() => sync_file(&entry.path())?,
            _ => {}
        }
    }
    sync_dir(dir)
}

/// Creates `dir` and every missing folder above it, each synced into its parent, so that a
/// power loss cannot take a data dir the service made and leave an empty volume (which a
/// restart would seed again).
pub(super) fn create_dir_all_synced(dir: &Path) -> Result<(), StorageError> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.is_dir() {
        missing.push(at);
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => break,
        }
    }
    for folder in missing.into_iter().rev() {
        match std::fs::create_dir(folder) {
            Ok(()) => {}
            // Another process made it: it may not have synced it yet, so sync it here too.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StorageError::io("create a directory", folder, e)),
        }
        sync_dir(parent(folder))?;
    }
    Ok(())
}

/// Replaces the file at `path` with `bytes`, all or nothing: written aside in its folder,
/// synced, renamed over it, and the folder synced. `op` names the operation in errors.
pub(super) fn replace_synced(
    path: &Path,
    bytes: &[u8],
    op: &'static str,
) -> Result<(), StorageError> {
    let dir = parent(path);
    let err = |e| StorageError::io(op, path, e);
    let mut tmp = tempfile::Builder::new()
        .prefix(".planfiles-")
        .tempfile_in(dir)
        .map_err(err)?;
    io::Write::write_all(&mut tmp, bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    sync_dir(dir)
}

/// Removes the file at `path` and syncs its folder; a file already gone is left so.
pub(super) fn remove_synced(path: &Path, op: &'static str) -> Result<(), StorageError> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(parent(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(op, path, e)),
    }
}

/// Creates the folder `dir` (not its parents), synced into its parent; an existing folder is
/// left as it is. A missing parent is `NotFound`: nothing is made where a folder went away
/// (a repository archived meanwhile must not come back as an empty skeleton).
pub(super) fn create_dir_synced(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => File::open(parent(dir))?.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens the file at `path` for writing (a lock or marker file), creating it when missing;
/// a file created here is synced into its folder before it is used. The common case, a file
/// that exists, costs one `open`.
pub(super) fn open_or_create(path: &Path) -> io::Result<File> {
    match OpenOptions::new().write(true).open(path) {
        Ok(file) => Ok(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)?;
            File::open(parent(path))?.sync_all()?;
            Ok(file)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_folders_are_made_from_the_top_and_existing_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dir_all_synced(&deep).unwrap();
        assert!(deep.is_dir());
        std::fs::write(deep.join("f"), "x").unwrap();
        create_dir_all_synced(&deep).unwrap();
        assert!(deep.join("f").exists(), "an existing folder is left alone");
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(create_dir_all_synced(&file.join("under")).is_err());
    }

    #[test]
    fn open_or_create_makes_the_file_once_and_keeps_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        drop(open_or_create(&path).unwrap());
        std::fs::write(&path, "kept").unwrap();
        drop(open_or_create(&path).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"kept");
        assert!(open_or_create(&dir.path().join("no/such/dir.lock")).is_err());
    }
}

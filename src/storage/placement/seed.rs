//! Seeding an empty data directory from the demo repositories in `repos-fixture/`: once,
//! however many instances start together, and redone when a seeder died half-way.
//!
//! Under an OS file lock in the data dir, a marker file is written and synced, then each
//! tenant is copied into a temporary folder, synced and renamed into place (never over an
//! existing tenant), then the marker is removed. A marker found at start means a seeder died:
//! its temporary folders are removed and the tenants still missing are seeded.
use crate::storage::disk::{self, sync_dir, sync_tree};
use crate::storage::StorageError;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The file in the data dir that seeders hold an OS lock on.
const LOCK_FILE: &str = "planfiles-seed.lock";
/// Present in the data dir while a seed is under way (or was cut off).
const MARKER: &str = "planfiles-seed.pending";
/// Name prefix of the temporary folders a seed copies into (in the tenants dir).
const TEMP_PREFIX: &str = ".seed-";

/// Copies `<fixture>/tenants/*.git` into `tenants_dir` when `tenants_dir` has no entries, or
/// the tenants still missing when an earlier seed was cut off. Returns how many tenant
/// repositories were copied.
pub fn seed_if_empty(fixture: &Path, tenants_dir: &Path) -> Result<usize, StorageError> {
    let data_dir = tenants_dir.parent().unwrap_or(tenants_dir);
    // Held until this function returns; the OS drops it if this process dies.
    let _lock = lock(&data_dir.join(LOCK_FILE))?;
    let marker = data_dir.join(MARKER);
    if marker.exists() {
        tracing::warn!(data_dir = %data_dir.display(), "an earlier seed was cut off; seeding again");
        remove_temp_folders(tenants_dir)?;
    } else if is_empty(tenants_dir)? {
        File::create(&marker)
            .and_then(|f| f.sync_all())
            .map_err(|e| StorageError::io("write the seed marker", &marker, e))?;
        sync_dir(data_dir)?;
    } else {
        return Ok(0);
    }
    let source = fixture.join("tenants");
    let entries =
        std::fs::read_dir(&source).map_err(|e| StorageError::io("read the fixture", &source, e))?;
    let mut copied = 0;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("read the fixture", &source, e))?;
        let name = entry.file_name();
        if entry.path().is_dir() && name.to_string_lossy().ends_with(".git") {
            copied += usize::from(seed_one(&entry.path(), tenants_dir, &name)?);
        }
    }
    sync_dir(tenants_dir)?;
    std::fs::remove_file(&marker)
        .map_err(|e| StorageError::io("remove the seed marker", &marker, e))?;
    sync_dir(data_dir)?;
    Ok(copied)
}

/// Copies one repository into a synced temporary folder and renames it to `name`, unless a
/// tenant of that name exists. True when it was copied.
fn seed_one(from: &Path, tenants_dir: &Path, name: &std::ffi::OsStr) -> Result<bool, StorageError> {
    let target = tenants_dir.join(name);
    if target.exists() {
        return Ok(false);
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{TEMP_PREFIX}{}-", name.to_string_lossy()))
        .tempdir_in(tenants_dir)
        .map_err(|e| StorageError::io("create a temporary directory", tenants_dir, e))?;
    copy_dir(from, tmp.path())?;
    sync_tree(tmp.path())?;
    match rename_no_replace(tmp.path(), &target) {
        Ok(()) => {
            // The folder now lives at `target`: nothing left to delete.
            let _ = tmp.keep();
            Ok(true)
        }
        // A tenant of that name appeared meanwhile (`tenant create`): it stays.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(StorageError::io(
            "move a seeded repository into place",
            &target,
            e,
        )),
    }
}

fn lock(path: &Path) -> Result<File, StorageError> {
    let file =
        disk::open_or_create(path).map_err(|e| StorageError::io("open the seed lock", path, e))?;
    file.lock()
        .map_err(|e| StorageError::io("take the seed lock", path, e))?;
    Ok(file)
}

fn is_empty(dir: &Path) -> Result<bool, StorageError> {
    Ok(std::fs::read_dir(dir)
        .map_err(|e| StorageError::io("read the tenants directory", dir, e))?
        .next()
        .is_none())
}

/// Removes the temporary folders of a seeder that died (no live seeder holds the lock).
fn remove_temp_folders(tenants_dir: &Path) -> Result<(), StorageError> {
    let entries = std::fs::read_dir(tenants_dir)
        .map_err(|e| StorageError::io("read the tenants directory", tenants_dir, e))?;
    for entry in entries.filter_map(Result::ok) {
        if entry
            .file_name()
            .as_bytes()
            .starts_with(TEMP_PREFIX.as_bytes())
        {
            std::fs::remove_dir_all(entry.path()).map_err(|e| {
                StorageError::io("remove an interrupted seed's folder", &entry.path(), e)
            })?;
        }
    }
    Ok(())
}

/// Copies the files below `from` into the existing folder `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<(), StorageError> {
    for entry in std::fs::read_dir(from).map_err(|e| StorageError::io("read directory", from, e))? {
        let entry = entry.map_err(|e| StorageError::io("read directory", from, e))?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir(&target)
                .map_err(|e| StorageError::io("create directory", &target, e))?;
            copy_dir(&entry.path(), &target)?;
        } else {
            // Synced with the rest of the folder (`sync_tree`) before it is renamed into place.
            std::fs::copy(entry.path(), &target)
                .map_err(|e| StorageError::io("copy file", &target, e))?;
        }
    }
    Ok(())
}

/// `rename(2)` that fails with `AlreadyExists` instead of replacing an empty folder at `to`.
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (from_c, to_c) = (c(from)?, c(to)?);
    // SAFETY: both paths are NUL-terminated C strings that live across the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from_c.as_ptr(),
            libc::AT_FDCWD,
            to_c.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // A filesystem without RENAME_NOREPLACE: checking first is the best it allows.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            if to.exists() {
                Err(io::ErrorKind::AlreadyExists.into())
            } else {
                std::fs::rename(from, to)
            }
        }
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_no_replace_keeps_an_existing_folder_even_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::write(a.join("f"), "x").unwrap();
        std::fs::create_dir(&b).unwrap();
        let e = rename_no_replace(&a, &b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(a.join("f").exists());
        std::fs::remove_dir(&b).unwrap();
        rename_no_replace(&a, &b).unwrap();
        assert!(b.join("f").exists());
    }
}

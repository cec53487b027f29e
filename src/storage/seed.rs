//! Seeding an empty data directory from the demo repositories in `repos-fixture/`.
use super::StorageError;
use std::path::Path;

/// Copies `<fixture>/tenants/*` into `tenants_dir` when `tenants_dir` has no entries.
/// Returns how many tenant repositories were copied.
pub fn seed_if_empty(fixture: &Path, tenants_dir: &Path) -> Result<usize, StorageError> {
    let is_empty = std::fs::read_dir(tenants_dir)
        .map_err(|e| StorageError::io("read the tenants directory", tenants_dir, e))?
        .next()
        .is_none();
    if !is_empty {
        return Ok(0);
    }
    let source = fixture.join("tenants");
    let entries =
        std::fs::read_dir(&source).map_err(|e| StorageError::io("read the fixture", &source, e))?;
    let mut copied = 0;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("read the fixture", &source, e))?;
        if entry.path().is_dir() && entry.file_name().to_string_lossy().ends_with(".git") {
            copy_dir(&entry.path(), &tenants_dir.join(entry.file_name()))?;
            copied += 1;
        }
    }
    Ok(copied)
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), StorageError> {
    std::fs::create_dir_all(to).map_err(|e| StorageError::io("create directory", to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| StorageError::io("read directory", from, e))? {
        let entry = entry.map_err(|e| StorageError::io("read directory", from, e))?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .map_err(|e| StorageError::io("copy file", &target, e))?;
        }
    }
    Ok(())
}

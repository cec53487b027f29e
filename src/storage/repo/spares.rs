//! Spare object files: a repack moves the loose objects its synced pack made redundant into `objects/planfiles-spares/` instead of deleting them, and a write takes one (rested a while) as a new object's file instead of creating one, so that a write's objects neither make nor free an inode.
//!
//! Why: on ext4 without a journal, the inode allocator skips every inode freed in the last
//! minute (six while its inode-table block is dirty), looking each one up; a repack that
//! deletes thousands of loose objects at once made every write after it slower, more so as the
//! history grew (docs/PERFORMANCE.md, "The volume"). A spare keeps its inode: a writer renames
//! it to its temporary name (the rename is the claim: of two takers, one gets `ENOENT`),
//! truncates and writes it, and names it as it would a new file, after the same syncs.
//!
//! A spare is never written while it has another name (an object `git clone` of the
//! repository hard-linked elsewhere), and never before its old name is durably gone: a repack
//! moves the objects under pending names, syncs the folders they left and the spares' folder,
//! and only then names them as spares (`<unix seconds>-<random>`), so a power cut cannot bring
//! an old name back onto a file a write reused. A spare then rests at least [`REST`] (by its
//! name, which every process on the data dir reads): a reader that opened the object before
//! the repack moved it has read it whole. At most [`MAX_SPARES`] are kept; past that, retired
//! objects are deleted as before.
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The folder, under `objects/` (git reads only `objects/xx/`, `pack/` and `info/`).
pub(super) const FOLDER: &str = "objects/planfiles-spares";
/// Spares kept at most per repository (emptied once rested: an inode each, no block).
const MAX_SPARES: usize = 4_096;
/// How long a retired file rests, at least, before it is written again (or emptied): a reader
/// that opened it before it was retired (libgit2 and git read an object whole, at once) is
/// done.
#[cfg(not(test))]
pub(in crate::storage) const REST: Duration = Duration::from_secs(10);
#[cfg(test)]
pub(in crate::storage) const REST: Duration = Duration::ZERO;
/// How often an empty list looks at the folder again.
#[cfg(not(test))]
const LOOK_EVERY: Duration = Duration::from_secs(1);
#[cfg(test)]
const LOOK_EVERY: Duration = Duration::ZERO;
/// The name a spare takes while it is emptied.
const CLAIMED: &str = "claimed-";
/// The name a retired object has until the folder it left is synced.
const PENDING: &str = "pending-";

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// A repository's rested spares, as its folder last listed them (oldest first).
#[derive(Debug, Default)]
pub(super) struct Spares {
    inner: Mutex<Listed>,
}

#[derive(Debug, Default)]
struct Listed {
    names: Vec<String>,
    looked: Option<Instant>,
}

impl Spares {
    /// Renames a rested spare of `repo` to `to` (a temporary name in a fan-out folder);
    /// false when there is none (the caller creates a file).
    pub(super) fn take(&self, repo: &Path, to: &Path) -> bool {
        let folder = repo.join(FOLDER);
        let mut listed = self.inner.lock().expect("not poisoned");
        loop {
            let Some(name) = listed.names.pop() else {
                if listed.looked.is_some_and(|at| at.elapsed() < LOOK_EVERY) {
                    return false;
                }
                listed.looked = Some(Instant::now());
                listed.names = rested(&folder);
                if listed.names.is_empty() {
                    return false;
                }
                continue;
            };
            match std::fs::rename(folder.join(&name), to) {
                Ok(()) => return true,
                // The fan-out folder is not there (git removes emptied ones): the caller
                // makes it with a new file.
                Err(_) if !to.parent().is_some_and(Path::is_dir) => {
                    listed.names.push(name);
                    return false;
                }
                // Taken by another writer (another process) meanwhile.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(_) => return false,
            }
        }
    }
}

/// The rested spares in `folder`, newest last (taken first: the oldest rest longest).
fn rested(folder: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    // Named in whole seconds: `secs + REST < now` is at least `REST` after the retire.
    let now = now_secs();
    let mut names: Vec<(u64, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| {
            let secs: u64 = name.split_once('-')?.0.parse().ok()?;
            (secs.saturating_add(REST.as_secs()) < now || REST.is_zero()).then_some((secs, name))
        })
        .collect();
    names.sort_unstable_by(|a, b| b.cmp(a));
    names.into_iter().map(|(_, n)| n).collect()
}

/// Opens a spare taken as `tmp` for its new object: writable again, emptied. Refused (the
/// caller makes a new file) when the file has another name: `git clone` of a repository on
/// the same volume hard-links its loose objects, and a spare that is another repository's
/// object must never be written.
pub(super) fn reopen(tmp: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let shared = || std::io::Error::other("a spare with another name");
    if std::fs::symlink_metadata(tmp)?.nlink() != 1 {
        return Err(shared());
    }
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o644))?;
    let file = std::fs::OpenOptions::new().write(true).open(tmp)?;
    if file.metadata()?.nlink() != 1 {
        return Err(shared());
    }
    file.set_len(0)?;
    Ok(file)
}

/// Retires loose objects that a synced pack holds; how many left their names. Without
/// `recycle` each is deleted (and the spares folder goes). With it, each is moved under a
/// pending name while fewer than [`MAX_SPARES`] are kept (the rest deleted), the folders they
/// left and the spares' folder are synced, and only then are they named as spares. Spares
/// past [`MAX_SPARES`], and pending or claimed files a process that died left, are deleted.
pub(super) fn retire(repo: &Path, files: &[PathBuf], recycle: bool) -> usize {
    let folder = repo.join(FOLDER);
    let delete_all = |files: &[PathBuf]| {
        files
            .iter()
            .filter(|f| std::fs::remove_file(f).is_ok())
            .count()
    };
    if !recycle {
        let _ = std::fs::remove_dir_all(&folder);
        return delete_all(files);
    }
    let mut spares: Vec<(u64, String)> = Vec::new();
    match std::fs::create_dir(&folder) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            for name in std::fs::read_dir(&folder)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
            {
                match name.split_once('-').and_then(|(s, _)| s.parse().ok()) {
                    Some(secs) => spares.push((secs, name)),
                    // Left by a repack or an emptying that died: its old name may not be
                    // durably gone, so it is never used.
                    None if name.starts_with(PENDING)
                        || (name.starts_with(CLAIMED) && abandoned(&folder.join(&name))) =>
                    {
                        let _ = std::fs::remove_file(folder.join(&name));
                    }
                    None => {}
                }
            }
        }
        Err(_) => return delete_all(files),
    }
    if spares.len() > MAX_SPARES {
        spares.sort_unstable();
        for (_, name) in &spares[..spares.len() - MAX_SPARES] {
            let _ = std::fs::remove_file(folder.join(name));
        }
    }
    let room = MAX_SPARES.saturating_sub(spares.len());
    let (keep, delete) = files.split_at(files.len().min(room));
    let mut gone = delete_all(delete);
    let mut pending = Vec::with_capacity(keep.len());
    let mut left: Vec<&Path> = Vec::new();
    for file in keep {
        let name = format!("{PENDING}{:016x}", rand::random::<u64>());
        if std::fs::rename(file, folder.join(&name)).is_ok() {
            pending.push(name);
            let from = file.parent().expect("objects/xx");
            if !left.contains(&from) {
                left.push(from);
            }
        } else if std::fs::remove_file(file).is_ok() {
            gone += 1;
        }
    }
    gone += pending.len();
    // The old names durably gone, the new ones there: then they are spares.
    let synced = left
        .iter()
        .chain([&folder.as_path()])
        .all(|f| crate::storage::disk::sync_dir(f).is_ok());
    let stamp = now_secs();
    for name in pending {
        let from = folder.join(&name);
        if !synced
            || std::fs::rename(
                &from,
                folder.join(format!("{stamp}-{:016x}", rand::random::<u64>())),
            )
            .is_err()
        {
            let _ = std::fs::remove_file(&from);
        }
    }
    gone
}

/// Empties the spares that have rested (their data blocks freed, their inodes kept: an idle
/// tenant's spares hold no bytes). Each is claimed as a writer claims one, emptied only while
/// it has no other name, and put back under its name.
pub(in crate::storage) fn empty(repo: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let folder = repo.join(FOLDER);
    for name in rested(&folder) {
        let claimed = folder.join(format!("{CLAIMED}{:016x}", rand::random::<u64>()));
        // Taken by a writer meanwhile.
        if std::fs::rename(folder.join(&name), &claimed).is_err() {
            continue;
        }
        let full = std::fs::symlink_metadata(&claimed).is_ok_and(|m| m.nlink() == 1 && m.len() > 0);
        if full {
            let _ = std::fs::set_permissions(&claimed, std::fs::Permissions::from_mode(0o644))
                .and_then(|()| std::fs::OpenOptions::new().write(true).open(&claimed))
                .and_then(|f| f.set_len(0));
        }
        let _ = std::fs::rename(&claimed, folder.join(&name));
    }
}

/// A claim older than a minute: its writer died between the claim and the lock.
fn abandoned(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use crate::storage::repo::staged::Staged;
    use crate::storage::repo::TenantRepo;
    use git2::ObjectType;
    use std::os::unix::fs::MetadataExt;

    /// A repository with every fan-out folder, as one with some history has (a spare is
    /// taken only into a folder that is there: making one is the new file's path, which
    /// syncs it).
    fn repo() -> (tempfile::TempDir, TenantRepo) {
        let (dir, storage, tenant) = crate::storage::test_storage();
        let repo = TenantRepo::open(&tenant, &storage.repo_path(&tenant)).unwrap();
        for n in 0..256 {
            let _ = std::fs::create_dir(repo.path.join(format!("objects/{n:02x}")));
        }
        (dir, repo)
    }

    fn write(repo: &TenantRepo, data: &[u8]) -> std::path::PathBuf {
        let mut staged = Staged::new(repo, true);
        let id = repo
            .stage_object(&mut staged, ObjectType::Blob, data)
            .unwrap();
        staged.publish().unwrap();
        repo.loose_path(id)
    }

    fn ino(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).unwrap().ino()
    }

    #[test]
    fn a_retired_object_file_becomes_the_next_objects_whole() {
        let (_dir, repo) = repo();
        let old = write(&repo, b"old object");
        let inode = ino(&old);
        assert_eq!(
            super::retire(&repo.path, std::slice::from_ref(&old), true),
            1
        );
        assert!(!old.exists());
        let new = write(&repo, b"a new object, longer than the old one");
        assert_eq!(ino(&new), inode, "the retired file was reused");
        let id = git2::Oid::hash_object(ObjectType::Blob, b"a new object, longer than the old one")
            .unwrap();
        assert!(crate::storage::repo::staged::loose_is_whole(&new, id));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&new).unwrap().permissions().mode() & 0o777,
            0o444
        );
        // None left: the next object is a new file.
        let third = write(&repo, b"third");
        assert_ne!(ino(&third), inode);
    }

    #[test]
    fn a_pending_file_a_dead_repack_left_is_deleted_never_used() {
        let (_dir, repo) = repo();
        let folder = repo.path.join(super::FOLDER);
        std::fs::create_dir_all(&folder).unwrap();
        let pending = folder.join(format!("{}0123456789abcdef", super::PENDING));
        std::fs::write(&pending, "an object whose old name may come back").unwrap();
        let inode = ino(&pending);
        let new = write(&repo, b"not from the pending file");
        assert_ne!(ino(&new), inode);
        super::retire(&repo.path, &[], true);
        assert!(!pending.exists());
    }

    #[test]
    fn rested_spares_are_emptied_but_one_with_another_name_is_not() {
        let (dir, repo) = repo();
        let (a, b) = (write(&repo, b"one object"), write(&repo, b"another object"));
        let other = dir.path().join("a-clones-object");
        std::fs::hard_link(&b, &other).unwrap();
        let before = std::fs::read(&other).unwrap();
        super::retire(&repo.path, &[a, b], true);
        super::empty(&repo.path);
        let sizes: Vec<u64> = std::fs::read_dir(repo.path.join(super::FOLDER))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .collect();
        assert_eq!(sizes.len(), 2, "both kept, under names a writer takes");
        assert!(sizes.contains(&0), "{sizes:?}");
        assert_eq!(
            std::fs::read(&other).unwrap(),
            before,
            "the other name's bytes"
        );
        // The emptied spare is still taken for the next object.
        let next = write(&repo, b"next");
        assert!(crate::storage::repo::staged::loose_is_whole(
            &next,
            git2::Oid::hash_object(ObjectType::Blob, b"next").unwrap()
        ));
    }

    #[test]
    fn a_spare_with_another_name_is_never_written() {
        let (dir, repo) = repo();
        let old = write(&repo, b"shared object");
        // As `git clone` of a repository on the same volume links its loose objects.
        let other = dir.path().join("a-clones-object");
        std::fs::hard_link(&old, &other).unwrap();
        let before = std::fs::read(&other).unwrap();
        super::retire(&repo.path, std::slice::from_ref(&old), true);
        let new = write(&repo, b"another object");
        assert_ne!(ino(&new), ino(&other));
        assert_eq!(
            std::fs::read(&other).unwrap(),
            before,
            "the other name's bytes"
        );
        assert!(repo
            .path
            .join(super::FOLDER)
            .read_dir()
            .unwrap()
            .next()
            .is_none());
    }
}

#[cfg(test)]
mod off {
    /// Without `recycle` (a journaled volume), a repack deletes what it retires and the
    /// spares folder goes.
    #[test]
    fn without_recycling_retired_files_are_deleted_and_the_folder_goes() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(super::FOLDER);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("1-a"), "old").unwrap();
        let file = dir.path().join("objects-file");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(
            super::retire(dir.path(), std::slice::from_ref(&file), false),
            1
        );
        assert!(!file.exists() && !folder.exists());
    }
}

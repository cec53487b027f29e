//! Spare files: a repack moves the loose objects its synced pack made redundant into `objects/planfiles-spares/` instead of deleting them, a ref's move keeps the ref's old file there, and a write takes one (rested a while) for a new object or a ref's lock instead of creating a file, so that a write neither makes nor frees an inode.
//!
//! Why: on ext4 without a journal, the inode allocator skips every inode freed in the last
//! minute (six while its inode-table block is dirty), looking each one up; a repack that
//! deletes thousands of loose objects at once made every write after it slower, more so as the
//! history grew (docs/PERFORMANCE.md, "The volume"), and so did each ref's move, which frees
//! the ref's old file. A spare keeps its inode: a writer renames it to its temporary name (the
//! rename is the claim: of two takers, one gets `ENOENT`), truncates and writes it, and names
//! it as it would a new file, after the same sync. A ref's lock is made from a claimed spare
//! by a hard link to the lock's name, which fails when the lock is held, as git's exclusive
//! create does. A spare that has another name (a ref's old file kept by a writer that died
//! before its rename, or an object `git clone` hard-linked into another repository) is never
//! written.
//!
//! A spare rests [`REST`] before it is taken: a reader that opened the object before the
//! repack moved it reads its bytes whole, not a new object's. Its name says when it was
//! retired (`<unix seconds>-<random>`), so every process on the data dir knows. At most
//! [`MAX_SPARES`] are kept; past that, retired objects are deleted as before.
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The folder, under `objects/` (git reads only `objects/xx/`, `pack/` and `info/`).
pub(super) const FOLDER: &str = "objects/planfiles-spares";
/// Spares kept at most per repository (a file of a few hundred bytes each).
const MAX_SPARES: usize = 4_096;
/// How long a retired file rests before it is written again (or emptied): a reader that opened it
/// before it was retired (libgit2 and git read an object or a ref whole, at once) is done.
#[cfg(not(test))]
pub(in crate::storage) const REST: Duration = Duration::from_secs(2);
#[cfg(test)]
pub(in crate::storage) const REST: Duration = Duration::ZERO;
/// How often an empty list looks at the folder again.
#[cfg(not(test))]
const LOOK_EVERY: Duration = Duration::from_secs(1);
#[cfg(test)]
const LOOK_EVERY: Duration = Duration::ZERO;
/// The name a spare takes while a ref's lock is made of it.
const CLAIMED: &str = "claimed-";

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
    /// Makes `lock` (a ref's lock, which must not exist) from a rested spare, as exclusive as
    /// git's create: the spare claimed, given `mode`, emptied, then hard-linked to the lock's
    /// name (`AlreadyExists` while the lock is held, `NotFound` without the ref's folder, as
    /// a create says). `None` when no spare could be used (the caller creates the lock).
    pub(super) fn lock(
        &self,
        repo: &Path,
        lock: &Path,
        mode: u32,
    ) -> Option<std::io::Result<File>> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let claimed = repo
            .join(FOLDER)
            .join(format!("{CLAIMED}{:016x}", rand::random::<u64>()));
        if !self.take(repo, &claimed) {
            return None;
        }
        let ready = std::fs::symlink_metadata(&claimed)
            .is_ok_and(|m| m.nlink() == 1)
            .then(|| {
                std::fs::set_permissions(&claimed, std::fs::Permissions::from_mode(mode))?;
                let file = std::fs::OpenOptions::new().write(true).open(&claimed)?;
                file.set_len(0)?;
                Ok::<_, std::io::Error>(file)
            })
            .and_then(Result::ok);
        let Some(file) = ready else {
            let _ = std::fs::remove_file(&claimed);
            return None;
        };
        let linked = std::fs::hard_link(&claimed, lock);
        let _ = std::fs::remove_file(&claimed);
        match linked {
            Ok(()) => Some(Ok(file)),
            Err(e) if matches!(e.kind(), ErrorKind::AlreadyExists | ErrorKind::NotFound) => {
                Some(Err(e))
            }
            // A file system without hard links: a new lock, as git makes it.
            Err(_) => None,
        }
    }

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
    let ready = now_secs().saturating_sub(REST.as_secs());
    let mut names: Vec<(u64, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| {
            let secs: u64 = name.split_once('-')?.0.parse().ok()?;
            (secs <= ready).then_some((secs, name))
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

/// Keeps the file of ref `path` as a spare before a lock is renamed over it (it would be
/// freed): a second name in the spares. Nothing when the ref has no file (new, or packed), or
/// the repository has no spares folder.
pub(super) fn keep_ref_file(repo: &Path, path: &Path) {
    // Only where a repack made the folder (a volume that recycles).
    let name = repo
        .join(FOLDER)
        .join(format!("{}-{:016x}", now_secs(), rand::random::<u64>()));
    let _ = std::fs::hard_link(path, &name);
}

/// Retires loose objects that a synced pack holds: with `recycle`, each moved into the
/// spares while fewer than [`MAX_SPARES`] are there, else (and without `recycle`) deleted; how many left their names. Then the oldest
/// spares past [`MAX_SPARES`] (refs' old files add one per move) and claims a writer that died
/// left behind are deleted.
pub(super) fn retire(repo: &Path, files: &[PathBuf], recycle: bool) -> usize {
    let folder = repo.join(FOLDER);
    let mut spares: Vec<(u64, String)> = Vec::new();
    let made = match recycle {
        true => std::fs::create_dir(&folder),
        // Emptied, and the folder left: no ref's old file is kept any more.
        false => {
            let _ = std::fs::remove_dir_all(&folder);
            Err(std::io::Error::other("not recycling"))
        }
    };
    match made {
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
                    None if name.starts_with(CLAIMED) && abandoned(&folder.join(&name)) => {
                        let _ = std::fs::remove_file(folder.join(&name));
                    }
                    None => {}
                }
            }
        }
        Err(_) => {
            return files
                .iter()
                .filter(|f| std::fs::remove_file(f).is_ok())
                .count()
        }
    }
    if spares.len() > MAX_SPARES {
        spares.sort_unstable();
        for (_, name) in &spares[..spares.len() - MAX_SPARES] {
            let _ = std::fs::remove_file(folder.join(name));
        }
    }
    let mut kept = spares.len().min(MAX_SPARES);
    let stamp = now_secs();
    let mut gone = 0;
    for file in files {
        let moved = kept < MAX_SPARES
            && std::fs::rename(
                file,
                folder.join(format!("{stamp}-{:016x}", rand::random::<u64>())),
            )
            .is_ok();
        if moved {
            kept += 1;
            gone += 1;
        } else if std::fs::remove_file(file).is_ok() {
            gone += 1;
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

    #[test]
    fn a_refs_old_file_becomes_the_next_lock_which_stays_exclusive() {
        let (_dir, repo) = repo();
        let main = repo.path.join("refs/heads/main");
        let head = repo.main_commit("").unwrap();
        let inode = ino(&main);
        // A move of main keeps its old file as a spare (in a repository that recycles: a
        // repack made the folder).
        std::fs::create_dir(repo.path.join(super::FOLDER)).unwrap();
        let lock = repo
            .lock_ref("refs/heads/main", Some(head), head, true)
            .ok()
            .unwrap();
        lock.commit().unwrap();
        assert_ne!(ino(&main), inode);
        let lock = repo
            .lock_ref("refs/heads/main", Some(head), head, true)
            .ok()
            .unwrap();
        let lock_file = repo.path.join("refs/heads/main.lock");
        assert_eq!(ino(&lock_file), inode, "the lock is the old file");
        assert!(crate::storage::repo::refs::made_by_planfiles(&lock_file));
        assert_eq!(
            std::fs::read_to_string(&lock_file).unwrap(),
            format!("{head}\n")
        );
        assert!(matches!(
            repo.lock_ref("refs/heads/main", Some(head), head, true),
            Err(crate::storage::repo::refs::RefMove::Locked)
        ));
        lock.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&main).unwrap(), format!("{head}\n"));
    }
}

#[cfg(test)]
mod off {
    /// Without `recycle` (a journaled volume), a repack deletes what it retires and the
    /// spares folder goes: no ref's old file is kept after it.
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
        let reference = dir.path().join("main");
        std::fs::write(&reference, "r").unwrap();
        super::keep_ref_file(dir.path(), &reference);
        assert!(!folder.exists());
    }
}

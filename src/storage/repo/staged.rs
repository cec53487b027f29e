//! The objects of one attempt at a batch, written to temporary files that no name points at until a sync has made their bytes durable (then renamed into place, as git orders it); an object found already there is read back whole and freshened, or written anew.
use super::{git_err, TenantRepo};
use crate::storage::disk::faults::{self, Op};
use crate::storage::disk::sync_dir;
use crate::storage::StorageError;
use flate2::write::ZlibEncoder;
use flate2::Compression;
use git2::{ObjectType, Oid};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

thread_local! {
    /// Each thread's zlib compressor, reset for every object: a new one allocates and zeroes
    /// its tables (over 200 KiB) for objects of a few hundred bytes, which was a tenth of a
    /// write's CPU at c=64 (docs/PERFORMANCE.md).
    static DEFLATE: std::cell::RefCell<ZlibEncoder<Vec<u8>>> =
        std::cell::RefCell::new(ZlibEncoder::new(Vec::new(), Compression::fast()));
}

/// A loose object's bytes: `<kind> <size>\0` and `data`, zlib-compressed.
fn deflate(kind: ObjectType, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let header = format!("{} {}\0", kind.str(), data.len());
    DEFLATE.with_borrow_mut(|z| {
        // `reset` also ends whatever an earlier failure left half done.
        z.reset(Vec::with_capacity(data.len() / 2 + 64))?;
        z.write_all(header.as_bytes())?;
        z.write_all(data)?;
        z.try_finish()?;
        Ok(std::mem::take(z.get_mut()))
    })
}

/// What an attempt wrote and has not named yet. Dropped unpublished (a retry, a failure),
/// it removes its temporary files.
pub(super) struct Staged {
    fsync: bool,
    /// Each object's temporary file and its name, in the order written.
    files: Vec<(PathBuf, PathBuf)>,
    /// The ids staged here, for lookups within the attempt.
    ids: Vec<Oid>,
    /// The blobs staged here with their bytes: a later write of the batch may edit them.
    blobs: Vec<(Oid, Vec<u8>)>,
    /// The commits of `main` made in this attempt, oldest first: the line from the head on
    /// disk (pushed by [`TenantRepo::commit_changes`]).
    pub(super) commits: Vec<Oid>,
    /// Objects found already there, whole, that a commit of the attempt depends on: in
    /// fsync mode they are synced too (their writer may not have).
    pub(super) found: Vec<Oid>,
    /// Fan-out folders that gained a temporary file, and whether one was made.
    fanouts: Vec<PathBuf>,
    new_fanout: bool,
    /// A spare file became one of the objects: in fsync mode the spares' folder, which lost
    /// its name, is synced too (a power cut must not bring that name back onto the object).
    spare_used: bool,
    objects_dir: PathBuf,
}

impl Staged {
    pub(super) fn new(repo: &TenantRepo, fsync: bool) -> Self {
        Self {
            fsync,
            files: Vec::new(),
            ids: Vec::new(),
            blobs: Vec::new(),
            commits: Vec::new(),
            found: Vec::new(),
            fanouts: Vec::new(),
            new_fanout: false,
            spare_used: false,
            objects_dir: repo.path.join("objects"),
        }
    }

    /// The bytes of a blob staged here.
    pub(super) fn blob(&self, id: Oid) -> Option<&[u8]> {
        self.blobs
            .iter()
            .find(|(b, _)| *b == id)
            .map(|(_, bytes)| bytes.as_slice())
    }

    /// Names every staged object (renames it into place), once the sync that made their
    /// bytes durable has returned; in fsync mode the folders that gained names are synced,
    /// so that the names are durable before any ref names the objects.
    pub(super) fn publish(mut self) -> Result<(), StorageError> {
        while let Some((tmp, path)) = self.files.first() {
            let renamed = faults::check(Op::Rename, path).and_then(|()| std::fs::rename(tmp, path));
            if let Err(e) = renamed {
                // Drop removes this temporary file and those not named yet.
                return Err(StorageError::io("name an object", tmp, e));
            }
            self.files.remove(0);
        }
        if self.fsync {
            for fanout in &self.fanouts {
                sync_dir(fanout)?;
            }
            if self.new_fanout {
                sync_dir(&self.objects_dir)?;
            }
            if self.spare_used {
                let repo = self.objects_dir.parent().expect("a repository's objects");
                sync_dir(&repo.join(super::spares::FOLDER))?;
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (tmp, _) in &self.files {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Whether the loose object file at `path` holds object `id` whole: it inflates, its header
/// names a length its content has, and it hashes to `id`. A power loss can leave a named
/// object empty or zeroed (written by a tool that renames before it syncs).
pub(super) fn loose_is_whole(path: &Path, id: Oid) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut inflated = Vec::new();
    if flate2::read::ZlibDecoder::new(file)
        .read_to_end(&mut inflated)
        .is_err()
    {
        return false;
    }
    let Some(nul) = inflated.iter().position(|&b| b == 0) else {
        return false;
    };
    let Some((kind, len)) = std::str::from_utf8(&inflated[..nul])
        .ok()
        .and_then(|h| h.split_once(' '))
    else {
        return false;
    };
    let (Some(kind), Ok(len)) = (ObjectType::from_str(kind), len.parse::<usize>()) else {
        return false;
    };
    let content = &inflated[nul + 1..];
    content.len() == len && Oid::hash_object(kind, content).is_ok_and(|h| h == id)
}

/// Sets the file's modification time to now, as git freshens an object it would have
/// written: `git prune` deletes unreachable loose objects by age, and an object a new commit
/// is about to name must not look old.
fn freshen(path: &Path) -> bool {
    std::fs::File::open(path)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()))
        .is_ok()
}

impl TenantRepo {
    /// Stages `data` as a loose object of `kind`. An object already loose there is used when
    /// it reads back whole and could be freshened; otherwise (missing, packed only, empty,
    /// zeroed, or not ours to touch) it is written anew: deflated into a temporary file in
    /// its fan-out folder (synced there in fsync mode), renamed by [`Staged::publish`].
    pub(super) fn stage_object(
        &self,
        staged: &mut Staged,
        kind: ObjectType,
        data: &[u8],
    ) -> Result<Oid, StorageError> {
        let id = Oid::hash_object(kind, data).map_err(git_err(&self.tenant, "hash", ""))?;
        if staged.ids.contains(&id) {
            return Ok(id);
        }
        let path = self.loose_path(id);
        if path.exists() && loose_is_whole(&path, id) && freshen(&path) {
            staged.found.push(id);
            staged.ids.push(id);
            self.remember(staged, kind, id, data);
            return Ok(id);
        }
        let fanout = path.parent().expect("objects/xx");
        let io = |op, p: &Path, e| StorageError::io(op, p, e);
        let tmp = fanout.join(format!("tmp_obj_{:016x}", rand::random::<u64>()));
        let new_file = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .open(&tmp)
        };
        let create = || faults::check(Op::Create, &tmp).and_then(|()| new_file());
        // A spare object file first (no inode made: `spares.rs`), else a new one. As git
        // does, the fan-out folder is made when the file cannot be, since it may not be there
        // yet, or no more (`git gc` and `git prune-packed` remove emptied ones at any moment,
        // also between a check and the create).
        let mut recycled = false;
        let mut opened = faults::check(Op::Create, &tmp).and_then(|()| {
            if !self.spares.take(&self.path, &tmp) {
                return new_file();
            }
            recycled = true;
            super::spares::reopen(&tmp).or_else(|_| {
                recycled = false;
                let _ = std::fs::remove_file(&tmp);
                new_file()
            })
        });
        for _ in 0..3 {
            match &opened {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                _ => break,
            }
            match std::fs::create_dir(fanout) {
                Ok(()) => staged.new_fanout = true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("create an object folder", fanout, e)),
            }
            opened = create();
        }
        let mut file = opened.map_err(|e| io("create an object", &tmp, e))?;
        let deflated = deflate(kind, data).map_err(|e| io("deflate an object", &tmp, e))?;
        let written = faults::check(Op::Write, &tmp)
            .and_then(|()| file.write_all(&deflated))
            .and_then(|()| match recycled {
                // Read-only, as git makes loose objects (a new file is made so).
                true => file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o444)),
                false => Ok(()),
            })
            .and_then(|()| {
                if staged.fsync {
                    faults::check(Op::Fsync, &tmp).and_then(|()| file.sync_all())
                } else {
                    Ok(())
                }
            });
        drop(file);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("write an object", &tmp, e));
        }
        staged.spare_used |= recycled;
        staged.files.push((tmp, path.clone()));
        if !staged.fanouts.iter().any(|f| f == fanout) {
            staged.fanouts.push(fanout.to_owned());
        }
        staged.ids.push(id);
        self.remember(staged, kind, id, data);
        Ok(id)
    }

    fn remember(&self, staged: &mut Staged, kind: ObjectType, id: Oid, data: &[u8]) {
        if kind == ObjectType::Blob {
            staged.blobs.push((id, data.to_vec()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{loose_is_whole, Staged};
    use crate::storage::repo::TenantRepo;
    use git2::ObjectType;
    use std::time::{Duration, SystemTime};

    /// Stages and names one blob; returns its id and file.
    fn write_blob(repo: &TenantRepo, data: &[u8]) -> (git2::Oid, std::path::PathBuf) {
        let mut staged = Staged::new(repo, false);
        let id = repo
            .stage_object(&mut staged, ObjectType::Blob, data)
            .unwrap();
        staged.publish().unwrap();
        (id, repo.loose_path(id))
    }

    #[test]
    fn a_reused_compressor_gives_each_object_alone() {
        use std::io::Read;
        let big: Vec<u8> = (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let inputs: [&[u8]; 4] = [b"", b"aws:\n- account_id: '123456789012'\n", &big, b"x"];
        for _ in 0..2 {
            for data in inputs {
                let z = super::deflate(ObjectType::Blob, data).unwrap();
                let mut out = Vec::new();
                flate2::read::ZlibDecoder::new(&z[..])
                    .read_to_end(&mut out)
                    .unwrap();
                let mut want = format!("blob {}\0", data.len()).into_bytes();
                want.extend_from_slice(data);
                assert_eq!(out, want, "{} bytes", data.len());
            }
        }
    }

    #[test]
    fn nothing_is_named_before_publish_and_a_dropped_attempt_leaves_nothing() {
        let (_dir, storage, tenant) = crate::storage::test_storage();
        let repo = TenantRepo::open(&tenant, &storage.repo_path(&tenant)).unwrap();
        let id = git2::Oid::hash_object(ObjectType::Blob, b"staged: true\n").unwrap();
        let path = repo.loose_path(id);
        let fanout = path.parent().unwrap().to_owned();
        // The tenant's first commit is dated, so its objects land in any fan-out folder,
        // this one too now and then: what the attempt leaves is what was not there before.
        let listing = || -> std::collections::BTreeSet<_> {
            std::fs::read_dir(&fanout)
                .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
                .unwrap_or_default()
        };
        let before = listing();
        let mut staged = Staged::new(&repo, false);
        assert_eq!(
            repo.stage_object(&mut staged, ObjectType::Blob, b"staged: true\n")
                .unwrap(),
            id
        );
        assert!(!path.exists(), "named before its bytes were synced");
        assert_eq!(staged.blob(id), Some(&b"staged: true\n"[..]));
        assert_ne!(
            listing(),
            before,
            "nothing was staged in the fan-out folder"
        );
        drop(staged);
        let left: Vec<_> = listing().difference(&before).cloned().collect();
        assert!(left.is_empty(), "a dropped attempt left {left:?}");
        let (_, path) = write_blob(&repo, b"staged: true\n");
        assert!(loose_is_whole(&path, id));
    }

    #[test]
    fn an_existing_object_is_used_only_when_whole_and_is_freshened() {
        let (_dir, storage, tenant) = crate::storage::test_storage();
        let repo = TenantRepo::open(&tenant, &storage.repo_path(&tenant)).unwrap();
        let data = b"accounts: [1, 2, 3]\n";
        let (id, path) = write_blob(&repo, data);
        let whole = std::fs::read(&path).unwrap();
        // A power loss leaves a renamed file empty, zeroed or cut short.
        for (case, bytes) in [
            ("empty", Vec::new()),
            ("zeroed", vec![0u8; whole.len()]),
            ("truncated", whole[..whole.len() / 2].to_vec()),
        ] {
            std::fs::remove_file(&path).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            assert!(!loose_is_whole(&path, id), "{case}");
            let mut staged = Staged::new(&repo, false);
            repo.stage_object(&mut staged, ObjectType::Blob, data)
                .unwrap();
            assert!(
                staged.found.is_empty(),
                "{case}: a broken object was trusted"
            );
            staged.publish().unwrap();
            assert!(loose_is_whole(&path, id), "{case}: not written anew");
        }
        // Whole but old, as `git prune` would delete it: used, and its age is now.
        let old = SystemTime::now() - Duration::from_secs(30 * 86_400);
        std::fs::File::open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let mut staged = Staged::new(&repo, false);
        repo.stage_object(&mut staged, ObjectType::Blob, data)
            .unwrap();
        assert_eq!(staged.found, vec![id]);
        let age = std::fs::metadata(&path).unwrap().modified().unwrap();
        assert!(
            age > SystemTime::now() - Duration::from_secs(60),
            "not freshened"
        );
    }
}

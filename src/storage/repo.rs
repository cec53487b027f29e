//! The git2 side of storage: one tenant's bare repository, read and written with libgit2.
use super::disk::{self, sync_dir, sync_tree};
use super::durable::{SyncGroup, SyncMark};
use super::versions::Change;
use super::{Ancestry, FileSnapshot, StorageError, TenantSummary, WriteOutcome, WriteRequest};
use crate::domain::yaml::splice::{self, Made, Rewrite};
use crate::domain::{BlobId, CommitId, Identity, ObjectId, PlanFile, TenantId};
use git2::{
    ConfigLevel, ErrorClass, ErrorCode, ObjectType, Oid, Repository, RepositoryInitOptions,
    Signature,
};
use std::borrow::Cow;
use std::fs::{File, TryLockError};
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant, UNIX_EPOCH};

mod changes;
mod commit;
mod history;
mod upkeep;
mod versions;
#[cfg(test)]
mod write_tests;

const MAIN: &str = "refs/heads/main";
const SOURCE_HOSTING_KEY: &str = "planfiles.sourcehosting";
const FILE_MODE: i32 = 0o100644;
/// How long a write keeps trying to get the tenant's write lock and move `main`.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// A `main.lock` older than this, found while holding the tenant's write lock, was left by a
/// dead process (live writers hold it for milliseconds) and is removed.
const STALE_REF_LOCK: Duration = Duration::from_secs(5);
/// The sidecar file every planfiles writer of a tenant holds an OS lock on while writing.
const WRITE_LOCK_FILE: &str = "planfiles-write.lock";

/// Turns libgit2's own fsync of every object, ref and folder on or off (process-wide).
pub(super) fn set_libgit2_fsync(on: bool) {
    libgit2_sys::init();
    // SAFETY: git_libgit2_opts with ENABLE_FSYNC_GITDIR takes one int argument; libgit2 is
    // initialised above.
    let rc = unsafe {
        libgit2_sys::git_libgit2_opts(
            libgit2_sys::GIT_OPT_ENABLE_FSYNC_GITDIR as libc_int,
            libc_int::from(on),
        )
    };
    assert_eq!(rc, 0, "libgit2 refused GIT_OPT_ENABLE_FSYNC_GITDIR");
}

pub(super) fn init_libgit2() {
    libgit2_sys::init();
    // SAFETY: git_libgit2_opts with ENABLE_FSYNC_GITDIR takes one int argument; libgit2 is
    // initialised above.
    let rc = unsafe {
        libgit2_sys::git_libgit2_opts(
            libgit2_sys::GIT_OPT_ENABLE_FSYNC_GITDIR as libc_int,
            1 as libc_int,
        )
    };
    assert_eq!(rc, 0, "libgit2 refused GIT_OPT_ENABLE_FSYNC_GITDIR");
    // Only each repository's own config counts: the service account's ~/.gitconfig or
    // /etc/gitconfig must not change how tenants' repositories are written, and not looking
    // for them saves about 40 syscalls per repository opened.
    for level in [
        ConfigLevel::System,
        ConfigLevel::XDG,
        ConfigLevel::Global,
        ConfigLevel::ProgramData,
    ] {
        // SAFETY: called at start, before any thread uses libgit2.
        unsafe { git2::opts::set_search_path(level, "") }
            .expect("libgit2 takes an empty config search path");
    }
}

#[allow(non_camel_case_types)]
type libc_int = std::os::raw::c_int;

fn to_id(oid: Oid) -> ObjectId {
    ObjectId::parse(&oid.to_string()).expect("git2 prints 40 hex digits")
}

fn to_oid(id: &ObjectId) -> Oid {
    Oid::from_str(id.as_str()).expect("ObjectId holds 40 hex digits")
}

fn empty_blob_oid() -> Oid {
    Oid::hash_object(ObjectType::Blob, b"").expect("hashing in memory cannot fail")
}

/// The commit `main` is at, read from the ref files alone: the loose ref, or after `git gc` /
/// `git pack-refs` its line in `packed-refs` (a loose ref wins, as in git). `None` when
/// neither names it (callers fall back to libgit2).
pub(super) fn file_head(repo: &Path) -> Option<CommitId> {
    match std::fs::read(repo.join(MAIN)) {
        Ok(text) => {
            let hex = std::str::from_utf8(&text).ok()?.trim_end();
            ObjectId::parse(hex).ok().map(CommitId)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            packed_head(&std::fs::read(repo.join("packed-refs")).ok()?)
        }
        Err(_) => None,
    }
}

/// `main`'s commit in the text of a `packed-refs` file.
fn packed_head(packed: &[u8]) -> Option<CommitId> {
    let text = std::str::from_utf8(packed).ok()?;
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .find_map(|l| {
            let (hex, name) = l.split_once(' ')?;
            (name == MAIN).then(|| ObjectId::parse(hex).ok().map(CommitId))?
        })
}

/// The source-hosting flag of the repository at `path`, read from its config file alone: no
/// repository is opened (path resolution, `HEAD`, `objects/`, `refs/`), which a check made
/// before every write does not need. A broken repository is found by the operation after it.
pub(super) fn source_hosting_flag(tenant: &TenantId, path: &Path) -> Result<bool, StorageError> {
    if !path.is_dir() {
        return Err(StorageError::TenantNotFound(tenant.clone()));
    }
    let config =
        git2::Config::open(&path.join("config")).map_err(git_err(tenant, "read config", ""))?;
    source_hosting_in(&config, tenant)
}

fn source_hosting_in(config: &git2::Config, tenant: &TenantId) -> Result<bool, StorageError> {
    match config.get_bool(SOURCE_HOSTING_KEY) {
        Ok(on) => Ok(on),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(false),
        Err(e) => Err(git_err(tenant, "read config", "")(e)),
    }
}

/// An open tenant repository.
pub(super) struct TenantRepo<'a> {
    tenant: &'a TenantId,
    path: PathBuf,
    repo: Repository,
    /// Called by a write just before it moves `main` (a test seam; see [`super::WriteHook`]).
    before_ref_update: Option<super::WriteHook>,
}

impl<'a> TenantRepo<'a> {
    pub(super) fn open(tenant: &'a TenantId, path: &Path) -> Result<Self, StorageError> {
        if !path.is_dir() {
            return Err(StorageError::TenantNotFound(tenant.clone()));
        }
        let repo = Repository::open_bare(path).map_err(git_err(tenant, "open repository", ""))?;
        Ok(Self {
            tenant,
            path: path.to_owned(),
            repo,
            before_ref_update: None,
        })
    }

    pub(super) fn with_write_hook(mut self, hook: Option<super::WriteHook>) -> Self {
        self.before_ref_update = hook;
        self
    }

    pub(super) fn source_hosting(&self) -> Result<bool, StorageError> {
        let config = self
            .repo
            .config()
            .map_err(git_err(self.tenant, "read config", ""))?;
        source_hosting_in(&config, self.tenant)
    }

    /// Sets the flag in the repository's config. libgit2 writes `config.lock` and renames it
    /// over `config`; a process killed in between leaves `config.lock` behind, which would
    /// refuse every later change. So the same rule as for `main.lock` applies: planfiles
    /// setters take turns on the tenant's write lock, and a `config.lock` older than
    /// [`STALE_REF_LOCK`] found while holding it was left by a dead process and is removed.
    /// A fresh one is waited on until [`WRITE_DEADLINE`].
    pub(super) fn set_source_hosting(&self, on: bool) -> Result<(), StorageError> {
        let deadline = Instant::now() + WRITE_DEADLINE;
        let _turn = self.config_turn(deadline)?;
        let mut config = self
            .repo
            .config()
            .map_err(git_err(self.tenant, "open config", ""))?;
        let lock = self.path.join("config.lock");
        let mut attempt = 0;
        loop {
            attempt += 1;
            match config.set_bool(SOURCE_HOSTING_KEY, on) {
                Ok(()) => break,
                Err(e) if e.code() == ErrorCode::Locked => {
                    if let Some(age) = remove_if_stale(&lock) {
                        tracing::warn!(tenant = %self.tenant, age_ms = age.as_millis() as u64, "removed a stale config.lock");
                        continue;
                    }
                    if Instant::now() >= deadline {
                        return Err(StorageError::io(
                            "change the tenant's config: config.lock is held by another \
                             process; remove it if no git or planfiles process uses the \
                             repository",
                            &lock,
                            std::io::Error::new(
                                std::io::ErrorKind::WouldBlock,
                                format!(
                                    "still locked after {} s and {attempt} attempts",
                                    WRITE_DEADLINE.as_secs()
                                ),
                            ),
                        ));
                    }
                    backoff(attempt);
                }
                Err(e) => return Err(git_err(self.tenant, "write config", "")(e)),
            }
        }
        // libgit2 never fsyncs a config it writes (renamed from config.lock): the flag
        // reaches the disk here, in both modes, before the change is reported done.
        disk::sync_file(&self.path.join("config"))?;
        sync_dir(&self.path)
    }

    /// The tenant's write lock, for a config change: while it is held no other planfiles
    /// process changes the config (or writes), so an old `config.lock` is nobody's.
    fn config_turn(&self, deadline: Instant) -> Result<File, StorageError> {
        let path = self.path.join(WRITE_LOCK_FILE);
        lock_file_until(&path, deadline)
            .map_err(|e| StorageError::io("take the write lock", &path, e))?
            .map_err(|_| {
                StorageError::io(
                    "change the tenant's config: another planfiles process kept the tenant's \
                     write lock",
                    &path,
                    std::io::ErrorKind::WouldBlock.into(),
                )
            })
    }

    /// In group-commit mode, waits for a shared `syncfs` of the volume.
    fn group_sync(&self, sync: Option<&SyncGroup>, file: &'static str) -> Result<(), StorageError> {
        match sync {
            Some(group) => group
                .sync()
                .map_err(|e| self.io_err("sync the data volume", &self.path, e, file)),
            None => Ok(()),
        }
    }

    /// In group-commit mode, waits for a shared `syncfs` that covers everything written since
    /// `mark` (taken from the same group before writing).
    fn group_sync_since(
        &self,
        sync: Option<&SyncGroup>,
        mark: Option<SyncMark>,
        file: &'static str,
    ) -> Result<(), StorageError> {
        match (sync, mark) {
            (Some(group), Some(mark)) => group
                .sync_from(mark)
                .map_err(|e| self.io_err("sync the data volume", &self.path, e, file)),
            _ => self.group_sync(sync, file),
        }
    }

    pub(super) fn summary(&self) -> Result<TenantSummary, StorageError> {
        let head = self.repo.refname_to_id(MAIN).ok();
        let last_change = match head {
            Some(oid) => {
                let commit =
                    self.repo
                        .find_commit(oid)
                        .map_err(git_err(self.tenant, "read head", ""))?;
                let secs = u64::try_from(commit.time().seconds()).unwrap_or(0);
                Some(UNIX_EPOCH + Duration::from_secs(secs))
            }
            None => None,
        };
        Ok(TenantSummary {
            id: self.tenant.clone(),
            source_hosting: self.source_hosting()?,
            head: head.map(|oid| CommitId(to_id(oid))),
            last_change,
        })
    }

    /// The head commit of `main` and the blob id of `file` in it (the empty blob if absent).
    fn head_and_blob(&self, file: PlanFile) -> Result<(git2::Commit<'_>, Oid, bool), StorageError> {
        let path = file.path();
        let head_oid =
            self.repo
                .refname_to_id(MAIN)
                .map_err(git_err(self.tenant, "resolve main", path))?;
        let head = self.repo.find_commit(head_oid).map_err(git_err(
            self.tenant,
            "read head commit",
            path,
        ))?;
        let tree = head
            .tree()
            .map_err(git_err(self.tenant, "read head tree", path))?;
        let entry = tree
            .get_name(path)
            .filter(|e| e.kind() == Some(ObjectType::Blob));
        Ok(match entry {
            Some(e) => (head, e.id(), true),
            None => (head, empty_blob_oid(), false),
        })
    }

    pub(super) fn read(&self, file: PlanFile) -> Result<FileSnapshot, StorageError> {
        let (head, blob_oid, present) = self.head_and_blob(file)?;
        let bytes = if present {
            let blob = self.repo.find_blob(blob_oid).map_err(git_err(
                self.tenant,
                "read blob",
                file.path(),
            ))?;
            blob.content().to_vec()
        } else {
            Vec::new()
        };
        Ok(FileSnapshot {
            bytes,
            blob: BlobId(to_id(blob_oid)),
            commit: CommitId(to_id(head.id())),
        })
    }

    /// True when `oid` names a commit that is `head` or one of its ancestors.
    fn in_history(&self, head: Oid, oid: Oid) -> bool {
        if oid == head {
            return true;
        }
        match self.repo.find_commit(oid) {
            Ok(_) => self.repo.graph_descendant_of(head, oid).unwrap_or(false),
            Err(_) => false,
        }
    }

    /// See [`crate::storage::Storage::ancestry`].
    pub(super) fn ancestry(&self, id: ObjectId) -> Result<Ancestry, StorageError> {
        let head =
            self.repo
                .refname_to_id(MAIN)
                .map_err(git_err(self.tenant, "resolve main", ""))?;
        Ok(Ancestry {
            head: CommitId(to_id(head)),
            in_history: self.in_history(head, to_oid(&id)),
        })
    }

    /// Whether `oid` is in the history of `head`, from what `known` found at an earlier head:
    /// when `head` reaches that head along first parents within a few commits and no merge,
    /// only those commits are new, and the answer is `known`'s or "one of them". Otherwise
    /// (someone moved `main` elsewhere, or merged) the whole walk again.
    fn in_history_since(&self, head: Oid, oid: Oid, known: Option<Ancestry>) -> bool {
        const NEW_COMMITS: usize = 1000;
        let Some(known) = known else {
            return self.in_history(head, oid);
        };
        let earlier = to_oid(&known.head.0);
        let mut at = head;
        for _ in 0..=NEW_COMMITS {
            if at == earlier {
                return known.in_history;
            }
            if at == oid {
                return true;
            }
            let Ok(commit) = self.repo.find_commit(at) else {
                break;
            };
            if commit.parent_count() != 1 {
                break;
            }
            at = commit.parent_id(0).expect("one parent");
        }
        self.in_history(head, oid)
    }

    /// Writes one file (see [`crate::storage::Storage::write`]): a commit of one change.
    pub(super) fn write(
        &self,
        req: WriteRequest,
        committer: &Identity,
        sync: Option<&SyncGroup>,
    ) -> Result<WriteOutcome, StorageError> {
        Ok(self.commit(&req.into(), committer, sync)?.into_single())
    }

    /// The bytes a write stores: the request's, or for JSON content the current file's text
    /// edited into the content's text (its whole emission when that cannot be done).
    fn new_bytes<'r>(
        &self,
        req: &'r Change,
        current: Oid,
        present: bool,
    ) -> Result<(Cow<'r, [u8]>, Option<Made>), StorageError> {
        let Some(content) = &req.content else {
            return Ok((Cow::Borrowed(&req.bytes), None));
        };
        if !present {
            return Ok((Cow::Borrowed(&req.bytes), Some(Made::Emitted)));
        }
        let blob = self.repo.find_blob(current).map_err(git_err(
            self.tenant,
            "read blob",
            req.file.path(),
        ))?;
        let rewrite = match std::str::from_utf8(blob.content()) {
            Ok(old) => splice::rewrite(old, content),
            Err(_) => Rewrite::Fresh,
        };
        let made = rewrite.made();
        if made == Made::Fallback {
            tracing::warn!(
                tenant = %self.tenant,
                file = req.file.path(),
                "the stored text could not be edited into the new content; emitted whole"
            );
        }
        Ok(match rewrite {
            Rewrite::Edited(text) => (Cow::Owned(text.into_bytes()), Some(made)),
            Rewrite::Fresh | Rewrite::Fallback => (Cow::Borrowed(&req.bytes), Some(made)),
        })
    }

    /// In fsync mode, syncs the loose files of `objects` (see [`TenantRepo::commit_on`]),
    /// their fan-out folders and `objects/`: libgit2 fsyncs each object it writes, but an
    /// object that is there already (written by plain git, or by a `group` instance before its
    /// `syncfs`) it only touches, and it does not sync `objects/` when it creates a fan-out
    /// folder.
    fn sync_objects(&self, objects: &[Oid], file: &'static str) -> Result<(), StorageError> {
        let mut fanouts: Vec<PathBuf> = Vec::new();
        for oid in objects {
            let object = self.loose_path(*oid);
            match File::open(&object).and_then(|f| f.sync_all()) {
                Ok(()) => {}
                // Packed (packs are synced when written), or not an object (a gitlink).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io_err("sync an object", &object, e, file)),
            }
            if let Some(fanout) = object.parent().filter(|f| !fanouts.iter().any(|k| k == f)) {
                fanouts.push(fanout.to_owned());
            }
        }
        for fanout in &fanouts {
            sync_dir(fanout)?;
        }
        sync_dir(&self.path.join("objects"))
    }

    /// Puts `main` back from `commit` to `head` after the sync that was to make `commit`
    /// durable failed, and syncs that. Only if `main` is still at `commit`: when it moved
    /// again meanwhile (plain git), the new head builds on `commit`, which then stays.
    fn undo_unsynced(
        &self,
        head: Oid,
        commit: Oid,
        sync: Option<&SyncGroup>,
        file: &'static str,
        cause: &StorageError,
    ) {
        let tenant = self.tenant.as_str();
        let undo_mark = sync.map(SyncGroup::mark);
        let undone = self.repo.reference_matching(
            MAIN,
            head,
            true,
            commit,
            &format!("planfiles: undo an update of {file} that was not synced"),
        );
        match undone {
            Ok(_) => match self.group_sync_since(sync, undo_mark, file) {
                Ok(()) => {
                    tracing::warn!(
                        tenant, file, %commit, %head, error = %cause,
                        "main put back after its update could not be synced"
                    );
                }
                Err(e) => {
                    tracing::error!(
                        tenant, file, %commit, %head, error = %cause, undo_error = %e,
                        "main put back after its update could not be synced, but the undo \
                         could not be synced either: after a crash main may be at either"
                    );
                }
            },
            Err(e) if e.code() == ErrorCode::Modified => {
                tracing::error!(
                    tenant, file, %commit, error = %cause,
                    "main could not be put back after its update could not be synced: it moved \
                     again meanwhile, so the unsynced commit stays in its history"
                );
            }
            Err(e) => {
                tracing::error!(
                    tenant, file, %commit, %head, error = %cause, undo_error = e.message(),
                    "main could not be put back after its update could not be synced: it \
                     stays at the unsynced commit"
                );
            }
        }
    }

    /// Takes the tenant's write lock (an OS file lock on a sidecar file), waiting until
    /// `deadline` at most.
    fn lock_for_write(&self, deadline: Instant, file: &'static str) -> Result<File, StorageError> {
        let lock_path = self.path.join(WRITE_LOCK_FILE);
        lock_file_until(&lock_path, deadline)
            .map_err(|e| self.io_err("take the write lock", &lock_path, e, file))?
            .map_err(|attempts| StorageError::Contended {
                tenant: self.tenant.clone(),
                file,
                attempts,
            })
    }

    /// Removes `refs/heads/main.lock` when it is older than [`STALE_REF_LOCK`]. Called only
    /// while holding the write lock, so no live planfiles writer owns it.
    fn remove_stale_ref_lock(&self) {
        if let Some(age) = remove_if_stale(&self.path.join("refs/heads/main.lock")) {
            tracing::warn!(tenant = %self.tenant, age_ms = age.as_millis() as u64, "removed a stale refs/heads/main.lock");
        }
    }

    /// libgit2 does not always keep the errno of a failed write (a full disk reads as "no
    /// error"), so a failed write probes the volume: if a small file cannot be written and
    /// synced there, the disk is full.
    fn explain_write_failure(&self, e: StorageError, file: &'static str) -> StorageError {
        if !matches!(e, StorageError::Git { .. }) {
            return e;
        }
        let probe = tempfile::tempfile_in(&self.path).and_then(|mut f| {
            use std::io::Write;
            f.write_all(&[0u8; 64 * 1024])?;
            f.sync_all()
        });
        match probe {
            Err(p) if p.kind() == std::io::ErrorKind::StorageFull => StorageError::StorageFull {
                tenant: self.tenant.clone(),
                file,
            },
            _ => e,
        }
    }

    fn io_err(
        &self,
        op: &'static str,
        path: &Path,
        e: std::io::Error,
        file: &'static str,
    ) -> StorageError {
        if e.kind() == std::io::ErrorKind::StorageFull {
            return StorageError::StorageFull {
                tenant: self.tenant.clone(),
                file,
            };
        }
        StorageError::io(op, path, e)
    }

    /// The file of the loose object `oid`.
    fn loose_path(&self, oid: Oid) -> PathBuf {
        let hex = oid.to_string();
        self.path.join("objects").join(&hex[..2]).join(&hex[2..])
    }

    fn is_loose(&self, oid: Oid) -> bool {
        self.loose_path(oid).exists()
    }
}

/// A commit [`TenantRepo::commit_on`] wrote, and the objects it depends on that libgit2 did
/// not write (and fsync) for it.
struct NewCommit {
    id: Oid,
    found: Vec<Oid>,
}

/// The id of `base` with the blob entry `name` set to `blob`, as git would write it, computed
/// without writing it.
#[cfg(test)]
fn tree_id_with(base: &git2::Tree<'_>, name: &str, blob: Oid) -> Option<Oid> {
    tree_id_with_all(base, &[(name, blob)])
}

/// The id of `base` with each blob entry of `set` replaced, as git would write it, computed
/// without writing it (entries sorted as git sorts them: a folder as if its name ended in `/`).
fn tree_id_with_all(base: &git2::Tree<'_>, set: &[(&str, Oid)]) -> Option<Oid> {
    let mut entries: Vec<(Vec<u8>, i32, Oid)> = base
        .iter()
        .filter(|e| !set.iter().any(|(n, _)| e.name_bytes() == n.as_bytes()))
        .map(|e| (e.name_bytes().to_vec(), e.filemode(), e.id()))
        .collect();
    entries.extend(
        set.iter()
            .map(|(name, blob)| (name.as_bytes().to_vec(), FILE_MODE, *blob)),
    );
    let key = |(name, mode, _): &(Vec<u8>, i32, Oid)| {
        let mut key = name.clone();
        if *mode == 0o040000 {
            key.push(b'/');
        }
        key
    };
    entries.sort_by_cached_key(key);
    let mut bytes = Vec::with_capacity(entries.len() * 48);
    for (name, mode, id) in &entries {
        bytes.extend_from_slice(format!("{mode:o} ").as_bytes());
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend_from_slice(id.as_bytes());
    }
    Oid::hash_object(ObjectType::Tree, &bytes).ok()
}

fn signature(who: &Identity) -> Result<Signature<'static>, git2::Error> {
    Signature::now(who.name(), who.email())
}

/// An OS lock on the file at `path` (created if missing), waiting until `deadline` at most;
/// `Err(attempts)` when another holder kept it that long.
fn lock_file_until(path: &Path, deadline: Instant) -> std::io::Result<Result<File, u32>> {
    let file = disk::open_or_create(path)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match file.try_lock() {
            Ok(()) => return Ok(Ok(file)),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => backoff(attempt),
            Err(TryLockError::WouldBlock) => return Ok(Err(attempt)),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Removes the lock file at `path` when it is older than [`STALE_REF_LOCK`] and returns its
/// age; `None` when it is fresh, gone, or its age cannot be told (a time in the future).
fn remove_if_stale(path: &Path) -> Option<Duration> {
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()?
        .elapsed()
        .ok()?;
    (age >= STALE_REF_LOCK && std::fs::remove_file(path).is_ok()).then_some(age)
}

/// Sleeps a little longer on each attempt, with jitter so that racing writers spread out.
fn backoff(attempt: u32) {
    let cap_us = 500u64 * u64::from(attempt.min(20));
    let us = rand::random_range(50..=cap_us.max(100));
    std::thread::sleep(Duration::from_micros(us));
}

/// The lock file that tenant creations of every planfiles process take turns on, in the
/// data dir (not in `tenants/`, whose emptiness means "seed me").
const CREATE_LOCK_FILE: &str = ".planfiles-create.lock";

/// Creates a tenant repository: init in a temporary directory, first commit, then rename.
/// Creations take turns, and an id that equals an existing tenant's in another letter case is
/// refused: on a case-insensitive volume both would be one repository.
pub(super) fn create(
    tenant: &TenantId,
    tenants_dir: &Path,
    path: &Path,
    source_hosting: bool,
    committer: &Identity,
) -> Result<CommitId, StorageError> {
    let lock_path = tenants_dir
        .parent()
        .unwrap_or(tenants_dir)
        .join(CREATE_LOCK_FILE);
    let _turn = lock_file_until(&lock_path, Instant::now() + WRITE_DEADLINE)
        .map_err(|e| StorageError::io("take the tenant creation lock", &lock_path, e))?
        .map_err(|_| {
            StorageError::io(
                "another process kept the tenant creation lock",
                &lock_path,
                std::io::ErrorKind::WouldBlock.into(),
            )
        })?;
    if let Some(existing) = same_id_in_other_case(tenant, tenants_dir)? {
        return Err(StorageError::TenantCaseClash {
            tenant: tenant.clone(),
            existing,
        });
    }
    if path.exists() {
        return Err(StorageError::TenantExists(tenant.clone()));
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".new-{tenant}-"))
        .tempdir_in(tenants_dir)
        .map_err(|e| StorageError::io("create a temporary directory", tenants_dir, e))?;
    let commit = init_repo(tenant, tmp.path(), source_hosting, committer)?;
    // Every file and folder of the new repository (libgit2 fsyncs none of its config, and in
    // group mode nothing), then the rename, then the folder that gained it.
    sync_tree(tmp.path())?;
    let tmp_path = tmp.keep();
    if let Err(e) = std::fs::rename(&tmp_path, path) {
        let _ = std::fs::remove_dir_all(&tmp_path);
        return Err(if path.exists() {
            StorageError::TenantExists(tenant.clone())
        } else {
            StorageError::io("move the new repository into place", path, e)
        });
    }
    sync_dir(tenants_dir)?;
    Ok(CommitId(to_id(commit)))
}

/// The name of an existing tenant repository whose id equals `tenant` in another letter case.
fn same_id_in_other_case(
    tenant: &TenantId,
    tenants_dir: &Path,
) -> Result<Option<String>, StorageError> {
    let wanted = format!("{tenant}.git");
    let entries = std::fs::read_dir(tenants_dir)
        .map_err(|e| StorageError::io("list tenants", tenants_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("list tenants", tenants_dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name != wanted && name.eq_ignore_ascii_case(&wanted) {
            let id = &name[..name.len() - ".git".len()];
            return Ok(Some(id.to_owned()));
        }
    }
    Ok(None)
}

/// Initialises a bare repository at `path` with branch `main` and the tenant's first commit.
fn init_repo(
    tenant: &TenantId,
    path: &Path,
    source_hosting: bool,
    committer: &Identity,
) -> Result<Oid, StorageError> {
    let err = |op| git_err(tenant, op, "");
    let mut opts = RepositoryInitOptions::new();
    opts.bare(true)
        .initial_head("main")
        .mkdir(true)
        .mkpath(false);
    let repo = Repository::init_opts(path, &opts).map_err(err("init repository"))?;
    repo.config()
        .and_then(|mut c| c.set_bool(SOURCE_HOSTING_KEY, source_hosting))
        .map_err(err("write config"))?;
    let mut builder = repo.treebuilder(None).map_err(err("build tree"))?;
    for (file, text) in [
        (PlanFile::Integration, "{}\n"),
        (PlanFile::Configuration, "folders: []\n"),
    ] {
        let blob = repo.blob(text.as_bytes()).map_err(err("write blob"))?;
        builder
            .insert(file.path(), blob, FILE_MODE)
            .map_err(err("build tree"))?;
    }
    let tree = repo
        .find_tree(builder.write().map_err(err("write tree"))?)
        .map_err(err("read tree"))?;
    let sig = signature(committer).map_err(err("signature"))?;
    let commit = repo
        .commit(
            Some(MAIN),
            &sig,
            &sig,
            &format!("Create tenant {tenant}\n"),
            &tree,
            &[],
        )
        .map_err(err("write commit"))?;
    Ok(commit)
}

/// Maps a git2 error to a `StorageError` that names the tenant, the file and the operation.
fn git_err<'t>(
    tenant: &'t TenantId,
    op: &'static str,
    file: &'static str,
) -> impl Fn(git2::Error) -> StorageError + 't {
    move |e| {
        if e.class() == ErrorClass::Os && e.message().contains("No space left") {
            return StorageError::StorageFull {
                tenant: tenant.clone(),
                file,
            };
        }
        StorageError::Git {
            tenant: tenant.clone(),
            op,
            message: if file.is_empty() {
                e.message().to_owned()
            } else {
                format!("{file}: {}", e.message())
            },
            code: e.raw_code(),
            class: e.raw_class(),
        }
    }
}

#[cfg(test)]
mod file_head_tests {
    #[test]
    fn packed_refs_name_main_on_its_own_line() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let text = format!(
            "# pack-refs with: peeled fully-peeled sorted \n{b} refs/heads/mainline\n{a} refs/heads/main\n^{b}\n"
        );
        assert_eq!(
            super::packed_head(text.as_bytes()).map(|c| c.to_string()),
            Some(a)
        );
        assert_eq!(super::packed_head(b"# nothing\n"), None);
    }
}

//! One tenant's bare repository, opened with libgit2: what every operation shares (ids, `main`, locks, errors), and reading the head. Each operation has its file below `repo/`.

use super::disk;
use super::{Ancestry, FileSnapshot, StorageError, TenantSummary};
use crate::domain::{BlobId, CommitId, Identity, ObjectId, PlanFile, TenantId};
use git2::{ConfigLevel, ErrorClass, ObjectType, Oid, Repository, Signature};
use std::fs::{File, TryLockError};
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant, UNIX_EPOCH};

mod advance;
#[cfg(test)]
mod batch_tests;
mod commit;
mod create;
mod diff;
mod durability;
mod history;
mod idempotency;
pub(super) mod inflight;
mod objects;
pub(super) mod open_repos;
mod proposals;
pub(super) use proposals::RecordsCaches;
pub(super) mod receive;
pub(super) mod recent_keys;
mod refs;
mod repack;
mod replay;
pub(super) mod signatures;
mod source_hosting;
mod spares;
mod staged;
pub(super) mod upload_pack;
#[cfg(test)]
mod write_tests;

pub(super) use create::{create, creation_turn, handover_turn};
pub(super) use refs::{file_head, file_records};
pub(super) use source_hosting::Flags;
pub use source_hosting::{Settings, MAX_REQUIRED_APPROVALS};
pub(super) use spares::{empty as empty_spares, REST as SPARES_REST};

const MAIN: &str = "refs/heads/main";
/// The records of idempotent writes that changed nothing, one commit each
/// (`idempotency.rs`); here beside `MAIN` because the refs' code moves both.
const NO_OPS: &str = "refs/planfiles/no-ops";
const FILE_MODE: i32 = 0o100644;
/// How long a write keeps trying to get the tenant's write lock and move `main`.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// A lock file of git's (`main.lock`, `config.lock`) older than this was left by a process
/// that died: git itself never removes another process's lock, and a live transaction (a
/// slow hook, a long push) may hold one for seconds, so only minutes make it abandoned.
const ABANDONED_LOCK: Duration = Duration::from_secs(600);
/// How long a write waits for a `main.lock` held by a live process before it answers 503.
const REF_LOCK_WAIT: Duration = Duration::from_secs(2);
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

/// See [`super::limit_open_packs`]. Once per process: the first caller's value stays.
pub(super) fn set_open_pack_limit(files: usize) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: the service calls this while it starts (`startup.rs`), before it serves a
        // request, so no other thread is inside libgit2. (Tests that build several apps in
        // one process call it while others may be: it is one aligned word, which libgit2
        // reads when it maps a pack, and only the first call writes it.)
        unsafe { git2::opts::set_mwindow_file_limit(files) }
            .expect("libgit2 takes a pack file limit");
    });
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

/// An open tenant repository.
pub(super) struct TenantRepo {
    tenant: TenantId,
    path: PathBuf,
    repo: Repository,
    /// Called by a write just before it moves `main` (a test seam; see [`super::WriteHook`]).
    before_ref_update: Option<super::WriteHook>,
    /// What the blobs this repository's last edits stored parse to (see [`objects::Parsed`]).
    parsed: objects::Parsed,
    /// Object files a repack retired, for new objects (see [`spares`]).
    spares: spares::Spares,
}

impl TenantRepo {
    /// Opens the tenant's repository, whatever its placement: where an access may happen is
    /// [`super::Storage::locate`]'s answer, asked first.
    pub(super) fn open(tenant: &TenantId, path: &Path) -> Result<Self, StorageError> {
        if !path.is_dir() {
            return Err(super::placement::missing(path, tenant));
        }
        let repo = Repository::open_bare(path).map_err(git_err(tenant, "open repository", ""))?;
        Ok(Self {
            tenant: tenant.clone(),
            path: path.to_owned(),
            repo,
            before_ref_update: None,
            parsed: objects::Parsed::default(),
            spares: spares::Spares::default(),
        })
    }

    /// [`TenantRepo::open`] for a repository kept open between writes: `objects/pack` is
    /// made first when missing (a repository copied without its empty folders), since
    /// libgit2 looks for new packs on a missing object only in a pack folder that was there
    /// when it opened the repository.
    pub(super) fn open_to_keep(tenant: &TenantId, path: &Path) -> Result<Self, StorageError> {
        let pack = path.join("objects/pack");
        match disk::create_dir_synced(&pack) {
            Ok(()) => {}
            // No repository (any more): `open` says why.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io("create a directory", &pack, e)),
        }
        Self::open(tenant, path)
    }

    pub(super) fn with_write_hook(mut self, hook: Option<super::WriteHook>) -> Self {
        self.before_ref_update = hook;
        self
    }

    pub(super) fn summary(&self) -> Result<TenantSummary, StorageError> {
        let settings = self.settings()?;
        let head = self.repo.refname_to_id(MAIN).ok();
        let last_change = match head {
            Some(oid) => {
                let commit =
                    self.repo
                        .find_commit(oid)
                        .map_err(git_err(&self.tenant, "read head", ""))?;
                let secs = u64::try_from(commit.time().seconds()).unwrap_or(0);
                Some(UNIX_EPOCH + Duration::from_secs(secs))
            }
            None => None,
        };
        Ok(TenantSummary {
            id: self.tenant.clone(),
            source_hosting: settings.source_hosting,
            required_approvals: settings.required_approvals,
            head: head.map(|oid| CommitId(to_id(oid))),
            last_change,
            placement: super::placement::read(&self.path)?,
        })
    }

    /// The head commit of `main` and the blob id of `file` in it (the empty blob if absent).
    fn head_and_blob(&self, file: PlanFile) -> Result<(git2::Commit<'_>, Oid, bool), StorageError> {
        let path = file.path();
        let head_oid =
            self.repo
                .refname_to_id(MAIN)
                .map_err(git_err(&self.tenant, "resolve main", path))?;
        let head = self.repo.find_commit(head_oid).map_err(git_err(
            &self.tenant,
            "read head commit",
            path,
        ))?;
        let tree = head
            .tree()
            .map_err(git_err(&self.tenant, "read head tree", path))?;
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
                &self.tenant,
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
                .map_err(git_err(&self.tenant, "resolve main", ""))?;
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

    /// The file of the loose object `oid`.
    fn loose_path(&self, oid: Oid) -> PathBuf {
        let hex = oid.to_string();
        self.path.join("objects").join(&hex[..2]).join(&hex[2..])
    }
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

/// Removes the lock file at `path` when it is clearly abandoned, and returns its age: made
/// before this machine booted (no process alive now can hold it), or older than
/// [`ABANDONED_LOCK`]. `None` when it may belong to a live process, is gone, or its age
/// cannot be told (a time in the future).
pub(super) fn remove_if_abandoned(path: &Path) -> Option<Duration> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    let age = modified.elapsed().ok()?;
    let before_boot = boot_time().is_some_and(|boot| modified < boot);
    ((before_boot || age >= ABANDONED_LOCK) && std::fs::remove_file(path).is_ok()).then_some(age)
}

/// When this machine booted (`btime` in `/proc/stat`), read once.
fn boot_time() -> Option<std::time::SystemTime> {
    static BOOT: std::sync::OnceLock<Option<std::time::SystemTime>> = std::sync::OnceLock::new();
    *BOOT.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let secs: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        Some(UNIX_EPOCH + Duration::from_secs(secs))
    })
}

/// Sleeps a little longer on each attempt, with jitter so that racing writers spread out.
fn backoff(attempt: u32) {
    let cap_us = 500u64 * u64::from(attempt.min(20));
    let us = rand::random_range(50..=cap_us.max(100));
    std::thread::sleep(Duration::from_micros(us));
}

/// Whether this process cannot open one more file now (`EMFILE`, or `ENFILE` for the
/// system): asked only after an operation failed, to tell why.
pub(super) fn out_of_descriptors() -> bool {
    match std::fs::File::open("/dev/null") {
        Ok(_) => false,
        Err(e) => matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)),
    }
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
        // libgit2 reports a pack it could not open for want of a descriptor as "object not
        // found" (it goes on to the next pack): whatever it says, a process out of
        // descriptors is told as such.
        if out_of_descriptors() {
            return StorageError::OutOfDescriptors { op };
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

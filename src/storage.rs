//! Storage: each tenant's two files in its bare git repository. No git type crosses this API.
mod dir_key;
mod disk;
mod durable;
mod faults;
mod feed;
mod import;
mod inflight;
mod model;
mod moves;
mod open_repos;
mod placement;
mod recent_keys;
mod repo;
mod seed;
mod upload_pack;
mod volume;
mod watch;

/// Group commit over `syncfs`, for the benchmark's file-system floor.
#[doc(hidden)]
pub use durable::SyncGroup;
pub use durable::{Durability, DurabilitySetting, GroupRefused};
pub use feed::{ChangeFeed, Subscription, Update};
pub use model::*;
pub use seed::seed_if_empty;
pub use upload_pack::{UploadPack, UploadPackError, CLONE_TURNS};
pub use volume::{volume, volume_at_or_above, Volume, VolumeKind};

use crate::domain::{CommitId, Cursor, IdempotencyKey, Identity, ObjectId, PlanFile, TenantId};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Turns on what libgit2 leaves off by default (its fsync); call once at start, before any
/// git work. [`Storage::open`] then sets fsync for its durability mode.
pub fn init_git() {
    repo::init_libgit2();
}

/// Caps the pack files libgit2 keeps open across every repository (its least recently used
/// ones are closed past it): the repositories kept open, each with its packs, must fit in
/// the descriptor reserve. Call at start, before any thread uses libgit2.
pub fn limit_open_packs(files: usize) {
    repo::set_open_pack_limit(files);
}

/// The tenants under one data directory.
#[derive(Debug, Clone)]
pub struct Storage {
    tenants_dir: PathBuf,
    committer: Identity,
    /// Present in group-commit mode.
    sync: Option<Arc<durable::SyncGroup>>,
    /// Which tenants' `main` is known not to have moved since it was read.
    watch: Arc<watch::HeadWatch>,
    /// Turns to run `git upload-pack` for clones and fetches.
    upload_packs: Arc<upload_pack::CloneTurns>,
    /// The data dir's secret: signs history cursors (a page starts only where an earlier
    /// page ended) and keys idempotency fingerprints.
    dir_key: Arc<dir_key::DirKey>,
    /// A test seam: called by every write just before it moves `main`.
    write_hook: Option<WriteHook>,
    /// What idempotency lookups learnt of recent history, so the next reads only what is new.
    recent_keys: Arc<recent_keys::RecentKeys>,
    /// Repositories kept open between writes.
    open_repos: Arc<open_repos::OpenRepos>,
}

/// Called with the tenant and its repository's path by a write after its commit is made and
/// synced, just before the compare-and-swap of `main`. Tests use it to move `main` with plain
/// git at that moment, so the rebase path runs every time; the service never sets one.
#[derive(Clone)]
pub struct WriteHook(pub Arc<HookFn>);

/// What a [`WriteHook`] calls.
pub type HookFn = dyn Fn(&TenantId, &Path) + Send + Sync;

impl std::fmt::Debug for WriteHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHook")
    }
}

impl Storage {
    /// Storage over `<data_dir>/tenants`, which is created if missing (each new folder synced
    /// into its parent). The durability mode
    /// applies to the whole process (libgit2's fsync switch is global).
    pub fn open(
        data_dir: &Path,
        committer: Identity,
        durability: Durability,
    ) -> Result<Self, StorageError> {
        let tenants_dir = data_dir.join("tenants");
        // Each folder made here is synced into the one above it: a power loss must not
        // take them and leave an empty volume that a restart would seed again.
        disk::create_dir_all_synced(&tenants_dir)?;
        repo::set_libgit2_fsync(durability == Durability::Fsync);
        let sync = match durability {
            Durability::Group => Some(Arc::new(
                durable::SyncGroup::new(&tenants_dir)
                    .map_err(|e| StorageError::io("open the data volume", &tenants_dir, e))?,
            )),
            Durability::Fsync => None,
        };
        Ok(Self {
            tenants_dir,
            committer,
            sync,
            watch: Arc::default(),
            upload_packs: Arc::new(upload_pack::CloneTurns::new(
                CLONE_TURNS,
                std::time::Duration::from_secs(30),
                std::time::Duration::from_secs(10),
            )),
            dir_key: Arc::new(dir_key::DirKey::load(data_dir)?),
            write_hook: None,
            recent_keys: Arc::default(),
            open_repos: Arc::default(),
        })
    }

    /// Sets the write hook (tests only; see [`WriteHook`]).
    #[doc(hidden)]
    pub fn write_hook(mut self, hook: WriteHook) -> Self {
        self.write_hook = Some(hook);
        self
    }

    /// With `false`, nothing is known about a tenant's `main` between requests: every read
    /// checks the ref file. For data dirs that processes on other hosts write to, whose
    /// changes inotify does not see.
    pub fn watch_refs(mut self, on: bool) -> Self {
        if !on {
            self.watch = Arc::new(watch::HeadWatch::disabled());
        }
        self
    }

    /// How many threads look heads up (the HTTP workers; 0: one per core). The watch keeps
    /// one inotify instance, and two watches per tenant, for each (at most 8); fewer than the
    /// workers only means that workers share them. Nothing changes with `watch_refs(false)`.
    pub fn head_lookup_threads(mut self, threads: usize) -> Self {
        if self.watch.enabled() {
            self.watch = Arc::new(watch::HeadWatch::new(threads));
        }
        self
    }

    /// How many `git upload-pack` run at once (one tenant gets at most half), how long a
    /// client may accept no bytes before its clone is stopped, and how long a clone or fetch
    /// waits for a turn before it is answered busy.
    pub fn clone_limits(
        mut self,
        turns: usize,
        stall: std::time::Duration,
        queue_timeout: std::time::Duration,
    ) -> Self {
        self.upload_packs = Arc::new(upload_pack::CloneTurns::new(turns, stall, queue_timeout));
        self
    }

    /// False with `watch_refs(false)`: nothing may rely on inotify seeing ref changes.
    pub fn watches_refs(&self) -> bool {
        self.watch.enabled()
    }

    /// `main`'s commit and both files' blob ids in it.
    /// A tenant that is moving or moved has none here (its streams end).
    pub fn head_state(&self, tenant: &TenantId) -> Result<HeadState, StorageError> {
        let path = self.repo_path(tenant);
        if let Some(p) = placement::read(&path)? {
            return Err(placement::refusal(tenant, &p));
        }
        repo::TenantRepo::open(tenant, &path)?.head_state()
    }

    /// `main`'s state wherever the tenant is served (the change feed's last word on a tenant
    /// that began to move).
    pub(crate) fn head_state_any(&self, tenant: &TenantId) -> Result<HeadState, StorageError> {
        repo::TenantRepo::open_any(tenant, &self.repo_path(tenant))?.head_state()
    }

    /// What the commits after `from` up to `to` on `main`'s first-parent line changed, oldest
    /// first, at most `max_commits` commits at a time; a reset when `from` is not on the line
    /// that leads to `to` (within 10,000 commits).
    pub fn replay(
        &self,
        tenant: &TenantId,
        from: CommitId,
        to: CommitId,
        max_commits: usize,
    ) -> Result<Replay, StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.replay(from, to, max_commits)
    }

    /// How to replay from `from` to `to` in steps of at most `step` commits (see
    /// [`ReplayPlan`]): the line is walked once, here; each step is then one [`Storage::replay`]
    /// of at most `step` commits.
    pub fn replay_plan(
        &self,
        tenant: &TenantId,
        from: CommitId,
        to: CommitId,
        step: usize,
    ) -> Result<ReplayPlan, StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.replay_plan(from, to, step)
    }

    pub fn tenants_dir(&self) -> &Path {
        &self.tenants_dir
    }

    fn repo_path(&self, tenant: &TenantId) -> PathBuf {
        self.tenants_dir.join(format!("{tenant}.git"))
    }

    /// The tenant's settings; `TenantNotFound` when it has no repository.
    pub fn tenant(&self, tenant: &TenantId) -> Result<TenantInfo, StorageError> {
        Ok(TenantInfo {
            id: tenant.clone(),
            source_hosting: repo::source_hosting_flag(tenant, &self.repo_path(tenant))?,
        })
    }

    /// The file at the head of `main`. A missing file reads as empty.
    pub fn read(&self, tenant: &TenantId, file: PlanFile) -> Result<FileSnapshot, StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.read(file)
    }

    /// Like [`Storage::read`], but answers `Unchanged` when `main` is still at `known`. That
    /// check reads only the ref files (loose, else `packed-refs`), so a commit made by anyone (another process, plain
    /// git) is seen at once.
    pub fn read_unless_at(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        known: Option<CommitId>,
    ) -> Result<ReadOutcome, StorageError> {
        let path = self.repo_path(tenant);
        if let Some(p @ Placement::Moved { .. }) = placement::read(&path)? {
            return Err(placement::refusal(tenant, &p));
        }
        let (outcome, head) = match known {
            Some(known) if repo::file_head(&path) == Some(known) => (ReadOutcome::Unchanged, known),
            _ => {
                let snap = repo::TenantRepo::open(tenant, &path)?
                    .read(file)
                    .map_err(|e| gone_or(e, &path, tenant))?;
                let head = snap.commit;
                (ReadOutcome::Changed(snap), head)
            }
        };
        self.watch
            .note(tenant, &path, head, || repo::file_head(&path));
        Ok(outcome)
    }

    /// The commit `main` of `tenant` is at, when a read through [`Storage::read_unless_at`]
    /// saw it and nothing has touched the tenant's refs since (inotify). Never blocks on the
    /// disk, so it may be called on an async worker; `None` means "read it".
    pub fn known_head(&self, tenant: &TenantId) -> Option<CommitId> {
        self.watch.known_head(tenant)
    }

    /// The file as it was in `commit`; `UnknownRef` unless `commit` is in `main`'s history.
    pub fn read_at(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        commit: CommitId,
    ) -> Result<FileSnapshot, StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.read_at(file, commit)
    }

    /// Up to `limit` commits that changed `file`, newest first, from the head or where the
    /// page of `from` ended. A cursor that this data dir did not make for this tenant is
    /// `UnknownRef`: a page never starts at a commit that `main`'s history did not lead to
    /// (such as a refused or undone write), and checking that walks nothing.
    pub fn history(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        limit: usize,
        from: Option<Cursor>,
    ) -> Result<HistoryPage, StorageError> {
        let from = match from {
            None => None,
            Some(cursor) => Some(self.dir_key.open(tenant, &cursor).ok_or_else(|| {
                StorageError::UnknownRef {
                    tenant: tenant.clone(),
                    commit: cursor.commit,
                }
            })?),
        };
        let page =
            repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.history(file, limit, from)?;
        Ok(HistoryPage {
            entries: page.0,
            next: page.1.map(|commit| self.dir_key.mint(tenant, commit)),
        })
    }

    /// Whether `id` names a commit of `main`'s history now. Walks the history (a long one
    /// takes a while), so writes ask before they take the tenant's write lock, and check again
    /// under it only what changed since ([`Preconditions::ancestry`]).
    pub fn ancestry(&self, tenant: &TenantId, id: ObjectId) -> Result<Ancestry, StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.ancestry(id)
    }

    /// Creates a tenant repository with its first commit. Fails if the tenant exists.
    pub fn create_tenant(
        &self,
        tenant: &TenantId,
        source_hosting: bool,
    ) -> Result<CommitId, StorageError> {
        repo::create(
            tenant,
            &self.tenants_dir,
            &self.repo_path(tenant),
            source_hosting,
            &self.committer,
        )
    }

    /// Turns the source-hosting flag on or off; running servers see it on the next request.
    pub fn set_source_hosting(&self, tenant: &TenantId, on: bool) -> Result<(), StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.set_source_hosting(on)
    }

    /// About how many loose objects the tenant's repository holds (a cheap estimate).
    pub fn loose_objects_estimate(&self, tenant: &TenantId) -> Result<usize, StorageError> {
        Ok(repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.loose_estimate())
    }

    /// Packs the tenant's loose objects, or with `full` everything into one pack (see the
    /// upkeep module); `None` when another repack of this tenant, in any process, is running.
    pub fn repack(
        &self,
        tenant: &TenantId,
        full: bool,
    ) -> Result<Option<RepackReport>, StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.repack(full)
    }

    /// Read-only git access to the tenant's repository for clone and fetch. `protocol` is the
    /// client's `Git-Protocol` header.
    pub fn upload_pack(
        &self,
        tenant: &TenantId,
        protocol: Option<&str>,
    ) -> Result<UploadPack, StorageError> {
        let path = self.repo_path(tenant);
        if let Some(p @ Placement::Moved { .. }) = self.placement(tenant)? {
            return Err(placement::refusal(tenant, &p));
        }
        Ok(UploadPack::new(
            tenant.clone(),
            path,
            protocol,
            self.upload_packs.clone(),
        ))
    }

    /// Checks that the tenants directory can be listed and written.
    pub fn check_ready(&self) -> Result<(), StorageError> {
        std::fs::read_dir(&self.tenants_dir)
            .map_err(|e| StorageError::io("list tenants", &self.tenants_dir, e))?;
        let probe = tempfile::Builder::new()
            .prefix(".ready-")
            .tempfile_in(&self.tenants_dir)
            .map_err(|e| StorageError::io("write a probe file", &self.tenants_dir, e))?;
        drop(probe);
        Ok(())
    }

    /// Every tenant id, sorted. Directories whose names are not `<tenant_id>.git` are skipped.
    /// Opens no repository, so one broken repository does not hide the others.
    pub fn tenant_ids(&self) -> Result<Vec<TenantId>, StorageError> {
        let entries = std::fs::read_dir(&self.tenants_dir)
            .map_err(|e| StorageError::io("list tenants", &self.tenants_dir, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| StorageError::io("list tenants", &self.tenants_dir, e))?;
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".git"))
                .and_then(|id| TenantId::parse(id).ok())
            {
                out.push(id);
            }
        }
        out.sort();
        Ok(out)
    }

    /// One row of `tenant list`: the flag, the head and the last change.
    pub fn summary(&self, tenant: &TenantId) -> Result<TenantSummary, StorageError> {
        repo::TenantRepo::open_any(tenant, &self.repo_path(tenant))?.summary()
    }
}

impl Storage {
    /// Commits one or both files if every change's preconditions hold (all or nothing): a
    /// batch of one (see [`Storage::commit_batch`]).
    pub fn commit(&self, tenant: &TenantId, req: CommitRequest) -> Result<Committed, StorageError> {
        self.commit_batch(tenant, &[&req])
            .pop()
            .flatten()
            .expect("a batch of one is tried")
    }

    /// A tenant's writes in order, each checked against the head the ones before it made and
    /// each its own commit on `main`'s first-parent line, made durable together: one sync of
    /// their objects, one compare-and-swap of `main` from the old head to the last commit,
    /// one sync of the ref. A request whose preconditions fail (409, 412) or whose key was
    /// recorded (a replay, 422) fails alone. With an idempotency key, the key is looked up in
    /// recent history first; a real write's caller holds the key's marker
    /// ([`Storage::claim_in_flight`]) until this returns, a dry run's caller has looked that
    /// nobody does ([`Storage::key_in_flight`]). `None`: not tried (an earlier write of the
    /// batch could not be written); try it again.
    ///
    /// The tenant's repository stays open for its next batch (see `open_repos.rs`).
    pub fn commit_batch(
        &self,
        tenant: &TenantId,
        reqs: &[&CommitRequest],
    ) -> Vec<Option<Result<Committed, StorageError>>> {
        let path = self.repo_path(tenant);
        let repo = match self.open_repos.take(tenant, &path) {
            Some(repo) => repo,
            None => match repo::TenantRepo::open_to_keep(tenant, &path) {
                Ok(repo) => repo.with_write_hook(self.write_hook.clone()),
                Err(e) => {
                    let mut out: Vec<_> =
                        reqs.iter().skip(1).map(|_| Some(Err(e.again()))).collect();
                    out.insert(0, Some(Err(e)));
                    return out;
                }
            },
        };
        let mut results = repo.commit_batch(
            reqs,
            &self.committer,
            self.sync.as_deref(),
            &self.recent_keys,
        );
        self.open_repos.put(tenant, &path, repo);
        // A repository archived under the batch (it moved away): the tenant moved, not a fault.
        if !path.is_dir() {
            for result in results.iter_mut().flatten() {
                if matches!(
                    result,
                    Err(StorageError::Git { .. } | StorageError::Io { .. })
                ) {
                    *result = Err(placement::missing(&path, tenant));
                }
            }
        }
        results
    }

    /// `file` in `from` and `to` (both `main` or ancestors of it; `to` defaults to `main`) and
    /// the unified diff between them.
    pub fn diff(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        from: CommitId,
        to: Option<CommitId>,
    ) -> Result<FileDiff, StorageError> {
        repo::TenantRepo::open(tenant, &self.repo_path(tenant))?.diff(file, from, to)
    }

    /// The fingerprint of a request to `target` (`PUT /plans/integration-file`, …) with
    /// `body`, keyed with the data dir's secret, for its [`IdempotencyRecord`].
    pub fn fingerprint(&self, target: &str, body: &[u8]) -> String {
        self.dir_key.fingerprint(target, body)
    }

    /// Marks a write with `key` as in flight, for every process on this data dir; `None` when
    /// one is in flight already. Held by a keyed write from before its turn until it is
    /// durable.
    pub fn claim_in_flight(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<Option<InFlight>, StorageError> {
        let path = self.repo_path(tenant);
        if !path.is_dir() {
            return Err(placement::missing(&path, tenant));
        }
        inflight::Marker::claim(&path, key.as_str())
            .map(|m| m.map(InFlight))
            .map_err(|e| StorageError::io("mark an idempotency key in flight", &path, e))
    }

    /// True when someone, in any process on this data dir, holds the marker of `key`. Takes
    /// nothing and creates nothing (a dry run's look).
    pub fn key_in_flight(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<bool, StorageError> {
        let path = self.repo_path(tenant);
        if !path.is_dir() {
            return Err(placement::missing(&path, tenant));
        }
        inflight::Marker::held(&path, key.as_str())
            .map_err(|e| StorageError::io("look for an idempotency key in flight", &path, e))
    }
}

/// Tests: storage over a new temporary data dir (per-file fsync), with tenant `acme` made.
#[cfg(test)]
pub(crate) fn test_storage() -> (tempfile::TempDir, Storage, TenantId) {
    init_git();
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(
        dir.path(),
        Identity::new("p", "p@localhost", "localhost"),
        Durability::Fsync,
    )
    .unwrap();
    let tenant = TenantId::parse("acme").unwrap();
    storage.create_tenant(&tenant, false).unwrap();
    (dir, storage, tenant)
}

/// `e`, unless the tenant's repository is gone meanwhile (archived after a move): then why.
fn gone_or(e: StorageError, path: &Path, tenant: &TenantId) -> StorageError {
    if path.is_dir() {
        e
    } else {
        placement::missing(path, tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the watch, a read leaves `main` known, so a cached GET needs no disk read; with
    /// `watch_refs(false)` nothing is ever known, so every read checks the ref file.
    #[test]
    fn watch_refs_off_means_main_is_never_known_without_a_read() {
        init_git();
        for (on, expect_known) in [(true, true), (false, false)] {
            let dir = tempfile::tempdir().unwrap();
            let committer = Identity::new("planfiles", "p@localhost", "localhost");
            let storage = Storage::open(dir.path(), committer, Durability::Fsync)
                .unwrap()
                .watch_refs(on);
            let tenant = TenantId::parse("acme").unwrap();
            let head = storage.create_tenant(&tenant, false).unwrap();
            storage
                .read_unless_at(&tenant, PlanFile::Integration, None)
                .unwrap();
            assert_eq!(
                storage.known_head(&tenant),
                expect_known.then_some(head),
                "watch_refs({on})"
            );
        }
    }

    /// After `git pack-refs` (as `git gc` runs it) there is no loose `refs/heads/main`: the
    /// head is learnt from `packed-refs`, so cached reads keep working.
    #[test]
    fn main_is_known_from_packed_refs_too() {
        init_git();
        let dir = tempfile::tempdir().unwrap();
        let committer = Identity::new("planfiles", "p@localhost", "localhost");
        let storage = Storage::open(dir.path(), committer, Durability::Fsync).unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        let head = storage.create_tenant(&tenant, false).unwrap();
        let repo = storage.repo_path(&tenant);
        let packed = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repo)
            .args(["pack-refs", "--all"])
            .status()
            .unwrap();
        assert!(packed.success());
        assert!(!repo.join("refs/heads/main").exists());
        storage
            .read_unless_at(&tenant, PlanFile::Integration, None)
            .unwrap();
        assert_eq!(storage.known_head(&tenant), Some(head));
        assert!(matches!(
            storage
                .read_unless_at(&tenant, PlanFile::Integration, Some(head))
                .unwrap(),
            ReadOutcome::Unchanged
        ));
    }

    /// A commit-hash force checked before the lock stays right when `main` moved after the
    /// check: commits added since are looked at, and a `main` moved elsewhere is walked again.
    #[test]
    fn an_ancestry_found_before_the_lock_is_checked_again_for_what_changed() {
        init_git();
        let dir = tempfile::tempdir().unwrap();
        let committer = Identity::new("planfiles", "p@localhost", "localhost");
        let storage = Storage::open(dir.path(), committer.clone(), Durability::Fsync).unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        let first = storage.create_tenant(&tenant, false).unwrap();
        let write = |n: usize, id: &ObjectId, ancestry| {
            let req = CommitRequest::of(
                PlanFile::Configuration,
                format!("folders:\n- path: p{n}\n").into_bytes(),
                Preconditions {
                    file_sha: Some(ShaCheck::BlobOrCommit(*id)),
                    if_match: None,
                    ancestry,
                },
                committer.clone(),
            );
            match storage.commit(&tenant, req)? {
                Committed::Written(outcome) => Ok((
                    outcome.commit.expect("not a dry run"),
                    outcome.files[0].forced,
                )),
                Committed::Replayed(_) => unreachable!("no key"),
            }
        };
        // Found in history at the first head; two commits land before the write.
        let found = storage.ancestry(&tenant, first.0).unwrap();
        assert!(found.in_history);
        let second = write(1, &first.0, None).unwrap().0;
        write(2, &first.0, None).unwrap();
        assert!(write(3, &first.0, Some(found)).unwrap().1);
        // Not in history at the check, but among the commits added since.
        let stale = Ancestry {
            head: first,
            in_history: false,
        };
        assert!(write(4, &second.0, Some(stale)).is_ok());
        // A check that said yes, but main was moved elsewhere since: walked again, refused.
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(storage.repo_path(&tenant))
                .args(args)
                .env("GIT_AUTHOR_NAME", "x")
                .env("GIT_AUTHOR_EMAIL", "x@x")
                .env("GIT_COMMITTER_NAME", "x")
                .env("GIT_COMMITTER_EMAIL", "x@x")
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        let tree = git(&["rev-parse", "main^{tree}"]);
        let orphan = git(&["commit-tree", &tree, "-m", "new root"]);
        git(&["update-ref", "refs/heads/main", &orphan]);
        let said_yes = storage.ancestry(&tenant, second.0).unwrap();
        assert!(!said_yes.in_history, "main no longer reaches it");
        let before_reset = Ancestry {
            head: second,
            in_history: true,
        };
        assert!(matches!(
            write(5, &second.0, Some(before_reset)),
            Err(StorageError::ShaMismatch { .. })
        ));
    }

    /// A batch commits exactly what writing its requests one by one commits: the same trees
    /// and messages in the same order on `main`'s first-parent line, the same answers (a
    /// stale `file_sha` refused, a no-op, a dry run), each write its own commit.
    #[test]
    fn a_batch_commits_what_one_by_one_commits() {
        use crate::domain::{BlobId, RequestId};
        init_git();
        let committer = Identity::new("planfiles", "p@localhost", "localhost");
        let tenant = TenantId::parse("acme").unwrap();
        let open = || {
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(dir.path(), committer.clone(), Durability::Fsync).unwrap();
            storage.create_tenant(&tenant, false).unwrap();
            (dir, storage)
        };
        let (_a, batched) = open();
        let (_b, single) = open();
        let initial = single.read(&tenant, PlanFile::Integration).unwrap().blob;
        let initial_conf = single.read(&tenant, PlanFile::Configuration).unwrap().blob;
        let req = |n: u32, file: PlanFile, text: &str, pre: Preconditions, dry_run: bool| {
            let mut r = CommitRequest::of(file, text.as_bytes().to_vec(), pre, committer.clone());
            r.request_id = RequestId::parse(&format!("req-{n}")).unwrap();
            r.dry_run = dry_run;
            r
        };
        let blob_of = |text: &str| {
            BlobId(
                ObjectId::parse(
                    &git2::Oid::hash_object(git2::ObjectType::Blob, text.as_bytes())
                        .unwrap()
                        .to_string(),
                )
                .unwrap(),
            )
        };
        let sha = |id: BlobId| Preconditions {
            file_sha: Some(ShaCheck::Blob(id.0)),
            ..Default::default()
        };
        let reqs = [
            req(
                1,
                PlanFile::Integration,
                "a: 1\n",
                Preconditions::default(),
                false,
            ),
            req(
                2,
                PlanFile::Configuration,
                "folders: []\nx: 1\n",
                sha(initial_conf),
                false,
            ),
            // Stale: the first write changed the file.
            req(3, PlanFile::Integration, "a: 3\n", sha(initial), false),
            // The same bytes again: a no-op.
            req(
                4,
                PlanFile::Integration,
                "a: 1\n",
                Preconditions::default(),
                false,
            ),
            req(
                5,
                PlanFile::Integration,
                "a: 5\n",
                Preconditions::default(),
                true,
            ),
            req(
                6,
                PlanFile::Configuration,
                "folders: []\nx: 6\n",
                sha(blob_of("folders: []\nx: 1\n")),
                false,
            ),
        ];
        let refs: Vec<&CommitRequest> = reqs.iter().collect();
        let together = batched.commit_batch(&tenant, &refs);
        let apart: Vec<_> = reqs
            .iter()
            .map(|r| single.commit(&tenant, r.clone()))
            .collect();
        let shape = |r: &Result<Committed, StorageError>| match r {
            Ok(Committed::Written(o)) => format!(
                "written changed={} dry={} files={:?}",
                o.changed(),
                o.commit.is_none(),
                o.files
                    .iter()
                    .map(|f| (f.blob, f.changed))
                    .collect::<Vec<_>>()
            ),
            Ok(Committed::Replayed(_)) => "replayed".into(),
            Err(e) => format!(
                "error {}",
                e.to_string().split(';').next().unwrap_or_default()
            ),
        };
        let together: Vec<String> = together
            .iter()
            .map(|r| shape(r.as_ref().expect("tried")))
            .collect();
        let apart: Vec<String> = apart.iter().map(shape).collect();
        assert_eq!(together, apart);
        assert!(together[2].starts_with("error"), "{}", together[2]);
        let log = |storage: &Storage| {
            let out = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(storage.repo_path(&tenant))
                .args(["log", "--first-parent", "--format=%T %s%n%b", "main"])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        let log_together = log(&batched);
        assert_eq!(log_together, log(&single));
        assert_eq!(
            log_together.matches("Request-Id:").count(),
            3,
            "{log_together}"
        );
        let fsck = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(batched.repo_path(&tenant))
            .args(["fsck", "--strict"])
            .status()
            .unwrap();
        assert!(fsck.success());
    }
}

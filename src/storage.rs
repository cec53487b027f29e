//! Storage: each tenant's two files in its bare git repository. No git type crosses this API.
mod disk;
mod error;
mod model;
mod placement;
mod proposals;
mod reads;
mod repo;
mod tenants;
mod watch;
mod webhooks;
mod writes;

/// Group commit over `syncfs`, for the benchmark's file-system floor.
#[doc(hidden)]
pub use disk::durable::SyncGroup;
pub use disk::durable::{Durability, DurabilitySetting, GroupRefused};
pub use disk::volume::{volume, volume_at_or_above, Volume, VolumeKind};
pub use error::StorageError;
pub use model::*;
pub use placement::seed::seed_if_empty;
pub use repo::receive::{PushedTip, StagedPush};
pub use repo::upload_pack::{UploadPack, UploadPackError, CLONE_TURNS};
pub use repo::{Settings, MAX_REQUIRED_APPROVALS};
pub use tenants::SPARES_REST;
pub use watch::feed::{ChangeFeed, Subscription, Update, Wants};
pub use webhooks::{
    Attempt, AttemptStatus, BundledCursor, CursorPosition, DeliveryCursor, NewWebhook, Webhook,
    WebhookBundle, WebhookKey, WebhookState, WebhooksStamp, MOVED_ATTEMPTS,
};

use crate::domain::{Identity, TenantId};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Makes the secret file at `path` when it is absent: 32 random bytes as 64 hex digits, mode
/// 0600, synced and linked into place, so that processes that start at once end with the same
/// one (`auth.secret_file`, like `storage.cursor_key_file`); true when this call made it.
/// One that was there already is said once when other users can read it.
pub fn make_secret_file(path: &Path) -> Result<bool, StorageError> {
    let (_, made) = disk::secret_text(path)?;
    if !made {
        disk::warn_if_others_can_read(path, "the HS256 secret (auth.secret_file)");
    }
    Ok(made)
}

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
    committer: repo::signatures::Committer,
    /// The keys whose commit signatures count, and the verdicts found so far.
    signing: Arc<repo::signatures::Signing>,
    /// Present in group-commit mode.
    sync: Option<Arc<disk::durable::SyncGroup>>,
    /// Which tenants' `main` is known not to have moved since it was read.
    watch: Arc<watch::HeadWatch>,
    /// Turns to run `git upload-pack` for clones and fetches.
    upload_packs: Arc<repo::upload_pack::CloneTurns>,
    /// The data dir's secret: signs history cursors (a page starts only where an earlier
    /// page ended) and keys idempotency fingerprints.
    dir_key: Arc<disk::dir_key::DirKey>,
    /// A test seam: called by every write just before it moves `main`.
    write_hook: Option<WriteHook>,
    /// Tells whether a version is valid, for change events.
    judge: Option<Arc<dyn Judge>>,
    /// What idempotency lookups learnt of recent history, so the next reads only what is new.
    recent_keys: Arc<repo::recent_keys::RecentKeys>,
    /// Repositories kept open between writes.
    open_repos: Arc<repo::open_repos::OpenRepos>,
    /// Repositories kept open between reads (the change feed's, the webhooks', the API's).
    read_repos: Arc<repo::open_repos::OpenRepos>,
    /// Each tenant's source-hosting flag, read again when its config file changes.
    flags: Arc<repo::Flags>,
    /// Each tenant's proposals' records as last read.
    proposal_records: Arc<repo::RecordsCaches>,
    /// Repacks keep the object files they retire, for new objects and ref locks
    /// (`repo/spares.rs`): on ext4 without a journal only, where each freed inode slows every
    /// later allocation for minutes.
    recycle_files: bool,
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
        cursor_key: &Path,
        committer: Identity,
        durability: Durability,
    ) -> Result<Self, StorageError> {
        let tenants_dir = data_dir.join("tenants");
        // Each folder made here is synced into the one above it: a power loss must not
        // take them and leave an empty volume that a restart would seed again.
        disk::create_dir_all_synced(&tenants_dir)?;
        let recycle_files = disk::volume::ext4_without_journal(&tenants_dir);
        repo::set_libgit2_fsync(durability == Durability::Fsync);
        let sync = match durability {
            Durability::Group => Some(Arc::new(
                disk::durable::SyncGroup::new(&tenants_dir)
                    .map_err(|e| StorageError::io("open the data volume", &tenants_dir, e))?,
            )),
            Durability::Fsync => None,
        };
        Ok(Self {
            tenants_dir,
            committer: repo::signatures::Committer {
                identity: committer,
                signer: None,
            },
            signing: Arc::default(),
            sync,
            watch: Arc::default(),
            upload_packs: Arc::new(repo::upload_pack::CloneTurns::new(
                CLONE_TURNS,
                std::time::Duration::from_secs(30),
                std::time::Duration::from_secs(10),
            )),
            dir_key: Arc::new(disk::dir_key::DirKey::load(cursor_key)?),
            write_hook: None,
            judge: None,
            recent_keys: Arc::default(),
            open_repos: Arc::default(),
            read_repos: Arc::default(),
            flags: Arc::default(),
            proposal_records: Arc::default(),
            recycle_files,
        })
    }

    /// Whether this data dir's volume is ext4 without a journal, where repacks keep the
    /// files they retire for new objects and ref locks instead of deleting them.
    pub fn recycles_files(&self) -> bool {
        self.recycle_files
    }

    /// Signs every commit this process makes with the ed25519 key in `key_file` (an OpenSSH
    /// private key, made there at mode 0600 when absent, unless a key that `previous` does not
    /// list signed in this data dir before), and counts as verified the commits signed by it or by one of `previous`
    /// (retired keys, as OpenSSH public key lines).
    pub fn sign_commits(
        mut self,
        key_file: &Path,
        previous: &[String],
    ) -> Result<Self, StorageError> {
        let data_dir = self.tenants_dir.parent().unwrap_or(Path::new("."));
        let retired = crate::signing::Keyring::new(None, previous).map_err(|e| {
            StorageError::io(
                "read signing.previous_public_keys",
                key_file,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
            )
        })?;
        let (signer, before) = disk::signing_key::load_or_create(
            key_file,
            &data_dir.join(disk::signing_key::RECORD),
            |key| retired.lists(key),
            self.committer.identity.email(),
        )?;
        let keyring = retired.with_current(&signer);
        if let Some(before) = before.filter(|b| !keyring.lists(b)) {
            tracing::warn!(
                key_file = %key_file.display(),
                previous_key = %before,
                "the commit signing key changed, and the key before is not in signing.previous_public_keys: the commits it signed now read unverified"
            );
        }
        self.committer.signer = Some(Arc::new(signer));
        self.signing = Arc::new(repo::signatures::Signing::new(keyring));
        Ok(self)
    }

    /// The committer email on the service's commits.
    pub fn committer_email(&self) -> &str {
        self.committer.identity.email()
    }

    /// The keys whose signatures count, current first (none when commits are not signed).
    pub fn signing_keys(&self) -> &crate::signing::Keyring {
        &self.signing.keyring
    }

    /// Sets the write hook (tests only; see [`WriteHook`]).
    #[doc(hidden)]
    /// With `judge`, each change of a replay (the change feed) says whether the file as of
    /// that commit is valid.
    pub fn judge_with(mut self, judge: Arc<dyn Judge>) -> Self {
        self.judge = Some(judge);
        self
    }

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
        self.upload_packs = Arc::new(repo::upload_pack::CloneTurns::new(
            turns,
            stall,
            queue_timeout,
        ));
        self
    }

    /// False with `watch_refs(false)`: nothing may rely on inotify seeing ref changes.
    pub fn watches_refs(&self) -> bool {
        self.watch.enabled()
    }

    pub fn tenants_dir(&self) -> &Path {
        &self.tenants_dir
    }

    fn repo_path(&self, tenant: &TenantId) -> PathBuf {
        self.tenants_dir.join(format!("{tenant}.git"))
    }

    /// The tenant's repository for a read, where [`Storage::locate`] says `access` may happen;
    /// kept open between reads.
    fn read_repo(
        &self,
        tenant: &TenantId,
        access: placement::Access,
    ) -> Result<repo::open_repos::Lent<'_>, StorageError> {
        self.read_repos.lend(tenant, &self.locate(tenant, access)?)
    }

    /// The tenant's repository, opened where [`Storage::locate`] says `access` may happen (for
    /// what changes it: a push, a repack, a flag).
    fn repo_for(
        &self,
        tenant: &TenantId,
        access: placement::Access,
    ) -> Result<repo::TenantRepo, StorageError> {
        repo::TenantRepo::open(tenant, &self.locate(tenant, access)?)
    }
}

/// Tests: storage over a new temporary data dir (per-file fsync), with tenant `acme` made.
#[cfg(test)]
pub(crate) fn test_storage() -> (tempfile::TempDir, Storage, TenantId) {
    init_git();
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(
        dir.path(),
        &dir.path().join("cursor.key"),
        Identity::new("p", "p@localhost", "localhost"),
        Durability::Fsync,
    )
    .unwrap();
    let tenant = TenantId::parse("acme").unwrap();
    storage.create_tenant(&tenant, false).unwrap();
    (dir, storage, tenant)
}

/// Tests: a write of the integration file's text `text` to `tenant`, by a test identity.
#[cfg(test)]
pub(crate) fn test_write(
    storage: &Storage,
    tenant: &TenantId,
    text: &str,
) -> Result<(), StorageError> {
    let who = Identity::new("t", "t@localhost", "localhost");
    let req = CommitRequest::of(
        crate::domain::PlanFile::Integration,
        text.as_bytes().to_vec(),
        Preconditions::default(),
        who,
    );
    storage.commit(tenant, req).map(|_| ())
}

/// `e`, unless the tenant's repository is gone meanwhile (archived after a move): then why.
fn gone_or(e: StorageError, path: &Path, tenant: &TenantId) -> StorageError {
    if path.is_dir() {
        e
    } else {
        placement::missing(path, tenant)
    }
}

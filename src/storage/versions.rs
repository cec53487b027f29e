//! Versions: commits of one or both files (with a subject, a restore source and an idempotency record), diffs and idempotent replays.
use super::{repo, FileSnapshot, Preconditions, Storage, StorageError, WriteRequest};
use crate::domain::yaml::{splice::Made, Mapping};
use crate::domain::{BlobId, CommitId, IdempotencyKey, Identity, PlanFile, RequestId, TenantId};
use std::sync::Arc;

/// A new version of one file, and what must hold of the current one.
#[derive(Debug, Clone)]
pub struct Change {
    pub file: PlanFile,
    /// The file's new bytes; with `content`, its whole emission, stored only when the file's
    /// current text cannot be edited into the content.
    pub bytes: Vec<u8>,
    /// Content sent as JSON: the current text is edited into its text under the write lock
    /// (unchanged nodes keep their bytes), checked to read back as exactly this content.
    pub content: Option<Arc<Mapping>>,
    pub preconditions: Preconditions,
}

/// What a write records so that a retry can be told from a new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The `Idempotency-Key` header.
    pub key: IdempotencyKey,
    /// A fingerprint of the request (its target and its body bytes), keyed with the data
    /// dir's secret ([`Storage::fingerprint`]).
    pub fingerprint: String,
}

/// A write of one or both files as one commit: all its changes or none.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    /// One change per file, at least one, each file at most once.
    pub changes: Vec<Change>,
    /// The commit subject (one cleaned line); `Update <paths>` when absent.
    pub subject: Option<String>,
    /// A restore: the commit the bytes come from (the `Restored-From` trailer).
    pub restored_from: Option<CommitId>,
    pub idempotency: Option<IdempotencyRecord>,
    /// Check everything, write nothing (no object, no ref, no lock).
    pub dry_run: bool,
    pub author: Identity,
    pub request_id: RequestId,
}

impl From<WriteRequest> for CommitRequest {
    fn from(req: WriteRequest) -> Self {
        CommitRequest {
            changes: vec![Change {
                file: req.file,
                bytes: req.bytes,
                content: req.content,
                preconditions: req.preconditions,
            }],
            subject: None,
            restored_from: None,
            idempotency: None,
            dry_run: false,
            author: req.author,
            request_id: req.request_id,
        }
    }
}

/// What a commit (or a dry run of it) did to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOutcome {
    pub file: PlanFile,
    /// The file's blob id after the write.
    pub blob: BlobId,
    /// False when the bytes equalled the stored bytes.
    pub changed: bool,
    /// True when no blob-id precondition matched.
    pub forced: bool,
    /// On a dry run: the bytes stored now, for the patch a client is shown.
    pub before: Option<Vec<u8>>,
    /// The bytes the file holds after the write (or would, on a dry run).
    pub bytes: Vec<u8>,
    /// For content sent as JSON, how its text was made.
    pub made: Option<Made>,
}

/// The result of a successful [`Storage::commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The new commit, or the head when nothing changed; `None` on a dry run.
    pub commit: Option<CommitId>,
    /// One per change, in the request's order.
    pub files: Vec<FileOutcome>,
}

impl CommitOutcome {
    /// The outcome of a commit of one change, as a single-file write reports it.
    pub fn into_single(self) -> super::WriteOutcome {
        let file = self
            .files
            .into_iter()
            .next()
            .expect("one change, one outcome");
        super::WriteOutcome {
            commit: self.commit.expect("not a dry run"),
            blob: file.blob,
            changed: file.changed,
            forced: file.forced,
            bytes: file.bytes,
            made: file.made,
        }
    }

    /// True when a commit was made.
    pub fn changed(&self) -> bool {
        self.files.iter().any(|f| f.changed)
    }
}

/// An earlier write that recorded an idempotency key: the commit it answered with (its own,
/// or for a write that changed nothing, the head it found).
#[derive(Debug, Clone)]
pub struct IdempotentHit {
    pub commit: CommitId,
    /// The fingerprint recorded with the key.
    pub fingerprint: String,
}

/// How far back a key is looked for: the last [`IDEMPOTENCY_COMMITS`] commits of `main`'s
/// first-parent line, and the last as many records of writes that changed nothing. Counted
/// in commits: a commit's date is never trusted to stop the look-back.
pub const IDEMPOTENCY_COMMITS: usize = 1000;

/// A file in two commits, and the unified diff between them.
#[derive(Debug, Clone)]
pub struct FileDiff {
    pub from: FileSnapshot,
    pub to: FileSnapshot,
    /// As `git diff from to -- <file>` prints it; empty when the bytes are equal.
    pub text: String,
}

/// While held, a write with this idempotency key is in flight; others, in any process, are
/// told so. Released on drop, or by the OS when the process dies.
pub struct InFlight(#[allow(dead_code)] super::inflight::Marker);

/// What [`Storage::commit`] did.
#[derive(Debug)]
pub enum Committed {
    /// Committed now (or nothing changed, or a dry run).
    Written(CommitOutcome),
    /// An earlier commit recorded the same key and request: nothing was written.
    Replayed(IdempotentHit),
}

impl Storage {
    /// Commits one or both files if every change's preconditions hold (all or nothing).
    ///
    /// With an idempotency key, first looks for the key in recent history, on the same open
    /// repository: a commit with the same fingerprint is replayed, one with another is
    /// [`StorageError::KeyReused`]. A real write's caller holds the key's marker
    /// ([`Storage::claim_in_flight`]) until this returns; a dry run's caller has looked that
    /// nobody does ([`Storage::key_in_flight`]).
    pub fn commit(&self, tenant: &TenantId, req: CommitRequest) -> Result<Committed, StorageError> {
        let repo = repo::TenantRepo::open(tenant, &self.repo_path(tenant))?
            .with_write_hook(self.write_hook.clone());
        if let Some(record) = &req.idempotency {
            match repo.find_idempotent(record.key.as_str(), &self.recent_keys)? {
                Some(hit) if hit.fingerprint == record.fingerprint => {
                    return Ok(Committed::Replayed(hit))
                }
                Some(hit) => {
                    return Err(StorageError::KeyReused {
                        tenant: tenant.clone(),
                        commit: hit.commit,
                    })
                }
                None => {}
            }
        }
        repo.commit(&req, &self.committer, self.sync.as_deref())
            .map(Committed::Written)
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
            return Err(StorageError::TenantNotFound(tenant.clone()));
        }
        super::inflight::Marker::claim(&path, key.as_str())
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
            return Err(StorageError::TenantNotFound(tenant.clone()));
        }
        super::inflight::Marker::held(&path, key.as_str())
            .map_err(|e| StorageError::io("look for an idempotency key in flight", &path, e))
    }
}

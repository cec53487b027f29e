//! Storage's vocabulary: the requests it takes and the outcomes and records it answers, in domain types only (no git type crosses this API; its errors are `error.rs`). The git side is `repo/`.
use crate::domain::yaml::{splice::Made, Mapping};
use crate::domain::{
    BlobId, CommitId, CommitMessage, Cursor, IdempotencyKey, Identity, ObjectId, PlanFile,
    RequestId, ShardUrl, TenantId,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

/// What a tenant is, as far as requests are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantInfo {
    pub id: TenantId,
    pub source_hosting: bool,
    /// Approvals a proposal needs; above 0, `main` moves only by applying one.
    pub required_approvals: u32,
}

/// One row of `tenant list`.
#[derive(Debug, Clone)]
pub struct TenantSummary {
    pub id: TenantId,
    pub source_hosting: bool,
    pub required_approvals: u32,
    pub head: Option<CommitId>,
    pub last_change: Option<SystemTime>,
    /// Set while the tenant moves to another shard, and after it moved.
    pub placement: Option<Placement>,
}

/// Where a tenant is while it leaves this shard: `Moving` refuses writes (reads go on);
/// `Aborting` too, while `tenant move --abort` asks the target whether it took the tenant (it
/// is not handed over: an import's checks refuse it); `Moved` refuses everything (421): the
/// tenant is served by the shard at `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    Moving { to: ShardUrl, since: SystemTime },
    Aborting { to: ShardUrl, since: SystemTime },
    Moved { to: ShardUrl, at: SystemTime },
}

impl Placement {
    pub fn to(&self) -> &ShardUrl {
        match self {
            Placement::Moving { to, .. }
            | Placement::Aborting { to, .. }
            | Placement::Moved { to, .. } => to,
        }
    }

    /// The word the placement endpoint and `tenant list` use.
    pub fn word(&self) -> &'static str {
        match self {
            Placement::Moving { .. } => "moving",
            Placement::Aborting { .. } => "aborting",
            Placement::Moved { .. } => "moved",
        }
    }
}

/// What the source of a move knows once writes are refused and every write that had begun
/// has landed: the head to hand over, and the tenant's setting.
#[derive(Debug, Clone)]
pub struct MoveStart {
    pub head: CommitId,
    /// The tenant's settings (source hosting, required approvals), carried to the target.
    pub settings: super::Settings,
    /// Since when the tenant's writes are refused (an earlier run's moment, on a rerun).
    pub since: SystemTime,
    /// The move had finished already (a rerun): only the later steps are left.
    pub moved: bool,
}

/// Where an import fetches a tenant's repository from.
#[derive(Debug, Clone)]
pub enum ImportSource {
    /// A shard's `/git/<tenant>.git`, with a token that may clone it.
    Shard { url: ShardUrl, token: String },
    /// A repository on this host (a `git clone --mirror` made by hand).
    Path(PathBuf),
}

/// What an import of a tenant would do on this shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportPlan {
    /// No repository here: it is fetched into a new one.
    Fresh,
    /// It moved away from here and comes back: its old repository takes the newer history.
    ComeBack,
    /// It is served here, at `head`; `holds_head` says whether the head asked for is in its
    /// history (`None`: none was asked for).
    Served {
        head: CommitId,
        holds_head: Option<bool>,
    },
}

/// The result of an import.
#[derive(Debug, Clone)]
pub struct Imported {
    /// What the import found here before it ran.
    pub found: ImportPlan,
    pub head: CommitId,
    /// The tenant was here and writable already, at the head asked for or after it (a rerun).
    pub already: bool,
    pub millis: u64,
}

/// A file as it is at the head of `main`.
#[derive(Debug, Clone)]
pub struct FileSnapshot {
    pub bytes: Vec<u8>,
    pub blob: BlobId,
    pub commit: CommitId,
}

/// One commit that changed a file, as the history lists it.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    pub commit: CommitId,
    /// The file's blob id after this commit.
    pub blob: BlobId,
    pub author_name: String,
    pub author_email: String,
    /// The author time.
    pub time: SystemTime,
    /// The whole commit message, trailers included.
    pub message: String,
    /// True when the commit carries the `Forced: true` trailer.
    pub forced: bool,
    /// True when the commit is signed by the service's key, or one of its retired keys
    /// still listed; false for plain git's commits, other keys and bad signatures.
    pub verified: bool,
    /// Who pushed the commit, when it came by `git push` (its note on
    /// `refs/notes/planfiles`).
    pub pushed_by: Option<Identity>,
}

impl HistoryEntry {
    /// The proposal this commit applied: its `Proposal:` trailer, believed only on a commit
    /// the service signed (a push may not carry the trailer; plain git's commits are not
    /// signed).
    pub fn proposal(&self) -> Option<u64> {
        if !self.verified {
            return None;
        }
        crate::domain::trailers::value(&self.message, crate::domain::trailers::Reserved::Proposal)?
            .parse()
            .ok()
    }
}

/// A page of history, and where the next page starts.
#[derive(Debug, Clone)]
pub struct HistoryPage {
    pub entries: Vec<HistoryEntry>,
    pub next: Option<Cursor>,
}

/// What one repack did.
#[derive(Debug, Clone)]
pub struct RepackReport {
    pub loose_before: usize,
    pub packs_before: usize,
    /// Objects written to the new pack.
    pub objects_packed: usize,
    pub loose_removed: usize,
    pub packs_removed: usize,
    /// `incremental` (loose objects only), `merge` (the smaller packs too) or `full`.
    pub kind: &'static str,
    pub duration: std::time::Duration,
}

/// What a read that already knows one version found.
#[derive(Debug, Clone)]
pub enum ReadOutcome {
    /// `main` is still at the known commit.
    Unchanged,
    Changed(FileSnapshot),
}

/// What must hold of the current file for a write to go ahead.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// The `file_sha` of the request, if any.
    pub file_sha: Option<ShaCheck>,
    /// The `If-Match` header, if any.
    pub if_match: Option<IfMatch>,
    /// What [`Storage::ancestry`] found about a `BlobOrCommit` id before the write lock was
    /// taken, so that the walk of a long history happens outside it.
    pub ancestry: Option<Ancestry>,
}

/// Whether an object id named a commit of `main`'s history when `main` was at `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ancestry {
    pub head: CommitId,
    pub in_history: bool,
}

/// How a `file_sha` is checked.
#[derive(Debug, Clone, Copy)]
pub enum ShaCheck {
    /// Must equal the current blob id.
    Blob(ObjectId),
    /// Must equal the current blob id, or name a commit reachable from `main` (a forced write).
    BlobOrCommit(ObjectId),
}

/// A parsed `If-Match` header.
#[derive(Debug, Clone)]
pub enum IfMatch {
    /// `*`: any current file.
    Any,
    /// A list of entity tags; it matches when one of them is the current blob id.
    Tags(Vec<String>),
}

/// A new version of one file, and what must hold of the current one.
#[derive(Debug, Clone)]
pub struct Change {
    pub file: PlanFile,
    /// The file's new bytes; with `content`, its whole emission (not verified yet), stored
    /// only when the file's current text cannot be edited into the content, and then only
    /// once it reads back as exactly the content.
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
    pub subject: Option<CommitMessage>,
    /// A restore: the commit the bytes come from (the `Restored-From` trailer).
    pub restored_from: Option<CommitId>,
    pub idempotency: Option<IdempotencyRecord>,
    /// Check everything, write nothing (no object, no ref, no lock).
    pub dry_run: bool,
    pub author: Identity,
    pub request_id: RequestId,
    /// The last moment this write may commit (its caller's token's end): checked under the
    /// write lock, after every wait, so a write that waited past it is refused (`Expired`)
    /// and writes nothing. `None`: no such moment.
    pub not_after: Option<std::time::SystemTime>,
}

impl CommitRequest {
    /// A commit of one file's bytes, stored as they are, with a new request id.
    pub fn of(
        file: PlanFile,
        bytes: Vec<u8>,
        preconditions: Preconditions,
        author: Identity,
    ) -> Self {
        CommitRequest {
            changes: vec![Change {
                file,
                bytes,
                content: None,
                preconditions,
            }],
            subject: None,
            restored_from: None,
            idempotency: None,
            dry_run: false,
            author,
            request_id: RequestId::generate(),
            not_after: None,
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

impl Committed {
    /// The outcome of a commit made now; `None` for a replay.
    pub fn written(self) -> Option<CommitOutcome> {
        match self {
            Committed::Written(outcome) => Some(outcome),
            Committed::Replayed(_) => None,
        }
    }
}

impl CommitOutcome {
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
pub struct InFlight(#[allow(dead_code)] pub(super) super::repo::inflight::Marker);

/// What [`Storage::commit`] did.
#[derive(Debug)]
pub enum Committed {
    /// Committed now (or nothing changed, or a dry run).
    Written(CommitOutcome),
    /// An earlier commit recorded the same key and request: nothing was written.
    Replayed(IdempotentHit),
}

/// `main`'s commit and the blob ids of both files in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadState {
    pub commit: CommitId,
    pub integration: BlobId,
    pub configuration: BlobId,
}

impl HeadState {
    pub fn blob(&self, file: PlanFile) -> BlobId {
        match file {
            PlanFile::Integration => self.integration,
            PlanFile::Configuration => self.configuration,
        }
    }
}

/// One file changed by one commit: its history entry, and the commit's `Request-Id` trailer.
#[derive(Debug, Clone)]
pub struct FileChange {
    pub file: PlanFile,
    pub entry: HistoryEntry,
    pub request_id: Option<RequestId>,
    /// Whether the file as of this commit is valid, by the storage's [`Judge`] (`None`
    /// without one).
    pub valid: Option<bool>,
}

/// What a push's storage side asks of each file a pushed commit changes (the rules it does
/// not know: permissions, YAML, validators): `Err(reason)` refuses the push.
pub type PushCheck<'a> = dyn FnMut(CommitId, PlanFile, &[u8]) -> Result<(), String> + 'a;

/// How a push's move of `main` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastForward {
    Moved,
    /// `main` is not where the push found it any more.
    Stale,
    /// A live git command holds `main`'s lock.
    Locked,
}

/// What tells whether a version of a file is valid (the YAML rules and the operator's
/// schemas, which storage does not know); given to storage so that change events carry it.
pub trait Judge: Send + Sync + std::fmt::Debug {
    /// The verdict on `blob`, when it is known without its bytes.
    fn known(&self, file: PlanFile, blob: BlobId) -> Option<bool>;
    /// The verdict on `bytes`, the version `blob` of `file` (remembered for `known`).
    fn judge(&self, file: PlanFile, blob: BlobId, bytes: &[u8]) -> bool;
}

/// What happened on `main` after a resume point.
#[derive(Debug, Clone)]
pub enum Replay {
    /// The changes of the commits after the resume point up to `through`, oldest first (a
    /// commit that changed both files gives two, integration first).
    Changes {
        changes: Vec<FileChange>,
        through: CommitId,
    },
    /// The resume point is not on `main`'s first-parent line (any more): start again here.
    Reset(HeadState),
}

/// How a webhook subscription goes from its cursor to `main`'s head.
#[derive(Debug, Clone)]
pub enum DeliveryPlan {
    /// The cursor is on the head's first-parent line: the commits to stop at, oldest first
    /// (the cursor, one every step, the head); each pair is one [`Replay`].
    Steps(Vec<CommitId>),
    /// The head the caller knows is behind the cursor (its view of `main` lags): nothing to do
    /// until it catches up.
    Behind,
    /// `main` left the cursor's line; the lines meet here (on both first-parent lines).
    Fork(HeadState),
    /// They do not meet (or the cursor's commit is gone): start again at the head.
    Reset(HeadState),
}

/// How a stream catches up from a resume point to a head: the commits to stop at, oldest
/// first (the resume point, then one every step, then the head), each pair read as one
/// [`Replay`] without walking the line again; or a reset, when the resume point is unknown
/// or not on the head's first-parent line.
#[derive(Debug, Clone)]
pub enum ReplayPlan {
    Steps(Vec<CommitId>),
    Reset(HeadState),
}

/// Why a commit prefix names no commit: none starts with it, or more than one object does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixMiss {
    Unknown,
    Ambiguous,
}

/// A proposal to open (`number: None`) or to update: its files as a write of them
/// (`changes`, checked against `main` as a write's are), its title and description, who.
#[derive(Debug, Clone)]
pub struct ProposalRequest {
    pub number: Option<crate::domain::ProposalNumber>,
    pub changes: Vec<Change>,
    pub title: CommitMessage,
    pub message: Option<crate::domain::proposal::Description>,
    pub author: crate::domain::Reviewer,
    pub request_id: RequestId,
    /// As [`CommitRequest::not_after`].
    pub not_after: Option<SystemTime>,
}

/// A step of an open proposal, taken under the tenant's write lock.
#[derive(Debug, Clone)]
pub enum ProposalStep {
    /// `seen`: the proposal's commit as the approver reviewed it.
    Approve {
        by: crate::domain::Reviewer,
        seen: CommitId,
    },
    Close {
        by: String,
    },
    /// `checked`: the proposal's commit whose files were held to today's rules.
    Apply {
        by: String,
        request_id: RequestId,
        checked: CommitId,
    },
}

impl ProposalStep {
    pub fn word(&self) -> &'static str {
        match self {
            ProposalStep::Approve { .. } => "approve",
            ProposalStep::Close { .. } => "close",
            ProposalStep::Apply { .. } => "apply",
        }
    }
}

/// Each file a proposal changes, with its bytes as the proposal's commit holds them.
pub type ProposedTexts = Vec<(PlanFile, Vec<u8>)>;

/// A proposal's file in three commits: its base, the proposal, and `main` now.
#[derive(Debug, Clone)]
pub struct ProposedFile {
    pub file: PlanFile,
    pub base: FileSnapshot,
    pub proposed: FileSnapshot,
    pub main: FileSnapshot,
    /// Unified diffs to the proposal, from its base and from `main`.
    pub from_base: String,
    pub from_main: String,
}

/// One step of a proposal as the records ref holds it: an event of the change streams and
/// webhooks (`proposal.opened` and the others).
#[derive(Debug, Clone)]
pub struct ProposalChange {
    /// The step's commit on the records ref (the event's id).
    pub id: CommitId,
    /// `main`'s commit when the step was taken: the step comes after that commit's events and
    /// before the next one's. `None` for a step recorded without it (read as coming first).
    pub main: Option<CommitId>,
    pub kind: crate::domain::StepKind,
    /// The proposal as the step left it.
    pub proposal: crate::domain::Proposal,
    /// Who took the step, as its commit names them.
    pub by_name: String,
    pub by_email: String,
    pub time: SystemTime,
}

/// Steps read after a point of the records line, oldest first.
#[derive(Debug, Clone, Default)]
pub struct ProposalChanges {
    pub steps: Vec<ProposalChange>,
    /// Where the reader stands after them: the last step read or passed over (`None`: before
    /// the first). A point no longer on the line (plain git rewrote it) moves to its head.
    pub through: Option<CommitId>,
    /// Steps are left after `through`: read on from there.
    pub more: bool,
}

//! What an event says, as the change streams and webhooks send it: `HeadEvent`, `FileEvent` (with `Author` and `FileStatus`, which the API's bodies share) and `ProposalEvent`, one serialization for both.
use serde::Serialize;
use utoipa::ToSchema;

/// Whether a stored file could be read as a valid document.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileStatus {
    Valid,
    Invalid,
}

/// Who made a commit.
#[derive(Debug, Serialize, ToSchema)]
pub struct Author {
    pub name: String,
    pub email: String,
}

impl Author {
    /// The name and email of `who` (a pusher).
    pub fn of(who: &crate::domain::Identity) -> Self {
        Self {
            name: who.name().to_owned(),
            email: who.email().to_owned(),
        }
    }
}

/// The first event of a stream (`event: head`), and `event: reset`: `main` now.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeadEvent {
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: String,
    /// Null when the token may not read the integration file.
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub integration_file_sha: Option<String>,
    /// Null when the token may not read the configuration file.
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub configuration_file_sha: Option<String>,
}

/// One file changed by one commit (`event: integration-file` or `configuration-file`, `id:`
/// the commit): the file's history entry, plus `file` and the commit's `Request-Id` trailer.
#[derive(Debug, Serialize, ToSchema)]
pub struct FileEvent {
    /// `integration-file` or `configuration-file`.
    pub file: &'static str,
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: String,
    /// The file's blob id after the commit.
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub file_sha: String,
    pub author: Author,
    /// The author date, RFC 3339.
    pub date: String,
    /// The whole commit message, trailers included.
    pub message: String,
    /// True when the commit carries the `Forced: true` trailer.
    pub forced: bool,
    /// True when the commit is signed by the service's key (as in the history).
    pub verified: bool,
    /// The `Request-Id` trailer; null when the commit has none (plain git).
    pub request_id: Option<String>,
    /// Whether the file as of this commit is valid (its YAML rules and today's schemas), as
    /// in the history.
    pub status: FileStatus,
    /// Who pushed the commit, when it came by `git push` (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pushed_by: Option<Author>,
    /// The proposal this commit applied, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal: Option<u64>,
}

impl FileEvent {
    /// The event of one file changed by one commit (streams and webhooks say the same).
    pub fn from_change(change: &crate::storage::FileChange) -> Self {
        let e = &change.entry;
        Self {
            file: match change.file {
                crate::domain::PlanFile::Integration => "integration-file",
                crate::domain::PlanFile::Configuration => "configuration-file",
            },
            commit_sha: e.commit.to_string(),
            file_sha: e.blob.to_string(),
            author: Author {
                name: e.author_name.clone(),
                email: e.author_email.clone(),
            },
            date: crate::domain::timestamp::rfc3339(e.time),
            message: e.message.clone(),
            forced: e.forced,
            verified: e.verified,
            request_id: change.request_id.as_ref().map(|r| r.as_str().to_owned()),
            pushed_by: e.pushed_by.as_ref().map(Author::of),
            proposal: e.proposal(),
            // `None` only from storage without a judge, which the service never builds.
            status: if change.valid == Some(false) {
                FileStatus::Invalid
            } else {
                FileStatus::Valid
            },
        }
    }
}

/// One step of a proposal (`event: proposal.opened|updated|approved|applied|closed`, `id:`
/// the step's commit on `refs/proposals/records`): the proposal as the step left it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalEvent {
    /// `opened`, `updated`, `approved`, `applied` or `closed`.
    pub step: &'static str,
    /// The step's commit on `refs/proposals/records` (the stream's `id:`).
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub step_sha: String,
    pub number: u64,
    /// `open`, `applied` or `closed`.
    pub state: &'static str,
    pub title: String,
    /// Who proposed it.
    pub author: Author,
    /// Who took this step.
    pub by: Author,
    /// When the step was taken, RFC 3339.
    pub date: String,
    /// `main`'s commit the proposal is on.
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub base: String,
    /// The proposal's commit (what an approval names).
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub commit: String,
    /// The files it changes: `integration-file`, `configuration-file`.
    pub files: Vec<&'static str>,
    /// Approvals of its current commit.
    pub approvals: usize,
    /// The commit on `main` that applied it (`proposal.applied`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub applied: Option<String>,
}

impl ProposalEvent {
    /// The event of one step (streams and webhooks say the same).
    pub fn from_change(change: &crate::storage::ProposalChange) -> Self {
        let p = &change.proposal;
        Self {
            step: change
                .kind
                .event()
                .strip_prefix("proposal.")
                .expect("every step's event is a proposal's"),
            step_sha: change.id.to_string(),
            number: p.number.get(),
            state: p.state.as_str(),
            title: p.title.clone(),
            author: Author {
                name: p.author.name.clone(),
                email: p.author.email.clone(),
            },
            by: Author {
                name: change.by_name.clone(),
                email: change.by_email.clone(),
            },
            date: crate::domain::timestamp::rfc3339(change.time),
            base: p.base.to_string(),
            commit: p.commit.to_string(),
            files: p.files.iter().map(|f| f.part_name()).collect(),
            approvals: p.approvals_in_force().count(),
            applied: p.applied.map(|c| c.to_string()),
        }
    }
}

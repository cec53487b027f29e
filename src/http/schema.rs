//! The JSON bodies of the API as types: responses are serialized from them and the OpenAPI
//! document is generated from them, so the two cannot drift apart.
use super::problem::Problem;
use crate::domain::json_patch::Op;
use crate::domain::yaml::Mapping;
use crate::domain::{BlobId, CommitId};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

pub use crate::events::{Author, FileEvent, FileStatus, HeadEvent, ProposalEvent};

/// Why a stored file is invalid: text that cannot be read as the file (a string), or a rule
/// of the operator's schemas it breaks (an object with its line in the stored text).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum FileProblem {
    Unreadable(String),
    Rule(crate::validation::Violation),
}

/// The integration file (GET), or its new state (PUT, with `commit_sha`).
#[derive(Debug, Serialize, ToSchema)]
pub struct IntegrationFile {
    /// The parsed integration configuration; keys are integration names. `{}` when invalid.
    #[schema(value_type = Object)]
    pub content: Mapping,
    /// The stored YAML text, byte for byte.
    pub raw_content: String,
    /// The git blob id of the file.
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub file_sha: BlobId,
    pub status: FileStatus,
    /// Extra information from the integration vendor.
    #[schema(value_type = Object)]
    pub vendor_response: Mapping,
    /// Why a stored file is invalid (only when `status` is `invalid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation_errors: Option<Vec<FileProblem>>,
    /// The head of `main` after a write (`null` on a dry run), or the commit of a `?ref=`
    /// read; absent on a plain GET.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: Option<Option<CommitId>>,
    /// Only in a dry run's answer: the RFC 6902 patch from the stored content to this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<PatchOp>>)]
    pub patch: Option<Vec<Op>>,
}

/// The configuration file (GET), or its new state (PUT, with `commit_sha`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfigurationFile {
    /// `{folders: [{path, exclude}], ...}`; `{}` when the stored file is not a mapping.
    #[schema(value_type = Object)]
    pub content: Mapping,
    /// The git blob id of the file.
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub sha: BlobId,
    /// Present only for a stored file that is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<FileStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation_errors: Option<Vec<FileProblem>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: Option<Option<CommitId>>,
    /// Only in a dry run's answer: the RFC 6902 patch from the stored content to this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<PatchOp>>)]
    pub patch: Option<Vec<Op>>,
}

/// The new integration configuration: a mapping, or YAML text whose top level is a mapping.
/// The configuration's `payload`: a mapping, or YAML text stored as it is.
fn configuration_payload() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Ref, Type};
    OneOfBuilder::new()
        .item(Ref::from_schema_name("ConfigurationContent"))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(
                    "YAML text whose top level is a mapping of the same shape, stored byte for \
                     byte (comments included)",
                )),
        )
        .build()
        .into()
}

fn integration_content() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some("the configuration as a mapping")),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some("YAML text whose top level is a mapping")),
        )
        .build()
        .into()
}

/// Body of `PUT /plans/integration-file`. (Documents the body; the handler parses it field by
/// field for precise error codes.)
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct PutIntegrationFile {
    #[schema(schema_with = integration_content)]
    pub content: Value,
    /// Only for tenants with source hosting: the blob id from the last read. Omit to force.
    #[schema(nullable, pattern = "^[0-9a-fA-F]{40}$")]
    pub file_sha: Option<String>,
    /// The commit subject: one line of 1-200 characters once control characters are removed.
    #[schema(nullable, min_length = 1)]
    pub message: Option<String>,
}

/// One folder rule of the configuration file. Other keys are kept.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct Folder {
    #[schema(min_length = 1)]
    pub path: String,
    pub exclude: Option<Vec<String>>,
}

/// The configuration document. Other keys are kept as they are.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct ConfigurationContent {
    pub folders: Option<Vec<Folder>>,
}

/// Body of `PUT /plans/configuration-file`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct PutConfigurationFile {
    #[schema(schema_with = configuration_payload)]
    pub payload: Value,
    /// The sha from the last read, or a commit in the tenant's history to force the update.
    /// (An `If-Match` header may stand in for it.)
    #[schema(pattern = "^[0-9a-fA-F]{40}$")]
    pub file_sha: String,
    /// The commit subject: one line of 1-200 characters once control characters are removed.
    #[schema(nullable, min_length = 1)]
    pub message: Option<String>,
}

/// Body of `POST /plans/commits`: one or both files, each under its own PUT's rules.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct PostCommits {
    #[schema(rename = "integration-file", nullable)]
    pub integration_file: Option<PutIntegrationPart>,
    #[schema(rename = "configuration-file", nullable)]
    pub configuration_file: Option<PutConfigurationPart>,
    /// The commit subject (default `Update integrations.yml, configuration.yml`).
    #[schema(nullable, min_length = 1)]
    pub message: Option<String>,
}

/// The integration part of `POST /plans/commits`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct PutIntegrationPart {
    #[schema(schema_with = integration_content)]
    pub content: Value,
    #[schema(nullable, pattern = "^[0-9a-fA-F]{40}$")]
    pub file_sha: Option<String>,
}

/// The configuration part of `POST /plans/commits` (`If-Match` does not apply here).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct PutConfigurationPart {
    #[schema(schema_with = configuration_payload)]
    pub payload: Value,
    #[schema(pattern = "^[0-9a-fA-F]{40}$")]
    pub file_sha: String,
}

/// Answer of `POST /plans/commits`: the GET body of each part sent (with `patch` on a dry run).
#[derive(Debug, Serialize, ToSchema)]
pub struct CommitsAnswer {
    /// The new commit (the head when nothing changed); null on a dry run.
    #[schema(value_type = Option<String>, nullable, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: Option<CommitId>,
    #[serde(rename = "integration-file", skip_serializing_if = "Option::is_none")]
    #[schema(rename = "integration-file", nullable)]
    pub integration_file: Option<IntegrationFile>,
    #[serde(rename = "configuration-file", skip_serializing_if = "Option::is_none")]
    #[schema(rename = "configuration-file", nullable)]
    pub configuration_file: Option<ConfigurationFile>,
}

/// Body of `POST /plans/<file>/restore`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct RestoreFile {
    /// `main` or one of its ancestors, whole or as a unique prefix of at least 7 hex digits:
    /// the file is written back as it was there.
    #[schema(pattern = "^[0-9a-fA-F]{7,40}$")]
    pub commit: String,
    /// As in the file's PUT.
    #[schema(nullable, pattern = "^[0-9a-fA-F]{40}$")]
    pub file_sha: Option<String>,
    #[schema(nullable, min_length = 1)]
    pub message: Option<String>,
}

/// One side of a diff.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiffSide {
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: CommitId,
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub file_sha: BlobId,
}

/// One RFC 6902 operation (`add`, `remove`, `replace`, `move`).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct PatchOp {
    pub op: String,
    pub path: String,
    #[schema(nullable)]
    pub from: Option<String>,
    /// Any JSON value (absent for `remove` and `move`).
    pub value: Option<Value>,
}

/// Answer of `GET /plans/<file>/diff`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FileDiff {
    pub from: DiffSide,
    pub to: DiffSide,
    /// RFC 6902 JSON Patch from the parsed `from` content to the parsed `to` content; arrays
    /// of objects with `account_id` or `path` are diffed by that key.
    #[schema(value_type = Vec<PatchOp>)]
    pub patch: Vec<Op>,
    /// The unified diff of the two YAML texts, as `git diff` prints it.
    pub text: String,
}

/// Body of `/healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
    /// This process, made at its start (16 hex digits): another value means the service
    /// restarted, and what a caller had under way with it (a tenant's import) ended.
    pub instance: &'static str,
}

/// `/readyz`'s body: ready, and what the writes are checked against.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    pub status: &'static str,
    /// Schemas in use (integration kinds and the configuration's).
    pub schemas: usize,
    /// Said when no schema is in use: where the service looked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// One commit that changed the file.
#[derive(Debug, Serialize, ToSchema)]
pub struct HistoryEntry {
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: CommitId,
    /// The file's blob id after this commit.
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub file_sha: BlobId,
    pub author: Author,
    /// The author date, RFC 3339 in UTC.
    #[schema(format = DateTime)]
    pub date: String,
    /// The whole commit message, trailers included.
    pub message: String,
    /// True when the write did not name the current file (a forced write).
    pub forced: bool,
    /// True when the commit carries a signature by the service's key (or a retired one it
    /// still lists): false for plain git's commits, other keys and altered commits.
    pub verified: bool,
    /// Whether the file as of this commit is valid: its YAML rules and today's schemas.
    pub status: FileStatus,
    /// Who pushed the commit, when it came by `git push` (absent otherwise): its author is
    /// the one git recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pushed_by: Option<Author>,
    /// The proposal this commit applied (`GET /plans/proposals/{number}`), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal: Option<u64>,
}

/// The keys that sign the service's commits (`GET /plans/signing-keys`).
#[derive(Debug, Serialize, ToSchema)]
pub struct SigningKeys {
    /// The committer email on every commit the service makes: the principal of the
    /// `allowed_signers` lines.
    pub committer_email: String,
    /// The SSH signature namespace of commits.
    pub namespace: &'static str,
    /// The current key first, then the retired ones still listed (none when signing is off).
    pub keys: Vec<SigningKey>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SigningKey {
    /// An OpenSSH public key line (`ssh-ed25519 AAAA...`).
    pub public_key: String,
    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The key that signs new commits.
    pub current: bool,
}

/// A page of a file's history, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct HistoryPage {
    pub entries: Vec<HistoryEntry>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Bytes of git's smart HTTP protocol (pkt-lines and packs), as git sends and reads them.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct GitBytes(#[allow(dead_code)] Vec<u8>);

/// A ticket for `GET /plans/events?ticket=` (browsers' `EventSource` cannot send headers).
#[derive(Debug, Serialize, ToSchema)]
pub struct Ticket {
    /// Single use; 64 hex digits.
    pub ticket: String,
    /// Seconds it stays valid.
    pub expires_in: u64,
}

/// The problems every authenticated endpoint can answer, listed once: each adds its own 400,
/// 403, 404 and 503.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum CommonProblems {
    #[response(
        status = 401,
        description = "No token, or the token was refused (WWW-Authenticate: Bearer)",
        content_type = "application/problem+json"
    )]
    Unauthorized(Problem),
    #[response(
        status = 500,
        description = "Server fault (its details are in the log, under the request id)",
        content_type = "application/problem+json"
    )]
    Internal(Problem),
}

/// The problems every write can answer (both PUTs, `POST /plans/commits`, both restores),
/// listed once; each write adds its own 200, 403, 404 and, where it applies, 428.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum WriteProblems {
    #[response(
        status = 400,
        description = "invalid_json, invalid_file_sha, file_sha_not_allowed, invalid_query (dry_run) or invalid_idempotency_key",
        content_type = "application/problem+json"
    )]
    BadRequest(Problem),
    #[response(
        status = 401,
        description = "No token, or the token was refused",
        content_type = "application/problem+json"
    )]
    Unauthorized(Problem),
    #[response(
        status = 408,
        description = "body_timeout: the body did not arrive in time",
        content_type = "application/problem+json"
    )]
    BodyTimeout(Problem),
    #[response(
        status = 409,
        description = "sha_mismatch: the file changed since it was read (current_sha), or idempotency_key_in_flight",
        content_type = "application/problem+json"
    )]
    Conflict(Problem),
    #[response(
        status = 412,
        description = "precondition_failed: If-Match differs (current_sha); on POST /plans/commits, any If-Match (it has no version of its own)",
        content_type = "application/problem+json"
    )]
    PreconditionFailed(Problem),
    #[response(
        status = 413,
        description = "The body is over the limit",
        content_type = "application/problem+json"
    )]
    TooLarge(Problem),
    #[response(
        status = 415,
        description = "The body is not application/json",
        content_type = "application/problem+json"
    )]
    UnsupportedMediaType(Problem),
    #[response(
        status = 422,
        description = "invalid_content, with the JSON pointer of the first bad element; schema_violation, with errors: every rule of the operator's schemas the document breaks; or idempotency_key_reused",
        content_type = "application/problem+json"
    )]
    Unprocessable(Problem),
    #[response(
        status = 500,
        description = "Server fault",
        content_type = "application/problem+json"
    )]
    Internal(Problem),
    #[response(
        status = 503,
        description = "busy: the tenant's write queue is full, its turn did not come in time, or main kept moving; Retry-After",
        content_type = "application/problem+json"
    )]
    Busy(Problem),
    #[response(
        status = 507,
        description = "storage_full: no space left on the data volume",
        content_type = "application/problem+json"
    )]
    StorageFull(Problem),
}

/// The query of every write.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct WriteQuery {
    /// true: run every check, write nothing; commit_sha is null and a patch is added
    dry_run: Option<bool>,
}

/// The headers every write takes (a single file's writes also take `If-Match`).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct WriteHeaders {
    /// 1-255 printable ASCII; a retry with the same request answers the first answer (Idempotent-Replayed: true)
    #[param(rename = "Idempotency-Key")]
    idempotency_key: Option<String>,
    /// Kept when it is 1-128 of [A-Za-z0-9._:-]; goes into the commit
    #[param(rename = "X-Request-Id")]
    request_id: Option<String>,
}

/// A webhook subscription. Its `secret` is in the answer to its creation only.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookView {
    /// `wh_` and 26 characters of a-z0-9.
    pub id: String,
    pub url: String,
    /// `integration-file.updated`, `configuration-file.updated`, `main.reset`, and the
    /// proposals' steps (`proposal.opened`, `proposal.updated`, `proposal.approved`,
    /// `proposal.applied`, `proposal.closed`).
    pub events: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `active`, or `failing` after its last retry (it waits for `POST .../resume`).
    pub state: &'static str,
    /// RFC 3339.
    pub created: String,
    /// `whsec_` and the base64 of 32 random bytes: the key of every delivery's
    /// `webhook-signature` (Standard Webhooks). Shown once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl WebhookView {
    pub fn new(hook: &crate::storage::Webhook, with_secret: bool) -> Self {
        Self {
            id: hook.id.to_string(),
            url: hook.url.to_string(),
            events: hook.events.iter().map(|e| e.as_str()).collect(),
            description: hook.description.clone(),
            state: hook.state.as_str(),
            created: crate::domain::timestamp::rfc3339(hook.created),
            secret: with_secret.then(|| hook.secret.expose().to_owned()),
        }
    }
}

/// `GET /plans/webhooks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

/// `GET /plans/webhooks/{id}/deliveries`: attempts, newest first. Each has `webhook_id` (the
/// event's message id, sent as the `webhook-id` header and the same for every attempt of one
/// event, so a receiver can drop a repeat; the subscription's id is the path's), `type`, `commit_sha`, `attempt` (1 for the first),
/// `status` (the receiver's HTTP status, or `timeout`, `refused`, `error`), `duration_ms`,
/// `at` (RFC 3339) and, when it failed, `detail` (the start of the answer, or the reason).
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    #[schema(value_type = Vec<Object>)]
    pub deliveries: Vec<crate::storage::Attempt>,
}

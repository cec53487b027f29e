//! The JSON bodies of the API as types: responses are serialized from them and the OpenAPI
//! document is generated from them, so the two cannot drift apart.
use crate::domain::yaml::Mapping;
use crate::domain::{BlobId, CommitId};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Whether a stored file could be read as a valid document.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileStatus {
    Valid,
    Invalid,
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
    pub validation_errors: Option<Vec<String>>,
    /// The head of `main` after a PUT.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: Option<CommitId>,
    /// Only in a dry run's answer: the RFC 6902 patch from the stored content to this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<PatchOp>>)]
    pub patch: Option<Vec<Value>>,
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
    pub validation_errors: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: Option<CommitId>,
    /// Only in a dry run's answer: the RFC 6902 patch from the stored content to this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<PatchOp>>)]
    pub patch: Option<Vec<Value>>,
}

/// The new integration configuration: a mapping, or YAML text whose top level is a mapping.
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
    pub payload: ConfigurationContent,
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
    pub payload: ConfigurationContent,
    #[schema(pattern = "^[0-9a-fA-F]{40}$")]
    pub file_sha: String,
}

/// Answer of `POST /plans/commits`: the GET body of each part sent (with `patch` on a dry run).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct CommitsAnswer {
    /// The new commit (the head when nothing changed); null on a dry run.
    #[schema(nullable, pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: Option<String>,
    #[schema(rename = "integration-file", nullable)]
    pub integration_file: Option<IntegrationFile>,
    #[schema(rename = "configuration-file", nullable)]
    pub configuration_file: Option<ConfigurationFile>,
}

/// Body of `POST /plans/<file>/restore`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct RestoreFile {
    /// `main` or one of its ancestors: the file is written back as it was there.
    #[schema(pattern = "^[0-9a-fA-F]{40}$")]
    pub commit: String,
    /// As in the file's PUT.
    #[schema(nullable, pattern = "^[0-9a-fA-F]{40}$")]
    pub file_sha: Option<String>,
    #[schema(nullable, min_length = 1)]
    pub message: Option<String>,
}

/// One side of a diff.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct DiffSide {
    #[schema(pattern = "^[0-9a-f]{40}$")]
    pub commit_sha: String,
    #[schema(pattern = "^[0-9a-f]{40}$")]
    pub file_sha: String,
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
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct FileDiff {
    pub from: DiffSide,
    pub to: DiffSide,
    /// RFC 6902 JSON Patch from the parsed `from` content to the parsed `to` content; arrays
    /// of objects with `account_id` or `path` are diffed by that key.
    pub patch: Vec<PatchOp>,
    /// The unified diff of the two YAML texts, as `git diff` prints it.
    pub text: String,
}

/// Body of `/healthz` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// Who made a commit.
#[derive(Debug, Serialize, ToSchema)]
pub struct Author {
    pub name: String,
    pub email: String,
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

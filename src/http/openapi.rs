//! The OpenAPI 3.1 document, generated from the handlers' annotations and the body types (utoipa).
use super::events::{FileEvent, HeadEvent, Ticket};
use super::problem::Problem;
use super::schema::{
    Author, CommitsAnswer, ConfigurationContent, ConfigurationFile, DiffSide, FileDiff, FileStatus,
    Folder, GitBytes, Health, HistoryEntry, HistoryPage, IntegrationFile, PatchOp, PostCommits,
    PutConfigurationFile, PutConfigurationPart, PutIntegrationFile, PutIntegrationPart,
    RestoreFile,
};
use super::{events, git, handlers, history, ops, versions};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "planfiles",
        description = "Per-tenant integration and configuration files kept in bare git repositories. \
            The hash of a file is its git blob id; every write is a commit."
    ),
    paths(
        handlers::get_integration,
        handlers::put_integration,
        handlers::get_configuration,
        handlers::put_configuration,
        history::integration,
        history::configuration,
        events::stream,
        events::ticket,
        versions::post_commits,
        versions::restore_integration,
        versions::restore_configuration,
        versions::diff_integration,
        versions::diff_configuration,
        git::info_refs,
        git::upload_pack,
        git::refuse_push,
        ops::healthz,
        ops::readyz,
        ops::metrics,
        ops::openapi,
    ),
    components(schemas(
        IntegrationFile, ConfigurationFile, PutIntegrationFile, PutConfigurationFile,
        ConfigurationContent, Folder, FileStatus, Problem, Health, HistoryPage, HistoryEntry,
        Author, GitBytes, HeadEvent, FileEvent, Ticket,
        Author, GitBytes, PostCommits, PutIntegrationPart, PutConfigurationPart, CommitsAnswer,
        RestoreFile, FileDiff, DiffSide, PatchOp
    )),
    modifiers(&BearerJwt),
)]
struct ApiDoc;

struct BearerJwt;

impl Modify for BearerJwt {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The document served at `/openapi.json`.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
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
        description = "invalid_content, with the JSON pointer of the first bad element, or idempotency_key_reused",
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

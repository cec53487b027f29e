//! `ApiError`: every error the HTTP API answers, mapped once to RFC 9457 problem+json.
use crate::auth::AuthError;
use crate::domain::{BlobId, CommitId, ContentError, PlanFile};
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

mod mapping;

/// An error (RFC 9457 problem details), finished with the request id by the middleware.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    pub code: &'static str,
    /// On 409 and 412: the current blob id of the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{40}$")]
    pub current_sha: Option<BlobId>,
    /// On errors of one part of `POST /plans/commits`: the JSON pointer of what failed, such
    /// as `/configuration-file/file_sha`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// On 422 `schema_violation`: every rule broken (at most 100), pointers into the body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<crate::validation::Violation>>,
    /// On 422 `schema_violation`: how many violations past the first 100 are not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors_omitted: Option<usize>,
    pub request_id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no route for {0}")]
    NotFound(String),
    #[error("method not allowed; allowed: {0}")]
    MethodNotAllowed(&'static str),
    #[error("{0}")]
    Unauthorized(AuthError),
    #[error("tenant {0} does not exist")]
    TenantNotFound(String),
    #[error("the token lacks the permission {0}")]
    Forbidden(&'static str),
    #[error("the body must be sent as application/json")]
    UnsupportedMediaType,
    #[error("the body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("file_sha {0}")]
    InvalidFileSha(String),
    #[error("file_sha may only be sent for tenants with an active source-hosting installation")]
    FileShaNotAllowed,
    #[error("{0}")]
    InvalidContent(ContentError),
    /// Documents that break the operator's schemas: one file's, or both files' of `POST
    /// /plans/commits` (then each pointer names its part).
    #[error("{}", describe_violations(files, violations))]
    SchemaViolation {
        files: Vec<PlanFile>,
        violations: crate::validation::Violations,
    },
    #[error("send file_sha (the sha from your last read) or an If-Match header")]
    PreconditionRequired,
    #[error("{file} has changed since it was read; read it again and resend")]
    ShaMismatch { file: &'static str, current: BlobId },
    #[error("If-Match does not match the current {file}")]
    PreconditionFailed { file: &'static str, current: BlobId },
    #[error("If-Match names one file's version and POST /plans/commits has none: send file_sha in each part instead")]
    IfMatchWithoutRepresentation,
    /// A turn (a tenant's writer, the body budget, a clone slot) was not had in time, or its
    /// queue is full. Answered 503 with `Retry-After`.
    #[error("{reason}; try again in {retry_after} s")]
    Busy { reason: String, retry_after: u64 },
    #[error("no space left to store {0}")]
    StorageFull(&'static str),
    #[error("the body did not arrive within {0} s")]
    BodyTimeout(u64),
    #[error("the body arrived slower than {0} bytes per second")]
    BodyTooSlow(u64),
    #[error("the request headers are larger than {0} bytes")]
    HeadersTooLarge(usize),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    InvalidBody(String),
    #[error("commit {0} is not in the tenant's history")]
    UnknownRef(CommitId),
    /// A commit prefix that names no commit of the tenant's repository.
    #[error("no commit of the tenant's history starts with {0}")]
    UnknownPrefix(String),
    #[error("Idempotency-Key {0}")]
    InvalidIdempotencyKey(&'static str),
    #[error("a request with this Idempotency-Key is still in flight; retry when it has answered")]
    IdempotencyKeyInFlight,
    #[error("this Idempotency-Key was used by commit {0} for another request")]
    IdempotencyKeyReused(CommitId),
    /// An error of one part (one file) of `POST /plans/commits`.
    #[error("{}: {}", part_pointer(*file, inner), inner)]
    Part {
        file: PlanFile,
        inner: Box<ApiError>,
    },
    #[error("the token is for another tenant")]
    WrongTenant,
    #[error("not ready: {0}")]
    NotReady(String),
    #[error("tenant {0} is moving to another shard: writes are refused for a moment, retry in a few seconds; reads go on")]
    TenantMoving(String),
    #[error(
        "tenant {0} is served by another shard now: send the request through the router again"
    )]
    TenantMoved(String),
    #[error("{0}")]
    MoveConflict(String),
    #[error(
        "{0} is not in this shard's cluster.peers: add it there (and restart) to import from it"
    )]
    PeerNotAllowed(String),
    #[error("the import failed: {0}")]
    ImportFailed(String),
    /// Anything the client cannot act on. The detail goes to the log, never to the client.
    #[error("no webhook {0} for this tenant")]
    WebhookNotFound(String),
    #[error("this destination is refused: {0}")]
    WebhookUrlRefused(String),
    #[error("the tenant has {0} webhooks, the most it may have")]
    WebhookLimit(usize),
    #[error("this Idempotency-Key made webhook {0} for another request")]
    WebhookKeyReused(String),
    #[error("this tenant requires approval: main moves only by applying an approved proposal; send the change to POST /plans/proposals instead (a dry run still answers)")]
    ApprovalRequired,
    #[error("proposals need a token with a sub claim: approvals tell people apart by it")]
    SubRequired,
    #[error("no proposal {0} for this tenant")]
    ProposalNotFound(u64),
    #[error("{0}")]
    ProposalRefused(crate::domain::proposal::Refusal),
    #[error("proposal {number} changes {file}, which moved on main since the proposal's base: its author updates it (PUT /plans/proposals/{number}) and it is approved again")]
    ProposalStale {
        number: u64,
        file: &'static str,
        current: BlobId,
    },
    #[error("the proposal changes nothing: every file it sends is as on main")]
    NothingProposed,
    #[error("the tenant has {0} open proposals, the most it may have: apply or close some first")]
    ProposalLimit(u64),
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        use ApiError::*;
        match self {
            NotFound(_) => (StatusCode::NOT_FOUND, "not_found", "Not found"),
            MethodNotAllowed(_) => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
            ),
            Unauthorized(AuthError::Missing | AuthError::NotBearer(_)) => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Authentication required",
            ),
            Unauthorized(AuthError::Invalid(_)) => {
                (StatusCode::UNAUTHORIZED, "invalid_token", "Invalid token")
            }
            TenantNotFound(_) => (
                StatusCode::NOT_FOUND,
                "tenant_not_found",
                "Tenant not found",
            ),
            Forbidden(_) => (
                StatusCode::FORBIDDEN,
                "insufficient_scope",
                "Insufficient permission",
            ),
            UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Unsupported media type",
            ),
            PayloadTooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "Payload too large",
            ),
            InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json", "Invalid JSON"),
            InvalidFileSha(_) => (
                StatusCode::BAD_REQUEST,
                "invalid_file_sha",
                "Invalid file_sha",
            ),
            FileShaNotAllowed => (
                StatusCode::BAD_REQUEST,
                "file_sha_not_allowed",
                "file_sha not allowed",
            ),
            InvalidContent(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_content",
                "Invalid content",
            ),
            SchemaViolation { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "schema_violation",
                "Schema violation",
            ),
            PreconditionRequired => (
                StatusCode::PRECONDITION_REQUIRED,
                "precondition_required",
                "Precondition required",
            ),
            ShaMismatch { .. } => (StatusCode::CONFLICT, "sha_mismatch", "File has changed"),
            PreconditionFailed { .. } | IfMatchWithoutRepresentation => (
                StatusCode::PRECONDITION_FAILED,
                "precondition_failed",
                "Precondition failed",
            ),
            Busy { .. } => (StatusCode::SERVICE_UNAVAILABLE, "busy", "Busy"),
            StorageFull(_) => (
                StatusCode::INSUFFICIENT_STORAGE,
                "storage_full",
                "Insufficient storage",
            ),
            BodyTimeout(_) | BodyTooSlow(_) => (
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                "Request body timeout",
            ),
            HeadersTooLarge(_) => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large",
                "Request headers too large",
            ),
            InvalidQuery(_) => (StatusCode::BAD_REQUEST, "invalid_query", "Invalid query"),
            InvalidBody(_) => (StatusCode::BAD_REQUEST, "invalid_body", "Invalid body"),
            UnknownRef(_) | UnknownPrefix(_) => {
                (StatusCode::NOT_FOUND, "unknown_ref", "Unknown ref")
            }
            InvalidIdempotencyKey(_) => (
                StatusCode::BAD_REQUEST,
                "invalid_idempotency_key",
                "Invalid Idempotency-Key",
            ),
            IdempotencyKeyInFlight => (
                StatusCode::CONFLICT,
                "idempotency_key_in_flight",
                "Idempotency-Key in flight",
            ),
            IdempotencyKeyReused(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "Idempotency-Key reused",
            ),
            Part { inner, .. } => inner.parts(),
            WrongTenant => (StatusCode::FORBIDDEN, "wrong_tenant", "Wrong tenant"),
            NotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, "not_ready", "Not ready"),
            TenantMoving(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "tenant_moving",
                "Tenant moving",
            ),
            TenantMoved(_) => (
                StatusCode::MISDIRECTED_REQUEST,
                "tenant_moved",
                "Tenant moved",
            ),
            MoveConflict(_) => (StatusCode::CONFLICT, "move_conflict", "Move conflict"),
            PeerNotAllowed(_) => (
                StatusCode::FORBIDDEN,
                "peer_not_allowed",
                "Peer not allowed",
            ),
            ImportFailed(_) => (StatusCode::BAD_GATEWAY, "import_failed", "Import failed"),
            WebhookNotFound(_) => (
                StatusCode::NOT_FOUND,
                "webhook_not_found",
                "Webhook not found",
            ),
            WebhookUrlRefused(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "webhook_url_refused",
                "Webhook URL refused",
            ),
            WebhookKeyReused(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "Idempotency-Key reused",
            ),
            WebhookLimit(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "webhook_limit_reached",
                "Webhook limit reached",
            ),
            ApprovalRequired => (
                StatusCode::FORBIDDEN,
                "approval_required",
                "Approval required",
            ),
            SubRequired => (StatusCode::FORBIDDEN, "sub_required", "sub claim required"),
            ProposalNotFound(_) => (
                StatusCode::NOT_FOUND,
                "proposal_not_found",
                "Proposal not found",
            ),
            ProposalRefused(r) => refusal_parts(r),
            ProposalStale { .. } => (StatusCode::CONFLICT, "proposal_stale", "Proposal stale"),
            NothingProposed => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "nothing_proposed",
                "Nothing proposed",
            ),
            ProposalLimit(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "proposal_limit_reached",
                "Proposal limit reached",
            ),
            Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "Internal server error",
            ),
        }
    }

    /// The stable `code` of this error.
    pub fn code(&self) -> &'static str {
        self.parts().1
    }

    fn current_sha(&self) -> Option<BlobId> {
        match self {
            ApiError::Part { inner, .. } => inner.current_sha(),
            ApiError::ShaMismatch { current, .. }
            | ApiError::PreconditionFailed { current, .. }
            | ApiError::ProposalStale { current, .. } => Some(*current),
            _ => None,
        }
    }
}

/// Status, code and title of a proposal's rule that refused a step.
fn refusal_parts(r: &crate::domain::proposal::Refusal) -> (StatusCode, &'static str, &'static str) {
    use crate::domain::proposal::Refusal as R;
    match r {
        R::NotOpen { .. } => (
            StatusCode::CONFLICT,
            "proposal_not_open",
            "Proposal not open",
        ),
        R::NotAuthor { .. } => (
            StatusCode::FORBIDDEN,
            "not_proposal_author",
            "Not the proposal's author",
        ),
        R::OwnProposal { .. } => (
            StatusCode::FORBIDDEN,
            "own_proposal",
            "Cannot approve one's own proposal",
        ),
        R::AlreadyApproved { .. } => (StatusCode::CONFLICT, "already_approved", "Already approved"),
        R::Changed { .. } => (StatusCode::CONFLICT, "proposal_changed", "Proposal changed"),
        R::ApprovalsMissing { .. } => (
            StatusCode::CONFLICT,
            "approvals_missing",
            "Approvals missing",
        ),
        R::NotParticipant { .. } => (
            StatusCode::FORBIDDEN,
            "not_proposal_participant",
            "Not the proposal's author or approver",
        ),
    }
}

/// The detail of a 422 `schema_violation`: how many rules, and the first.
fn describe_violations(files: &[PlanFile], found: &crate::validation::Violations) -> String {
    let count = found.list.len() + found.omitted;
    let first = found
        .list
        .first()
        .map(|v| format!(": {}: {}", v.pointer, v.message))
        .unwrap_or_default();
    format!(
        "{} {} {count} rule{} of {} schemas, listed in errors{first}",
        files
            .iter()
            .map(|f| f.path())
            .collect::<Vec<_>>()
            .join(" and "),
        if files.len() == 1 { "breaks" } else { "break" },
        if count == 1 { "" } else { "s" },
        if files.len() == 1 { "its" } else { "their" }
    )
}

/// The JSON pointer of what failed in one part of `POST /plans/commits`.
fn part_pointer(file: PlanFile, inner: &ApiError) -> String {
    let at = match inner {
        ApiError::InvalidContent(e) => e.pointer.as_str(),
        ApiError::InvalidFileSha(_)
        | ApiError::FileShaNotAllowed
        | ApiError::PreconditionRequired
        | ApiError::ShaMismatch { .. } => "/file_sha",
        _ => "",
    };
    format!("/{}{at}", file.part_name())
}

impl ApiError {
    /// The files whose write a validator refused, if this is that refusal.
    pub fn schema_refusal(&self) -> &[PlanFile] {
        match self {
            ApiError::SchemaViolation { files, .. } => files,
            ApiError::Part { inner, .. } => inner.schema_refusal(),
            _ => &[],
        }
    }

    /// This error, as the error of the part `file` of a request of both files.
    pub fn in_part(self, file: PlanFile) -> Self {
        match self {
            part @ ApiError::Part { .. } => part,
            inner if inner.status_code().is_client_error() => ApiError::Part {
                file,
                inner: Box::new(inner),
            },
            other => other,
        }
    }
}

/// The `type` URI of a problem code.
pub fn problem_type(code: &str) -> String {
    format!("https://planfiles.dev/problems/{code}")
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.parts().0
    }

    fn error_response(&self) -> HttpResponse {
        let (status, code, title) = self.parts();
        let detail = match self {
            ApiError::Internal(_) => {
                "the server could not complete the request; see its log for the request id"
                    .to_owned()
            }
            other => other.to_string(),
        };
        let mut res = HttpResponse::build(status);
        let (inner, pointer) = match self {
            ApiError::Part { file, inner } => (&**inner, Some(part_pointer(*file, inner))),
            other => (other, None),
        };
        let detail = match (self, inner) {
            (ApiError::Part { .. }, ApiError::InvalidContent(e)) => {
                format!("{}: {}", pointer.clone().unwrap_or_default(), e.message)
            }
            (ApiError::Part { file, .. }, ApiError::SchemaViolation { files, violations }) => {
                describe_violations(
                    files,
                    &violations.clone().under(&format!("/{}", file.part_name())),
                )
            }
            _ => detail,
        };
        match inner {
            ApiError::Unauthorized(AuthError::Missing | AuthError::NotBearer(_)) => {
                res.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            ApiError::Unauthorized(AuthError::Invalid(_)) => {
                res.insert_header((header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\""));
            }
            ApiError::Forbidden(scope) => {
                res.insert_header((
                    header::WWW_AUTHENTICATE,
                    format!("Bearer error=\"insufficient_scope\", scope=\"{scope}\""),
                ));
            }
            ApiError::MethodNotAllowed(allow) => {
                res.insert_header((header::ALLOW, *allow));
            }
            ApiError::Busy { retry_after, .. } => {
                res.insert_header((header::RETRY_AFTER, retry_after.to_string()));
            }
            ApiError::TenantMoving(_) => {
                res.insert_header((header::RETRY_AFTER, "1"));
            }
            ApiError::ShaMismatch { current, .. }
            | ApiError::PreconditionFailed { current, .. } => {
                res.insert_header((header::ETAG, format!("\"{current}\"")));
            }
            _ => {}
        }
        let (errors, errors_omitted) = match inner {
            ApiError::SchemaViolation { violations, .. } => {
                let at = match self {
                    ApiError::Part { file, .. } => format!("/{}", file.part_name()),
                    _ => String::new(),
                };
                let found = violations.clone().under(&at);
                (
                    Some(found.list),
                    (found.omitted > 0).then_some(found.omitted),
                )
            }
            _ => (None, None),
        };
        let problem = Problem {
            kind: problem_type(code),
            errors,
            errors_omitted,
            title,
            status: status.as_u16(),
            detail,
            code,
            current_sha: self.current_sha(),
            pointer,
            request_id: String::new(),
        };
        let mut response = res.finish();
        response.extensions_mut().insert(problem);
        response
    }
}

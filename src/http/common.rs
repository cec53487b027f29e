//! What every handler shares: the reply type, the permission check, the hops off the async workers (storage, CPU), the steps of a request on `AppState` (tenant, turns, body), and the fallbacks for unknown paths and methods.
use super::problem::ApiError;
use super::AppState;
use crate::auth::Principal;
use crate::domain::{PlanFile, TenantId};
use crate::storage::{StorageError, TenantInfo};
use actix_web::{web, HttpRequest, HttpResponse};

pub(super) type Reply = Result<HttpResponse, ApiError>;

/// 403 with the permission that was needed, unless it was granted.
pub(super) fn require(granted: bool, permission: &'static str) -> Result<(), ApiError> {
    if granted {
        Ok(())
    } else {
        Err(ApiError::Forbidden(permission))
    }
}

/// Runs storage work on the blocking pool, never on the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
    file: PlanFile,
) -> Result<T, ApiError> {
    match web::block(work).await {
        Ok(result) => result.map_err(|e| ApiError::from_storage(e, file)),
        Err(e) => Err(ApiError::Internal(format!("the storage task failed: {e}"))),
    }
}

/// The commit a client named (a whole id, or a prefix of 7 or more hex digits), resolved in
/// `storage` (on the blocking pool): a prefix of no object is 404 `unknown_ref`; one of
/// several is `ambiguous`'s error (400 in a query, 422 in a body).
pub(super) fn resolve(
    storage: &crate::storage::Storage,
    tenant: &crate::domain::TenantId,
    name: &crate::domain::CommitName,
    ambiguous: impl FnOnce(String) -> ApiError,
) -> Result<Result<crate::domain::CommitId, ApiError>, StorageError> {
    Ok(match storage.resolve_commit(tenant, name)? {
        Ok(commit) => Ok(commit),
        Err(crate::storage::PrefixMiss::Unknown) => Err(ApiError::UnknownPrefix(name.to_string())),
        Err(crate::storage::PrefixMiss::Ambiguous) => Err(ambiguous(format!(
            "{name} names more than one object: give more digits"
        ))),
    })
}

/// In a query: 400 `invalid_query`.
pub(super) fn ambiguous_in_query(why: String) -> ApiError {
    ApiError::InvalidQuery(why)
}

/// Bodies up to this size are parsed on the worker: it takes microseconds, less than the
/// hop to the blocking pool.
const PARSE_INLINE_BYTES: usize = 64 * 1024;

/// Parses a body of `size` bytes: inline when small, else on the blocking pool, so that one
/// large body (up to a whole megabyte of JSON and YAML) never stalls its worker's other
/// connections.
pub(in crate::http) async fn cpu<T: Send + 'static>(
    size: usize,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    if size <= PARSE_INLINE_BYTES {
        return work();
    }
    web::block(work)
        .await
        .map_err(|e| ApiError::Internal(format!("the parsing task failed: {e}")))?
}

/// A 200 with a JSON body that no cache keeps.
pub(super) fn json_bytes(body: web::Bytes) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("Cache-Control", "no-store"))
        .content_type("application/json")
        .body(body)
}

/// [`json_bytes`] of a value, serialized once.
pub(super) fn json(value: &impl serde::Serialize) -> HttpResponse {
    json_bytes(web::Bytes::from(
        serde_json::to_vec(value).expect("answers serialize"),
    ))
}

/// The request's id (the middleware's: the caller's `X-Request-Id` or a new one), for the
/// commit's `Request-Id` trailer.
pub(super) fn request_id(req: &HttpRequest) -> crate::domain::RequestId {
    use actix_web::HttpMessage;
    req.extensions()
        .get::<crate::domain::RequestId>()
        .cloned()
        .unwrap_or_else(crate::domain::RequestId::generate)
}

pub async fn not_found(req: HttpRequest) -> Reply {
    Err(ApiError::NotFound(req.path().to_owned()))
}

/// How long a write refused for a full queue waits before its 503 (see `shed_write`).
const SHED_HOLD: std::time::Duration = std::time::Duration::from_millis(250);

impl AppState {
    /// The caller's tenant: 404 `tenant_not_found` when it has no repository.
    pub(super) async fn tenant(
        &self,
        who: &Principal,
        file: PlanFile,
    ) -> Result<TenantInfo, ApiError> {
        let (storage, tenant) = (self.storage.clone(), who.tenant().clone());
        blocking(move || storage.tenant(&tenant), file).await
    }

    /// A turn to parse and render a stored file of `tenant` (or to walk its history); 503
    /// `busy` when it does not come in time.
    pub(super) async fn render_turn(
        &self,
        tenant: &TenantId,
    ) -> Result<crate::gates::Turn, ApiError> {
        self.renders.take(tenant).await.ok_or_else(|| {
            ApiError::busy(
                "too many stored files of this tenant are being read at once",
                self.renders.wait().as_secs().clamp(1, 5),
            )
        })
    }

    /// 503 `busy` when the tenant's write queue is full, before the body is read (load
    /// shedding). The refusal is held for [`SHED_HOLD`] first: a client that retries at
    /// once, ignoring `Retry-After`, then cannot turn its own refusals into a loop that takes
    /// the CPU from other tenants.
    pub(super) async fn shed_write(&self, who: &Principal, file: PlanFile) -> Result<(), ApiError> {
        if who.can_write(file) && self.writers.queue_full(who.tenant()) {
            tokio::time::sleep(SHED_HOLD).await;
            return Err(ApiError::from_write(
                crate::plans::writer::WriteError::QueueFull {
                    tenant: who.tenant().clone(),
                    waiting: 0,
                },
                file,
            ));
        }
        Ok(())
    }

    /// `err`, once the body is read and thrown away: a server that answers and closes with
    /// unread data makes the client's kernel drop the answer. Holds no memory or budget.
    pub(super) async fn unread(&self, payload: web::Payload, err: ApiError) -> ApiError {
        super::body::discard(payload, self.body_limit, self.body_pace).await;
        err
    }

    pub(super) async fn read_body(
        &self,
        req: &HttpRequest,
        payload: web::Payload,
    ) -> Result<web::BytesMut, ApiError> {
        super::body::read_put_body(req, payload, self.body_limit, self.body_pace).await
    }
}

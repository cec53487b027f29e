//! The four plans endpoints and the fallbacks for unknown paths and methods.
use super::body;
use super::cache::Rendered;
use super::openapi::{WriteHeaders, WriteProblems, WriteQuery};
use super::problem::ApiError;
use super::problem::Problem;
use super::query::ReadQuery;
use super::schema::{ConfigurationFile, IntegrationFile, PutConfigurationFile, PutIntegrationFile};
use super::versions::{self, Part, Planned, Shape, WriteOptions};
use super::{views, AppState};
use crate::auth::Principal;
use crate::domain::PlanFile;
use crate::storage::ReadOutcome;
use actix_web::{web, HttpRequest, HttpResponse};

pub(super) type Reply = Result<HttpResponse, ApiError>;

/// How long a write refused for a full queue waits before its 503 (see `shed_write`).
const SHED_HOLD: std::time::Duration = std::time::Duration::from_millis(250);

#[utoipa::path(
    get,
    path = "/plans/integration-file",
    tag = "plans",
    description = "Read the integration file.",
    params(
        ("X-Request-Id" = Option<String>, Header, description = "Kept when it is 1-128 of [A-Za-z0-9._:-]"),
        ("ref" = Option<String>, Query, pattern = "^[0-9a-fA-F]{40}$", description = "A commit of the tenant's history: read the file as it was there"),
        ("If-None-Match" = Option<String>, Header, description = "Quoted blob ids (or *): 304 when the file is one of them"),
        ("Prefer" = Option<String>, Header, description = "wait=N (RFC 7240) with If-None-Match: hold the request up to N seconds (at most events.max_wait_secs) until the file changes"),
    ),
    responses(
        (status = 200, description = "The current file (or the file at ref, with commit_sha)", body = IntegrationFile,
            headers(("ETag" = String, description = "The blob id, quoted"), ("X-Request-Id" = String, description = "The request id"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 304, description = "Not modified: the file is one If-None-Match listed (after the wait, with Prefer: wait)",
            headers(("ETag" = String, description = "The blob id, quoted"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 400, description = "invalid_query: ref is not a 40-hex commit id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, or the token was refused", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.integrations.read (or the write permission)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref: ref is not in the tenant's history", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Server fault", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: with Prefer: wait, the stream limits are reached; Retry-After", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get_integration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    state
        .get_file_conditional(&who, &req, PlanFile::Integration)
        .await
}

#[utoipa::path(
    get,
    path = "/plans/configuration-file",
    tag = "plans",
    description = "Read the configuration file.",
    params(
        ("X-Request-Id" = Option<String>, Header, description = "Kept when it is 1-128 of [A-Za-z0-9._:-]"),
        ("ref" = Option<String>, Query, pattern = "^[0-9a-fA-F]{40}$", description = "A commit of the tenant's history: read the file as it was there"),
        ("If-None-Match" = Option<String>, Header, description = "Quoted blob ids (or *): 304 when the file is one of them"),
        ("Prefer" = Option<String>, Header, description = "wait=N (RFC 7240) with If-None-Match: hold the request up to N seconds (at most events.max_wait_secs) until the file changes"),
    ),
    responses(
        (status = 200, description = "The current file (or the file at ref, with commit_sha)", body = ConfigurationFile,
            headers(("ETag" = String, description = "The blob id, quoted"), ("X-Request-Id" = String, description = "The request id"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 304, description = "Not modified: the file is one If-None-Match listed (after the wait, with Prefer: wait)",
            headers(("ETag" = String, description = "The blob id, quoted"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 400, description = "invalid_query: ref is not a 40-hex commit id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, or the token was refused", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.preferences.read (or the write permission)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref: ref is not in the tenant's history", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Server fault", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: with Prefer: wait, the stream limits are reached; Retry-After", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get_configuration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    state
        .get_file_conditional(&who, &req, PlanFile::Configuration)
        .await
}

#[utoipa::path(
    put,
    path = "/plans/integration-file",
    tag = "plans",
    description = "Replace the integration file. file_sha only for tenants with source hosting; without it the write is forced.",
    request_body(content = PutIntegrationFile, content_type = "application/json"),
    params(
        ("If-Match" = Option<String>, Header, description = "The quoted blob id from the last read; 412 when it differs"),
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Written (or unchanged): the new state and commit_sha", body = IntegrationFile,
            headers(("ETag" = String, description = "The new blob id, quoted"), ("X-Request-Id" = String, description = "The request id"), ("Idempotent-Replayed" = String, description = "true when this answers an earlier request with the same Idempotency-Key"))),
        (status = 403, description = "The token lacks jit.integrations.write", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn put_integration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    let file = PlanFile::Integration;
    // Load shedding first: a tenant with queued writes exists, so refusing here keeps the
    // order of checks for everyone else, and a flood of writes costs no disk read each.
    if let Err(e) = state.shed_write(&who, file).await {
        return Err(state.unread(payload, e).await);
    }
    let tenant = state.tenant(&who, file).await?;
    require(who.can_write(file), file.write_permission())?;
    let turn = match state.admit(&req, who.tenant(), state.body_limit).await {
        Ok(turn) => turn,
        Err(e) => return Err(state.unread(payload, e).await),
    };
    let bytes = state.read_body(&req, payload).await?;
    let options = WriteOptions::from_request(&req)?;
    let record = options.record(&state.storage, &req, &bytes);
    let (source_hosting, if_match) = (tenant.source_hosting, body::if_match(&req));
    let (part, subject) = cpu(bytes.len(), move || {
        let mut body = body::parse_put_body(&bytes)?;
        let sha = versions::file_sha(file, &body, source_hosting)?;
        let (doc, json) = versions::new_doc(file, &mut body)?;
        let subject = body.message()?;
        let pre = versions::preconditions(file, sha, if_match)?;
        Ok((Part::new(doc, json, pre), subject))
    })
    .await?;
    // Parsed: the body's share of the budget goes back before the write waits for its turn.
    drop(turn);
    let planned = Planned {
        parts: vec![part],
        subject,
        restored_from: None,
        record,
        dry_run: options.dry_run,
    };
    state.run_write(&who, &req, planned, Shape::Single).await
}

#[utoipa::path(
    put,
    path = "/plans/configuration-file",
    tag = "plans",
    description = "Replace the configuration file. file_sha (or If-Match) is required; a commit hash from the tenant's history forces the update.",
    request_body(content = PutConfigurationFile, content_type = "application/json"),
    params(
        ("If-Match" = Option<String>, Header, description = "The quoted blob id from the last read; 412 when it differs"),
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Written (or unchanged): the new state and commit_sha", body = ConfigurationFile,
            headers(("ETag" = String, description = "The new blob id, quoted"), ("X-Request-Id" = String, description = "The request id"), ("Idempotent-Replayed" = String, description = "true when this answers an earlier request with the same Idempotency-Key"))),
        (status = 403, description = "The token lacks jit.preferences.write", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "precondition_required: no file_sha and no If-Match", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn put_configuration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    let file = PlanFile::Configuration;
    // Load shedding first: a tenant with queued writes exists, so refusing here keeps the
    // order of checks for everyone else, and a flood of writes costs no disk read each.
    if let Err(e) = state.shed_write(&who, file).await {
        return Err(state.unread(payload, e).await);
    }
    state.tenant(&who, file).await?;
    require(who.can_write(file), file.write_permission())?;
    let turn = match state.admit(&req, who.tenant(), state.body_limit).await {
        Ok(turn) => turn,
        Err(e) => return Err(state.unread(payload, e).await),
    };
    let bytes = state.read_body(&req, payload).await?;
    let options = WriteOptions::from_request(&req)?;
    let record = options.record(&state.storage, &req, &bytes);
    let if_match = body::if_match(&req);
    let (part, subject) = cpu(bytes.len(), move || {
        let mut body = body::parse_put_body(&bytes)?;
        let sha = versions::file_sha(file, &body, false)?;
        let (doc, json) = versions::new_doc(file, &mut body)?;
        let subject = body.message()?;
        let pre = versions::preconditions(file, sha, if_match)?;
        Ok((Part::new(doc, json, pre), subject))
    })
    .await?;
    drop(turn);
    let planned = Planned {
        parts: vec![part],
        subject,
        restored_from: None,
        record,
        dry_run: options.dry_run,
    };
    state.run_write(&who, &req, planned, Shape::Single).await
}

pub(super) fn require(granted: bool, permission: &'static str) -> Result<(), ApiError> {
    if granted {
        Ok(())
    } else {
        Err(ApiError::Forbidden(permission))
    }
}

pub async fn not_found(req: HttpRequest) -> Reply {
    Err(ApiError::NotFound(req.path().to_owned()))
}

pub async fn get_only() -> Reply {
    Err(ApiError::MethodNotAllowed("GET"))
}

pub async fn post_only() -> Reply {
    Err(ApiError::MethodNotAllowed("POST"))
}

pub async fn get_put_only() -> Reply {
    Err(ApiError::MethodNotAllowed("GET, PUT"))
}

impl AppState {
    /// A GET: the file at the head of `main` (from the response cache while `main` has not
    /// moved), or at the commit of a `?ref=`. Checks in order: the tenant exists (404), the
    /// read permission (403), the query (400), the ref (404).
    pub(super) async fn get_file(
        &self,
        who: &Principal,
        req: &HttpRequest,
        file: PlanFile,
    ) -> Reply {
        let query = ReadQuery::parse(req.query_string());
        let tenant = who.tenant();
        if let Ok(ReadQuery { at: Some(at) }) = query {
            self.tenant(who, file).await?;
            require(who.can_read(file), file.read_permission())?;
            let (storage, tenant) = (self.storage.clone(), tenant.clone());
            let turn = self.render_turn(&tenant).await?;
            // Parsing up to a megabyte of YAML and rendering it is CPU work: off the worker.
            let (body, blob) = blocking(
                move || {
                    let _turn = turn;
                    let snap = storage.read_at(&tenant, file, at)?;
                    let body = views::stored_body(file, &snap.bytes, snap.blob, Some(at));
                    Ok((body, snap.blob))
                },
                file,
            )
            .await?;
            return Ok(views::respond(body, views::etag(blob)));
        }
        let cached = self.responses.get(tenant, file);
        if let Some(hit) = cached
            .as_ref()
            .filter(|c| self.storage.known_head(tenant) == Some(c.commit))
        {
            require(who.can_read(file), file.read_permission())?;
            query?;
            return Ok(views::respond(hit.body.clone(), hit.etag.clone()));
        }
        let known = cached.as_ref().map(|c| c.commit);
        let (storage, owned) = (self.storage.clone(), tenant.clone());
        let turn = self.render_turn(tenant).await?;
        // A changed file is parsed and rendered where it was read, off the worker.
        let outcome = blocking(
            move || {
                let _turn = turn;
                Ok(match storage.read_unless_at(&owned, file, known)? {
                    ReadOutcome::Unchanged => None,
                    ReadOutcome::Changed(snap) => Some(Rendered {
                        body: views::stored_body(file, &snap.bytes, snap.blob, None),
                        commit: snap.commit,
                        etag: views::etag(snap.blob),
                    }),
                })
            },
            file,
        )
        .await?;
        require(who.can_read(file), file.read_permission())?;
        query?;
        let rendered = match (outcome, cached) {
            (None, Some(cached)) => cached,
            (Some(rendered), _) => {
                self.responses.put(tenant, file, rendered.clone());
                rendered
            }
            (None, None) => {
                return Err(ApiError::Internal("unchanged without a cached body".into()))
            }
        };
        Ok(views::respond(rendered.body, rendered.etag))
    }

    /// `err`, once the body is read and thrown away: a server that answers and closes with
    /// unread data makes the client's kernel drop the answer. Holds no memory or budget.
    pub(super) async fn unread(&self, payload: web::Payload, err: ApiError) -> ApiError {
        body::discard(payload, self.body_limit, self.body_pace).await;
        err
    }

    /// 503 `busy` at once, before the body is read, when the tenant's write queue is full.
    /// 503 `busy` when the tenant's write queue is full. The refusal is held for
    /// [`SHED_HOLD`] first: a client that retries at once, ignoring `Retry-After`, then
    /// cannot turn its own refusals into a loop that takes the CPU from other tenants.
    pub(super) async fn shed_write(&self, who: &Principal, file: PlanFile) -> Result<(), ApiError> {
        if who.can_write(file) && self.writers.queue_full(who.tenant()) {
            tokio::time::sleep(SHED_HOLD).await;
            return Err(ApiError::from_write(
                crate::writer::WriteError::QueueFull {
                    tenant: who.tenant().clone(),
                    waiting: 0,
                },
                file,
            ));
        }
        Ok(())
    }

    /// A turn to parse and render a stored file of `tenant`; 503 `busy` when it does not come
    /// in time.
    pub(super) async fn render_turn(
        &self,
        tenant: &crate::domain::TenantId,
    ) -> Result<crate::gates::Turn, ApiError> {
        self.renders.take(tenant).await.ok_or_else(|| {
            ApiError::busy(
                "too many stored files of this tenant are being read at once",
                self.renders.wait().as_secs().clamp(1, 5),
            )
        })
    }

    pub(super) async fn tenant(
        &self,
        who: &Principal,
        file: PlanFile,
    ) -> Result<crate::storage::TenantInfo, ApiError> {
        let (storage, tenant) = (self.storage.clone(), who.tenant().clone());
        blocking(move || storage.tenant(&tenant), file).await
    }

    pub(super) async fn read_body(
        &self,
        req: &HttpRequest,
        payload: web::Payload,
    ) -> Result<web::BytesMut, ApiError> {
        body::read_put_body(req, payload, self.body_limit, self.body_pace).await
    }
}

/// Bodies up to this size are parsed on the worker: it takes microseconds, less than the
/// hop to the blocking pool.
const PARSE_INLINE_BYTES: usize = 64 * 1024;

/// Parses a body of `size` bytes: inline when small, else on the blocking pool, so that one
/// large body (up to a whole megabyte of JSON and YAML) never stalls its worker's other
/// connections.
pub(super) async fn cpu<T: Send + 'static>(
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

/// Runs storage work on the blocking pool, never on the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, crate::storage::StorageError> + Send + 'static,
    file: PlanFile,
) -> Result<T, ApiError> {
    match web::block(work).await {
        Ok(result) => result.map_err(|e| ApiError::from_storage(e, file)),
        Err(e) => Err(ApiError::Internal(format!("the storage task failed: {e}"))),
    }
}

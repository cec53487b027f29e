//! The four plans endpoints: GET and PUT of each file.
use super::body;
use super::cache::Rendered;
use super::common::{ambiguous_in_query, blocking, require, resolve, Reply};
use super::problem::{ApiError, Problem};
use super::query::ReadQuery;
use super::schema::CommonProblems;
use super::schema::{
    ConfigurationFile, IntegrationFile, PutConfigurationFile, PutIntegrationFile, WriteHeaders,
    WriteProblems, WriteQuery,
};
use super::write::Shape;
use super::{views, AppState};
use crate::auth::Principal;
use crate::domain::PlanFile;
use crate::plans::write;
use crate::storage::ReadOutcome;
use actix_web::{web, HttpRequest};

#[utoipa::path(
    get,
    path = "/plans/integration-file",
    tag = "plans",
    description = "Read the integration file.",
    params(
        ("X-Request-Id" = Option<String>, Header, description = "Kept when it is 1-128 of [A-Za-z0-9._:-]"),
        ("Accept" = Option<String>, Header, description = "application/yaml (first of JSON, YAML or */*): the stored bytes as they are, not the JSON document"),
        ("ref" = Option<String>, Query, pattern = "^[0-9a-fA-F]{7,40}$", description = "A commit of the tenant's history (its id, or a unique prefix of 7 or more hex digits): read the file as it was there"),
        ("If-None-Match" = Option<String>, Header, description = "Quoted blob ids (or *): 304 when the file is one of them"),
        ("Prefer" = Option<String>, Header, description = "wait=N (RFC 7240) with If-None-Match: hold the request up to N seconds (at most events.max_wait_secs) until the file changes"),
    ),
    responses(
        (status = 200, description = "The current file (or the file at ref, with commit_sha)", content((IntegrationFile = "application/json"), (String = "application/yaml")),
            headers(("ETag" = String, description = "The blob id, quoted"), ("X-Request-Id" = String, description = "The request id"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 304, description = "Not modified: the file is one If-None-Match listed (after the wait, with Prefer: wait)",
            headers(("ETag" = String, description = "The blob id, quoted"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 400, description = "invalid_query: ref is not a commit id or a prefix of 7 or more hex digits, or names several objects", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.integrations.read (or the write permission)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref: ref is not in the tenant's history", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: with Prefer: wait, the stream limits are reached; Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
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
        ("Accept" = Option<String>, Header, description = "application/yaml (first of JSON, YAML or */*): the stored bytes as they are, not the JSON document"),
        ("ref" = Option<String>, Query, pattern = "^[0-9a-fA-F]{7,40}$", description = "A commit of the tenant's history (its id, or a unique prefix of 7 or more hex digits): read the file as it was there"),
        ("If-None-Match" = Option<String>, Header, description = "Quoted blob ids (or *): 304 when the file is one of them"),
        ("Prefer" = Option<String>, Header, description = "wait=N (RFC 7240) with If-None-Match: hold the request up to N seconds (at most events.max_wait_secs) until the file changes"),
    ),
    responses(
        (status = 200, description = "The current file (or the file at ref, with commit_sha)", content((ConfigurationFile = "application/json"), (String = "application/yaml")),
            headers(("ETag" = String, description = "The blob id, quoted"), ("X-Request-Id" = String, description = "The request id"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 304, description = "Not modified: the file is one If-None-Match listed (after the wait, with Prefer: wait)",
            headers(("ETag" = String, description = "The blob id, quoted"), ("Preference-Applied" = String, description = "wait=N, when Prefer: wait was honoured"))),
        (status = 400, description = "invalid_query: ref is not a commit id or a prefix of 7 or more hex digits, or names several objects", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.preferences.read (or the write permission)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref: ref is not in the tenant's history", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: with Prefer: wait, the stream limits are reached; Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
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
    state.put(&who, &req, payload, PlanFile::Integration).await
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
    state
        .put(&who, &req, payload, PlanFile::Configuration)
        .await
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
        if views::wants_yaml(req) {
            return self.get_stored_text(who, query, file).await;
        }
        if let Ok(ReadQuery { at: Some(at) }) = query {
            self.tenant(who, file).await?;
            require(who.can_read(file), file.read_permission())?;
            let (storage, tenant) = (self.storage.clone(), tenant.clone());
            let turn = self.render_turn(&tenant).await?;
            let schemas = self.validators.current();
            // Parsing up to a megabyte of YAML and rendering it is CPU work: off the worker.
            let (body, blob) = blocking(
                move || {
                    let _turn = turn;
                    let at = match resolve(&storage, &tenant, &at, ambiguous_in_query)? {
                        Ok(at) => at,
                        Err(e) => return Ok(Err(e)),
                    };
                    let snap = storage.read_at(&tenant, file, at)?;
                    let body = views::stored_body(file, &snap.bytes, snap.blob, Some(at), &schemas);
                    Ok(Ok((body, snap.blob)))
                },
                file,
            )
            .await??;
            return Ok(views::respond(body, views::etag(blob)));
        }
        let cached = self.responses.get(tenant, file);
        let generation = self.validators.generation();
        if let Some(hit) = cached.as_ref().filter(|c| {
            self.storage.known_head(tenant) == Some(c.commit) && c.schemas == generation
        }) {
            require(who.can_read(file), file.read_permission())?;
            query?;
            return Ok(views::respond(hit.body.clone(), hit.etag.clone()));
        }
        // A body judged by another schema set is rendered again, though main has not moved.
        let known = cached
            .as_ref()
            .filter(|c| c.schemas == generation)
            .map(|c| c.commit);
        let (schemas, generation) = self.validators.current_with_generation();
        let (storage, owned) = (self.storage.clone(), tenant.clone());
        let turn = self.render_turn(tenant).await?;
        // A changed file is parsed and rendered where it was read, off the worker.
        let outcome = blocking(
            move || {
                let _turn = turn;
                Ok(match storage.read_unless_at(&owned, file, known)? {
                    ReadOutcome::Unchanged => None,
                    ReadOutcome::Changed(snap) => Some(Rendered {
                        body: views::stored_body(file, &snap.bytes, snap.blob, None, &schemas),
                        commit: snap.commit,
                        schemas: generation,
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

    /// The stored bytes of `file` (at `at`, else at `main`), for a GET that asked for YAML:
    /// read under a render turn, never cached.
    async fn get_stored_text(
        &self,
        who: &Principal,
        query: Result<ReadQuery, ApiError>,
        file: PlanFile,
    ) -> Reply {
        self.tenant(who, file).await?;
        require(who.can_read(file), file.read_permission())?;
        let at = query?.at;
        let (storage, tenant) = (self.storage.clone(), who.tenant().clone());
        let turn = self.render_turn(&tenant).await?;
        let snap = blocking(
            move || {
                let _turn = turn;
                Ok(match at {
                    Some(at) => match resolve(&storage, &tenant, &at, ambiguous_in_query)? {
                        Ok(at) => Ok(storage.read_at(&tenant, file, at)?),
                        Err(e) => Err(e),
                    },
                    None => Ok(storage.read(&tenant, file)?),
                })
            },
            file,
        )
        .await??;
        Ok(views::respond_text(snap.bytes, views::etag(snap.blob)))
    }

    /// A file's PUT: the write pipeline with the file's body rules (the integration file
    /// takes a `file_sha` only with source hosting).
    async fn put(
        &self,
        who: &Principal,
        req: &HttpRequest,
        payload: web::Payload,
        file: PlanFile,
    ) -> Reply {
        let intake = self.intake(who, req, payload, file).await?;
        let (source_hosting, if_match) = (intake.tenant.source_hosting, body::if_match(req));
        let schemas = self.validators.current();
        let (planned, meta) = intake
            .parse(move |bytes| write::put(file, bytes, source_hosting, if_match, &schemas))
            .await
            .map_err(|e| self.counted(e))?;
        self.run_write(who, req, planned, meta, Shape::Single).await
    }
}

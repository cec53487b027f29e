//! `POST /plans/<file>/restore`: a file written back as it was in a commit of `main`'s history, under its PUT's preconditions.
use super::body;
use super::common::{blocking, resolve, Reply};
use super::problem::{ApiError, Problem};
use super::schema::{
    ConfigurationFile, IntegrationFile, RestoreFile, WriteHeaders, WriteProblems, WriteQuery,
};
use super::write::Shape;
use super::AppState;
use crate::auth::Principal;
use crate::domain::{ContentError, PlanFile};
use crate::plans::{rules, write};
use actix_web::{web, HttpRequest};

/// `POST /plans/integration-file/restore`.
#[utoipa::path(
    post,
    path = "/plans/integration-file/restore",
    tag = "versions",
    description = "Write the file back as it was in a commit of main's history (bytes exactly), as a new commit with the trailer Restored-From. Preconditions as the file's PUT.",
    request_body(content = RestoreFile, content_type = "application/json"),
    params(
        ("If-Match" = Option<String>, Header, description = "The quoted blob id from the last read; 412 when it differs"),
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Restored (or unchanged): the PUT's answer", body = IntegrationFile, headers(("ETag" = String, description = "The new blob id, quoted"), ("Idempotent-Replayed" = String, description = "true on a replay"))),
        (status = 404, description = "tenant_not_found, or unknown_ref: commit is not main or an ancestor", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.integrations.write", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn restore_integration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    state
        .restore(who, req, payload, PlanFile::Integration)
        .await
}

/// `POST /plans/configuration-file/restore`.
#[utoipa::path(
    post,
    path = "/plans/configuration-file/restore",
    tag = "versions",
    description = "Write the file back as it was in a commit of main's history (bytes exactly), as a new commit with the trailer Restored-From. Preconditions as the file's PUT.",
    request_body(content = RestoreFile, content_type = "application/json"),
    params(
        ("If-Match" = Option<String>, Header, description = "The quoted blob id from the last read; 412 when it differs"),
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Restored (or unchanged): the PUT's answer", body = ConfigurationFile, headers(("ETag" = String, description = "The new blob id, quoted"), ("Idempotent-Replayed" = String, description = "true on a replay"))),
        (status = 404, description = "tenant_not_found, or unknown_ref: commit is not main or an ancestor", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.preferences.write", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "precondition_required: no file_sha and no If-Match", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn restore_configuration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    state
        .restore(who, req, payload, PlanFile::Configuration)
        .await
}

impl AppState {
    /// A restore: the file's bytes as of `commit`, under the preconditions of its PUT.
    async fn restore(
        &self,
        who: Principal,
        req: HttpRequest,
        payload: web::Payload,
        file: PlanFile,
    ) -> Reply {
        let intake = self.intake(&who, &req, payload, file).await?;
        let source_hosting = intake.tenant.source_hosting;
        let (restore, meta) = intake
            .parse(move |bytes| write::restore_body(file, bytes, source_hosting))
            .await?;
        let name = restore.commit.clone();
        // Whether `commit` is in main's history is a walk of it: a render turn of the
        // tenant's.
        let render = self.render_turn(who.tenant()).await?;
        let (storage, owned) = (self.storage.clone(), who.tenant().clone());
        let schemas = self.validators.current();
        // Reading, parsing and checking up to a megabyte of YAML: off the worker.
        let (commit, doc) = blocking(
            move || {
                let _turn = render;
                // A prefix (as the console and git abbreviate) names one commit, or is refused.
                let in_body = |why| ApiError::InvalidContent(ContentError::new("/commit", why));
                let commit = match resolve(&storage, &owned, &name, in_body)? {
                    Ok(commit) => commit,
                    Err(e) => return Ok(Err(e)),
                };
                let bytes = storage.read_at(&owned, file, commit)?.bytes;
                Ok(rules::restorable(file, &bytes, &schemas)
                    .map(|doc| (commit, doc))
                    .map_err(ApiError::from))
            },
            file,
        )
        .await?
        .map_err(|e| self.counted(e))?;
        // Preconditions come last (contract order): an unknown commit is 404 before a 428.
        let planned = write::restore(file, doc, commit, restore, body::if_match(&req))?;
        self.run_write(&who, &req, planned, meta, Shape::Single)
            .await
    }
}

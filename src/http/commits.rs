//! `POST /plans/commits`: both files (or one) in one commit, all or nothing, each part under its own PUT's rules.
use super::common::Reply;
use super::problem::{ApiError, Problem};
use super::schema::{CommitsAnswer, PostCommits, WriteHeaders, WriteProblems, WriteQuery};
use super::write::Shape;
use super::AppState;
use crate::auth::Principal;
use crate::domain::PlanFile;
use actix_web::{web, HttpRequest};

/// `POST /plans/commits`: both files (or one) in one commit, all or nothing.
#[utoipa::path(
    post,
    path = "/plans/commits",
    tag = "versions",
    description = "Write one or both files in one commit, all or nothing. Each part follows its PUT's rules and needs its own write permission; a failed part is named by the problem's pointer (/integration-file/..., /configuration-file/...).",
    request_body(content = PostCommits, content_type = "application/json"),
    params(
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Written (or unchanged): the commit and the new state of each part sent", body = CommitsAnswer, headers(("Idempotent-Replayed" = String, description = "true when this answers an earlier request with the same Idempotency-Key"))),
        (status = 403, description = "The token lacks the write permission of a file sent", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "precondition_required: no file_sha (and no If-Match) for the configuration file", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn post_commits(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    // Before the body is read, the token must hold the write permission of one file.
    let any = if who.can_write(PlanFile::Integration) {
        PlanFile::Integration
    } else {
        PlanFile::Configuration
    };
    let intake = state.intake(&who, &req, payload, any).await?;
    let source_hosting = intake.tenant.source_hosting;
    let granted = PlanFile::ALL.map(|f| who.can_write(f));
    let schemas = state.validators.current();
    let (planned, meta) = intake
        .parse(move |bytes| crate::plans::write::both(bytes, source_hosting, granted, &schemas))
        .await
        .map_err(|e| state.counted(e))?;
    // If-Match names one file's version, and this resource has none: the condition is false
    // (RFC 9110, 13.1.1), so the write does not happen. Each part's file_sha is the guard.
    if req
        .headers()
        .contains_key(actix_web::http::header::IF_MATCH)
    {
        return Err(ApiError::IfMatchWithoutRepresentation);
    }
    state
        .run_write(&who, &req, planned, meta, Shape::Both)
        .await
}

//! `GET /plans/<file>/diff`: what changed in a file between two commits of `main`'s history, as an RFC 6902 patch keyed by `account_id` / `path` and as a unified diff.
use super::common::{ambiguous_in_query, blocking, json, require, resolve, Reply};
use super::problem::Problem;
use super::schema::CommonProblems;
use super::schema::{DiffSide, FileDiff};
use super::{views, AppState};
use crate::auth::Principal;
use crate::domain::{json_patch, PlanFile};
use actix_web::{web, HttpRequest};

/// `GET /plans/integration-file/diff`.
#[utoipa::path(
    get,
    path = "/plans/integration-file/diff",
    tag = "versions",
    description = "What changed in the file between two commits of main's history: an RFC 6902 patch keyed by account_id / path, and the unified diff.",
    params(
        ("from" = String, Query, pattern = "^[0-9a-fA-F]{7,40}$", description = "A commit of main's history (its id, or a unique prefix of 7 or more hex digits)"),
        ("to" = Option<String>, Query, pattern = "^[0-9a-fA-F]{7,40}$", description = "A commit of main's history, its id or a unique prefix (default: main)"),
        ("X-Request-Id" = Option<String>, Header, description = "Kept when it is 1-128 of [A-Za-z0-9._:-]"),
    ),
    responses(
        (status = 200, description = "The diff", body = FileDiff),
        (status = 400, description = "invalid_query: from missing, or not a commit id or a prefix of 7 or more hex digits, or one that names several objects", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks the read permission of the file", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy; retry", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub async fn diff_integration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    state.diff(who, req, PlanFile::Integration).await
}

/// `GET /plans/configuration-file/diff`.
#[utoipa::path(
    get,
    path = "/plans/configuration-file/diff",
    tag = "versions",
    description = "What changed in the file between two commits of main's history: an RFC 6902 patch keyed by account_id / path, and the unified diff.",
    params(
        ("from" = String, Query, pattern = "^[0-9a-fA-F]{7,40}$", description = "A commit of main's history (its id, or a unique prefix of 7 or more hex digits)"),
        ("to" = Option<String>, Query, pattern = "^[0-9a-fA-F]{7,40}$", description = "A commit of main's history, its id or a unique prefix (default: main)"),
        ("X-Request-Id" = Option<String>, Header, description = "Kept when it is 1-128 of [A-Za-z0-9._:-]"),
    ),
    responses(
        (status = 200, description = "The diff", body = FileDiff),
        (status = 400, description = "invalid_query: from missing, or not a commit id or a prefix of 7 or more hex digits, or one that names several objects", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks the read permission of the file", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy; retry", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub async fn diff_configuration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    state.diff(who, req, PlanFile::Configuration).await
}

impl AppState {
    /// A diff of `file` between two commits of `main`'s history.
    async fn diff(&self, who: Principal, req: HttpRequest, file: PlanFile) -> Reply {
        self.tenant(&who, file).await?;
        require(who.can_read(file), file.read_permission())?;
        let (from, to) = super::query::diff_query(req.query_string())?;
        let turn = self.render_turn(who.tenant()).await?;
        let (storage, tenant) = (self.storage.clone(), who.tenant().clone());
        let answer = blocking(
            move || {
                let _turn = turn;
                let named = |name| resolve(&storage, &tenant, name, ambiguous_in_query);
                let from = match named(&from)? {
                    Ok(from) => from,
                    Err(e) => return Ok(Err(e)),
                };
                let to = match to.as_ref().map(named).transpose()? {
                    Some(Err(e)) => return Ok(Err(e)),
                    Some(Ok(to)) => Some(to),
                    None => None,
                };
                let diff = storage.diff(&tenant, file, from, to)?;
                let patch = json_patch::diff(
                    &views::stored_content(file, &diff.from.bytes),
                    &views::stored_content(file, &diff.to.bytes),
                );
                Ok(Ok(FileDiff {
                    from: DiffSide {
                        commit_sha: diff.from.commit,
                        file_sha: diff.from.blob,
                    },
                    to: DiffSide {
                        commit_sha: diff.to.commit,
                        file_sha: diff.to.blob,
                    },
                    patch,
                    text: diff.text,
                }))
            },
            file,
        )
        .await??;
        Ok(json(&answer))
    }
}

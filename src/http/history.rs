//! The history endpoints: the commits that changed a file, newest first, a page at a time.
use super::common::{blocking, require, Reply};
use super::problem::{ApiError, Problem};
use super::query::HistoryQuery;
use super::schema::CommonProblems;
use super::schema::{Author, FileStatus, HistoryEntry, HistoryPage};
use super::AppState;
use crate::auth::Principal;
use crate::domain::PlanFile;
use crate::storage::{self, StorageError};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

#[utoipa::path(
    get,
    path = "/plans/integration-file/history",
    tag = "history",
    description = "The commits that changed the integration file, newest first.",
    params(
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 500, description = "Page size; default 50"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of history", body = HistoryPage),
        (status = 400, description = "invalid_query: a bad limit or cursor", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.integrations.read", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub async fn integration(state: web::Data<AppState>, who: Principal, req: HttpRequest) -> Reply {
    history(state, who, req, PlanFile::Integration).await
}

#[utoipa::path(
    get,
    path = "/plans/configuration-file/history",
    tag = "history",
    description = "The commits that changed the configuration file, newest first.",
    params(
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 500, description = "Page size; default 50"),
        ("cursor" = Option<String>, Query, description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of history", body = HistoryPage),
        (status = 400, description = "invalid_query: a bad limit or cursor", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.preferences.read", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub async fn configuration(state: web::Data<AppState>, who: Principal, req: HttpRequest) -> Reply {
    history(state, who, req, PlanFile::Configuration).await
}

async fn history(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    file: PlanFile,
) -> Reply {
    state.tenant(&who, file).await?;
    require(who.can_read(file), file.read_permission())?;
    let query = HistoryQuery::parse(req.query_string())?;
    // A page reads up to its scan budget of commits: one of the tenant's render turns.
    let turn = state.render_turn(who.tenant()).await?;
    let (storage, tenant) = (state.storage.clone(), who.tenant().clone());
    let validators = state.validators.clone();
    let page = blocking(
        move || {
            let _turn = turn;
            let page = match storage.history(&tenant, file, query.limit, query.cursor) {
                // A cursor is only ever one that a page of this history made; else a bad
                // query.
                Err(StorageError::UnknownRef { .. }) => {
                    return Ok(Err(ApiError::InvalidQuery(
                        "cursor is not a cursor of this history".into(),
                    )))
                }
                other => other?,
            };
            // Each version judged once per schema set (remembered by file and blob id); a
            // version that cannot be read fails the page and is not remembered.
            let mut valid = Vec::with_capacity(page.entries.len());
            for e in &page.entries {
                let mut read = Ok(());
                let verdict = validators.passes(file, e.blob, |set| {
                    match storage.history_blob(&tenant, file, e.blob) {
                        Ok(bytes) => Some(crate::plans::rules::passes(file, &bytes, set)),
                        Err(err) => {
                            read = Err(err);
                            None
                        }
                    }
                });
                read?;
                valid.push(verdict.unwrap_or(false));
            }
            Ok(Ok(view(page, valid)))
        },
        file,
    )
    .await??;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(page))
}

fn view(page: storage::HistoryPage, valid: Vec<bool>) -> HistoryPage {
    HistoryPage {
        entries: page
            .entries
            .into_iter()
            .zip(valid)
            .map(|(e, valid)| HistoryEntry {
                proposal: e.proposal(),
                status: if valid {
                    FileStatus::Valid
                } else {
                    FileStatus::Invalid
                },
                commit_sha: e.commit,
                file_sha: e.blob,
                author: Author {
                    name: e.author_name,
                    email: e.author_email,
                },
                date: crate::domain::timestamp::rfc3339(e.time),
                message: e.message,
                forced: e.forced,
                verified: e.verified,
                pushed_by: e.pushed_by.as_ref().map(Author::of),
            })
            .collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }
}

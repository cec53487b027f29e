//! `GET /plans/schemas/{integration,configuration}-file`: the combined JSON Schema each file is checked against, for clients and editors that validate before they send; any token of the tenant.
use super::common::Reply;
use super::problem::{ApiError, Problem};
use super::schema::CommonProblems;
use super::AppState;
use crate::auth::Principal;
use crate::domain::PlanFile;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

/// The media type of a JSON Schema document.
const SCHEMA_JSON: &str = "application/schema+json";

#[utoipa::path(get, path = "/plans/schemas/integration-file", tag = "validation",
    description = "One JSON Schema (draft 2020-12) for the integration file: each integration kind under its key, with the operator's schemas embedded. Any valid token of the tenant.",
    params(("If-None-Match" = Option<String>, Header, description = "The ETag of an earlier answer: 304 while the schema set is the same")),
    responses(
        (status = 200, description = "The combined schema", content_type = "application/schema+json", body = Object, headers(("ETag" = String, description = "The schema set's id and the file, quoted"))),
        (status = 304, description = "The schema set has not changed"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn integration_schema(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    combined(&state, &who, &req, PlanFile::Integration).await
}

#[utoipa::path(get, path = "/plans/schemas/configuration-file", tag = "validation",
    description = "One JSON Schema (draft 2020-12) for the configuration file: the built-in shape of folders and the operator's configuration.json. Any valid token of the tenant.",
    params(("If-None-Match" = Option<String>, Header, description = "The ETag of an earlier answer: 304 while the schema set is the same")),
    responses(
        (status = 200, description = "The combined schema", content_type = "application/schema+json", body = Object, headers(("ETag" = String, description = "The schema set's id and the file, quoted"))),
        (status = 304, description = "The schema set has not changed"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn configuration_schema(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    combined(&state, &who, &req, PlanFile::Configuration).await
}

async fn combined(
    state: &AppState,
    who: &Principal,
    req: &HttpRequest,
    file: PlanFile,
) -> Result<HttpResponse, ApiError> {
    state.tenant(who, file).await?;
    let set = state.validators.current();
    let etag = format!("\"{}-{}\"", set.id(), file.label());
    let seen = req
        .headers()
        .get_all(header::IF_NONE_MATCH)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
        });
    let mut res = if seen {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    res.insert_header((header::ETAG, etag))
        .insert_header((header::CACHE_CONTROL, "no-cache"));
    if seen {
        return Ok(res.finish());
    }
    let body = match file {
        PlanFile::Integration => set.integration_schema(),
        PlanFile::Configuration => set.configuration_schema(),
    };
    Ok(res
        .content_type(SCHEMA_JSON)
        .body(web::Bytes::copy_from_slice(body)))
}

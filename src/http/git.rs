//! git smart HTTP at `/git/<tenant>.git`: clone and fetch for backup jobs and developers (here), and push held to every rule of an API write (`git/receive.rs`).
pub(super) mod receive;

use super::body::read_limited;
use super::common::Reply;
use super::problem::{ApiError, Problem};
use super::schema::CommonProblems;
use super::schema::GitBytes;
use super::AppState;
use crate::auth::{AuthError, Principal};
use crate::domain::{PlanFile, TenantId};
use crate::storage::{UploadPack, UploadPackError};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt;
pub(super) use receive::receive_pack;
use std::io::Read;

/// The permission a token needs to clone or fetch its tenant's repository.
pub const REPOS_READ: &str = "planfiles.repos.read";
/// The largest upload-pack request (wants and haves), before and after gzip.
const REQUEST_LIMIT: usize = 8 * 1024 * 1024;
const ADVERTISEMENT: &str = "application/x-git-upload-pack-advertisement";
const REQUEST: &str = "application/x-git-upload-pack-request";
const RESULT: &str = "application/x-git-upload-pack-result";

/// An error for a git client as text: git shows a `text/plain` error body to its user (as
/// `remote: ...` lines) and nothing of any other type. Other clients get problem+json.
///
/// A token that was sent and refused (expired, badly signed) is 403 for git, not 401: on a
/// 401 git asks for a username and password (a prompt in a terminal, "could not read
/// Username" elsewhere) instead of showing why, and no password would help. The text says
/// how to put a fresh token in the clone.
fn refuse(req: &HttpRequest, err: ApiError) -> Reply {
    let from_git = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|agent| agent.starts_with("git/"));
    if !from_git {
        return Err(err);
    }
    use actix_web::ResponseError;
    let refused_token = matches!(err, ApiError::Unauthorized(AuthError::Invalid(_)));
    let status = if refused_token {
        actix_web::http::StatusCode::FORBIDDEN
    } else {
        err.status_code()
    };
    let mut res = HttpResponse::build(status);
    // Retry-After and the like, as the problem would carry them.
    for (name, value) in err.error_response().headers() {
        if name != header::CONTENT_TYPE && !(refused_token && name == header::WWW_AUTHENTICATE) {
            res.append_header((name.clone(), value.clone()));
        }
    }
    let mut text = format!("planfiles: {err}\n");
    if matches!(err, ApiError::Unauthorized(_)) {
        text.push_str(
            "planfiles: put a fresh token in this clone: git config http.extraHeader \
             \"Authorization: Bearer $(planfiles token --tenant <tenant> --permission \
             planfiles.repos.read ...)\" (docs/API.md, \"Clone over HTTP\")\n",
        );
    }
    Ok(res.content_type("text/plain; charset=utf-8").body(text))
}

/// `GET info/refs?service=git-upload-pack`: the refs, in the smart protocol only.
#[utoipa::path(
    get,
    path = "/git/{repo}/info/refs",
    tag = "git",
    description = "git smart HTTP, first step of a clone or fetch: the repository's refs.",
    params(
        ("repo" = String, Path, description = "<tenant_id>.git: the token's own tenant"),
        ("service" = String, Query, description = "git-upload-pack (clone, fetch) or git-receive-pack (push)"),
        ("Git-Protocol" = Option<String>, Header, description = "version=2 for protocol v2"),
    ),
    responses(
        (status = 200, description = "The ref advertisement", body = GitBytes, content_type = "application/x-git-upload-pack-advertisement"),
        (status = 400, description = "invalid_query: no service=git-upload-pack or git-receive-pack", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "insufficient_scope (planfiles.repos.read to clone, a write permission to push) or wrong_tenant", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not_found: not <tenant_id>.git; tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: no clone turn within server.queue_timeout_secs (8 per process, 4 per tenant); see Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub(super) async fn info_refs(
    state: web::Data<AppState>,
    who: Result<Principal, ApiError>,
    req: HttpRequest,
    repo: web::Path<String>,
) -> Reply {
    let service = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .ok()
        .and_then(|q| {
            q.iter()
                .find(|(k, _)| k == "service")
                .map(|(_, v)| v.clone())
        });
    match service.as_deref() {
        Some("git-upload-pack") => {}
        Some("git-receive-pack") => return receive::advertise(&state, who, &req, &repo).await,
        _ => {
            if let Err(e) = open(&state, who, &req, &repo).await {
                return refuse(&req, e);
            }
            return Err(ApiError::InvalidQuery(
                "only the smart protocol is served: add ?service=git-upload-pack (or git-receive-pack)".into(),
            ));
        }
    }
    let (_, pack) = match open(&state, who, &req, &repo).await {
        Ok(opened) => opened,
        Err(e) => return refuse(&req, e),
    };
    let refs = match pack.advertise().await {
        Ok(refs) => refs,
        Err(e) => return upload_pack_error(&req, e),
    };
    let mut body = Vec::with_capacity(refs.len() + 64);
    // Protocol v2 starts with its capability list; v0 and v1 want the service line first.
    if !pack.is_v2() {
        body.extend_from_slice(&pkt_line("# service=git-upload-pack\n"));
        body.extend_from_slice(b"0000");
    }
    body.extend_from_slice(&refs);
    Ok(git_answer(ADVERTISEMENT).body(body))
}

/// `POST git-upload-pack`: one round of negotiation, answered with the pack as it is made.
#[utoipa::path(
    post,
    path = "/git/{repo}/git-upload-pack",
    tag = "git",
    description = "git smart HTTP: one round of negotiation (wants and haves), answered with a pack.",
    params(
        ("repo" = String, Path, description = "<tenant_id>.git: the token's own tenant"),
        ("Git-Protocol" = Option<String>, Header, description = "version=2 for protocol v2"),
    ),
    request_body(content = GitBytes, content_type = "application/x-git-upload-pack-request"),
    responses(
        (status = 200, description = "git upload-pack's answer. A want that is neither a ref tip nor reachable from one (protocol v0 or v2) is answered with the packet `ERR upload-pack: not our ref <id>`. The pack stops, and the response ends in an error, when the client accepts no bytes for server.clone_stall_secs", body = GitBytes, content_type = "application/x-git-upload-pack-result"),
        (status = 400, description = "invalid_body: a gzip body that cannot be read, or not a sequence of pkt-lines", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "insufficient_scope (planfiles.repos.read) or wrong_tenant", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not_found: not <tenant_id>.git; tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "body_timeout", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: over 8 MiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type: not application/x-git-upload-pack-request", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: no clone turn within server.queue_timeout_secs (8 per process, 4 per tenant); see Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub(super) async fn upload_pack(
    state: web::Data<AppState>,
    who: Result<Principal, ApiError>,
    req: HttpRequest,
    repo: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let (who, pack) = match open(&state, who, &req, &repo).await {
        Ok(opened) => opened,
        Err(e) => return refuse(&req, e),
    };
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type != Some(REQUEST) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let gzipped = match req
        .headers()
        .get(header::CONTENT_ENCODING)
        .map(|v| v.as_bytes())
    {
        None => false,
        Some(b"gzip") | Some(b"x-gzip") => true,
        Some(_) => return Err(ApiError::UnsupportedMediaType),
    };
    let admitted = state.admit(&req, who.tenant(), REQUEST_LIMIT).await?;
    let body = read_limited(&req, payload, REQUEST_LIMIT, state.body_pace).await?;
    // The body is read: waiting for a clone turn must not hold the body budget.
    drop(admitted);
    let body = if gzipped {
        // Inflating up to 8 MiB is CPU work: on the blocking pool, not an async worker.
        web::block(move || gunzip(&body, REQUEST_LIMIT))
            .await
            .map_err(|e| ApiError::Internal(format!("the gzip task failed: {e}")))??
    } else {
        body.to_vec()
    };
    let stream = match pack.respond(body).await {
        Ok(stream) => stream,
        Err(e) => return upload_pack_error(&req, e),
    };
    Ok(git_answer(RESULT).streaming(stream.map(|chunk| chunk.map(web::Bytes::from))))
}

/// The checks every git route makes before it looks at the request itself, in the contract's
/// order: the route (404 `not_found`: not `<tenant_id>.git`), the token (401), the token's
/// tenant (403 `wrong_tenant`), the tenant's repository (404 `tenant_not_found`), the
/// permission (403 `insufficient_scope`).
async fn open(
    state: &AppState,
    who: Result<Principal, ApiError>,
    req: &HttpRequest,
    repo: &str,
) -> Result<(Principal, UploadPack), ApiError> {
    let who = route_and_token(who, req, repo)?;
    let tenant = who.tenant().clone();
    let protocol = req
        .headers()
        .get("git-protocol")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let storage = state.storage.clone();
    let pack = super::common::blocking(
        move || storage.upload_pack(&tenant, protocol.as_deref()),
        PlanFile::Integration,
    )
    .await?;
    // A shard importing the tenant (a move) clones it with its import token.
    if !who.has(REPOS_READ) && !who.has(super::admin::REPOS_IMPORT) {
        return Err(ApiError::Forbidden(REPOS_READ));
    }
    Ok((who, pack))
}

/// The route (404 `not_found`: not `<tenant_id>.git`), the token (401) and its tenant (403
/// `wrong_tenant`).
fn route_and_token(
    who: Result<Principal, ApiError>,
    req: &HttpRequest,
    repo: &str,
) -> Result<Principal, ApiError> {
    let tenant = repo
        .strip_suffix(".git")
        .and_then(|t| TenantId::parse(t).ok())
        .ok_or_else(|| ApiError::NotFound(req.path().to_owned()))?;
    let who = who?;
    if &tenant != who.tenant() {
        return Err(ApiError::WrongTenant);
    }
    Ok(who)
}

/// [`route_and_token`], then the tenant's repository (404 `tenant_not_found`, 421 moved).
async fn open_tenant(
    state: &AppState,
    who: Result<Principal, ApiError>,
    req: &HttpRequest,
    repo: &str,
) -> Result<Principal, ApiError> {
    let who = route_and_token(who, req, repo)?;
    state.tenant(&who, PlanFile::Integration).await?;
    Ok(who)
}

/// Busy is 503 with `Retry-After` (text for a git client); a want that is not served is git's
/// own answer to it, an `ERR upload-pack: not our ref <id>` packet, which git shows as
/// `remote error: ...`.
fn upload_pack_error(req: &HttpRequest, e: UploadPackError) -> Reply {
    match e {
        UploadPackError::Busy { waited, .. } => refuse(
            req,
            ApiError::busy(
                format!("no clone turn within {}s", waited.as_secs()),
                waited.as_secs(),
            ),
        ),
        UploadPackError::NotOurRef { tenant, oid } => {
            tracing::info!(%tenant, want = %oid, "refused an upload-pack want that is not reachable from a ref");
            Ok(git_answer(RESULT).body(pkt_line(format!("ERR upload-pack: not our ref {oid}\n"))))
        }
        UploadPackError::Malformed { source, .. } => Err(ApiError::InvalidBody(source.to_string())),
        UploadPackError::Storage(e) => Err(ApiError::from_storage(e, PlanFile::Integration)),
    }
}

/// A gzip body inflated, at most `limit` bytes of it (413 past that).
fn gunzip(body: &[u8], limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    let mut decoder = flate2::read::GzDecoder::new(body).take(limit as u64 + 1);
    decoder
        .read_to_end(&mut out)
        .map_err(|e| ApiError::InvalidBody(format!("the gzip body cannot be read: {e}")))?;
    if out.len() > limit {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    Ok(out)
}

/// `data` as one pkt-line: its length (with the four digits) in hex, then the bytes.
fn pkt_line(data: impl AsRef<[u8]>) -> Vec<u8> {
    let data = data.as_ref();
    let mut out = format!("{:04x}", data.len() + 4).into_bytes();
    out.extend_from_slice(data);
    out
}

/// A 200 of a git smart HTTP route: its media type, and never cached.
fn git_answer(media: &'static str) -> actix_web::HttpResponseBuilder {
    let mut res = HttpResponse::Ok();
    res.content_type(media).insert_header((
        header::CACHE_CONTROL,
        "no-cache, max-age=0, must-revalidate",
    ));
    res
}

#[cfg(test)]
mod tests {
    use super::pkt_line;

    #[test]
    fn pkt_lines_carry_their_length_in_four_hex_digits() {
        assert_eq!(
            pkt_line("# service=git-upload-pack\n"),
            b"001e# service=git-upload-pack\n"
        );
    }
}

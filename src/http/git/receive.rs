//! `git push` over smart HTTP: the receive-pack advertisement, the request's pkt-lines (commands, capabilities, the pack), and `report-status` (side-band messages name each reason); the push itself is `plans::push`.
use super::{git_answer, open_tenant, pkt_line, refuse};
use crate::auth::Principal;
use crate::domain::{PlanFile, TenantId};
use crate::http::body::read_limited;
use crate::http::common::{blocking, cpu, Reply};
use crate::http::problem::{ApiError, Problem};
use crate::http::schema::{CommonProblems, GitBytes};
use crate::http::AppState;
use crate::plans::push::{self, Pusher, MAIN};
use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest};
use wire::{answer, parse, Report};

mod wire;

const ADVERTISEMENT: &str = "application/x-git-receive-pack-advertisement";
const REQUEST: &str = "application/x-git-receive-pack-request";
const RESULT: &str = "application/x-git-receive-pack-result";
const CAPABILITIES: &str = "report-status side-band-64k quiet atomic delete-refs ofs-delta object-format=sha1 agent=planfiles";

/// `GET info/refs?service=git-receive-pack`: `main` and the capabilities, for a token that
/// may write at least one file.
pub(super) async fn advertise(
    state: &AppState,
    who: Result<Principal, ApiError>,
    req: &HttpRequest,
    repo: &str,
) -> Reply {
    let tenant = match authorize(state, who, req, repo).await {
        Ok((_, tenant)) => tenant,
        Err(e) => return refuse(req, e),
    };
    let storage = state.storage.clone();
    let head = blocking(move || storage.head_state(&tenant), PlanFile::Integration).await;
    let head = match head {
        Ok(head) => head,
        Err(e) => return refuse(req, e),
    };
    let mut body = pkt_line("# service=git-receive-pack\n");
    body.extend_from_slice(b"0000");
    body.extend_from_slice(&pkt_line(
        format!("{} {MAIN}\0{CAPABILITIES}\n", head.commit).as_bytes(),
    ));
    body.extend_from_slice(b"0000");
    Ok(git_answer(ADVERTISEMENT).body(body))
}

/// `POST git-receive-pack`: the push, all or nothing.
#[utoipa::path(
    post,
    path = "/git/{repo}/git-receive-pack",
    tag = "git",
    description = "git push: a fast-forward of refs/heads/main, every pushed commit checked as an API write of the files it changes (two regular files, each valid for its kind and the validators, the token's write permission per file), main moved as API writes move it. Refusals are git's report-status `ng` with the reason (the file, the commit, a JSON pointer), which git push prints.",
    params(("repo" = String, Path, description = "<tenant_id>.git: the token's own tenant")),
    request_body(content = GitBytes, content_type = "application/x-git-receive-pack-request"),
    responses(
        (status = 200, description = "report-status (in side-band 1 when asked): `ok refs/heads/main`, or `ng <ref> <reason>` for a refused push, which changed nothing", body = GitBytes, content_type = "application/x-git-receive-pack-result"),
        (status = 400, description = "invalid_body: not a sequence of pkt-lines and a pack", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "insufficient_scope (a write permission of either file) or wrong_tenant", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not_found: not <tenant_id>.git; tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: over git.push_max_bytes", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type: not application/x-git-receive-pack-request", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy (another push of the tenant, 1 per tenant and 4 in all) or tenant_moving; see Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub(in crate::http) async fn receive_pack(
    state: web::Data<AppState>,
    who: Result<Principal, ApiError>,
    req: HttpRequest,
    repo: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let (who, tenant) = match authorize(&state, who, &req, &repo).await {
        Ok(found) => found,
        Err(e) => return refuse(&req, e),
    };
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type != Some(REQUEST) {
        return Err(ApiError::UnsupportedMediaType);
    }
    // One push of a tenant at a time (4 in all), waited for at most queue_timeout.
    let Some(turn) = state.pushes.take(&tenant).await else {
        return refuse(
            &req,
            ApiError::busy(
                "another push of this tenant is running",
                state.pushes.wait().as_secs(),
            ),
        );
    };
    let limit = state.push_max_bytes;
    let admitted = match state.admit(&req, &tenant, limit).await {
        Ok(admitted) => admitted,
        Err(e) => return refuse(&req, e),
    };
    let body = match read_limited(&req, payload, limit, state.body_pace).await {
        Ok(body) => body,
        Err(e) => return refuse(&req, e),
    };
    // The body is read: what the push holds from here on is bounded by the push turns (4),
    // not the body budget, which API writes share.
    drop(admitted);
    let gzipped = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() == b"gzip");
    let request_id = super::super::common::request_id(&req);
    let pusher = Pusher {
        sub: who.sub().map(str::to_owned),
        granted: PlanFile::ALL.map(|f| who.can_write(f)),
        file_limit: state.body_limit,
        not_after: who.valid_until(),
        who: who.author(),
        request_id,
    };
    // git probes a large push with a request of one flush-pkt first (to learn whether it
    // may send it): answered with nothing, as git's own server does.
    if body.as_ref() == b"0000" {
        return Ok(git_answer(RESULT).finish());
    }
    let body = body.freeze();
    // A gzipped body is inflated first, whatever its size: off the worker.
    let size = if gzipped { usize::MAX } else { body.len() };
    let parsed = cpu(size, move || {
        let body = if gzipped {
            Bytes::from(super::gunzip(&body, limit)?)
        } else {
            body
        };
        let request = parse(&body).map_err(ApiError::InvalidBody)?;
        let pack = body.slice(request.pack_at..);
        Ok((request, pack))
    })
    .await;
    let (request, pack) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return refuse(&req, e),
    };
    let schemas = state.validators.current();
    let outcome = push::push(
        &state.storage,
        &state.writers,
        &tenant,
        &request.commands,
        pack,
        pusher,
        schemas,
    )
    .await;
    drop(turn);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => return refuse(&req, ApiError::from_write(e, PlanFile::Integration)),
    };
    let report = Report::of(&request.commands, outcome);
    let (side_band, report_status) = (request.side_band, request.report_status);
    for (name, reason) in &report.refs {
        match reason {
            None => tracing::info!(tenant = %who.tenant(), reference = %name, "push accepted"),
            Some(why) => {
                tracing::info!(tenant = %who.tenant(), reference = %name, reason = %why, "push refused")
            }
        }
    }
    Ok(git_answer(RESULT).body(answer(&report, side_band, report_status)))
}

/// The route, the token, its tenant and the tenant's repository (as for a clone), then a
/// write permission of either file.
async fn authorize(
    state: &AppState,
    who: Result<Principal, ApiError>,
    req: &HttpRequest,
    repo: &str,
) -> Result<(Principal, TenantId), ApiError> {
    let who = open_tenant(state, who, req, repo).await?;
    if !PlanFile::ALL.iter().any(|f| who.can_write(*f)) {
        return Err(ApiError::Forbidden(
            PlanFile::Integration.write_permission(),
        ));
    }
    let tenant = who.tenant().clone();
    Ok((who, tenant))
}

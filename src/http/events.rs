//! The change stream: `GET /plans/events` (Server-Sent Events) and `POST /plans/events/tickets`.
use super::common::{blocking, Reply};
use super::problem::{ApiError, Problem};
use super::schema::CommonProblems;
use super::schema::Ticket;
use super::sse::{self, Resume};
use super::AppState;
use crate::auth::{AuthError, Principal};
use crate::domain::PlanFile;
use crate::events::{Full, Grant, Kind, TICKET_TTL};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

#[utoipa::path(
    get,
    path = "/plans/events",
    tag = "events",
    description = "Server-Sent Events for the token's tenant: first `event: head` (data HeadEvent), then per commit on main's first-parent line and per changed file the token may read `event: integration-file` or `configuration-file` (data FileEvent, `id:` the commit), `event: reset` (data HeadEvent) when the resume point is no longer on main's line, and `: keep-alive` comments. Each step of a proposal the token may see (it reads every file the proposal changes, or may approve) is `event: proposal.opened|updated|approved|applied|closed` (data ProposalEvent, `id:` the step's commit on refs/proposals/records), after the events of the commit main was at when it was taken. With Last-Event-ID or since (a commit of main, or a step's id), what came after it is replayed first (then `event: head`).",
    params(
        ("Last-Event-ID" = Option<String>, Header, description = "A commit id from this stream: resume after it (sent by EventSource on reconnect; wins over since)"),
        ("since" = Option<String>, Query, pattern = "^[0-9a-fA-F]{40}$", description = "A commit id: resume after it"),
        ("ticket" = Option<String>, Query, description = "A ticket from POST /plans/events/tickets, instead of the Authorization header"),
    ),
    responses(
        (status = 200, description = "The event stream (text/event-stream; data lines are HeadEvent, FileEvent or ProposalEvent JSON)", content_type = "text/event-stream", body = String),
        (status = 400, description = "invalid_query: since or Last-Event-ID is not a 40-hex commit id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, a refused token, or a used, expired or unknown ticket", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token may read neither file", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Server fault", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: the stream limits are reached, or too many of the tenant's streams are catching up at once; Retry-After", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn stream(state: web::Data<AppState>, req: HttpRequest) -> Reply {
    let query = sse::EventsQuery::parse(req.query_string());
    let grant = match query.as_ref().ok().and_then(|q| q.ticket.as_deref()) {
        Some(ticket) => state.events.tickets().redeem(ticket).ok_or_else(|| {
            ApiError::Unauthorized(AuthError::Invalid(
                "the ticket is used, expired or unknown".into(),
            ))
        })?,
        None => grant_of(&bearer(&state, &req)?),
    };
    exists(&state, &grant).await?;
    readable(&grant)?;
    let resume = Resume::from_request(&req, query?)?;
    let slot = state
        .events
        .admit(&grant.tenant, Kind::Stream)
        .map_err(busy)?;
    let subscription = state
        .events
        .subscribe(&grant.tenant)
        .await
        .map_err(|e| ApiError::from_storage(e, PlanFile::Integration))?;
    // A resume walks the tenant's history: under one of its replay turns, or 503 `busy`
    // before the stream starts. Read after subscribing, so no commit falls in between.
    let start = match resume {
        Resume::Head => sse::Start::Head,
        Resume::After(commit) => {
            let turn = state
                .events
                .replay_turn(&grant.tenant)
                .await
                .ok_or_else(|| {
                    ApiError::busy(
                        "too many event streams of this tenant are catching up at once",
                        5,
                    )
                })?;
            let (storage, tenant) = (state.storage.clone(), grant.tenant.clone());
            let (head, plan, records) = blocking(
                move || {
                    let _turn = turn;
                    let head = storage.head_state(&tenant)?;
                    // A step's id resumes after that step (and the commit of `main` it
                    // names); a commit of `main` after it, and the steps that came before it.
                    let (from, records) = match storage.step_place(&tenant, commit)? {
                        Some(main) => (main.unwrap_or(head.commit), Some(commit)),
                        None => (commit, storage.steps_sent_before(&tenant, commit)?),
                    };
                    let plan = storage.replay_plan(&tenant, from, head.commit, sse::REPLAY_STEP)?;
                    Ok((head, plan, records))
                },
                PlanFile::Integration,
            )
            .await?;
            sse::Start::After {
                head: Box::new(head),
                plan,
                records,
            }
        }
    };
    let body = sse::start(state.events.clone(), grant, start, subscription, slot);
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        // Proxies that buffer (nginx) would hold the events back.
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}

#[utoipa::path(
    post,
    path = "/plans/events/tickets",
    tag = "events",
    description = "A single-use ticket, valid 30 s, for GET /plans/events?ticket= (for browsers' EventSource, which cannot send Authorization). It carries the token's tenant and read permissions.",
    responses(
        (status = 200, description = "The ticket", body = Ticket),
        (status = 403, description = "The token may read neither file", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: too many tickets outstanding; Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub async fn ticket(state: web::Data<AppState>, who: Principal) -> Reply {
    let grant = grant_of(&who);
    exists(&state, &grant).await?;
    readable(&grant)?;
    let ticket = state
        .events
        .tickets()
        .issue(grant)
        .ok_or_else(|| ApiError::busy("too many event tickets are outstanding", 5))?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(Ticket {
            ticket,
            expires_in: TICKET_TTL.as_secs(),
        }))
}

fn bearer(state: &AppState, req: &HttpRequest) -> Result<Principal, ApiError> {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    state
        .verifier
        .verify_header(header)
        .map_err(ApiError::Unauthorized)
}

fn grant_of(who: &Principal) -> Grant {
    Grant {
        tenant: who.tenant().clone(),
        integration: who.can_read(PlanFile::Integration),
        configuration: who.can_read(PlanFile::Configuration),
        approves: who.has(super::proposals::PROPOSALS_APPROVE),
        valid_until: who.valid_until(),
    }
}

async fn exists(state: &AppState, grant: &Grant) -> Result<(), ApiError> {
    let (storage, tenant) = (state.storage.clone(), grant.tenant.clone());
    blocking(move || storage.tenant(&tenant), PlanFile::Integration).await?;
    Ok(())
}

fn readable(grant: &Grant) -> Result<(), ApiError> {
    if grant.integration || grant.configuration {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "jit.integrations.read jit.preferences.read",
        ))
    }
}

pub(super) fn busy(full: Full) -> ApiError {
    ApiError::busy(full.to_string(), 5)
}

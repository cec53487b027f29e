//! `/plans/proposals`: open, list, read (with diffs), update, approve, apply and close a tenant's proposals; every rule is `plans::proposals` and the domain's, each step runs in the tenant's writer turn.
mod view;

pub use view::{ApprovalView, Person, ProposalList, ProposalView, ProposedFileView};

use super::body::{is_json, read_limited};
use super::common::{blocking, json, request_id, require, Reply};
use super::problem::{ApiError, Problem};
use super::query::{pairs, single};
use super::schema::{CommonProblems, PostCommits, WriteProblems};
use super::AppState;
use crate::auth::Principal;
use crate::domain::{PlanFile, Proposal, ProposalNumber, ProposalState};
use crate::plans::proposals as rules;
use crate::storage::{ProposalStep, TenantInfo};
use actix_web::{web, HttpRequest, HttpResponse};

/// The permission an approval needs (and that lets its holder read a proposal's diffs).
pub const PROPOSALS_APPROVE: &str = "planfiles.proposals.approve";
/// A step's body: at most a commit id.
const STEP_BODY_LIMIT: usize = 4 * 1024;
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

#[utoipa::path(post, path = "/plans/proposals", tag = "proposals", operation_id = "open_proposal",
    description = "Propose a change of one or both files, for another person to approve before it applies. The parts are those of POST /plans/commits, each under its PUT's rules and permission (and validators); `title` (one line, 1-200 characters) is required, `message` (a description, lines kept) optional. The proposal is a signed commit on main's head under refs/proposals/<number>.",
    request_body(content = PostCommits, content_type = "application/json", description = "As POST /plans/commits, plus `title` (required) and `message` (the description)"),
    responses(
        (status = 201, description = "Opened; Location names it", body = ProposalView),
        (status = 403, description = "insufficient_scope (a file's write permission), or sub_required: the token has no sub", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "precondition_required: the configuration file's part has no file_sha", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = [])))]
pub async fn create(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    let (p, tenant) = state.propose(&who, &req, payload, None).await?;
    let required = tenant.required_approvals;
    Ok(HttpResponse::Created()
        .insert_header(("Location", format!("/plans/proposals/{}", p.number)))
        .insert_header(("Cache-Control", "no-store"))
        .json(ProposalView::new(&p, required)))
}

#[utoipa::path(put, path = "/plans/proposals/{number}", tag = "proposals", operation_id = "update_proposal",
    description = "Its author replaces an open proposal: the body of POST /plans/proposals, checked against main now; the new commit is on main's head and every approval is void.",
    params(("number" = u64, Path, description = "The proposal's number")),
    request_body(content = PostCommits, content_type = "application/json"),
    responses(
        (status = 200, description = "Updated", body = ProposalView),
        (status = 403, description = "insufficient_scope, sub_required, not_proposal_author", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "proposal_not_found or tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "precondition_required", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = [])))]
pub async fn update(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    number: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let n = number_of(&number)?;
    let (p, tenant) = state.propose(&who, &req, payload, Some(n)).await?;
    Ok(json(&ProposalView::new(&p, tenant.required_approvals)))
}

#[utoipa::path(get, path = "/plans/proposals", tag = "proposals", operation_id = "list_proposals",
    description = "The tenant's proposals, newest first, without their diffs: those whose every file the token may read (all of them with planfiles.proposals.approve).",
    params(
        ("state" = Option<String>, Query, description = "open, applied or closed (default: all)"),
        ("before" = Option<u64>, Query, description = "Only numbers below this one (the `next` of the page before)"),
        ("limit" = Option<usize>, Query, description = "1-1000, default 100"),
    ),
    responses(
        (status = 200, description = "A page of proposals", body = ProposalList),
        (status = 400, description = "invalid_query", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "insufficient_scope", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: the tenant's reads did not get a turn in time (Retry-After)", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn list(state: web::Data<AppState>, who: Principal, req: HttpRequest) -> Reply {
    let tenant = state.proposals_reader(&who).await?;
    let q = pairs(req.query_string())?;
    let wanted = single(&q, "state")?
        .map(|s| {
            ProposalState::parse(s).ok_or_else(|| {
                ApiError::InvalidQuery("state must be open, applied or closed".into())
            })
        })
        .transpose()?;
    let before = single(&q, "before")?
        .map(|b| ProposalNumber::parse(b).map_err(ApiError::InvalidQuery))
        .transpose()?;
    let limit = match single(&q, "limit")? {
        None => DEFAULT_PAGE,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| ApiError::InvalidQuery(format!("limit must be 1 to {MAX_PAGE}")))?,
    };
    // A list may read every record of the tenant (its first in a process): one of the
    // tenant's render turns, as a stored file's read takes.
    let turn = state.render_turn(who.tenant()).await?;
    let (storage, id, reader) = (state.storage.clone(), who.tenant().clone(), who.clone());
    let found = blocking(
        move || {
            let _turn = turn;
            let visible = |p: &Proposal| may_read(&reader, p);
            storage.proposals(&id, wanted, before, limit + 1, &visible)
        },
        PlanFile::Integration,
    )
    .await?;
    let more = found.len() > limit;
    let proposals: Vec<ProposalView> = found
        .iter()
        .take(limit)
        .map(|p| ProposalView::new(p, tenant.required_approvals))
        .collect();
    let next = more.then(|| proposals.last().map(|p| p.number)).flatten();
    Ok(json(&ProposalList { proposals, next }))
}

#[utoipa::path(get, path = "/plans/proposals/{number}", tag = "proposals", operation_id = "get_proposal",
    description = "One proposal with each file it changes: the diff (RFC 6902 patch and unified text) from its base and from main now, and whether a file moved on main since its base (`stale`). It needs the read permission of every file it changes, or planfiles.proposals.approve.",
    params(("number" = u64, Path, description = "The proposal's number")),
    responses(
        (status = 200, description = "The proposal", body = ProposalView),
        (status = 403, description = "insufficient_scope", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "proposal_not_found or tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: the tenant's reads did not get a turn in time (Retry-After)", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn get(state: web::Data<AppState>, who: Principal, number: web::Path<String>) -> Reply {
    let n = number_of(&number)?;
    let tenant = state.proposals_reader(&who).await?;
    let turn = state.render_turn(who.tenant()).await?;
    let (storage, id, reader) = (state.storage.clone(), who.tenant().clone(), who.clone());
    let view = blocking(
        move || {
            let _turn = turn;
            let p = storage.proposal(&id, n)?;
            if !may_read(&reader, &p) {
                return Ok(Err(unreadable(&p)));
            }
            let files = storage.proposed_files(&id, &p)?;
            Ok(Ok(
                ProposalView::new(&p, tenant.required_approvals).with_files(&files)
            ))
        },
        PlanFile::Integration,
    )
    .await??;
    Ok(json(&view))
}

#[utoipa::path(post, path = "/plans/proposals/{number}/approve", tag = "proposals", operation_id = "approve_proposal",
    description = "Approve the proposal's commit: needs planfiles.proposals.approve and a sub that is neither the author's nor an earlier approver's. The body `{\"commit\"}` (required) names the commit the approver reviewed: if the proposal moved on since, 409 proposal_changed.",
    params(("number" = u64, Path, description = "The proposal's number")),
    responses(
        (status = 200, description = "Approved (durable)", body = ProposalView),
        (status = 403, description = "insufficient_scope, sub_required, own_proposal", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "proposal_not_found", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = [])))]
pub async fn approve(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    number: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let n = number_of(&number)?;
    let tenant = state.tenant(&who, PlanFile::Integration).await?;
    require(who.has(PROPOSALS_APPROVE), PROPOSALS_APPROVE)?;
    let by = rules::reviewer(who.sub(), &who.author())?;
    let bytes = state.step_body(&req, payload).await?;
    let seen = rules::approve_body(&bytes)?;
    state
        .step(&who, &tenant, n, ProposalStep::Approve { by, seen })
        .await
}

#[utoipa::path(post, path = "/plans/proposals/{number}/apply", tag = "proposals", operation_id = "apply_proposal",
    description = "The author or an approver applies an open proposal with the approvals the tenant requires: one signed commit on main with the proposal's files and the trailers Proposal, Proposed-by and Approved-by. Its files are held to today's validators first (422 schema_violation). 409 proposal_stale when a file it changes moved on main since its base (a file it does not change may have).",
    params(("number" = u64, Path, description = "The proposal's number")),
    responses(
        (status = 200, description = "Applied (durable): applied_commit is on main", body = ProposalView),
        (status = 403, description = "insufficient_scope, sub_required, not_proposal_participant", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "proposal_not_found", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = [])))]
pub async fn apply(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    number: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let n = number_of(&number)?;
    let tenant = state.tenant(&who, PlanFile::Integration).await?;
    let allowed = who.has(PROPOSALS_APPROVE) || PlanFile::ALL.iter().any(|f| who.can_write(*f));
    require(allowed, PROPOSALS_APPROVE)?;
    let by = rules::reviewer(who.sub(), &who.author())?.sub;
    state.step_body(&req, payload).await?;
    let request_id = request_id(&req);
    // Its files against today's validators first, on the blocking pool; the apply is bound to
    // the commit checked.
    let (storage, id, schemas) = (
        state.storage.clone(),
        who.tenant().clone(),
        state.validators.current(),
    );
    let turn = state.render_turn(who.tenant()).await?;
    let checked = blocking(
        move || {
            let _turn = turn;
            let (p, files) = storage.proposal_texts(&id, n)?;
            Ok(rules::recheck(p.commit, &files, &schemas))
        },
        PlanFile::Integration,
    )
    .await?
    .map_err(|e| state.counted(e.into()))?;
    let step = ProposalStep::Apply {
        by,
        request_id,
        checked,
    };
    state.step(&who, &tenant, n, step).await
}

#[utoipa::path(post, path = "/plans/proposals/{number}/close", tag = "proposals", operation_id = "close_proposal",
    description = "Its author closes an open proposal without applying it.",
    params(("number" = u64, Path, description = "The proposal's number")),
    responses(
        (status = 200, description = "Closed (durable)", body = ProposalView),
        (status = 403, description = "sub_required, not_proposal_author", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "proposal_not_found", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = [])))]
pub async fn close(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    number: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let n = number_of(&number)?;
    let tenant = state.tenant(&who, PlanFile::Integration).await?;
    let by = rules::reviewer(who.sub(), &who.author())?.sub;
    state.step_body(&req, payload).await?;
    state
        .step(&who, &tenant, n, ProposalStep::Close { by })
        .await
}

/// Whether `who` may see proposal `p`: it reads every file `p` changes, or approves.
fn may_read(who: &Principal, p: &Proposal) -> bool {
    p.visible_to(|f| who.can_read(f), who.has(PROPOSALS_APPROVE))
}

/// The refusal of a proposal `who` may not read: the read permission of its first file.
fn unreadable(p: &Proposal) -> ApiError {
    ApiError::Forbidden(
        p.files
            .first()
            .map_or(PROPOSALS_APPROVE, |f| f.read_permission()),
    )
}

fn number_of(raw: &str) -> Result<ProposalNumber, ApiError> {
    ProposalNumber::parse(raw).map_err(|_| ApiError::NotFound(format!("/plans/proposals/{raw}")))
}

impl AppState {
    /// Opens a proposal, or updates proposal `n`: the write's intake (403 per file, the
    /// body), the person (a `sub`), the plan, then the step in the tenant's turn; the
    /// proposal and the tenant's settings as the intake read them.
    async fn propose(
        &self,
        who: &Principal,
        req: &HttpRequest,
        payload: web::Payload,
        n: Option<ProposalNumber>,
    ) -> Result<(Proposal, TenantInfo), ApiError> {
        let any = if who.can_write(PlanFile::Integration) {
            PlanFile::Integration
        } else {
            PlanFile::Configuration
        };
        let intake = self.intake(who, req, payload, any).await?;
        let author = rules::reviewer(who.sub(), &who.author())?;
        let (source_hosting, tenant) = (intake.tenant.source_hosting, intake.tenant.clone());
        let granted = PlanFile::ALL.map(|f| who.can_write(f));
        let schemas = self.validators.current();
        let (plan, meta) = intake
            .parse(move |bytes| rules::open_body(bytes, source_hosting, granted, &schemas))
            .await
            .map_err(|e| self.counted(e))?;
        if meta.dry_run || meta.record.is_some() {
            return Err(ApiError::InvalidQuery(
                "a proposal takes neither dry_run nor Idempotency-Key: it changes nothing until it is applied".into(),
            ));
        }
        let request = plan.request(n, author, request_id(req), who.valid_until());
        let p = rules::propose(&self.writers, who.tenant(), request)
            .await
            .map_err(|e| ApiError::from_write(e, any))?;
        Ok((p, tenant))
    }

    /// Takes `step` on proposal `n` in the tenant's turn; the proposal after it.
    async fn step(
        &self,
        who: &Principal,
        tenant: &TenantInfo,
        n: ProposalNumber,
        step: ProposalStep,
    ) -> Reply {
        let word = step.word();
        let p = rules::step(&self.writers, who.tenant(), n, step, who.valid_until())
            .await
            .map_err(|e| ApiError::from_write(e, PlanFile::Integration))?;
        tracing::info!(tenant = %who.tenant(), proposal = %n, step = word, "proposal step");
        Ok(json(&ProposalView::new(&p, tenant.required_approvals)))
    }

    /// A step's body: empty, or a small JSON object.
    async fn step_body(
        &self,
        req: &HttpRequest,
        payload: web::Payload,
    ) -> Result<web::BytesMut, ApiError> {
        let bytes = read_limited(req, payload, STEP_BODY_LIMIT, self.body_pace).await?;
        if !bytes.iter().all(u8::is_ascii_whitespace) && !is_json(req) {
            return Err(ApiError::UnsupportedMediaType);
        }
        Ok(bytes)
    }

    /// The tenant, for a reader of its proposals: a token that may read a file or approve.
    async fn proposals_reader(&self, who: &Principal) -> Result<TenantInfo, ApiError> {
        let tenant = self.tenant(who, PlanFile::Integration).await?;
        let reads = PlanFile::ALL.iter().any(|f| who.can_read(*f));
        require(
            reads || who.has(PROPOSALS_APPROVE),
            PlanFile::Integration.read_permission(),
        )?;
        Ok(tenant)
    }
}

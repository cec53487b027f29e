//! `POST /admin/tenants/{tenant}/import`: this shard fetches a tenant from a peer shard (step 2 of `planfiles tenant move`, called by the source); `GET /admin/tenants/{tenant}/placement`: where the tenant is here (an importer checks that its source refuses writes).
use super::body::read_limited;
use super::common::{blocking, json, Reply};
use super::problem::{ApiError, Problem};
use super::schema::CommonProblems;
use super::AppState;
use crate::auth::Principal;
use crate::domain::{CommitId, ObjectId, PlanFile, ShardUrl, TenantId};
use crate::storage::{ImportPlan, ImportSource};
use actix_web::http::header;
use actix_web::{web, HttpRequest};
use serde::{Deserialize, Serialize};

/// The permission a token needs to import its tenant here, and to clone it from the source
/// for that import.
pub const REPOS_IMPORT: &str = "planfiles.repos.import";
/// An import request is a URL, a commit id and a flag.
/// An import's body: a few fields, and the tenant's subscriptions (each at most about 6 KiB:
/// a 2 KiB URL and a 500-character description, escaped; and its latest attempts).
fn body_limit(state: &AppState) -> usize {
    let per_subscription = 8 * 1024 + crate::storage::MOVED_ATTEMPTS * 1024;
    64 * 1024 + per_subscription * state.webhooks.as_ref().map_or(0, |w| w.max_per_tenant())
}

/// What to import.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// The source shard's base URL; one of this shard's `cluster.peers`.
    pub from: String,
    /// The head the source handed over: the import fails unless the source's `main` is there.
    #[schema(pattern = "^[0-9a-f]{40}$")]
    pub head: Option<String>,
    /// The tenant's source-hosting flag at the source.
    #[serde(default)]
    pub source_hosting: bool,
    /// The approvals the tenant's proposals need at the source (0: none).
    #[serde(default)]
    pub required_approvals: u32,
    /// The tenant's webhook subscriptions and their cursors, as the source holds them once
    /// it refuses the tenant's writes (secrets included: only between shards).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub webhooks: Option<crate::storage::WebhookBundle>,
}

/// An import's result, or with `?dry_run=true` what it would do.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ImportAnswer {
    pub tenant: String,
    /// What the tenant was here: `fresh` (no repository), `comes_back` (it moved away from
    /// here before) or `served` (it is served here).
    pub found: &'static str,
    /// `main` after the import; on a dry run, `main` here when the tenant is served here.
    #[schema(pattern = "^[0-9a-f]{40}$")]
    pub head: Option<String>,
    /// The tenant was here and writable at the head asked for or after it (a rerun).
    pub already: bool,
    pub dry_run: bool,
    /// The `SHA256:` fingerprints of the keys that sign commits here, current first: a move
    /// checks that the target signs with the source's key.
    pub signing_keys: Vec<String>,
    /// The schema set in use here: each file's path and a short hash of its bytes, and
    /// `validation.unknown_integrations`. A move checks that both shards have the same.
    #[schema(value_type = Object)]
    pub schemas: std::collections::BTreeMap<String, String>,
    pub millis: u64,
}

#[utoipa::path(
    post,
    path = "/admin/tenants/{tenant}/import",
    tag = "cluster",
    description = "Fetch the tenant's repository from a peer shard over its /git/<tenant>.git with the same token, check it with git fsck --strict and that its main is at head, and serve the tenant here. Safe to repeat. Called by `planfiles tenant move` on the source.",
    params(
        ("tenant" = String, Path, description = "The token's own tenant"),
        ("dry_run" = Option<bool>, Query, description = "true: check everything, fetch nothing, and say what the import would find here (`tenant move` asks before it refuses any write)"),
    ),
    request_body(content = ImportRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Imported, or here already", body = ImportAnswer),
        (status = 400, description = "invalid_json or invalid_body: not an import request, from not a shard URL, head not a commit id; invalid_query: dry_run not true or false", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "insufficient_scope (planfiles.repos.import), wrong_tenant, or peer_not_allowed: from is not in cluster.peers", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not_found: not a tenant id", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "move_conflict: the tenant is served here with another history, or is moving away from here, or the source still takes its writes (it is not moving)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type: not application/json", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "import_failed: the fetch, git fsck or the head check failed", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy: another import of this tenant (or two in all) is running; Retry-After", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub async fn import(
    state: web::Data<AppState>,
    who: Result<Principal, ApiError>,
    req: HttpRequest,
    tenant: web::Path<String>,
    payload: web::Payload,
) -> Reply {
    let tenant = TenantId::parse(&tenant).map_err(|_| ApiError::NotFound(req.path().to_owned()))?;
    let who = who?;
    let dry_run = super::query::dry_run(req.query_string())?;
    if &tenant != who.tenant() {
        return Err(ApiError::WrongTenant);
    }
    if !who.has(REPOS_IMPORT) {
        return Err(ApiError::Forbidden(REPOS_IMPORT));
    }
    if !super::body::is_json(&req) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let bytes = read_limited(&req, payload, body_limit(&state), state.body_pace).await?;
    let body: ImportRequest =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let from =
        ShardUrl::parse(&body.from).map_err(|e| ApiError::InvalidBody(format!("from: {e}")))?;
    let head = match body.head.as_deref() {
        None => None,
        Some(raw) => Some(CommitId(
            ObjectId::parse(raw).map_err(|e| ApiError::InvalidBody(format!("head {e}")))?,
        )),
    };
    if !state.cluster.peers.contains(&from) {
        return Err(ApiError::PeerNotAllowed(from.to_string()));
    }
    // The same token clones the tenant from the source (it may: it carries REPOS_IMPORT).
    let token = bearer(&req).ok_or(ApiError::Unauthorized(crate::auth::AuthError::Missing))?;
    let _turn = state.cluster.imports.take(&tenant).await.ok_or_else(|| {
        ApiError::busy(
            "another import is running",
            state.cluster.imports.wait().as_secs().clamp(1, 5),
        )
    })?;
    let storage = state.storage.clone();
    let me = state.cluster.me.clone();
    let id = tenant.clone();
    let (found, done) = blocking(
        move || {
            if dry_run {
                return Ok((storage.import_plan_settled(&id, head)?, None));
            }
            // A fetch only from a source that is moving the tenant here (`import_tenant` asks
            // before the fetch and again just before the tenant becomes writable here): never
            // a second writable copy.
            let handed_over = || crate::cluster::handed_over(&from, &id, &token, me.as_ref());
            let source = ImportSource::Shard {
                url: from.clone(),
                token: token.clone(),
            };
            let done = storage.import_tenant(
                &id,
                &source,
                head,
                crate::storage::Settings {
                    source_hosting: body.source_hosting,
                    required_approvals: body
                        .required_approvals
                        .min(crate::storage::MAX_REQUIRED_APPROVALS),
                },
                body.webhooks.as_ref(),
                &handed_over,
            )?;
            Ok((done.found.clone(), Some(done)))
        },
        PlanFile::Integration,
    )
    .await?;
    // What the import did, or on a dry run what it would find.
    let (head, already, millis) = match (&done, &found) {
        (Some(done), _) => {
            tracing::info!(%tenant, head = %done.head, already = done.already, millis = done.millis, "tenant imported");
            if let Some(hooks) = &state.webhooks {
                hooks.poke(&tenant);
            }
            (Some(done.head), done.already, done.millis)
        }
        (None, ImportPlan::Served { head, holds_head }) => {
            (Some(*head), *holds_head == Some(true), 0)
        }
        (None, _) => (None, false, 0),
    };
    Ok(json(&ImportAnswer {
        tenant: tenant.to_string(),
        found: match found {
            ImportPlan::Fresh => "fresh",
            ImportPlan::ComeBack => "comes_back",
            ImportPlan::Served { .. } => "served",
        },
        head: head.map(|h| h.to_string()),
        already,
        dry_run,
        signing_keys: state.storage.signing_keys().fingerprints(),
        schemas: state.validators.current().digests().clone(),
        millis,
    }))
}

/// The bearer token of the request, as sent.
fn bearer(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get(header::AUTHORIZATION)?.as_bytes();
    let token = crate::auth::bearer_token(value)?;
    String::from_utf8(token.to_vec()).ok()
}

/// Where a tenant is on this shard.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PlacementAnswer {
    pub tenant: String,
    /// `served` (it takes writes here), `moving` (its writes are refused: a move is under way
    /// and hands it over), `aborting` (its writes are refused while the move is aborted: it is
    /// not handed over) or `moved` (it answers 421 here).
    pub placement: &'static str,
    /// The shard it is moving or moved to.
    pub to: Option<String>,
    pub source_hosting: bool,
    /// The approvals its proposals need (0: none).
    pub required_approvals: u32,
    /// The shard that answers (its `cluster.self_url`, when set): a `tenant move --to` that
    /// reaches the source itself (through the router, say) is told so.
    pub shard: Option<String>,
}

#[utoipa::path(
    get,
    path = "/admin/tenants/{tenant}/placement",
    tag = "cluster",
    description = "Where the tenant is on this shard. A shard asked to import the tenant from here checks that it is moving, so that an import never leaves it writable on two shards.",
    params(("tenant" = String, Path, description = "The token's own tenant")),
    responses(
        (status = 200, description = "The tenant's placement", body = PlacementAnswer),
        (status = 403, description = "insufficient_scope (planfiles.repos.import) or wrong_tenant", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "not_found: not a tenant id; tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 421, description = "tenant_moved: it was archived here after its move", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = []))
)]
pub async fn placement(
    state: web::Data<AppState>,
    who: Result<Principal, ApiError>,
    req: HttpRequest,
    tenant: web::Path<String>,
) -> Reply {
    let tenant = TenantId::parse(&tenant).map_err(|_| ApiError::NotFound(req.path().to_owned()))?;
    let who = who?;
    if &tenant != who.tenant() {
        return Err(ApiError::WrongTenant);
    }
    if !who.has(REPOS_IMPORT) {
        return Err(ApiError::Forbidden(REPOS_IMPORT));
    }
    let storage = state.storage.clone();
    let id = tenant.clone();
    let (placement, info) = blocking(
        move || Ok((storage.placement(&id)?, storage.tenant(&id)?)),
        PlanFile::Integration,
    )
    .await?;
    let (word, to) = match &placement {
        None => ("served", None),
        Some(p) => (p.word(), Some(p.to().to_string())),
    };
    Ok(json(&PlacementAnswer {
        tenant: tenant.to_string(),
        placement: word,
        to,
        source_hosting: info.source_hosting,
        required_approvals: info.required_approvals,
        shard: state.cluster.me.as_ref().map(ToString::to_string),
    }))
}

//! `/plans/webhooks`: a tenant's subscriptions (create, list, read, delete, resume) and each one's deliveries, all with `planfiles.webhooks.write`; the secret is answered once, at creation.
use super::body::{is_json, read_limited};
use super::common::{blocking, json, require, Reply};
use super::problem::{ApiError, Problem};
use super::schema::{CommonProblems, DeliveryList, WebhookList, WebhookView};
use super::AppState;
use crate::auth::Principal;
use crate::domain::{EventType, IdempotencyKey, PlanFile, WebhookId, WebhookUrl};
use crate::storage::{NewWebhook, WebhookKey};
use crate::webhooks::{CheckError, Webhooks};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

/// The permission every webhook endpoint needs.
pub const WEBHOOKS_WRITE: &str = "planfiles.webhooks.write";
/// A creation's body: a URL, a few event names, a description.
const BODY_LIMIT: usize = 8 * 1024;
const DESCRIPTION_MAX: usize = 500;
/// Deliveries listed at most.
const DELIVERIES_MAX: usize = 500;

/// `POST /plans/webhooks`'s body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where deliveries go: https (http only when the operator allows it), not a private
    /// address unless the operator allows it, no user info or fragment; at most 2048 bytes.
    pub url: String,
    /// The events to deliver; default all: `integration-file.updated`,
    /// `configuration-file.updated`, `main.reset`, `proposal.opened`, `proposal.updated`,
    /// `proposal.approved`, `proposal.applied`, `proposal.closed`.
    #[serde(default)]
    pub events: Option<Vec<String>>,
    /// At most 500 characters, no control characters.
    #[serde(default)]
    pub description: Option<String>,
}

#[utoipa::path(post, path = "/plans/webhooks", tag = "webhooks",
    description = "Subscribe a URL to the tenant's commits. Every commit on main's first-parent line after this one is delivered (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature), in order, at least once. The secret is in this answer only (and in a replay's: a retry with the same Idempotency-Key within a day answers the subscription it made).",
    params(("Idempotency-Key" = Option<String>, Header, description = "1-255 printable ASCII characters: a retry with the same key and body answers the first subscription, Idempotent-Replayed: true")),
    request_body(content = CreateWebhook, content_type = "application/json"),
    responses(
        (status = 201, description = "Subscribed; Location names it", body = WebhookView, headers(("Idempotent-Replayed" = String, description = "true when this answers an earlier request with the same Idempotency-Key"))),
        (status = 403, description = "insufficient_scope: the token lacks planfiles.webhooks.write", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "invalid_json, invalid_body (a field, an unknown event, a URL that is not one), invalid_idempotency_key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "webhook_url_refused (a destination rule: scheme, host, an address it resolves to), webhook_limit_reached, or idempotency_key_reused (the key made a subscription for another body)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "tenant_moving, or busy: the host name could not be looked up for want of a turn (Retry-After)", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn create(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    let hooks = enabled(&state, &who)?;
    if !is_json(&req) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let key = idempotency_key(&req)?;
    let bytes = read_limited(&req, payload, BODY_LIMIT, state.body_pace).await?;
    let mut new = parse_new(&bytes)?;
    new.key = key.map(|key| WebhookKey {
        key: key.as_str().to_owned(),
        fingerprint: state.storage.fingerprint("POST /plans/webhooks", &bytes),
    });
    hooks
        .rules()
        .check_resolved(&new.url)
        .await
        .map_err(|e| match e {
            CheckError::Refused(refused) => ApiError::WebhookUrlRefused(refused.0),
            CheckError::Busy => ApiError::busy(e.to_string(), 5),
        })?;
    let (storage, tenant, limit) = (
        state.storage.clone(),
        who.tenant().clone(),
        hooks.max_per_tenant(),
    );
    let (hook, replayed) = blocking(
        move || storage.add_webhook(&tenant, new, limit),
        PlanFile::Integration,
    )
    .await?;
    if !replayed {
        hooks.poke(who.tenant());
        tracing::info!(tenant = %who.tenant(), webhook = %hook.id, "webhook subscribed");
    }
    let mut answer = HttpResponse::Created();
    answer
        .insert_header(("Location", format!("/plans/webhooks/{}", hook.id)))
        .insert_header(("Cache-Control", "no-store"));
    if replayed {
        answer.insert_header(("Idempotent-Replayed", "true"));
    }
    Ok(answer.json(WebhookView::new(&hook, true)))
}

#[utoipa::path(get, path = "/plans/webhooks", tag = "webhooks",
    description = "The tenant's subscriptions, without their secrets.",
    responses(
        (status = 200, description = "The subscriptions", body = WebhookList),
        (status = 403, description = "insufficient_scope: the token lacks planfiles.webhooks.write", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn list(state: web::Data<AppState>, who: Principal) -> Reply {
    enabled(&state, &who)?;
    let (storage, tenant) = (state.storage.clone(), who.tenant().clone());
    let all = blocking(move || storage.webhooks(&tenant), PlanFile::Integration).await?;
    Ok(json(&WebhookList {
        webhooks: all.iter().map(|h| WebhookView::new(h, false)).collect(),
    }))
}

#[utoipa::path(get, path = "/plans/webhooks/{id}", tag = "webhooks",
    description = "One subscription, without its secret.",
    params(("id" = String, Path, description = "The subscription's id (wh_...)")),
    responses(
        (status = 200, description = "The subscription", body = WebhookView),
        (status = 403, description = "insufficient_scope: the token lacks planfiles.webhooks.write", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "webhook_not_found or tenant_not_found", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn get(state: web::Data<AppState>, who: Principal, id: web::Path<String>) -> Reply {
    enabled(&state, &who)?;
    let id = parse_id(&id)?;
    let (storage, tenant) = (state.storage.clone(), who.tenant().clone());
    let all = blocking(move || storage.webhooks(&tenant), PlanFile::Integration).await?;
    let hook = all
        .iter()
        .find(|h| h.id == id)
        .ok_or_else(|| ApiError::WebhookNotFound(id.to_string()))?;
    Ok(json(&WebhookView::new(hook, false)))
}

#[utoipa::path(delete, path = "/plans/webhooks/{id}", tag = "webhooks",
    description = "Unsubscribe: nothing more is delivered (an attempt under way may still arrive).",
    params(("id" = String, Path, description = "The subscription's id")),
    responses(
        (status = 204, description = "Removed"),
        (status = 403, description = "insufficient_scope: the token lacks planfiles.webhooks.write", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "webhook_not_found or tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "tenant_moving", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn delete(state: web::Data<AppState>, who: Principal, id: web::Path<String>) -> Reply {
    let hooks = enabled(&state, &who)?;
    let id = parse_id(&id)?;
    let (storage, tenant) = (state.storage.clone(), who.tenant().clone());
    blocking(
        move || storage.remove_webhook(&tenant, &id),
        PlanFile::Integration,
    )
    .await?;
    hooks.poke(who.tenant());
    Ok(HttpResponse::NoContent().finish())
}

#[utoipa::path(post, path = "/plans/webhooks/{id}/resume", tag = "webhooks",
    description = "A failing subscription starts again from where it stopped (its cursor): the event that failed first, then the rest in order. An active one stays as it is.",
    params(("id" = String, Path, description = "The subscription's id")),
    responses(
        (status = 200, description = "The subscription, active", body = WebhookView),
        (status = 403, description = "insufficient_scope: the token lacks planfiles.webhooks.write", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "webhook_not_found or tenant_not_found", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "tenant_moving", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn resume(state: web::Data<AppState>, who: Principal, id: web::Path<String>) -> Reply {
    let hooks = enabled(&state, &who)?;
    let id = parse_id(&id)?;
    let (storage, tenant) = (state.storage.clone(), who.tenant().clone());
    let hook = blocking(
        move || storage.resume_webhook(&tenant, &id),
        PlanFile::Integration,
    )
    .await?;
    hooks.poke(who.tenant());
    Ok(json(&WebhookView::new(&hook, false)))
}

#[utoipa::path(get, path = "/plans/webhooks/{id}/deliveries", tag = "webhooks",
    description = "The subscription's latest delivery attempts, newest first: the event's webhook-id, its type and commit, the attempt's number, the receiver's HTTP status (or timeout, refused, error), how long it took, when, and the start of what the receiver answered (or why no answer came).",
    params(
        ("id" = String, Path, description = "The subscription's id"),
        ("limit" = Option<u32>, Query, description = "At most this many (1-500, default 50)"),
    ),
    responses(
        (status = 200, description = "The attempts", body = DeliveryList),
        (status = 403, description = "insufficient_scope: the token lacks planfiles.webhooks.write", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "invalid_query", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "webhook_not_found or tenant_not_found", body = Problem, content_type = "application/problem+json"),
        CommonProblems,
    ),
    security(("bearer" = [])))]
pub async fn deliveries(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    id: web::Path<String>,
) -> Reply {
    enabled(&state, &who)?;
    let id = parse_id(&id)?;
    let limit = match super::query::single_param(req.query_string(), "limit")? {
        None => 50,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=DELIVERIES_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::InvalidQuery(format!("limit must be 1 to {DELIVERIES_MAX}"))
            })?,
    };
    let (storage, tenant) = (state.storage.clone(), who.tenant().clone());
    let deliveries = blocking(
        move || storage.webhook_attempts(&tenant, &id, limit),
        PlanFile::Integration,
    )
    .await?;
    Ok(json(&DeliveryList { deliveries }))
}

/// The `Idempotency-Key` header, once at most (400 `invalid_idempotency_key`).
fn idempotency_key(req: &HttpRequest) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut keys = req.headers().get_all("idempotency-key");
    match (keys.next(), keys.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(ApiError::InvalidIdempotencyKey("is sent twice")),
        (Some(v), None) => IdempotencyKey::parse(v.as_bytes())
            .map(Some)
            .map_err(ApiError::InvalidIdempotencyKey),
    }
}

/// The permission, then the service's webhooks.
fn enabled<'a>(state: &'a AppState, who: &Principal) -> Result<&'a Webhooks, ApiError> {
    require(who.has(WEBHOOKS_WRITE), WEBHOOKS_WRITE)?;
    state
        .webhooks
        .as_ref()
        .ok_or_else(|| ApiError::NotReady("webhooks are not set up on this server".into()))
}

fn parse_id(raw: &str) -> Result<WebhookId, ApiError> {
    WebhookId::parse(raw).ok_or_else(|| ApiError::WebhookNotFound(raw.chars().take(64).collect()))
}

/// A creation's body as a subscription's request.
fn parse_new(bytes: &[u8]) -> Result<NewWebhook, ApiError> {
    let body: CreateWebhook = serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::InvalidBody(e.to_string()),
        _ => ApiError::InvalidJson(e.to_string()),
    })?;
    let url =
        WebhookUrl::parse(&body.url).map_err(|e| ApiError::InvalidBody(format!("url: {e}")))?;
    let mut events = match body.events {
        None => EventType::ALL.to_vec(),
        Some(names) if names.is_empty() => {
            return Err(ApiError::InvalidBody(
                "events: name at least one (or leave events out for all)".into(),
            ))
        }
        Some(names) => names
            .iter()
            .map(|n| {
                EventType::parse(n).ok_or_else(|| {
                    ApiError::InvalidBody(format!(
                        "events: {:?} is not one of {}",
                        n.chars().take(64).collect::<String>(),
                        EventType::ALL.map(EventType::as_str).join(", ")
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    events.sort();
    events.dedup();
    if let Some(d) = &body.description {
        if d.chars().count() > DESCRIPTION_MAX || d.chars().any(char::is_control) {
            return Err(ApiError::InvalidBody(format!(
                "description: at most {DESCRIPTION_MAX} characters, no control characters"
            )));
        }
    }
    Ok(NewWebhook {
        url,
        events,
        description: body.description,
        key: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_bodies_are_parsed_or_refused_with_a_reason() {
        let all = parse_new(br#"{"url":"https://h.example.com/x"}"#).unwrap();
        assert_eq!(all.events, EventType::ALL.to_vec());
        let some = parse_new(
            br#"{"url":"https://h.example.com/x","events":["main.reset","integration-file.updated","main.reset"]}"#,
        )
        .unwrap();
        assert_eq!(
            some.events,
            vec![EventType::IntegrationFileUpdated, EventType::MainReset]
        );
        let long = format!(
            r#"{{"url":"https://h.example.com/x","description":"{}"}}"#,
            "a".repeat(501)
        );
        let cases: [(&[u8], &str); 7] = [
            (b"{", "invalid_json"),
            (br#"{"url":1}"#, "invalid_body"),
            (
                br#"{"url":"https://h.example.com","secret":"mine"}"#,
                "invalid_body",
            ),
            (br#"{"url":"not a url"}"#, "invalid_body"),
            (
                br#"{"url":"https://h.example.com","events":[]}"#,
                "invalid_body",
            ),
            (
                br#"{"url":"https://h.example.com","events":["push"]}"#,
                "invalid_body",
            ),
            (long.as_bytes(), "invalid_body"),
        ];
        for (body, code) in cases {
            let err = parse_new(body).unwrap_err();
            assert_eq!(err.code(), code, "{}", String::from_utf8_lossy(body));
        }
    }
}

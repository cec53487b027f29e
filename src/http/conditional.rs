//! Conditional GETs of a file: `If-None-Match` answers 304, and `Prefer: wait=N` (RFC 7240) holds the request until the file changes.
use super::common::Reply;
use super::events::busy;
use super::AppState;
use crate::auth::Principal;
use crate::domain::PlanFile;
use crate::events::Kind;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpRequest, HttpResponse};
use std::time::Duration;

impl AppState {
    /// A GET with its conditions: the answer of [`AppState::get_file`], or 304 when its
    /// `ETag` is one the client listed; with `Prefer: wait`, a 304 only once the wait (capped
    /// by `events.max_wait_secs`) ended without a change. A held request takes a slot under
    /// the stream limits, and ends early (304) on shutdown.
    pub(super) async fn get_file_conditional(
        &self,
        who: &Principal,
        req: &HttpRequest,
        file: PlanFile,
    ) -> Reply {
        let res = self.get_file(who, req, file).await?;
        let Some(tags) = if_none_match(req) else {
            return Ok(res);
        };
        // A `?ref=` names a version that never changes: nothing to wait for.
        let wait = prefer_wait(req)
            .filter(|_| {
                !matches!(super::query::ReadQuery::parse(req.query_string()), Ok(q) if q.at.is_some())
            })
            .map(|secs| secs.min(self.events.config().max_wait_secs));
        let applied = |mut res: HttpResponse| {
            if let Some(secs) = wait {
                res.headers_mut().insert(
                    header::HeaderName::from_static("preference-applied"),
                    header::HeaderValue::from_str(&format!("wait={secs}")).expect("digits"),
                );
            }
            res
        };
        if !matches(&res, &tags) {
            return Ok(applied(res));
        }
        let Some(secs) = wait.filter(|&s| s > 0) else {
            return Ok(applied(not_modified(&res)));
        };
        let tenant = who.tenant();
        let _slot = self.events.admit(tenant, Kind::LongPoll).map_err(busy)?;
        let mut subscription = self
            .events
            .subscribe_heads(tenant)
            .await
            .map_err(|e| super::ApiError::from_storage(e, file))?;
        // Held no longer than the token is accepted: then 304, and the client's next request
        // meets the expiry.
        let left = who
            .valid_until()
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs).min(left);
        let shutdown = self.events.shutting_down();
        tokio::pin!(shutdown);
        let current = subscription.current();
        if current.moving {
            // The tenant began to move after the read: answer now.
            return Ok(applied(not_modified(&res)));
        }
        let mut head = current.head.clone();
        loop {
            // Subscribed after the first read: a change in between shows here.
            if !tags.iter().any(|t| t == &head.blob(file).to_string()) {
                // Woken together, the tenant's held requests read one at a time: the first
                // renders the new version, the others get it from the response cache.
                let lease = self.events.rereads(tenant);
                let _turn = lease.semaphore().acquire().await;
                let res = self.get_file(who, req, file).await?;
                if !matches(&res, &tags) {
                    return Ok(applied(res));
                }
            }
            tokio::select! {
                update = subscription.changed() => match update {
                    // The tenant began to move: answer now; the client's next poll goes
                    // where the tenant is served next.
                    Some(update) if update.moving => break,
                    Some(update) => head = update.head.clone(),
                    // The feed stopped (a fault): answer now; the client asks again.
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
                () = &mut shutdown => break,
            }
        }
        Ok(applied(not_modified(&res)))
    }
}

/// The entity tags of `If-None-Match` without quotes or `W/` (a weak comparison, as RFC 9110
/// asks for this header); `*` matches any file.
fn if_none_match(req: &HttpRequest) -> Option<Vec<String>> {
    let mut tags = Vec::new();
    for value in req.headers().get_all(header::IF_NONE_MATCH) {
        let text = value.to_str().ok()?;
        for tag in text.split(',') {
            let tag = tag.trim();
            let tag = tag.strip_prefix("W/").unwrap_or(tag);
            tags.push(tag.trim_matches('"').to_owned());
        }
    }
    (!tags.is_empty()).then_some(tags)
}

/// `wait=N` of the `Prefer` headers (RFC 7240); a malformed preference is ignored.
fn prefer_wait(req: &HttpRequest) -> Option<u64> {
    req.headers()
        .get_all(header::HeaderName::from_static("prefer"))
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| {
            let (name, value) = p.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("wait")
                .then(|| value.trim().trim_matches('"').parse::<u64>().ok())?
        })
}

fn matches(res: &HttpResponse, tags: &[String]) -> bool {
    let Some(etag) = res
        .headers()
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let etag = etag.trim_matches('"');
    res.status() == StatusCode::OK && tags.iter().any(|t| t == "*" || t == etag)
}

fn not_modified(res: &HttpResponse) -> HttpResponse {
    let mut out = HttpResponse::NotModified().finish();
    for name in [header::ETAG, header::CACHE_CONTROL] {
        if let Some(v) = res.headers().get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

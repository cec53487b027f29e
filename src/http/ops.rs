//! Operations endpoints: `/healthz`, `/readyz` and `/metrics`.
use super::problem::{ApiError, Problem};
use super::schema::{Health, Ready};
use super::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

/// This process's instance id (see [`Health::instance`]): who it is, not a setting.
static INSTANCE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{:016x}", rand::random::<u64>()));

/// 200 while the process is up, with its instance id.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, description = "The process is up; `instance` changes when it restarts", body = Health)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok",
        instance: INSTANCE.as_str(),
    })
}

/// 200 when the data directory is readable and writable and the service is not stopping,
/// else 503.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses(
        (status = 200, description = "Ready; how many schemas writes are checked against, and a warning when none", body = Ready),
        (status = 503, description = "not_ready: the data directory cannot be listed or written, or the service is stopping (SIGTERM)", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state.events.is_shut_down() {
        return Err(ApiError::NotReady(
            "shutting down: requests are served until the listener closes".into(),
        ));
    }
    let storage = state.storage.clone();
    let validators = state.validators.clone();
    // The schemas folder is looked at too (when none is loaded): on the blocking pool.
    let ready = web::block(move || {
        storage.check_ready().map(|()| Ready {
            status: "ready",
            schemas: validators.current().count(),
            warning: validators.none_loaded(),
        })
    });
    match ready.await {
        Ok(Ok(ready)) => Ok(HttpResponse::Ok().json(ready)),
        Ok(Err(e)) => Err(ApiError::NotReady(e.to_string())),
        Err(e) => Err(ApiError::NotReady(e.to_string())),
    }
}

/// Prometheus text format. Needs a token with `planfiles.metrics.read` when configured so.
#[utoipa::path(get, path = "/metrics", tag = "operations", security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain"),
        (status = 401, description = "metrics.require_token is on and no valid token was sent", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks planfiles.metrics.read", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn metrics(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    if state.metrics_require_token {
        let who = state
            .verifier
            .verify_header(
                req.headers()
                    .get(header::AUTHORIZATION)
                    .map(|v| v.as_bytes()),
            )
            .map_err(ApiError::Unauthorized)?;
        if !who.has(METRICS_PERMISSION) {
            return Err(ApiError::Forbidden(METRICS_PERMISSION));
        }
    }
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render()))
}

pub const METRICS_PERMISSION: &str = "planfiles.metrics.read";

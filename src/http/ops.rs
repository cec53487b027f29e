//! Operations endpoints: `/healthz`, `/readyz` and `/metrics`.
use super::problem::ApiError;
use super::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

/// 200 while the process is up.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// 200 when the data directory is readable and writable, else 503.
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let storage = state.storage.clone();
    match web::block(move || storage.check_ready()).await {
        Ok(Ok(())) => Ok(HttpResponse::Ok().json(serde_json::json!({"status": "ready"}))),
        Ok(Err(e)) => Err(ApiError::NotReady(e.to_string())),
        Err(e) => Err(ApiError::NotReady(e.to_string())),
    }
}

/// Prometheus text format. Needs a token with `planfiles.metrics.read` when configured so.
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

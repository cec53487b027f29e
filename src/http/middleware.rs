//! Request middleware: `X-Request-Id`, finishing problem+json bodies, and the request log line.
use super::problem::Problem;
use crate::domain::{CommitId, RequestId, TenantId};
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::HttpMessage;
use std::time::Instant;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The commit a write made, left on the response by the handler for the log line.
#[derive(Debug, Clone, Copy)]
pub struct WrittenCommit(pub CommitId);

pub async fn request_context(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<BoxBody>>, actix_web::Error> {
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(RequestId::parse)
        .unwrap_or_else(RequestId::generate);
    req.extensions_mut().insert(request_id.clone());
    let method = req.method().clone();
    // The path only: a query string may carry a token and is never logged.
    let path = req.path().to_owned();

    let res = next.call(req).await?;
    let status = res.status();
    let commit = res
        .response()
        .extensions()
        .get::<WrittenCommit>()
        .map(|c| c.0.to_string());
    let tenant = res
        .request()
        .extensions()
        .get::<TenantId>()
        .map(|t| t.to_string());
    if let Some(err) = res.response().error() {
        if status.is_server_error() {
            tracing::error!(request_id = %request_id, error = %err, "request failed");
        }
    }
    let problem = res.response().extensions().get::<Problem>().cloned();
    let mut res = res.map_body(|head, body| match problem {
        Some(mut problem) => {
            problem.request_id = request_id.to_string();
            head.headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            );
            let bytes = serde_json::to_vec(&problem).expect("a problem always serializes");
            EitherBody::right(BoxBody::new(bytes))
        }
        None => EitherBody::left(body.boxed()),
    });
    res.headers_mut().insert(
        REQUEST_ID,
        HeaderValue::from_str(request_id.as_str()).expect("request ids are header-safe"),
    );
    tracing::info!(
        request_id = %request_id,
        method = %method,
        route = %path,
        status = status.as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        tenant = tenant.as_deref().unwrap_or("-"),
        commit = commit.as_deref().unwrap_or("-"),
        "request"
    );
    Ok(res)
}

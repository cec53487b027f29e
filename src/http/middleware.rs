//! Request middleware: `X-Request-Id`, finishing problem+json bodies, and the request log line.
use super::problem::{ApiError, Problem};
use super::AppState;
use crate::auth::Principal;
use crate::domain::yaml::splice::Made;
use crate::domain::{CommitId, PlanFile, RequestId};
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::web;
use actix_web::{HttpMessage, ResponseError};
use futures_util::StreamExt;
use std::borrow::Cow;
use std::time::Instant;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// The largest request head (names, values and separators of all headers) the service reads.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The size of the request's headers as sent: `name: value\r\n` for each.
fn header_bytes(req: &ServiceRequest) -> usize {
    req.headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// What a write did, left on the response by the handler for the log line and metrics.
#[derive(Debug, Clone, Copy)]
pub struct WrittenCommit {
    pub commit: CommitId,
    pub file: PlanFile,
    pub changed: bool,
    pub forced: bool,
    /// For JSON content, how its text was made.
    pub made: Option<Made>,
}

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
    let method = req.method().clone();
    if !method.is_safe() {
        // For the handlers that write it into a commit (its `Request-Id` trailer); a read
        // has no use for it (this middleware logs and answers with its own), and the insert
        // was a tenth of what this middleware cost a cached GET.
        req.extensions_mut().insert(request_id.clone());
    }

    let res = if header_bytes(&req) > MAX_HEADER_BYTES {
        // Read the body (up to the body limit) before answering: a server that closes with
        // unread data makes the client's kernel drop the answer.
        let limit = req
            .app_data::<web::Data<AppState>>()
            .map_or(0, |s| s.body_limit);
        let (http_req, mut payload) = req.into_parts();
        let mut drained = 0;
        while let Some(Ok(chunk)) = payload.next().await {
            drained += chunk.len();
            if drained > limit {
                break;
            }
        }
        let answer = ApiError::HeadersTooLarge(MAX_HEADER_BYTES).error_response();
        ServiceResponse::new(http_req, answer)
    } else {
        next.call(req).await?.map_into_boxed_body()
    };
    let status = res.status();
    let written = res.response().extensions().get::<WrittenCommit>().copied();
    if let Some(err) = res.response().error() {
        // A 503 (busy, a tenant moving to another shard, not ready) is the service working
        // as designed under load or during a move: a warning. Other 5xx are faults.
        if status == actix_web::http::StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(request_id = %request_id, error = %err, "request refused for now");
        } else if status.is_server_error() {
            tracing::error!(request_id = %request_id, error = %err, "request failed");
        }
    }
    let problem = res.response().extensions().get::<Problem>().cloned();
    if let Some(state) = res.request().app_data::<web::Data<AppState>>() {
        // Named routes (the plans routes) give their route without building a string. Every
        // route label is a pattern the service registered, or `unmatched`: a path a client
        // makes up never becomes a label value.
        let route = match res.request().match_name() {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned(
                res.request()
                    .match_pattern()
                    .unwrap_or_else(|| UNMATCHED.into()),
            ),
        };
        record(
            state,
            &route,
            &method,
            status,
            started.elapsed().as_secs_f64(),
            written,
            problem.as_ref(),
        );
    }
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
        None => EitherBody::left(body),
    });
    res.headers_mut().insert(
        REQUEST_ID,
        HeaderValue::from_str(request_id.as_str()).expect("request ids are header-safe"),
    );
    super::cors::expose(res.headers_mut());
    // Probes (load balancers ask every few seconds) are logged at debug: the log is for
    // requests people make.
    let probe = matches!(res.request().path(), "/healthz" | "/readyz") && status.is_success();
    if (probe && tracing::enabled!(tracing::Level::DEBUG)) || (!probe && request_log_enabled()) {
        let extensions = res.request().extensions();
        let tenant = extensions
            .get::<Principal>()
            .map(|who| who.tenant().as_str());
        let commit = written.filter(|w| w.changed).map(|w| w.commit.to_string());
        // To the microsecond: more digits are noise.
        let latency_ms = (started.elapsed().as_secs_f64() * 1_000_000.0).round() / 1000.0;
        macro_rules! request_line {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    request_id = %request_id,
                    method = %method,
                    // The path only: a query string may carry a token and is never logged.
                    route = %res.request().path(),
                    status = status.as_u16(),
                    latency_ms,
                    tenant = tenant.unwrap_or("-"),
                    commit = commit.as_deref().unwrap_or("-"),
                    "request"
                )
            };
        }
        if probe {
            request_line!(tracing::Level::DEBUG);
        } else {
            request_line!(tracing::Level::INFO);
        }
    }
    Ok(res)
}

/// The route label of a request that matched no route.
const UNMATCHED: &str = "unmatched";

/// The method as a metric label: the methods of RFC 9110 and PATCH by name, anything a client
/// makes up as `OTHER`, so that label values come from a closed set.
pub(super) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::HEAD => "HEAD",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

/// Whether the request log line is written (its level and target are this module's), so
/// that what only the line needs is gathered only then.
pub(super) fn request_log_enabled() -> bool {
    tracing::enabled!(tracing::Level::INFO)
}

fn record(
    state: &AppState,
    route: &str,
    method: &Method,
    status: StatusCode,
    seconds: f64,
    written: Option<WrittenCommit>,
    problem: Option<&Problem>,
) {
    let m = &state.metrics;
    m.count_request(route, method_label(method), status.as_u16(), seconds);
    if let Some(made) = written.as_ref().and_then(|w| w.made.map(|m| (w.file, m))) {
        m.yaml_writes
            .with_label_values(&[made.0.label(), made.1.label()])
            .inc();
    }
    if let Some(w) = written.filter(|w| w.changed) {
        m.commits.with_label_values(&[w.file.label()]).inc();
        if w.forced {
            m.forced_writes.with_label_values(&[w.file.label()]).inc();
        }
    }
    let file = || {
        if route.contains("integration") {
            "integration"
        } else {
            "configuration"
        }
    };
    match problem.map(|p| p.code) {
        Some("sha_mismatch") => m.conflicts.with_label_values(&[file(), "409"]).inc(),
        Some("precondition_failed") => m.conflicts.with_label_values(&[file(), "412"]).inc(),
        Some("internal_error") => m.git_errors.inc(),
        _ => {}
    }
}

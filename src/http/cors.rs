//! Browsers on other origins: the CORS policy (actix-cors) for the origins of `server.cors_allowed_origins`; with none listed, no CORS at all.
use actix_cors::Cors;
use actix_web::http::{header, Method};

/// Seconds a browser may keep a preflight's answer.
pub const PREFLIGHT_MAX_AGE_SECS: usize = 3600;

/// Request headers a page on a listed origin may send: the bearer token, preconditions,
/// `Prefer` (dry runs), retries' keys and request ids; `Content-Type` for JSON bodies and
/// `Last-Event-ID` for a stream's resume.
const ALLOWED_HEADERS: [&str; 9] = [
    "authorization",
    "content-type",
    "if-match",
    "if-none-match",
    "prefer",
    "idempotency-key",
    "x-request-id",
    "last-event-id",
    "cache-control",
];

/// Response headers such a page may read.
const EXPOSED_HEADERS: &str =
    "etag, x-request-id, retry-after, idempotent-replayed, preference-applied";

/// The policy for `origins` (checked by the config: `scheme://host[:port]`). No credentials
/// mode: the API takes bearer tokens only, never cookies.
pub fn policy(origins: &[String]) -> Cors {
    let cors = Cors::default()
        .allowed_methods([Method::GET, Method::PUT, Method::POST])
        .allowed_headers(ALLOWED_HEADERS.map(header::HeaderName::from_static))
        .max_age(PREFLIGHT_MAX_AGE_SECS);
    origins
        .iter()
        .fold(cors, |cors, origin| cors.allowed_origin(origin))
}

/// `Access-Control-Expose-Headers` for an answer that CORS allowed (it carries
/// `Access-Control-Allow-Origin`): set here rather than by actix-cors, which would put it on
/// every answer, an origin not listed included.
pub fn expose(headers: &mut header::HeaderMap) {
    if headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN) {
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            header::HeaderValue::from_static(EXPOSED_HEADERS),
        );
    }
}

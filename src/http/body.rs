//! Reading request bodies (their budget turn, their pace, their size limit) and the headers a write carries (`Content-Type`, `If-Match`); the body's fields are parsed by `write/plan.rs`.
use super::problem::ApiError;
use crate::storage::IfMatch;
use actix_web::http::header;
use actix_web::{web, HttpRequest};
use futures_util::StreamExt;

/// How a body must arrive: whole within `total`, and after [`BodyPace::GRACE`] at no less than
/// `min_bytes_per_sec` on average (Apache's `mod_reqtimeout` MinRate), so that a trickled body
/// cannot hold its share of the budget for the whole `total`.
#[derive(Debug, Clone, Copy)]
pub struct BodyPace {
    pub total: std::time::Duration,
    pub min_bytes_per_sec: u64,
}

impl BodyPace {
    /// What any body gets before the rate counts.
    pub const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

    /// When the next bytes must have arrived, `received` bytes after `start`: one more second
    /// for each `min_bytes_per_sec` received, and never past `total`.
    fn next_deadline(
        &self,
        start: tokio::time::Instant,
        received: usize,
    ) -> (tokio::time::Instant, bool) {
        let earned = std::time::Duration::from_secs_f64(
            received as f64 / self.min_bytes_per_sec.max(1) as f64,
        );
        let by_rate = Self::GRACE + earned;
        if by_rate < self.total {
            (start + by_rate, true)
        } else {
            (start + self.total, false)
        }
    }
}

/// Reads the body of a PUT: JSON media type, then the size limit (also for chunked bodies).
/// Parsing it ([`parse_put_body`]) is CPU work for the blocking pool.
pub async fn read_put_body(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
    pace: BodyPace,
) -> Result<web::BytesMut, ApiError> {
    if !is_json(req) {
        return Err(ApiError::UnsupportedMediaType);
    }
    read_limited(req, payload, limit, pace).await
}

/// Reads a whole body of at most `limit` bytes at the given pace, refusing early when
/// Content-Length says more.
pub(super) async fn read_limited(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
    pace: BodyPace,
) -> Result<web::BytesMut, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    let start = tokio::time::Instant::now();
    loop {
        let (deadline, by_rate) = pace.next_deadline(start, body.len());
        let next = tokio::time::timeout_at(deadline, payload.next())
            .await
            .map_err(|_| match by_rate {
                true => ApiError::BodyTooSlow(pace.min_bytes_per_sec),
                false => ApiError::BodyTimeout(pace.total.as_secs()),
            })?;
        let Some(chunk) = next else { break };
        let chunk =
            chunk.map_err(|e| ApiError::InvalidJson(format!("the body could not be read: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads and drops a body of up to `limit` bytes at the given pace (for an answer given before
/// the body was needed); stops at the first error, the limit or the deadline.
pub(super) async fn discard(mut payload: web::Payload, limit: usize, pace: BodyPace) {
    let start = tokio::time::Instant::now();
    let mut received = 0;
    while received <= limit {
        let (deadline, _) = pace.next_deadline(start, received);
        match tokio::time::timeout_at(deadline, payload.next()).await {
            Ok(Some(Ok(chunk))) => received += chunk.len(),
            _ => return,
        }
    }
}

/// Whether the request's `Content-Type` is `application/json` (any parameters, any case).
pub(super) fn is_json(req: &HttpRequest) -> bool {
    let Some(ct) = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
}

/// The `If-Match` header: `*` or a list of entity tags (weak tags never match). An empty
/// header counts as absent.
pub fn if_match(req: &HttpRequest) -> Option<IfMatch> {
    let values: Vec<&str> = req
        .headers()
        .get_all(header::IF_MATCH)
        .map(|v| v.to_str().unwrap_or("\u{0}"))
        .collect();
    if values.iter().any(|v| v.trim() == "*") {
        return Some(IfMatch::Any);
    }
    let tags: Vec<String> = values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .filter(|t| !t.starts_with("W/"))
        .map(|t| t.trim_matches('"').to_ascii_lowercase())
        .collect();
    let only_weak = tags.is_empty() && values.iter().any(|v| v.contains("W/"));
    if tags.is_empty() && !only_weak {
        return None;
    }
    Some(IfMatch::Tags(tags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_parsing() {
        use actix_web::test::TestRequest;
        let parse = |values: &[&str]| {
            let mut req = TestRequest::default();
            for v in values {
                req = req.append_header((header::IF_MATCH, *v));
            }
            if_match(&req.to_http_request())
        };
        assert!(parse(&[]).is_none());
        assert!(parse(&[""]).is_none(), "an empty If-Match counts as absent");
        assert!(matches!(parse(&["*"]), Some(IfMatch::Any)));
        let Some(IfMatch::Tags(tags)) = parse(&["\"ABC\", \"def\"", "W/\"weak\""]) else {
            panic!()
        };
        assert_eq!(tags, ["abc", "def"]);
        // Only weak tags: a precondition that can never match.
        assert!(matches!(parse(&["W/\"x\""]), Some(IfMatch::Tags(t)) if t.is_empty()));
    }
}

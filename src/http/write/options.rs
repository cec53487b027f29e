//! What the query and headers of a write ask for besides its body: a dry run, an `Idempotency-Key` (and the record a commit keeps of it).
use crate::domain::IdempotencyKey;
use crate::http::problem::ApiError;
use crate::storage::{IdempotencyRecord, Storage};
use actix_web::http::header::HeaderName;
use actix_web::HttpRequest;

pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// What the query and headers of a write ask for besides its body.
#[derive(Debug, Default)]
pub(in crate::http) struct WriteOptions {
    pub dry_run: bool,
    pub key: Option<IdempotencyKey>,
}

impl WriteOptions {
    /// `?dry_run=true|false` (400 `invalid_query` otherwise; other parameters are ignored)
    /// and the `Idempotency-Key` header (400 `invalid_idempotency_key`).
    pub fn from_request(req: &HttpRequest) -> Result<Self, ApiError> {
        let dry_run = crate::http::query::dry_run(req.query_string())?;
        let mut keys = req.headers().get_all(&IDEMPOTENCY_KEY);
        let key = match (keys.next(), keys.next()) {
            (None, _) => None,
            (Some(_), Some(_)) => return Err(ApiError::InvalidIdempotencyKey("is sent twice")),
            (Some(v), None) => {
                Some(IdempotencyKey::parse(v.as_bytes()).map_err(ApiError::InvalidIdempotencyKey)?)
            }
        };
        Ok(Self { dry_run, key })
    }

    /// What the commit records: the key and a fingerprint of this request (method, path,
    /// body bytes). A dry run is checked against the key as the real call would be (409,
    /// 422, a replay) and records nothing, since it commits nothing.
    pub fn record(
        &self,
        storage: &Storage,
        req: &HttpRequest,
        body: &[u8],
    ) -> Option<IdempotencyRecord> {
        let key = self.key.clone()?;
        let target = format!("{} {}", req.method(), req.path());
        Some(IdempotencyRecord {
            key,
            fingerprint: storage.fingerprint(&target, body),
        })
    }
}

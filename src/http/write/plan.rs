//! A write, parsed, in one place: the body's JSON and its fields (`PutBody`), its options (dry run, `Idempotency-Key`), each file's new document and preconditions, its subject and restore source.
use crate::domain::{
    json_guard, yaml, CommitId, CommitMessage, CommitName, ConfigurationDoc, ContentError,
    IdempotencyKey, IntegrationDoc, ObjectId, PlanFile, Stored,
};
use crate::http::problem::ApiError;
use crate::storage::{Change, IdempotencyRecord, IfMatch, Preconditions, ShaCheck, Storage};
use crate::validation::{SchemaSet, Violations};
use actix_web::http::header::HeaderName;
use actix_web::HttpRequest;
use serde_json::{Map, Value};
use std::sync::Arc;

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

/// A new version of a file, parsed and valid.
pub(in crate::http) enum NewDoc {
    Integration(IntegrationDoc),
    Configuration(ConfigurationDoc),
}

impl NewDoc {
    pub fn file(&self) -> PlanFile {
        match self {
            NewDoc::Integration(_) => PlanFile::Integration,
            NewDoc::Configuration(_) => PlanFile::Configuration,
        }
    }

    /// What this document breaks of `schemas`, pointers into its content.
    pub fn violations(&self, schemas: &SchemaSet) -> Violations {
        match self {
            NewDoc::Integration(d) => schemas.check_integration(d.content()),
            NewDoc::Configuration(d) => schemas.check_configuration(d.content()),
        }
    }

    fn raw(&self) -> &str {
        match self {
            NewDoc::Integration(d) => d.raw(),
            NewDoc::Configuration(d) => d.raw(),
        }
    }

    /// This document if it passes `schemas`, else 422 `schema_violation`: each violation's
    /// pointer under `at` (the document's place in the request), with its line and column
    /// when the document is YAML text the client sees (`text`).
    pub fn validated(self, schemas: &SchemaSet, at: &str, text: bool) -> Result<Self, ApiError> {
        let found = self.violations(schemas);
        if found.is_empty() {
            return Ok(self);
        }
        let found = if text {
            found.located_in(self.raw())
        } else {
            found
        };
        Err(ApiError::SchemaViolation {
            files: vec![self.file()],
            violations: found.under(at),
        })
    }

    /// A stored version, when it is valid (restore writes only those).
    pub fn from_stored(file: PlanFile, bytes: &[u8]) -> Result<Self, Vec<String>> {
        match file {
            PlanFile::Integration => match IntegrationDoc::from_stored(bytes) {
                Stored::Valid(d) => Ok(NewDoc::Integration(d)),
                Stored::Invalid { errors, .. } => Err(errors),
            },
            PlanFile::Configuration => match ConfigurationDoc::from_stored(bytes) {
                Stored::Valid(d) => Ok(NewDoc::Configuration(d)),
                Stored::Invalid { errors, .. } => Err(errors),
            },
        }
    }
}

/// One file of a planned write: the document and its preconditions; `json` when its content
/// came as JSON (storage edits the stored text into it) rather than YAML text (stored byte
/// for byte).
pub(in crate::http) struct Part {
    pub doc: NewDoc,
    pub json: bool,
    pub preconditions: Preconditions,
}

impl Part {
    /// The change storage commits for this part.
    pub fn change(&self) -> Change {
        let (raw, content) = match &self.doc {
            NewDoc::Integration(d) => (d.raw(), d.content()),
            NewDoc::Configuration(d) => (d.raw(), d.content()),
        };
        Change {
            file: self.doc.file(),
            bytes: raw.as_bytes().to_vec(),
            content: self.json.then(|| Arc::new(content.clone())),
            preconditions: self.preconditions.clone(),
        }
    }
}

/// A write, parsed: its parts, subject and restore source.
pub(in crate::http) struct Planned {
    pub parts: Vec<Part>,
    pub subject: Option<CommitMessage>,
    pub restored_from: Option<CommitId>,
}

/// How a write answers: as its file's PUT, or as `POST /plans/commits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::http) enum Shape {
    Single,
    Both,
}

/// A file's PUT body as a planned write (400s, then 422s, then the preconditions).
pub(in crate::http) fn put(
    file: PlanFile,
    bytes: &[u8],
    source_hosting: bool,
    if_match: Option<IfMatch>,
    schemas: &SchemaSet,
) -> Result<Planned, ApiError> {
    let mut body = parse_put_body(bytes)?;
    let sha = file_sha(file, &body, source_hosting)?;
    let (doc, json) = new_doc(file, &mut body, schemas)?;
    let subject = body.message()?;
    let preconditions = preconditions(file, sha, if_match)?;
    Ok(Planned {
        parts: vec![Part {
            doc,
            json,
            preconditions,
        }],
        subject,
        restored_from: None,
    })
}

/// The `file_sha` of a file's PUT body (400s): the integration file takes one only with
/// source hosting (a blob id); for the configuration file a commit of the history forces the
/// write.
pub(in crate::http) fn file_sha(
    file: PlanFile,
    body: &PutBody,
    source_hosting: bool,
) -> Result<Option<ShaCheck>, ApiError> {
    let file_sha = body.file_sha()?;
    Ok(match file {
        PlanFile::Integration => {
            if file_sha.is_some() && !source_hosting {
                return Err(ApiError::FileShaNotAllowed);
            }
            file_sha.map(ShaCheck::Blob)
        }
        PlanFile::Configuration => file_sha.map(ShaCheck::BlobOrCommit),
    })
}

/// The preconditions of a write; the configuration file needs `file_sha` or `If-Match`
/// (428 `precondition_required`).
pub(in crate::http) fn preconditions(
    file: PlanFile,
    file_sha: Option<ShaCheck>,
    if_match: Option<IfMatch>,
) -> Result<Preconditions, ApiError> {
    if file == PlanFile::Configuration && file_sha.is_none() && if_match.is_none() {
        return Err(ApiError::PreconditionRequired);
    }
    Ok(Preconditions {
        file_sha,
        if_match,
        ancestry: None,
    })
}

/// The new document of a file's PUT body (`content` or `payload`), checked against
/// `schemas`, and whether it came as JSON (edited into the stored text) rather than YAML
/// text (stored byte for byte).
pub(in crate::http) fn new_doc(
    file: PlanFile,
    body: &mut PutBody,
    schemas: &SchemaSet,
) -> Result<(NewDoc, bool), ApiError> {
    let (doc, json) = parse_doc(file, body)?;
    let at = match file {
        PlanFile::Integration => "/content",
        PlanFile::Configuration => "/payload",
    };
    Ok((doc.validated(schemas, at, !json)?, json))
}

fn parse_doc(file: PlanFile, body: &mut PutBody) -> Result<(NewDoc, bool), ApiError> {
    Ok(match file {
        PlanFile::Integration => {
            let content = body.take("content")?;
            let json = content.is_object();
            let doc = IntegrationDoc::from_request(content).map_err(ApiError::InvalidContent)?;
            (NewDoc::Integration(doc), json)
        }
        PlanFile::Configuration => {
            let payload: Value = body.take("payload")?;
            let json = payload.is_object();
            (
                NewDoc::Configuration(
                    ConfigurationDoc::from_request(payload).map_err(ApiError::InvalidContent)?,
                ),
                json,
            )
        }
    })
}

/// A PUT body: a JSON object whose fields are looked up by the handlers.
#[derive(Debug)]
pub struct PutBody(Map<String, Value>);

impl PutBody {
    /// The optional `file_sha` field: null counts as absent; anything else must be 40 hex digits.
    pub fn file_sha(&self) -> Result<Option<ObjectId>, ApiError> {
        match self.0.get("file_sha") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => ObjectId::parse(s)
                .map(Some)
                .map_err(|e| ApiError::InvalidFileSha(e.to_string())),
            Some(other) => Err(ApiError::InvalidFileSha(format!(
                "must be a string, found {}",
                yaml::kind(other)
            ))),
        }
    }

    /// The optional `message` field (the commit subject), cleaned.
    pub fn message(&self) -> Result<Option<CommitMessage>, ApiError> {
        CommitMessage::from_field(self.0.get("message"), "/message")
            .map_err(ApiError::InvalidContent)
    }

    /// The `commit` field of a restore: 40 hex digits (422 at `/commit` otherwise).
    pub fn commit(&self) -> Result<CommitName, ApiError> {
        let bad = |m: String| ApiError::InvalidContent(ContentError::new("/commit", m));
        match self.0.get("commit") {
            None | Some(Value::Null) => Err(bad("is required".into())),
            Some(Value::String(s)) => CommitName::parse(s).map_err(|_| {
                bad(
                    "must be a commit id: 40 hexadecimal digits, or a unique prefix of at least 7"
                        .into(),
                )
            }),
            Some(other) => Err(bad(format!(
                "must be a string, found {}",
                yaml::kind(other)
            ))),
        }
    }

    /// True when the body has `field` with a value other than null (a part it sends).
    pub fn sends(&self, field: &str) -> bool {
        !matches!(self.0.get(field), None | Some(Value::Null))
    }

    /// An optional part of `POST /plans/commits`: a JSON object (absent or null: `None`).
    pub fn part(&mut self, field: &str) -> Result<Option<PutBody>, ApiError> {
        match self.0.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(PutBody(map))),
            Some(other) => Err(ApiError::InvalidContent(ContentError::new(
                format!("/{field}"),
                format!("must be an object, found {}", yaml::kind(&other)),
            ))),
        }
    }

    /// Takes a required field (`content` or `payload`).
    pub fn take(&mut self, field: &str) -> Result<Value, ApiError> {
        self.0.remove(field).ok_or_else(|| {
            ApiError::InvalidContent(ContentError::new(format!("/{field}"), "is required"))
        })
    }
}

/// Parses a complete body: JSON syntax, then a JSON object within the document limits
/// (public for the fuzz targets).
pub fn parse_put_body(body: &[u8]) -> Result<PutBody, ApiError> {
    // The body object is one level above the document.
    let guard = json_guard::scan(body, yaml::MAX_DEPTH + 1);
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) if guard.is_err() => return Err(guard_error(guard.unwrap_err())),
        Err(e) => return Err(ApiError::InvalidJson(e.to_string())),
    };
    guard.map_err(guard_error)?;
    match value {
        Value::Object(map) => Ok(PutBody(map)),
        other => Err(ApiError::InvalidContent(ContentError::new(
            "",
            format!(
                "the body must be a JSON object, found {}",
                yaml::kind(&other)
            ),
        ))),
    }
}

fn guard_error(e: json_guard::GuardError) -> ApiError {
    ApiError::InvalidContent(ContentError::new("", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_rules() {
        assert!(parse_put_body(b"{\"a\":1}").is_ok());
        assert!(matches!(
            parse_put_body(b"{\"a\":"),
            Err(ApiError::InvalidJson(_))
        ));
        assert!(matches!(
            parse_put_body(b"\xff"),
            Err(ApiError::InvalidJson(_))
        ));
        assert!(matches!(
            parse_put_body(b"[1]"),
            Err(ApiError::InvalidContent(_))
        ));
        assert!(matches!(
            parse_put_body(b"{\"a\": 123456789012345678901}"),
            Err(ApiError::InvalidContent(_))
        ));
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            parse_put_body(deep.as_bytes()),
            Err(ApiError::InvalidContent(_))
        ));
    }

    #[test]
    fn file_sha_rules() {
        let body = |v: Value| PutBody(v.as_object().unwrap().clone());
        assert!(body(serde_json::json!({})).file_sha().unwrap().is_none());
        assert!(body(serde_json::json!({"file_sha": null}))
            .file_sha()
            .unwrap()
            .is_none());
        for bad in [
            serde_json::json!(1),
            serde_json::json!("abc"),
            serde_json::json!(["x"]),
        ] {
            assert!(matches!(
                body(serde_json::json!({"file_sha": bad})).file_sha(),
                Err(ApiError::InvalidFileSha(_))
            ));
        }
    }
}

//! A write, parsed: its options (dry run, `Idempotency-Key`), each file's new document and preconditions, its subject and restore source.
use crate::domain::{
    CommitId, CommitMessage, ConfigurationDoc, IdempotencyKey, IntegrationDoc, PlanFile, Stored,
};
use crate::http::body::PutBody;
use crate::http::problem::ApiError;
use crate::storage::{Change, IdempotencyRecord, IfMatch, Preconditions, ShaCheck, Storage};
use actix_web::http::header::HeaderName;
use actix_web::HttpRequest;
use serde_json::Value;
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
) -> Result<Planned, ApiError> {
    let mut body = crate::http::body::parse_put_body(bytes)?;
    let sha = file_sha(file, &body, source_hosting)?;
    let (doc, json) = new_doc(file, &mut body)?;
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

/// The new document of a file's PUT body (`content` or `payload`), and whether it came as
/// JSON (edited into the stored text) rather than YAML text (stored byte for byte).
pub(in crate::http) fn new_doc(
    file: PlanFile,
    body: &mut PutBody,
) -> Result<(NewDoc, bool), ApiError> {
    Ok(match file {
        PlanFile::Integration => {
            let content = body.take("content")?;
            let json = content.is_object();
            let doc = IntegrationDoc::from_request(content).map_err(ApiError::InvalidContent)?;
            (NewDoc::Integration(doc), json)
        }
        PlanFile::Configuration => {
            let payload: Value = body.take("payload")?;
            (
                NewDoc::Configuration(
                    ConfigurationDoc::from_request(payload).map_err(ApiError::InvalidContent)?,
                ),
                true,
            )
        }
    })
}

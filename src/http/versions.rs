//! The versions endpoints (both files in one commit, restore, diff) and what every write shares: its message, dry run and `Idempotency-Key`.
use super::body::{self, PutBody};
use super::handlers::{blocking, require, Reply};
use super::middleware::WrittenCommit;
use super::openapi::{WriteHeaders, WriteProblems, WriteQuery};
use super::problem::{ApiError, Problem};
#[allow(unused_imports)]
use super::schema::{
    CommitsAnswer, ConfigurationFile, FileDiff, IntegrationFile, PostCommits, RestoreFile,
};
use super::{views, AppState};
use crate::auth::Principal;
use crate::domain::yaml::Mapping;
use crate::domain::{
    json_patch, CommitId, CommitMessage, ConfigurationDoc, ContentError, IdempotencyKey,
    IntegrationDoc, PlanFile, RequestId, Stored,
};
use crate::storage::{
    Change, CommitOutcome, CommitRequest, IdempotencyRecord, IdempotentHit, Preconditions,
    ShaCheck, StorageError,
};
use crate::writer::{Committed, WriteError};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use serde_json::{json, Map, Value};
use std::sync::Arc;

pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// What the query and headers of a write ask for besides its body.
#[derive(Debug, Default)]
pub(super) struct WriteOptions {
    pub dry_run: bool,
    pub key: Option<IdempotencyKey>,
}

impl WriteOptions {
    /// `?dry_run=true|false` (400 `invalid_query` otherwise; other parameters are ignored)
    /// and the `Idempotency-Key` header (400 `invalid_idempotency_key`).
    pub fn from_request(req: &HttpRequest) -> Result<Self, ApiError> {
        let dry_run = match super::query::single_param(req.query_string(), "dry_run")? {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(_) => {
                return Err(ApiError::InvalidQuery(
                    "dry_run must be true or false".into(),
                ))
            }
        };
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
        storage: &crate::storage::Storage,
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
pub(super) enum NewDoc {
    Integration(IntegrationDoc),
    Configuration(ConfigurationDoc),
}

impl NewDoc {
    fn file(&self) -> PlanFile {
        match self {
            NewDoc::Integration(_) => PlanFile::Integration,
            NewDoc::Configuration(_) => PlanFile::Configuration,
        }
    }

    fn content(&self) -> Value {
        Value::Object(match self {
            NewDoc::Integration(d) => d.content().clone(),
            NewDoc::Configuration(d) => d.content().clone(),
        })
    }

    /// This document with the text storage holds for it (see `IntegrationDoc::stored_as`).
    /// (A configuration answer shows no text.)
    fn stored_as(self, bytes: &[u8]) -> Self {
        match self {
            NewDoc::Integration(d) => NewDoc::Integration(d.stored_as(bytes)),
            other => other,
        }
    }

    /// The GET body of this version (with `commit_sha` when given).
    fn body(self, sha: crate::domain::BlobId, commit: Option<CommitId>) -> web::Bytes {
        match self {
            NewDoc::Integration(d) => views::integration_body(Stored::Valid(d), &[], sha, commit),
            NewDoc::Configuration(d) => views::configuration_body(Stored::Valid(d), sha, commit),
        }
    }

    /// A stored version, when it is valid (restore writes only those).
    fn from_stored(file: PlanFile, bytes: &[u8]) -> Result<Self, Vec<String>> {
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

/// One file of a planned write: the document, its bytes and its preconditions.
pub(super) struct Part {
    pub doc: NewDoc,
    pub bytes: Vec<u8>,
    /// JSON content: storage edits the stored text into it (see `Change::content`).
    pub edit: Option<Arc<Mapping>>,
    pub preconditions: Preconditions,
}

impl Part {
    /// A part from a request body; `json` when its content came as JSON, not YAML text.
    pub fn new(doc: NewDoc, json: bool, preconditions: Preconditions) -> Self {
        let (bytes, edit) = match &doc {
            NewDoc::Integration(d) => (d.raw(), json.then(|| Arc::new(d.content().clone()))),
            NewDoc::Configuration(d) => (d.raw(), json.then(|| Arc::new(d.content().clone()))),
        };
        Self {
            bytes: bytes.as_bytes().to_vec(),
            doc,
            edit,
            preconditions,
        }
    }
}

/// A write, parsed: its parts, subject and restore source.
pub(super) struct Planned {
    pub parts: Vec<Part>,
    pub subject: Option<CommitMessage>,
    pub restored_from: Option<CommitId>,
    pub record: Option<IdempotencyRecord>,
    pub dry_run: bool,
}

/// How a write answers: as its file's PUT, or as `POST /plans/commits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Single,
    Both,
}

impl AppState {
    /// Runs a planned write in the tenant's turn and answers it.
    pub(super) async fn run_write(
        &self,
        who: &Principal,
        req: &HttpRequest,
        planned: Planned,
        shape: Shape,
    ) -> Reply {
        let request_id = req
            .extensions()
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(RequestId::generate);
        let files: Vec<PlanFile> = planned.parts.iter().map(|p| p.doc.file()).collect();
        let first = files[0];
        let commit = CommitRequest {
            changes: planned
                .parts
                .iter()
                .map(|p| Change {
                    file: p.doc.file(),
                    bytes: p.bytes.clone(),
                    content: p.edit.clone(),
                    preconditions: p.preconditions.clone(),
                })
                .collect(),
            subject: planned.subject.map(CommitMessage::into_string),
            restored_from: planned.restored_from,
            idempotency: planned.record,
            dry_run: planned.dry_run,
            author: who.author(),
            request_id,
        };
        let committed =
            self.writers
                .commit(who.tenant(), commit)
                .await
                .map_err(|e| match shape {
                    Shape::Single => ApiError::from_write(e, first),
                    Shape::Both => part_error(e, first),
                })?;
        match committed {
            Committed::Replayed(hit) => self.replay(who, hit, files, shape).await,
            Committed::Written(outcome) => {
                let docs = planned.parts.into_iter().map(|p| p.doc).collect();
                let answer = if planned.dry_run {
                    // The patch parses the stored file and diffs both: CPU work, off the
                    // worker, under one of the tenant's render turns.
                    let turn = self.render_turn(who.tenant()).await?;
                    web::block(move || {
                        let _turn = turn;
                        render(docs, outcome, shape)
                    })
                    .await
                    .map_err(|e| ApiError::Internal(format!("the render task failed: {e}")))?
                } else {
                    render(docs, outcome, shape)
                };
                Ok(answer.respond())
            }
        }
    }

    /// The answer a first request with the same key and fingerprint got: the state of its
    /// commit, marked `Idempotent-Replayed: true`.
    async fn replay(
        &self,
        who: &Principal,
        hit: IdempotentHit,
        files: Vec<PlanFile>,
        shape: Shape,
    ) -> Reply {
        let (storage, tenant) = (self.storage.clone(), who.tenant().clone());
        let commit = hit.commit;
        let bodies = blocking(
            move || {
                files
                    .into_iter()
                    .map(|file| {
                        let snap = storage.read_at(&tenant, file, commit)?;
                        let at = (shape == Shape::Single).then_some(commit);
                        Ok((
                            file,
                            views::stored_body(file, &snap.bytes, snap.blob, at),
                            snap.blob,
                        ))
                    })
                    .collect::<Result<Vec<_>, StorageError>>()
            },
            PlanFile::Integration,
        )
        .await?;
        let mut res = match shape {
            Shape::Single => {
                let (_, body, blob) = bodies.into_iter().next().expect("one file");
                views::respond(body, views::etag(blob))
            }
            Shape::Both => {
                let mut out = Map::new();
                out.insert("commit_sha".into(), json!(commit));
                for (file, body, _) in bodies {
                    out.insert(file.part_name().into(), parse(&body));
                }
                json_response(&Value::Object(out))
            }
        };
        res.headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        Ok(res)
    }
}

/// A write's answer, built where the work is and sent from the worker.
struct Answer {
    body: web::Bytes,
    etag: Option<crate::domain::BlobId>,
    written: Option<WrittenCommit>,
}

impl Answer {
    fn respond(self) -> HttpResponse {
        let mut res = match self.etag {
            Some(blob) => views::respond(self.body, views::etag(blob)),
            None => json_bytes(self.body),
        };
        if let Some(written) = self.written {
            res.extensions_mut().insert(written);
        }
        res
    }
}

/// The answer of a write that ran (or of its dry run).
fn render(docs: Vec<NewDoc>, outcome: CommitOutcome, shape: Shape) -> Answer {
    let mut parts = Vec::new();
    for (doc, file) in docs.into_iter().zip(&outcome.files) {
        let patch = file.before.as_ref().map(|before| {
            serde_json::to_value(json_patch::diff(
                &stored_content(file.file, before),
                &doc.content(),
            ))
            .expect("patches serialize")
        });
        let at = (shape == Shape::Single).then_some(outcome.commit).flatten();
        let body = doc.stored_as(&file.bytes).body(file.blob, at);
        parts.push((file, body, patch));
    }
    let written = outcome.commit.and_then(|commit| {
        let f = outcome
            .files
            .iter()
            .find(|f| f.changed)
            .or(outcome.files.first())?;
        Some(WrittenCommit {
            commit,
            file: f.file,
            changed: outcome.changed(),
            forced: f.forced,
            made: f.made,
        })
    });
    match shape {
        Shape::Single => {
            let (file, body, patch) = parts.pop().expect("one part");
            let body = match patch {
                Some(patch) => {
                    let mut value = parse(&body);
                    value["commit_sha"] = Value::Null;
                    value["patch"] = patch;
                    web::Bytes::from(value.to_string())
                }
                None => body,
            };
            Answer {
                body,
                etag: Some(file.blob),
                written,
            }
        }
        Shape::Both => {
            let mut out = Map::new();
            out.insert("commit_sha".into(), json!(outcome.commit));
            for (file, body, patch) in parts {
                let mut value = parse(&body);
                if let Some(patch) = patch {
                    value["patch"] = patch;
                }
                out.insert(file.file.part_name().into(), value);
            }
            Answer {
                body: web::Bytes::from(Value::Object(out).to_string()),
                etag: None,
                written,
            }
        }
    }
}

/// The `content` a GET shows for stored bytes (`{}` for a file that is not a mapping).
pub(super) fn stored_content(file: PlanFile, bytes: &[u8]) -> Value {
    Value::Object(match file {
        PlanFile::Integration => match IntegrationDoc::from_stored(bytes) {
            Stored::Valid(d) => d.into_parts().0,
            Stored::Invalid { content, .. } => content,
        },
        PlanFile::Configuration => match ConfigurationDoc::from_stored(bytes) {
            Stored::Valid(d) => d.into_content(),
            Stored::Invalid { content, .. } => content,
        },
    })
}

fn parse(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("rendered bodies are JSON")
}

fn json_response(value: &Value) -> HttpResponse {
    json_bytes(web::Bytes::from(value.to_string()))
}

fn json_bytes(body: web::Bytes) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("Cache-Control", "no-store"))
        .content_type("application/json")
        .body(body)
}

/// Maps a failed write of both files: an error about one file names its part.
fn part_error(e: WriteError, first: PlanFile) -> ApiError {
    let file = match &e {
        WriteError::Storage(
            StorageError::ShaMismatch { file, .. } | StorageError::PreconditionFailed { file, .. },
        ) => PlanFile::ALL.into_iter().find(|f| f.path() == *file),
        _ => None,
    };
    match file {
        Some(file) => ApiError::from_write(e, file).in_part(file),
        None => ApiError::from_write(e, first),
    }
}

/// The `file_sha` of a file's PUT body (400s): the integration file takes one only with
/// source hosting (a blob id); for the configuration file a commit of the history forces the
/// write.
pub(super) fn file_sha(
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
pub(super) fn preconditions(
    file: PlanFile,
    file_sha: Option<ShaCheck>,
    if_match: Option<crate::storage::IfMatch>,
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
pub(super) fn new_doc(file: PlanFile, body: &mut PutBody) -> Result<(NewDoc, bool), ApiError> {
    Ok(match file {
        PlanFile::Integration => {
            let content = body.take("content")?;
            let json = content.is_object();
            let doc = IntegrationDoc::from_request(content).map_err(ApiError::InvalidContent)?;
            (NewDoc::Integration(doc), json)
        }
        PlanFile::Configuration => (
            NewDoc::Configuration(
                ConfigurationDoc::from_request(body.take("payload")?)
                    .map_err(ApiError::InvalidContent)?,
            ),
            true,
        ),
    })
}

/// `POST /plans/commits`: both files (or one) in one commit, all or nothing.
#[utoipa::path(
    post,
    path = "/plans/commits",
    tag = "versions",
    description = "Write one or both files in one commit, all or nothing. Each part follows its PUT's rules and needs its own write permission; a failed part is named by the problem's pointer (/integration-file/..., /configuration-file/...).",
    request_body(content = PostCommits, content_type = "application/json"),
    params(
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Written (or unchanged): the commit and the new state of each part sent", body = CommitsAnswer, headers(("Idempotent-Replayed" = String, description = "true when this answers an earlier request with the same Idempotency-Key"))),
        (status = 403, description = "The token lacks the write permission of a file sent", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The token's tenant does not exist", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "precondition_required: no file_sha (and no If-Match) for the configuration file", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn post_commits(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    let any = if who.can_write(PlanFile::Integration) {
        PlanFile::Integration
    } else {
        PlanFile::Configuration
    };
    if let Err(e) = state.shed_write(&who, any).await {
        return Err(state.unread(payload, e).await);
    }
    let tenant = state.tenant(&who, any).await?;
    require(who.can_write(any), any.write_permission())?;
    let turn = match state.admit(&req, who.tenant(), state.body_limit).await {
        Ok(turn) => turn,
        Err(e) => return Err(state.unread(payload, e).await),
    };
    let bytes = state.read_body(&req, payload).await?;
    let options = WriteOptions::from_request(&req)?;
    let record = options.record(&state.storage, &req, &bytes);
    let source_hosting = tenant.source_hosting;
    let granted = [PlanFile::Integration, PlanFile::Configuration].map(|f| who.can_write(f));
    // The contract's order across both parts: every part's permission (403), then every
    // part's 400s, then the 422s (parts, contents, message), then the preconditions (428).
    let (parts, subject) = super::handlers::cpu(bytes.len(), move || {
        let mut body = body::parse_put_body(&bytes)?;
        let sent: Vec<PlanFile> = PlanFile::ALL
            .into_iter()
            .filter(|file| body.sends(file.part_name()))
            .collect();
        for (file, granted) in PlanFile::ALL.into_iter().zip(granted) {
            if sent.contains(&file) {
                require(granted, file.write_permission()).map_err(|e| e.in_part(file))?;
            }
        }
        let mut found = Vec::new();
        for file in sent {
            let part = body.part(file.part_name());
            let sha = match &part {
                Ok(Some(part)) => {
                    file_sha(file, part, source_hosting).map_err(|e| e.in_part(file))?
                }
                _ => None,
            };
            found.push((file, part, sha));
        }
        let mut parts = Vec::new();
        for (file, part, sha) in found {
            let mut part = part?.expect("a part that is sent is not null");
            let (doc, json) = new_doc(file, &mut part).map_err(|e| e.in_part(file))?;
            parts.push((file, doc, json, sha));
        }
        let subject = body.message()?;
        if parts.is_empty() {
            return Err(ApiError::InvalidContent(ContentError::new(
                "",
                "send integration-file, configuration-file or both",
            )));
        }
        parts
            .into_iter()
            .map(|(file, doc, json, sha)| {
                let pre = preconditions(file, sha, None).map_err(|e| e.in_part(file))?;
                Ok(Part::new(doc, json, pre))
            })
            .collect::<Result<Vec<_>, ApiError>>()
            .map(|parts| (parts, subject))
    })
    .await?;
    // If-Match names one file's version, and this resource has none: the condition is false
    // (RFC 9110, 13.1.1), so the write does not happen. Each part's file_sha is the guard.
    if req
        .headers()
        .contains_key(actix_web::http::header::IF_MATCH)
    {
        return Err(ApiError::IfMatchWithoutRepresentation);
    }
    drop(turn);
    let planned = Planned {
        parts,
        subject,
        restored_from: None,
        record,
        dry_run: options.dry_run,
    };
    state.run_write(&who, &req, planned, Shape::Both).await
}

/// `POST /plans/integration-file/restore`.
#[utoipa::path(
    post,
    path = "/plans/integration-file/restore",
    tag = "versions",
    description = "Write the file back as it was in a commit of main's history (bytes exactly), as a new commit with the trailer Restored-From. Preconditions as the file's PUT.",
    request_body(content = RestoreFile, content_type = "application/json"),
    params(
        ("If-Match" = Option<String>, Header, description = "The quoted blob id from the last read; 412 when it differs"),
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Restored (or unchanged): the PUT's answer", body = IntegrationFile, headers(("ETag" = String, description = "The new blob id, quoted"), ("Idempotent-Replayed" = String, description = "true on a replay"))),
        (status = 404, description = "tenant_not_found, or unknown_ref: commit is not main or an ancestor", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.integrations.write", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn restore_integration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    state
        .restore(who, req, payload, PlanFile::Integration)
        .await
}

/// `POST /plans/configuration-file/restore`.
#[utoipa::path(
    post,
    path = "/plans/configuration-file/restore",
    tag = "versions",
    description = "Write the file back as it was in a commit of main's history (bytes exactly), as a new commit with the trailer Restored-From. Preconditions as the file's PUT.",
    request_body(content = RestoreFile, content_type = "application/json"),
    params(
        ("If-Match" = Option<String>, Header, description = "The quoted blob id from the last read; 412 when it differs"),
        WriteQuery,
        WriteHeaders,
    ),
    responses(
        (status = 200, description = "Restored (or unchanged): the PUT's answer", body = ConfigurationFile, headers(("ETag" = String, description = "The new blob id, quoted"), ("Idempotent-Replayed" = String, description = "true on a replay"))),
        (status = 404, description = "tenant_not_found, or unknown_ref: commit is not main or an ancestor", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks jit.preferences.write", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "precondition_required: no file_sha and no If-Match", body = Problem, content_type = "application/problem+json"),
        WriteProblems,
    ),
    security(("bearer" = []))
)]
pub async fn restore_configuration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
    payload: web::Payload,
) -> Reply {
    state
        .restore(who, req, payload, PlanFile::Configuration)
        .await
}

/// `GET /plans/integration-file/diff`.
#[utoipa::path(
    get,
    path = "/plans/integration-file/diff",
    tag = "versions",
    description = "What changed in the file between two commits of main's history: an RFC 6902 patch keyed by account_id / path, and the unified diff.",
    params(
        ("from" = String, Query, pattern = "^[0-9a-fA-F]{40}$", description = "A commit of main's history"),
        ("to" = Option<String>, Query, pattern = "^[0-9a-fA-F]{40}$", description = "A commit of main's history (default: main)"),
        ("X-Request-Id" = Option<String>, Header, description = "Kept when it is 1-128 of [A-Za-z0-9._:-]"),
    ),
    responses(
        (status = 200, description = "The diff", body = FileDiff),
        (status = 400, description = "invalid_query: from missing, or not a 40-hex id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, or the token was refused", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks the read permission of the file", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Server fault", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy; retry", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn diff_integration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    state.diff(who, req, PlanFile::Integration).await
}

/// `GET /plans/configuration-file/diff`.
#[utoipa::path(
    get,
    path = "/plans/configuration-file/diff",
    tag = "versions",
    description = "What changed in the file between two commits of main's history: an RFC 6902 patch keyed by account_id / path, and the unified diff.",
    params(
        ("from" = String, Query, pattern = "^[0-9a-fA-F]{40}$", description = "A commit of main's history"),
        ("to" = Option<String>, Query, pattern = "^[0-9a-fA-F]{40}$", description = "A commit of main's history (default: main)"),
        ("X-Request-Id" = Option<String>, Header, description = "Kept when it is 1-128 of [A-Za-z0-9._:-]"),
    ),
    responses(
        (status = 200, description = "The diff", body = FileDiff),
        (status = 400, description = "invalid_query: from missing, or not a 40-hex id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No token, or the token was refused", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The token lacks the read permission of the file", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "tenant_not_found, or unknown_ref", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Server fault", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "busy; retry", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn diff_configuration(
    state: web::Data<AppState>,
    who: Principal,
    req: HttpRequest,
) -> Reply {
    state.diff(who, req, PlanFile::Configuration).await
}

impl AppState {
    /// A restore: the file's bytes as of `commit`, under the preconditions of its PUT.
    async fn restore(
        &self,
        who: Principal,
        req: HttpRequest,
        payload: web::Payload,
        file: PlanFile,
    ) -> Reply {
        if let Err(e) = self.shed_write(&who, file).await {
            return Err(self.unread(payload, e).await);
        }
        let tenant = self.tenant(&who, file).await?;
        require(who.can_write(file), file.write_permission())?;
        let turn = match self.admit(&req, who.tenant(), self.body_limit).await {
            Ok(turn) => turn,
            Err(e) => return Err(self.unread(payload, e).await),
        };
        let bytes = self.read_body(&req, payload).await?;
        let options = WriteOptions::from_request(&req)?;
        let record = options.record(&self.storage, &req, &bytes);
        let source_hosting = tenant.source_hosting;
        let (commit, subject, sha) = super::handlers::cpu(bytes.len(), move || {
            let body = body::parse_put_body(&bytes)?;
            let sha = file_sha(file, &body, source_hosting)?;
            Ok((body.commit()?, body.message()?, sha))
        })
        .await?;
        drop(turn);
        // Whether `commit` is in main's history is a walk of it: a render turn of the tenant's.
        let render = self.render_turn(who.tenant()).await?;
        let (storage, owned) = (self.storage.clone(), who.tenant().clone());
        let (doc, bytes) = blocking(
            move || {
                let _turn = render;
                let snap = storage.read_at(&owned, file, commit)?;
                Ok(snap.bytes)
            },
            file,
        )
        .await
        .and_then(|bytes| {
            let doc = NewDoc::from_stored(file, &bytes).map_err(|errors| {
                ApiError::InvalidContent(ContentError::new(
                    "/commit",
                    format!(
                        "the file in that commit is not valid, so it is not restored: {}",
                        errors.join("; ")
                    ),
                ))
            })?;
            Ok((doc, bytes))
        })?;
        // Preconditions come last (contract order): an unknown commit is 404 before a 428.
        let pre = preconditions(file, sha, body::if_match(&req))?;
        let planned = Planned {
            parts: vec![Part {
                doc,
                bytes,
                edit: None,
                preconditions: pre,
            }],
            subject,
            restored_from: Some(commit),
            record,
            dry_run: options.dry_run,
        };
        self.run_write(&who, &req, planned, Shape::Single).await
    }

    /// A diff of `file` between two commits of `main`'s history.
    async fn diff(&self, who: Principal, req: HttpRequest, file: PlanFile) -> Reply {
        self.tenant(&who, file).await?;
        require(who.can_read(file), file.read_permission())?;
        let (from, to) = super::query::diff_query(req.query_string())?;
        let turn = self.render_turn(who.tenant()).await?;
        let (storage, tenant) = (self.storage.clone(), who.tenant().clone());
        let body = blocking(
            move || {
                let _turn = turn;
                let diff = storage.diff(&tenant, file, from, to)?;
                let patch = json_patch::diff(
                    &stored_content(file, &diff.from.bytes),
                    &stored_content(file, &diff.to.bytes),
                );
                Ok(json!({
                    "from": {"commit_sha": diff.from.commit, "file_sha": diff.from.blob},
                    "to": {"commit_sha": diff.to.commit, "file_sha": diff.to.blob},
                    "patch": patch,
                    "text": diff.text,
                }))
            },
            file,
        )
        .await?;
        Ok(json_response(&body))
    }
}

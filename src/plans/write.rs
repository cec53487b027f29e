//! A write, planned: the body's JSON and its fields (`PutBody`), each file's new document held to its rules, its preconditions, its subject and restore source, for a file's PUT, a write of both files and a restore, in the contract's order.
use super::rules::{self, NewDoc};
use super::PlanError;
use crate::domain::{
    json_guard, yaml, CommitId, CommitMessage, CommitName, ContentError, ObjectId, PlanFile,
};
use crate::storage::{Change, IfMatch, Preconditions, ShaCheck};
use crate::validation::{SchemaSet, Violations};
use serde_json::{Map, Value};
use std::sync::Arc;

/// One file of a planned write: the document and its preconditions; `json` when its content
/// came as JSON (storage edits the stored text into it) rather than YAML text (stored byte
/// for byte).
pub struct Part {
    pub doc: NewDoc,
    pub json: bool,
    pub preconditions: Preconditions,
}

impl Part {
    /// The change storage commits for this part.
    pub fn change(&self) -> Change {
        Change {
            file: self.doc.file(),
            bytes: self.doc.raw().as_bytes().to_vec(),
            content: self.json.then(|| Arc::new(self.doc.content().clone())),
            preconditions: self.preconditions.clone(),
        }
    }
}

/// A write, planned: its parts, subject and restore source.
pub struct Planned {
    pub parts: Vec<Part>,
    pub subject: Option<CommitMessage>,
    pub restored_from: Option<CommitId>,
}

/// A file's PUT body as a planned write (400s, then 422s, then the preconditions).
pub fn put(
    file: PlanFile,
    bytes: &[u8],
    source_hosting: bool,
    if_match: Option<IfMatch>,
    schemas: &SchemaSet,
) -> Result<Planned, PlanError> {
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

/// The body of a write of both files (`POST /plans/commits`) as a planned write, in the
/// contract's order across both parts: every part's permission (403), then every part's
/// 400s, then the 422s (parts, contents, message), then the preconditions (428).
pub fn both(
    bytes: &[u8],
    source_hosting: bool,
    granted: [bool; 2],
    schemas: &SchemaSet,
) -> Result<Planned, PlanError> {
    let mut body = parse_put_body(bytes)?;
    let (parts, subject) = parts_of(
        &mut body,
        source_hosting,
        granted,
        schemas,
        PutBody::message,
    )?;
    Ok(Planned {
        parts,
        subject,
        restored_from: None,
    })
}

/// The parts of a body that sends one or both files (`POST /plans/commits`, a proposal), in
/// the contract's order: every part's permission (403), every part's 400s, the 422s (parts,
/// contents, then the body's own `fields`), then the preconditions (428).
pub(super) fn parts_of<T>(
    body: &mut PutBody,
    source_hosting: bool,
    granted: [bool; 2],
    schemas: &SchemaSet,
    fields: impl FnOnce(&PutBody) -> Result<T, PlanError>,
) -> Result<(Vec<Part>, T), PlanError> {
    let sent: Vec<PlanFile> = PlanFile::ALL
        .into_iter()
        .filter(|file| body.sends(file.part_name()))
        .collect();
    for (file, granted) in PlanFile::ALL.into_iter().zip(granted) {
        if sent.contains(&file) && !granted {
            return Err(PlanError::Forbidden(file.write_permission()).in_part(file));
        }
    }
    let mut found = Vec::new();
    for file in sent {
        let part = body.part(file.part_name());
        let sha = match &part {
            Ok(Some(part)) => file_sha(file, part, source_hosting).map_err(|e| e.in_part(file))?,
            _ => None,
        };
        found.push((file, part, sha));
    }
    let mut parts = Vec::new();
    // Every part's violations at once (up to 100 in all), each pointer under its part.
    let mut refused: Vec<(PlanFile, Violations)> = Vec::new();
    for (file, part, sha) in found {
        let mut part = part?.expect("a part that is sent is not null");
        match new_doc(file, &mut part, schemas) {
            Ok((doc, json)) => parts.push((file, doc, json, sha)),
            Err(PlanError::SchemaViolation { violations, .. }) => refused.push((file, violations)),
            Err(e) => return Err(e.in_part(file)),
        }
    }
    match refused.as_slice() {
        [] => {}
        [(file, violations)] => {
            return Err(PlanError::SchemaViolation {
                files: vec![*file],
                violations: violations.clone(),
            }
            .in_part(*file))
        }
        _ => {
            let files = refused.iter().map(|(f, _)| *f).collect();
            let violations = refused
                .into_iter()
                .map(|(f, v)| v.under(&format!("/{}", f.part_name())))
                .reduce(Violations::and)
                .unwrap_or_default();
            return Err(PlanError::SchemaViolation { files, violations });
        }
    }
    let fields = fields(body)?;
    if parts.is_empty() {
        return Err(PlanError::InvalidContent(ContentError::new(
            "",
            "send integration-file, configuration-file or both",
        )));
    }
    let parts = parts
        .into_iter()
        .map(|(file, doc, json, sha)| {
            let preconditions = preconditions(file, sha, None).map_err(|e| e.in_part(file))?;
            Ok(Part {
                doc,
                json,
                preconditions,
            })
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    Ok((parts, fields))
}

/// What a restore's body asks for: the commit (a name, resolved by storage), the subject,
/// and `file_sha` (400s, then 422s).
pub struct RestoreBody {
    pub commit: CommitName,
    pub subject: Option<CommitMessage>,
    pub file_sha: Option<ShaCheck>,
}

/// A restore's body, parsed.
pub fn restore_body(
    file: PlanFile,
    bytes: &[u8],
    source_hosting: bool,
) -> Result<RestoreBody, PlanError> {
    let body = parse_put_body(bytes)?;
    let file_sha = file_sha(file, &body, source_hosting)?;
    Ok(RestoreBody {
        commit: body.commit()?,
        subject: body.message()?,
        file_sha,
    })
}

/// A restore of `file` to its stored `bytes` in `commit`, planned: the version held to
/// today's rules ([`rules::restorable`]), then the PUT's preconditions (428 last, as the
/// contract orders).
pub fn restore(
    file: PlanFile,
    doc: NewDoc,
    commit: CommitId,
    body: RestoreBody,
    if_match: Option<IfMatch>,
) -> Result<Planned, PlanError> {
    let preconditions = preconditions(file, body.file_sha, if_match)?;
    Ok(Planned {
        parts: vec![Part {
            doc,
            json: false,
            preconditions,
        }],
        subject: body.subject,
        restored_from: Some(commit),
    })
}

/// The `file_sha` of a file's PUT body (400s): the integration file takes one only with
/// source hosting (a blob id); for the configuration file a commit of the history forces the
/// write.
fn file_sha(
    file: PlanFile,
    body: &PutBody,
    source_hosting: bool,
) -> Result<Option<ShaCheck>, PlanError> {
    let file_sha = body.file_sha()?;
    Ok(match file {
        PlanFile::Integration => {
            if file_sha.is_some() && !source_hosting {
                return Err(PlanError::FileShaNotAllowed);
            }
            file_sha.map(ShaCheck::Blob)
        }
        PlanFile::Configuration => file_sha.map(ShaCheck::BlobOrCommit),
    })
}

/// The preconditions of a write; the configuration file needs `file_sha` or `If-Match`
/// (428 `precondition_required`).
fn preconditions(
    file: PlanFile,
    file_sha: Option<ShaCheck>,
    if_match: Option<IfMatch>,
) -> Result<Preconditions, PlanError> {
    if file == PlanFile::Configuration && file_sha.is_none() && if_match.is_none() {
        return Err(PlanError::PreconditionRequired);
    }
    Ok(Preconditions {
        file_sha,
        if_match,
        ancestry: None,
    })
}

/// The new document of a file's PUT body (`content` or `payload`) held to its rules, and
/// whether it came as JSON.
fn new_doc(
    file: PlanFile,
    body: &mut PutBody,
    schemas: &SchemaSet,
) -> Result<(NewDoc, bool), PlanError> {
    let field = match file {
        PlanFile::Integration => "content",
        PlanFile::Configuration => "payload",
    };
    rules::requested(file, body.take(field)?, schemas)
}

/// A PUT body: a JSON object whose fields are looked up by the handlers.
#[derive(Debug)]
pub struct PutBody(Map<String, Value>);

impl PutBody {
    /// The optional `file_sha` field: null counts as absent; anything else must be 40 hex digits.
    pub fn file_sha(&self) -> Result<Option<ObjectId>, PlanError> {
        match self.0.get("file_sha") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => ObjectId::parse(s)
                .map(Some)
                .map_err(|e| PlanError::InvalidFileSha(e.to_string())),
            Some(other) => Err(PlanError::InvalidFileSha(format!(
                "must be a string, found {}",
                yaml::kind(other)
            ))),
        }
    }

    /// The optional `message` field (the commit subject), cleaned.
    pub fn message(&self) -> Result<Option<CommitMessage>, PlanError> {
        CommitMessage::from_field(self.0.get("message"), "/message")
            .map_err(PlanError::InvalidContent)
    }

    /// A field's raw value, for the rules of another kind of body (a proposal's).
    pub(super) fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field)
    }

    /// The `commit` field of a restore: 40 hex digits (422 at `/commit` otherwise).
    pub fn commit(&self) -> Result<CommitName, PlanError> {
        let bad = |m: String| PlanError::InvalidContent(ContentError::new("/commit", m));
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
    pub fn part(&mut self, field: &str) -> Result<Option<PutBody>, PlanError> {
        match self.0.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(PutBody(map))),
            Some(other) => Err(PlanError::InvalidContent(ContentError::new(
                format!("/{field}"),
                format!("must be an object, found {}", yaml::kind(&other)),
            ))),
        }
    }

    /// Takes a required field (`content` or `payload`).
    pub fn take(&mut self, field: &str) -> Result<Value, PlanError> {
        self.0.remove(field).ok_or_else(|| {
            PlanError::InvalidContent(ContentError::new(format!("/{field}"), "is required"))
        })
    }
}

/// Parses a complete body: JSON syntax, then a JSON object within the document limits
/// (public for the fuzz targets).
pub fn parse_put_body(body: &[u8]) -> Result<PutBody, PlanError> {
    // The body object is one level above the document.
    let guard = json_guard::scan(body, yaml::MAX_DEPTH + 1);
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) if guard.is_err() => return Err(guard_error(guard.unwrap_err())),
        Err(e) => return Err(PlanError::InvalidJson(e.to_string())),
    };
    guard.map_err(guard_error)?;
    match value {
        Value::Object(map) => Ok(PutBody(map)),
        other => Err(PlanError::InvalidContent(ContentError::new(
            "",
            format!(
                "the body must be a JSON object, found {}",
                yaml::kind(&other)
            ),
        ))),
    }
}

fn guard_error(e: json_guard::GuardError) -> PlanError {
    PlanError::InvalidContent(ContentError::new("", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_rules() {
        assert!(parse_put_body(b"{\"a\":1}").is_ok());
        assert!(matches!(
            parse_put_body(b"{\"a\":"),
            Err(PlanError::InvalidJson(_))
        ));
        assert!(matches!(
            parse_put_body(b"\xff"),
            Err(PlanError::InvalidJson(_))
        ));
        assert!(matches!(
            parse_put_body(b"[1]"),
            Err(PlanError::InvalidContent(_))
        ));
        assert!(matches!(
            parse_put_body(b"{\"a\": 123456789012345678901}"),
            Err(PlanError::InvalidContent(_))
        ));
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            parse_put_body(deep.as_bytes()),
            Err(PlanError::InvalidContent(_))
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
                Err(PlanError::InvalidFileSha(_))
            ));
        }
    }
}

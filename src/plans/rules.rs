//! The rules of one file, in one place: a document from a request, a text or stored bytes, judged by its kind's YAML rules and then the operator's validators, with one verdict whose violations carry their line in the text.
use super::PlanError;
use crate::domain::yaml::Mapping;
use crate::domain::{BlobId, ConfigurationDoc, ContentError, IntegrationDoc, PlanFile, Stored};
use crate::validation::{SchemaSet, Validators, Violations};
use serde_json::Value;

/// A new version of a file, valid for its kind.
#[derive(Debug)]
pub enum NewDoc {
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

    /// The text stored for it.
    pub fn raw(&self) -> &str {
        match self {
            NewDoc::Integration(d) => d.raw(),
            NewDoc::Configuration(d) => d.raw(),
        }
    }

    pub fn content(&self) -> &Mapping {
        match self {
            NewDoc::Integration(d) => d.content(),
            NewDoc::Configuration(d) => d.content(),
        }
    }

    /// What it breaks of `schemas`, pointers into its content.
    fn violations(&self, schemas: &SchemaSet) -> Violations {
        match self {
            NewDoc::Integration(d) => schemas.check_integration(d.content()),
            NewDoc::Configuration(d) => schemas.check_configuration(d.content()),
        }
    }

    /// The field of a request a file's document is sent in.
    fn field(file: PlanFile) -> &'static str {
        match file {
            PlanFile::Integration => "/content",
            PlanFile::Configuration => "/payload",
        }
    }

    fn from_request(file: PlanFile, value: Value) -> Result<Self, ContentError> {
        Ok(match file {
            PlanFile::Integration => NewDoc::Integration(IntegrationDoc::from_request(value)?),
            PlanFile::Configuration => {
                NewDoc::Configuration(ConfigurationDoc::from_request(value)?)
            }
        })
    }

    fn from_stored(file: PlanFile, bytes: &[u8]) -> Stored<Self> {
        fn map<D>(s: Stored<D>, f: fn(D) -> NewDoc) -> Stored<NewDoc> {
            match s {
                Stored::Valid(d) => Stored::Valid(f(d)),
                Stored::Invalid { content, errors } => Stored::Invalid { content, errors },
            }
        }
        match file {
            PlanFile::Integration => map(IntegrationDoc::from_stored(bytes), NewDoc::Integration),
            PlanFile::Configuration => {
                map(ConfigurationDoc::from_stored(bytes), NewDoc::Configuration)
            }
        }
    }
}

/// The document a request sends for `file` (`content` or `payload`: a JSON object, or YAML
/// text in a string), held to every rule of a write: its kind's (422 `invalid_content`),
/// then `schemas` (422 `schema_violation`, pointers under the field, with lines when it came
/// as text). Also whether it came as JSON (storage edits the stored text into it) rather
/// than text (stored byte for byte).
pub fn requested(
    file: PlanFile,
    value: Value,
    schemas: &SchemaSet,
) -> Result<(NewDoc, bool), PlanError> {
    let json = value.is_object();
    let doc = NewDoc::from_request(file, value).map_err(PlanError::InvalidContent)?;
    let doc = passing(doc, schemas, NewDoc::field(file), !json)?;
    Ok((doc, json))
}

/// `doc` if it passes `schemas`, else 422 `schema_violation`: each pointer under `at`, with
/// its line and column in the document's text when the client sees it (`text`).
fn passing(doc: NewDoc, schemas: &SchemaSet, at: &str, text: bool) -> Result<NewDoc, PlanError> {
    let found = doc.violations(schemas);
    if found.is_empty() {
        return Ok(doc);
    }
    let found = if text {
        found.located_in(doc.raw())
    } else {
        found
    };
    Err(PlanError::SchemaViolation {
        files: vec![doc.file()],
        violations: found.under(at),
    })
}

/// Why a text is not taken as a file.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Not a file of its kind: the first reason, `pointer: message` (`/` for the whole).
    Unreadable(String),
    /// A file of its kind that breaks the validators, each violation at its line.
    Breaks(Violations),
}

/// A whole file's text as a write would take it (a PUT of YAML text, a pushed blob,
/// `planfiles validate`): what passes here is what the service stores.
pub fn text(file: PlanFile, text: &str, schemas: &SchemaSet) -> Result<NewDoc, Refusal> {
    let doc = NewDoc::from_request(file, Value::String(text.to_owned())).map_err(|e| {
        let pointer = e.pointer.strip_prefix(NewDoc::field(file)).unwrap_or("");
        let pointer = if pointer.is_empty() { "/" } else { pointer };
        Refusal::Unreadable(format!("{pointer}: {}", e.message))
    })?;
    passing(doc, schemas, "", true).map_err(|e| match e {
        PlanError::SchemaViolation { violations, .. } => Refusal::Breaks(violations),
        other => Refusal::Unreadable(other.to_string()),
    })
}

/// Stored bytes, judged: a file read back may break what a write would refuse (plain git,
/// a schema added later).
#[derive(Debug)]
pub enum Verdict {
    Valid(NewDoc),
    /// A file of its kind that breaks the validators, each violation at its line.
    Breaks(NewDoc, Violations),
    /// Not a file of its kind: what can be shown as its content, and why.
    Unreadable {
        content: Mapping,
        errors: Vec<String>,
    },
}

impl Verdict {
    pub fn passes(&self) -> bool {
        matches!(self, Verdict::Valid(_))
    }
}

/// The verdict on stored bytes of `file`.
pub fn stored(file: PlanFile, bytes: &[u8], schemas: &SchemaSet) -> Verdict {
    match NewDoc::from_stored(file, bytes) {
        Stored::Invalid { content, errors } => Verdict::Unreadable { content, errors },
        Stored::Valid(doc) => {
            let found = doc.violations(schemas);
            if found.is_empty() {
                Verdict::Valid(doc)
            } else {
                let found = found.located_in(doc.raw());
                Verdict::Breaks(doc, found)
            }
        }
    }
}

/// A stored version to write back (a restore): valid for its kind (422 `invalid_content` at
/// `/commit` otherwise) and by `schemas` (violations point into the file, at their lines).
pub fn restorable(file: PlanFile, bytes: &[u8], schemas: &SchemaSet) -> Result<NewDoc, PlanError> {
    match NewDoc::from_stored(file, bytes) {
        Stored::Valid(doc) => passing(doc, schemas, "", true),
        Stored::Invalid { errors, .. } => Err(PlanError::InvalidContent(ContentError::new(
            "/commit",
            format!(
                "the file in that commit is not valid, so it is not restored: {}",
                errors.join("; ")
            ),
        ))),
    }
}

/// The `content` shown for stored bytes, valid or not (`{}` when they are not a mapping).
pub fn stored_content(file: PlanFile, bytes: &[u8]) -> Mapping {
    match NewDoc::from_stored(file, bytes) {
        Stored::Valid(NewDoc::Integration(d)) => d.into_parts().0,
        Stored::Valid(NewDoc::Configuration(d)) => d.into_content(),
        Stored::Invalid { content, .. } => content,
    }
}

/// [`stored`]'s yes or no, without locating the violations.
pub fn passes(file: PlanFile, bytes: &[u8], schemas: &SchemaSet) -> bool {
    match NewDoc::from_stored(file, bytes) {
        Stored::Valid(doc) => doc.violations(schemas).is_empty(),
        Stored::Invalid { .. } => false,
    }
}

/// Storage's judge of the change feed: the validators in use, through these rules.
#[derive(Debug, Clone)]
pub struct StoredJudge(pub Validators);

impl crate::storage::Judge for StoredJudge {
    fn known(&self, file: PlanFile, blob: BlobId) -> Option<bool> {
        self.0.known(file, blob)
    }

    /// Whether stored bytes pass the set in use, remembered per (file, blob, set): what
    /// change events show as `status`, as history pages do.
    fn judge(&self, file: PlanFile, blob: BlobId, bytes: &[u8]) -> bool {
        self.0
            .passes(file, blob, |set| Some(passes(file, bytes, set)))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests;

//! Validators: the operator's JSON Schemas (jsonschema; no network, patterns on a linear-time engine), compiled once per schema set, and the violations they find in a document.
mod combined;
mod folder;
pub mod locate;
mod reload;
mod verdicts;
pub use reload::Reloaded;

pub use reload::Validators;

use crate::domain::yaml::Mapping;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The base URI of the schemas folder: `$ref`s resolve against it, and only URIs under it
/// resolve at all (to the folder's files). `.invalid` names no host, so nothing ever asks one.
pub const BASE_URI: &str = "https://planfiles.invalid/schemas/";

/// At most this many violations are listed; the rest are counted.
pub const MAX_VIOLATIONS: usize = 100;

/// A message longer than this (it may quote a large part of the document) is cut.
const MAX_MESSAGE: usize = 300;

/// Whether a top-level key of the integration file with no schema is allowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownIntegrations {
    #[default]
    Allow,
    Refuse,
}

/// One rule a document breaks: where (a JSON pointer), which keyword of which schema, and
/// why; with the line and column (1-based) when the document is YAML text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Violation {
    /// JSON pointer of the value at fault.
    pub pointer: String,
    /// The failing keyword (`pattern`, `required`, ... or `unknown_integration`).
    pub keyword: String,
    pub message: String,
    /// The schema file and the JSON pointer of the keyword in it
    /// (`integrations/aws.json#/items/properties/account_id/pattern`).
    pub schema: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub column: Option<usize>,
}

/// What a document breaks: the first [`MAX_VIOLATIONS`] violations and a count of the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Violations {
    pub list: Vec<Violation>,
    pub omitted: usize,
}

impl Violations {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty() && self.omitted == 0
    }

    fn push(&mut self, v: Violation) {
        if self.list.len() < MAX_VIOLATIONS {
            self.list.push(v);
        } else {
            self.omitted += 1;
        }
    }

    /// These and then `more`'s, within the same bound of [`MAX_VIOLATIONS`] listed.
    pub fn and(mut self, more: Violations) -> Self {
        for v in more.list {
            self.push(v);
        }
        self.omitted += more.omitted;
        self
    }

    /// Each pointer placed under `prefix` (`/content`, `/payload`, a part's name).
    pub fn under(mut self, prefix: &str) -> Self {
        for v in &mut self.list {
            v.pointer.insert_str(0, prefix);
        }
        self
    }

    /// Each violation given its line and column in `text`, the YAML the document was read
    /// from (pointers still relative to the document).
    pub fn located_in(mut self, text: &str) -> Self {
        let pointers: Vec<&str> = self.list.iter().map(|v| v.pointer.as_str()).collect();
        let found = locate::positions(text, &pointers);
        for (v, at) in self.list.iter_mut().zip(found) {
            if let Some((line, column)) = at {
                v.line = Some(line);
                v.column = Some(column);
            }
        }
        self
    }
}

/// Why a schema set cannot be used: the file, the JSON pointer in it where there is one, and
/// what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    File { file: String, message: String },
    #[error("{file}#{pointer}: {message}")]
    Invalid {
        file: String,
        pointer: String,
        message: String,
    },
}

/// One compiled schema and the file it came from (relative to the folder).
struct Compiled {
    file: String,
    validator: jsonschema::Validator,
}

/// A schema set: every schema of the folder, compiled, and its identity (a hash of the
/// files and the setting), which keys cached verdicts and the combined schemas' `ETag`s.
pub struct SchemaSet {
    integrations: BTreeMap<String, Compiled>,
    configuration: Option<Compiled>,
    unknown: UnknownIntegrations,
    id: String,
    digests: BTreeMap<String, String>,
    combined: combined::Combined,
    /// The folder's files: what a violation's message quotes of its schema.
    files: folder::Files,
}

impl std::fmt::Debug for SchemaSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaSet")
            .field(
                "integrations",
                &self.integrations.keys().collect::<Vec<_>>(),
            )
            .field("configuration", &self.configuration.is_some())
            .field("unknown", &self.unknown)
            .field("id", &self.id)
            .finish()
    }
}

impl SchemaSet {
    /// No schemas: every document that has the built-in shape is valid.
    pub fn empty() -> Self {
        Self::compile(&folder::Files::default(), UnknownIntegrations::Allow)
            .expect("an empty set compiles")
    }

    /// The schemas under `dir` (absent or empty: none), compiled.
    pub fn load(dir: Option<&Path>, unknown: UnknownIntegrations) -> Result<Self, SchemaError> {
        let files = match dir {
            Some(dir) => folder::Files::read(dir)?,
            None => folder::Files::default(),
        };
        Self::compile(&files, unknown)
    }

    fn compile(files: &folder::Files, unknown: UnknownIntegrations) -> Result<Self, SchemaError> {
        let mut integrations = BTreeMap::new();
        let mut configuration = None;
        for (file, schema) in files.iter() {
            if let Some(kind) = file
                .strip_prefix("integrations/")
                .and_then(|f| f.strip_suffix(".json"))
                .filter(|k| !k.contains('/'))
            {
                integrations.insert(kind.to_owned(), compile_one(files, file, schema)?);
            } else if file == "configuration.json" {
                configuration = Some(compile_one(files, file, schema)?);
            } else {
                // Shared definitions: checked by compiling them too, so a broken one is
                // named even when nothing refers to it yet.
                compile_one(files, file, schema)?;
            }
        }
        let id = files.id(unknown);
        let combined = combined::Combined::new(files, &id, unknown);
        Ok(Self {
            integrations,
            configuration,
            unknown,
            id,
            digests: files.digests(unknown),
            combined,
            files: files.clone(),
        })
    }

    /// The set's identity: a hex hash of its files (names and bytes) and the unknown setting.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Each schema file's path and a short hash of its bytes, and the unknown setting.
    pub fn digests(&self) -> &BTreeMap<String, String> {
        &self.digests
    }

    /// What differs between this set's `digests` and `other`'s, in words (`None`: nothing).
    pub fn difference(
        here: &BTreeMap<String, String>,
        there: &BTreeMap<String, String>,
    ) -> Option<String> {
        let names = |pick: &dyn Fn(&String) -> bool, from: &BTreeMap<String, String>| {
            from.keys().filter(|k| pick(k)).cloned().collect::<Vec<_>>()
        };
        let only_here = names(&|k| !there.contains_key(k), here);
        let only_there = names(&|k| !here.contains_key(k), there);
        let changed = names(
            &|k| there.get(k).is_some_and(|v| Some(v) != here.get(k)),
            here,
        );
        let mut parts = Vec::new();
        for (label, list) in [
            ("only here", only_here),
            ("only there", only_there),
            ("different", changed),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label}: {}", list.join(", ")));
            }
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// How many schemas the set uses: one per integration kind, and the configuration's.
    pub fn count(&self) -> usize {
        self.integrations.len() + usize::from(self.configuration.is_some())
    }

    /// Whether the set has no schema and allows every integration.
    pub fn is_empty(&self) -> bool {
        self.integrations.is_empty()
            && self.configuration.is_none()
            && self.unknown == UnknownIntegrations::Allow
    }

    /// What the integration file's `content` breaks, pointers into the content.
    pub fn check_integration(&self, content: &Mapping) -> Violations {
        let mut found = Violations::default();
        for (kind, value) in content {
            let at = format!("/{}", escape(kind));
            match self.integrations.get(kind) {
                Some(compiled) => collect(compiled, &self.files, value, &at, &mut found),
                None if self.unknown == UnknownIntegrations::Refuse => found.push(Violation {
                    pointer: at,
                    keyword: "unknown_integration".into(),
                    message: format!(
                        "no schema for the integration {kind:?} (integrations/{kind}.json), and \
                         validation.unknown_integrations is \"refuse\""
                    ),
                    schema: "integrations/".into(),
                    line: None,
                    column: None,
                }),
                None => {}
            }
        }
        found
    }

    /// What the configuration file's content breaks, pointers into the content.
    pub fn check_configuration(&self, content: &Mapping) -> Violations {
        let mut found = Violations::default();
        if let Some(compiled) = &self.configuration {
            collect(
                compiled,
                &self.files,
                &Value::Object(content.clone()),
                "",
                &mut found,
            );
        }
        found
    }

    /// The combined schema of the integration file (every kind under its key), as JSON.
    pub fn integration_schema(&self) -> &[u8] {
        self.combined.integration()
    }

    /// The combined schema of the configuration file, as JSON.
    pub fn configuration_schema(&self) -> &[u8] {
        self.combined.configuration()
    }
}

/// The draft every schema of the folder is written in.
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

fn compile_one(files: &folder::Files, file: &str, schema: &Value) -> Result<Compiled, SchemaError> {
    // One draft for the folder: the combined schemas served to clients are 2020-12 documents
    // that embed these files, and another draft's keywords would be read differently there.
    if let Some(declared) = schema.get("$schema").and_then(Value::as_str) {
        if declared.trim_end_matches('#') != DRAFT_2020_12 {
            return Err(SchemaError::Invalid {
                file: file.to_owned(),
                pointer: "/$schema".into(),
                message: format!(
                    "{declared:?}: the schemas must be JSON Schema draft 2020-12 ({DRAFT_2020_12})"
                ),
            });
        }
    }
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .with_base_uri(format!("{BASE_URI}{file}"))
        .with_retriever(files.retriever())
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| {
            // Where in the schema: the meta-schema's verdict names it as its instance path;
            // a pattern the engine refuses, by the path of the keyword.
            let pointer = match e.instance_path().as_str() {
                "" => e.schema_path().as_str().to_owned(),
                at => at.to_owned(),
            };
            let mut message = e.to_string();
            if message.contains("\"regex\"") {
                message.push_str(
                    " (patterns run on a linear-time engine: no look-around, no back-references)",
                );
            }
            SchemaError::Invalid {
                file: file.to_owned(),
                pointer,
                message,
            }
        })?;
    Ok(Compiled {
        file: file.to_owned(),
        validator,
    })
}

/// The violations of `value` (at `at` in the document) against one schema.
fn collect(
    compiled: &Compiled,
    files: &folder::Files,
    value: &Value,
    at: &str,
    found: &mut Violations,
) {
    for e in compiled.validator.iter_errors(value) {
        if found.list.len() >= MAX_VIOLATIONS {
            found.omitted += 1;
            continue;
        }
        let schema = match e.absolute_keyword_location() {
            Some(uri) => uri
                .as_str()
                .strip_prefix(BASE_URI)
                .unwrap_or(uri.as_str())
                .to_owned(),
            None => format!("{}#{}", compiled.file, e.schema_path().as_str()),
        };
        let keyword = e.kind().keyword().to_owned();
        // `not` says only "<the subschema as JSON> is not allowed": the rule's own words
        // (the description or title of the schema that holds the `not`) say more.
        let message = match keyword.as_str() {
            "not" => format!(
                "{} is not allowed: {}",
                e.instance(),
                described(files, &schema)
                    .unwrap_or_else(|| "it matches what the schema forbids here".into())
            ),
            _ => e.to_string(),
        };
        found.push(Violation {
            pointer: format!("{at}{}", e.instance_path().as_str()),
            keyword,
            message: cut(message),
            schema,
            line: None,
            column: None,
        });
    }
}

/// The `description` (else `title`) of the schema that holds the keyword at `location`
/// (`file#/pointer/to/keyword`), as the folder's file has it.
fn described(files: &folder::Files, location: &str) -> Option<String> {
    let (file, pointer) = location.split_once('#')?;
    let (holder, _keyword) = pointer.rsplit_once('/')?;
    let schema = files.iter().find(|(f, _)| *f == file)?.1.pointer(holder)?;
    ["description", "title"]
        .iter()
        .find_map(|k| schema.get(*k)?.as_str().map(str::to_owned))
}

/// A JSON pointer's reference token for `key` (RFC 6901: `~` as `~0`, `/` as `~1`).
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn cut(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests;

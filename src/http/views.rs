//! Response bodies of a file, as typed values serialized once: what a GET or a write answers for each file, valid or broken, and its stored text for a GET that asks for YAML.
use super::schema::{ConfigurationFile, FileProblem, FileStatus, IntegrationFile};
use crate::domain::json_patch::Op;
use crate::domain::yaml::Mapping;
use crate::domain::{BlobId, CommitId, ConfigurationDoc, IntegrationDoc, PlanFile};
use crate::plans::rules::{self, NewDoc, Verdict};
use crate::validation::SchemaSet;
use actix_web::http::{header, StatusCode};
use actix_web::web::Bytes;
use actix_web::HttpResponse;
use serde_json::Value;

/// One file's body: the GET body, plus `commit_sha` after a write and `patch` on a dry run.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub(super) enum FileView {
    Integration(IntegrationFile),
    Configuration(ConfigurationFile),
}

impl FileView {
    /// The view of stored bytes, valid or not: a file that parses but breaks `schemas` is
    /// `invalid` with its content as parsed and each violation at its line.
    pub fn stored(file: PlanFile, bytes: &[u8], sha: BlobId, schemas: &SchemaSet) -> Self {
        match rules::stored(file, bytes, schemas) {
            Verdict::Valid(doc) => Self::of(doc, None, sha),
            Verdict::Breaks(doc, found) => {
                let broken = found.list.into_iter().map(FileProblem::Rule).collect();
                Self::of(doc, Some(broken), sha)
            }
            Verdict::Unreadable { content, errors } => {
                let broken = Some(errors.into_iter().map(FileProblem::Unreadable).collect());
                match file {
                    PlanFile::Integration => {
                        let raw = String::from_utf8_lossy(bytes).into_owned();
                        integration(content, raw, broken, sha)
                    }
                    PlanFile::Configuration => configuration(content, broken, sha),
                }
            }
        }
    }

    /// The view of a document of its kind, with what it breaks of the schemas, if anything.
    fn of(doc: NewDoc, broken: Option<Vec<FileProblem>>, sha: BlobId) -> Self {
        match doc {
            NewDoc::Integration(d) => {
                let (content, raw) = d.into_parts();
                integration(content, raw, broken, sha)
            }
            NewDoc::Configuration(d) => configuration(d.into_content(), broken, sha),
        }
    }

    /// The view of stored bytes held to their kind's rules only (a replay shows the version
    /// it committed, not judged again by today's schemas).
    pub fn unjudged(file: PlanFile, bytes: &[u8], sha: BlobId) -> Self {
        Self::stored(file, bytes, sha, &SchemaSet::empty())
    }

    /// The view of a valid integration document.
    pub fn integration(doc: IntegrationDoc, sha: BlobId) -> Self {
        Self::of(NewDoc::Integration(doc), None, sha)
    }

    /// The view of a valid configuration document.
    pub fn configuration(doc: ConfigurationDoc, sha: BlobId) -> Self {
        Self::of(NewDoc::Configuration(doc), None, sha)
    }

    /// With `commit_sha`: the commit a write made (or found), or `null` for a dry run.
    pub fn commit(mut self, commit: Option<CommitId>) -> Self {
        match &mut self {
            FileView::Integration(f) => f.commit_sha = Some(commit),
            FileView::Configuration(f) => f.commit_sha = Some(commit),
        }
        self
    }

    /// With the dry run's `patch`.
    pub fn patch(mut self, patch: Vec<Op>) -> Self {
        match &mut self {
            FileView::Integration(f) => f.patch = Some(patch),
            FileView::Configuration(f) => f.patch = Some(patch),
        }
        self
    }

    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("response bodies serialize"))
    }
}

/// A GET's body for a stored file (at `commit` for a `?ref=` read), serialized once (the
/// response cache keeps it).
pub fn stored_body(
    file: PlanFile,
    bytes: &[u8],
    sha: BlobId,
    commit: Option<CommitId>,
    schemas: &SchemaSet,
) -> Bytes {
    let view = FileView::stored(file, bytes, sha, schemas);
    match commit {
        Some(commit) => view.commit(Some(commit)),
        None => view,
    }
    .to_bytes()
}

/// An integration file's body; `invalid` when it breaks anything.
fn integration(
    content: Mapping,
    raw_content: String,
    broken: Option<Vec<FileProblem>>,
    sha: BlobId,
) -> FileView {
    FileView::Integration(IntegrationFile {
        content,
        raw_content,
        file_sha: sha,
        status: if broken.is_some() {
            FileStatus::Invalid
        } else {
            FileStatus::Valid
        },
        vendor_response: Mapping::new(),
        validation_errors: broken,
        commit_sha: None,
        patch: None,
    })
}

/// A configuration file's body; `status: invalid` only when it breaks anything.
fn configuration(content: Mapping, broken: Option<Vec<FileProblem>>, sha: BlobId) -> FileView {
    FileView::Configuration(ConfigurationFile {
        content,
        sha,
        status: broken.is_some().then_some(FileStatus::Invalid),
        validation_errors: broken,
        commit_sha: None,
        patch: None,
    })
}

/// The `content` a GET shows for stored bytes (`{}` for a file that is not a mapping).
pub(super) fn stored_content(file: PlanFile, bytes: &[u8]) -> Value {
    Value::Object(rules::stored_content(file, bytes))
}

/// The `ETag` of a file: its blob id, quoted.
pub fn etag(sha: BlobId) -> header::HeaderValue {
    header::HeaderValue::from_str(&format!("\"{sha}\"")).expect("hex digits and quotes")
}

/// A 200 with a file's JSON body and its `ETag` (see [`etag`]).
/// The media type of a file's stored text.
pub const YAML: &str = "application/yaml; charset=utf-8";

/// Whether a GET asks for the stored text: the first media range of `Accept` that names
/// JSON, YAML or anything (and is not refused with `q=0`) is `application/yaml`. Without
/// `Accept`, or with JSON first, the answer is the JSON document, as ever.
pub fn wants_yaml(req: &actix_web::HttpRequest) -> bool {
    prefers(req, "application/yaml")
}

/// Whether `Accept` asks for `media` rather than JSON: the first media range that names
/// JSON, `media`, either's type with `*`, or anything (and is not refused with `q=0`) is
/// `media`.
pub fn prefers(req: &actix_web::HttpRequest, media_wanted: &str) -> bool {
    let kind = media_wanted.split('/').next().unwrap_or_default();
    let Some(accept) = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    // What curl and fetch() send by default: anything, so JSON.
    if accept == "*/*" {
        return false;
    }
    // Media types compare without case; nothing is allocated (browsers and curl send
    // `Accept` with every GET).
    let is = |media: &str, name: &str| media.eq_ignore_ascii_case(name);
    accept
        .split(',')
        .find_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next()?;
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            let any_of_kind = media.len() == kind.len() + 2
                && media.ends_with("/*")
                && is(&media[..kind.len()], kind);
            let known = ["application/json", "application/*", "*/*", media_wanted]
                .iter()
                .any(|name| is(media, name))
                || any_of_kind;
            (known && !refused).then_some(media)
        })
        .is_some_and(|m| is(m, media_wanted))
}

/// A file's stored bytes as they are, for a GET that asked for YAML.
pub fn respond_text(bytes: Vec<u8>, etag: header::HeaderValue) -> HttpResponse {
    let mut res = respond(Bytes::from(bytes), etag);
    res.headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(YAML));
    res
}

pub fn respond(body: Bytes, etag: header::HeaderValue) -> HttpResponse {
    // Built directly rather than through `HttpResponseBuilder`, whose header conversions
    // were a tenth of the instructions of a cached GET.
    let mut res = HttpResponse::with_body(StatusCode::OK, body);
    let headers = res.headers_mut();
    headers.insert(header::ETAG, etag);
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    res.map_into_boxed_body()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_media_range_that_names_json_yaml_or_anything_decides() {
        let asks = |accept: Option<&str>| {
            let mut req = actix_web::test::TestRequest::default();
            if let Some(a) = accept {
                req = req.insert_header(("Accept", a));
            }
            super::wants_yaml(&req.to_http_request())
        };
        for (accept, yaml) in [
            (None, false),
            (Some("application/json"), false),
            (Some("*/*"), false),
            (Some("application/yaml"), true),
            (Some("Application/YAML; charset=utf-8"), true),
            (Some("text/html, application/yaml;q=0.9, */*;q=0.8"), true),
            (Some("application/json, application/yaml"), false),
            (Some("application/yaml;q=0, application/json"), false),
            (Some("text/yaml"), false),
            (Some("APPLICATION/*, application/yaml"), false),
            (Some("application/*;q=0, application/yaml"), true),
            (Some("applicatio/*, application/yaml"), true),
            // Not visible ASCII: the header is not read at all.
            (Some("é/*, application/yaml"), false),
        ] {
            assert_eq!(asks(accept), yaml, "{accept:?}");
        }
    }
}

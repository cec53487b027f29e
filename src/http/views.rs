//! Response bodies: what a GET or PUT answers for each file, valid or broken.
use super::schema::{ConfigurationFile, FileStatus, IntegrationFile};
use crate::domain::yaml::Mapping;
use crate::domain::{BlobId, CommitId, ConfigurationDoc, IntegrationDoc, PlanFile, Stored};
use actix_web::http::{header, StatusCode};
use actix_web::web::Bytes;
use actix_web::HttpResponse;

/// A GET's body for a stored file, serialized once (the response cache keeps it).
pub fn stored_body(file: PlanFile, bytes: &[u8], sha: BlobId, commit: Option<CommitId>) -> Bytes {
    match file {
        PlanFile::Integration => {
            integration_body(IntegrationDoc::from_stored(bytes), bytes, sha, commit)
        }
        PlanFile::Configuration => {
            configuration_body(ConfigurationDoc::from_stored(bytes), sha, commit)
        }
    }
}

pub(super) fn integration_body(
    stored: Stored<IntegrationDoc>,
    raw: &[u8],
    sha: BlobId,
    commit: Option<CommitId>,
) -> Bytes {
    let body = match stored {
        Stored::Valid(doc) => {
            let (content, raw_content) = doc.into_parts();
            IntegrationFile {
                content,
                raw_content,
                file_sha: sha,
                status: FileStatus::Valid,
                vendor_response: Mapping::new(),
                validation_errors: None,
                commit_sha: commit,
                patch: None,
            }
        }
        Stored::Invalid { content, errors } => IntegrationFile {
            content,
            raw_content: String::from_utf8_lossy(raw).into_owned(),
            file_sha: sha,
            status: FileStatus::Invalid,
            vendor_response: Mapping::new(),
            validation_errors: Some(errors),
            commit_sha: commit,
            patch: None,
        },
    };
    to_bytes(&body)
}

pub(super) fn configuration_body(
    stored: Stored<ConfigurationDoc>,
    sha: BlobId,
    commit: Option<CommitId>,
) -> Bytes {
    let body = match stored {
        Stored::Valid(doc) => ConfigurationFile {
            content: doc.into_content(),
            sha,
            status: None,
            validation_errors: None,
            commit_sha: commit,
            patch: None,
        },
        Stored::Invalid { content, errors } => ConfigurationFile {
            content,
            sha,
            status: Some(FileStatus::Invalid),
            validation_errors: Some(errors),
            commit_sha: commit,
            patch: None,
        },
    };
    to_bytes(&body)
}

fn to_bytes(body: &impl serde::Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(body).expect("response bodies serialize"))
}

/// The `ETag` of a file: its blob id, quoted.
pub fn etag(sha: BlobId) -> header::HeaderValue {
    header::HeaderValue::from_str(&format!("\"{sha}\"")).expect("hex digits and quotes")
}

/// A 200 with a file's JSON body and its `ETag` (see [`etag`]).
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

//! Response bodies: what a GET or PUT answers for each file, valid or broken.
use super::schema::{ConfigurationFile, FileStatus, IntegrationFile};
use crate::domain::yaml::Mapping;
use crate::domain::{BlobId, CommitId, ConfigurationDoc, IntegrationDoc, Stored};
use actix_web::http::header;
use actix_web::HttpResponse;

pub fn integration(
    stored: Stored<IntegrationDoc>,
    raw: &[u8],
    sha: BlobId,
    commit: Option<CommitId>,
) -> HttpResponse {
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
        },
    };
    respond(&body, sha)
}

pub fn configuration(
    stored: Stored<ConfigurationDoc>,
    sha: BlobId,
    commit: Option<CommitId>,
) -> HttpResponse {
    let body = match stored {
        Stored::Valid(doc) => ConfigurationFile {
            content: doc.into_content(),
            sha,
            status: None,
            validation_errors: None,
            commit_sha: commit,
        },
        Stored::Invalid { content, errors } => ConfigurationFile {
            content,
            sha,
            status: Some(FileStatus::Invalid),
            validation_errors: Some(errors),
            commit_sha: commit,
        },
    };
    respond(&body, sha)
}

fn respond(body: &impl serde::Serialize, sha: BlobId) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::ETAG, format!("\"{sha}\"")))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(body)
}

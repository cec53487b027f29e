//! Response bodies: what a GET or PUT answers for each file, valid or broken.
use crate::domain::{BlobId, CommitId};
use crate::domain::{ConfigurationDoc, IntegrationDoc, Stored};
use actix_web::http::header;
use actix_web::HttpResponse;
use serde_json::{json, Value};

pub fn integration(
    stored: &Stored<IntegrationDoc>,
    raw: &[u8],
    sha: BlobId,
    commit: Option<CommitId>,
) -> HttpResponse {
    let mut body = match stored {
        Stored::Valid(doc) => json!({
            "content": doc.content(),
            "raw_content": doc.raw(),
            "file_sha": sha,
            "status": "valid",
            "vendor_response": {},
        }),
        Stored::Invalid { content, errors } => json!({
            "content": content,
            "raw_content": String::from_utf8_lossy(raw),
            "file_sha": sha,
            "status": "invalid",
            "vendor_response": {},
            "validation_errors": errors,
        }),
    };
    respond(&mut body, sha, commit)
}

pub fn configuration(
    stored: &Stored<ConfigurationDoc>,
    sha: BlobId,
    commit: Option<CommitId>,
) -> HttpResponse {
    let mut body = match stored {
        Stored::Valid(doc) => json!({ "content": doc.content(), "sha": sha }),
        Stored::Invalid { content, errors } => json!({
            "content": content,
            "sha": sha,
            "status": "invalid",
            "validation_errors": errors,
        }),
    };
    respond(&mut body, sha, commit)
}

fn respond(body: &mut Value, sha: BlobId, commit: Option<CommitId>) -> HttpResponse {
    if let (Some(commit), Value::Object(map)) = (commit, &mut *body) {
        map.insert("commit_sha".into(), json!(commit));
    }
    HttpResponse::Ok()
        .insert_header((header::ETAG, format!("\"{sha}\"")))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(&*body)
}

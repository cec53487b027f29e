//! `GET /plans/signing-keys`: the public keys that sign the service's commits, as JSON or as the lines of a git `allowed_signers` file; no token needed.
use super::schema::{SigningKey, SigningKeys};
use super::views::prefers;
use super::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

/// The keys whose signatures count, the current one first.
#[utoipa::path(get, path = "/plans/signing-keys", tag = "signing", security(()),
    params(("Accept" = Option<String>, Header, description = "text/plain (first of JSON, text or */*): the lines of a git allowed_signers file")),
    responses((status = 200, description = "The current key and the retired ones still listed (none when signing is off)",
        content((SigningKeys = "application/json"), (String = "text/plain")))))]
pub async fn signing_keys(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    let keys = state.storage.signing_keys();
    let email = state.storage.committer_email();
    let mut res = HttpResponse::Ok();
    res.insert_header((header::CACHE_CONTROL, "no-cache"));
    if prefers(&req, "text/plain") {
        return res
            .content_type("text/plain; charset=utf-8")
            .body(keys.allowed_signers(email));
    }
    let listed = keys
        .public_keys()
        .into_iter()
        .zip(keys.fingerprints())
        .enumerate()
        .map(|(i, (public_key, fingerprint))| SigningKey {
            public_key,
            fingerprint,
            current: i == 0,
        })
        .collect();
    res.json(SigningKeys {
        committer_email: email.to_owned(),
        namespace: crate::signing::NAMESPACE,
        keys: listed,
    })
}

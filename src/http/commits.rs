//! `POST /plans/commits`: both files (or one) in one commit, all or nothing, each part under its own PUT's rules.
use super::common::{require, Reply};
use super::problem::{ApiError, Problem};
use super::schema::{CommitsAnswer, PostCommits, WriteHeaders, WriteProblems, WriteQuery};
use super::write::{file_sha, new_doc, preconditions, Part, Planned, Shape};
use super::AppState;
use crate::auth::Principal;
use crate::domain::{ContentError, PlanFile};
use crate::validation::{SchemaSet, Violations};
use actix_web::{web, HttpRequest};

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
    // Before the body is read, the token must hold the write permission of one file.
    let any = if who.can_write(PlanFile::Integration) {
        PlanFile::Integration
    } else {
        PlanFile::Configuration
    };
    let intake = state.intake(&who, &req, payload, any).await?;
    let source_hosting = intake.tenant.source_hosting;
    let granted = PlanFile::ALL.map(|f| who.can_write(f));
    let schemas = state.validators.current();
    let (planned, meta) = intake
        .parse(move |bytes| plan(bytes, source_hosting, granted, &schemas))
        .await
        .map_err(|e| state.counted(e))?;
    // If-Match names one file's version, and this resource has none: the condition is false
    // (RFC 9110, 13.1.1), so the write does not happen. Each part's file_sha is the guard.
    if req
        .headers()
        .contains_key(actix_web::http::header::IF_MATCH)
    {
        return Err(ApiError::IfMatchWithoutRepresentation);
    }
    state
        .run_write(&who, &req, planned, meta, Shape::Both)
        .await
}

/// The body of `POST /plans/commits` as a planned write, in the contract's order across both
/// parts: every part's permission (403), then every part's 400s, then the 422s (parts,
/// contents, message), then the preconditions (428).
fn plan(
    bytes: &[u8],
    source_hosting: bool,
    granted: [bool; 2],
    schemas: &SchemaSet,
) -> Result<Planned, ApiError> {
    let mut body = super::write::parse_put_body(bytes)?;
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
            Err(ApiError::SchemaViolation { violations, .. }) => refused.push((file, violations)),
            Err(e) => return Err(e.in_part(file)),
        }
    }
    match refused.as_slice() {
        [] => {}
        [(file, violations)] => {
            return Err(ApiError::SchemaViolation {
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
            return Err(ApiError::SchemaViolation { files, violations });
        }
    }
    let subject = body.message()?;
    if parts.is_empty() {
        return Err(ApiError::InvalidContent(ContentError::new(
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
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Planned {
        parts,
        subject,
        restored_from: None,
    })
}

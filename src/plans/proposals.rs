//! Proposals, planned and run: a proposal's body held to the rules of a write of its files (`open_body`), who may take part (`reviewer`: a token with a `sub`), an approval's body, and each step run alone in the tenant's writer turn.
use super::write::{parse_put_body, parts_of, Part, PutBody};
use super::{PlanError, WriteError, Writers};
use crate::domain::proposal::Description;
use crate::domain::{
    yaml, CommitId, CommitMessage, ContentError, Identity, ObjectId, Proposal, ProposalNumber,
    RequestId, Reviewer, TenantId,
};
use crate::storage::{ProposalRequest, ProposalStep};
use crate::validation::SchemaSet;
use serde_json::Value;

/// A proposal's body, planned: its files as a write of them, its title and description.
pub struct ProposalPlan {
    pub parts: Vec<Part>,
    pub title: CommitMessage,
    pub message: Option<Description>,
}

impl ProposalPlan {
    /// The request storage takes, for a new proposal (`number: None`) or an update.
    pub fn request(
        self,
        number: Option<ProposalNumber>,
        author: Reviewer,
        request_id: RequestId,
        not_after: std::time::SystemTime,
    ) -> ProposalRequest {
        ProposalRequest {
            number,
            changes: self.parts.iter().map(Part::change).collect(),
            title: self.title,
            message: self.message,
            author,
            request_id,
            not_after: Some(not_after),
        }
    }
}

/// The body of `POST /plans/proposals` (and of an update): `integration-file` and
/// `configuration-file` as `POST /plans/commits` takes them (each part's permission, 400s,
/// 422s, then 428), a required `title` (one line, as a commit message) and an optional
/// `message` (the description, lines kept).
pub fn open_body(
    bytes: &[u8],
    source_hosting: bool,
    granted: [bool; 2],
    schemas: &SchemaSet,
) -> Result<ProposalPlan, PlanError> {
    let mut body = parse_put_body(bytes)?;
    let (parts, (title, message)) = parts_of(
        &mut body,
        source_hosting,
        granted,
        schemas,
        title_and_message,
    )?;
    Ok(ProposalPlan {
        parts,
        title,
        message,
    })
}

fn title_and_message(body: &PutBody) -> Result<(CommitMessage, Option<Description>), PlanError> {
    let title = CommitMessage::from_field(body.get("title"), "/title")
        .map_err(PlanError::InvalidContent)?
        .ok_or_else(|| PlanError::InvalidContent(ContentError::new("/title", "is required")))?;
    let message = Description::from_field(body.get("message"), "/message")
        .map_err(PlanError::InvalidContent)?;
    // The description goes into the commits' messages: no line a reader could take for the
    // service's own trailers (`Approved-by:` and the like), as a push may not carry one.
    if let Some(found) = message
        .as_ref()
        .and_then(|m| crate::domain::trailers::first_reserved(m.as_str().as_bytes()))
    {
        return Err(PlanError::InvalidContent(ContentError::new(
            "/message",
            format!(
                "a line starting with {}: is the service's own trailer; reword it",
                found.key()
            ),
        )));
    }
    Ok((title, message))
}

/// The person taking part: four eyes tell people apart by the token's `sub`, so a token
/// without one (or with one that cannot be kept) may not (403 `sub_required`).
pub fn reviewer(sub: Option<&str>, author: &Identity) -> Result<Reviewer, PlanError> {
    Reviewer::new(sub, author.name(), author.email()).ok_or(PlanError::SubRequired)
}

/// An approval's body: `{"commit": "<the proposal's commit the approver reviewed>"}`. It is
/// required: an approval approves those bytes, and nothing the author sends after them.
pub fn approve_body(bytes: &[u8]) -> Result<CommitId, PlanError> {
    let bad = |m: &str| PlanError::InvalidContent(ContentError::new("/commit", m));
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(bad(
            "is required: send {\"commit\": \"<the proposal's commit you reviewed>\"}",
        ));
    }
    let body = parse_put_body(bytes)?;
    match body.get("commit") {
        None | Some(Value::Null) => Err(bad("is required: the proposal's commit you reviewed")),
        Some(Value::String(s)) => ObjectId::parse(s)
            .map(CommitId)
            .map_err(|_| bad("must be the proposal's commit id: 40 hexadecimal digits")),
        Some(other) => Err(PlanError::InvalidContent(ContentError::new(
            "/commit",
            format!("must be a string, found {}", yaml::kind(other)),
        ))),
    }
}

/// A proposal's files held to today's rules before it applies (the validators may have
/// changed since it was opened): the commit they were checked at, which the apply is bound
/// to; a 422 for the first file that breaks them.
pub fn recheck(
    commit: CommitId,
    files: &[(crate::domain::PlanFile, Vec<u8>)],
    schemas: &SchemaSet,
) -> Result<CommitId, PlanError> {
    for (file, bytes) in files {
        let text = String::from_utf8_lossy(bytes);
        match super::rules::text(*file, &text, schemas) {
            Ok(_) => {}
            Err(super::rules::Refusal::Breaks(violations)) => {
                return Err(PlanError::SchemaViolation {
                    files: vec![*file],
                    violations,
                })
            }
            Err(super::rules::Refusal::Unreadable(why)) => {
                return Err(PlanError::InvalidContent(ContentError::new(
                    "",
                    format!("{}: {why}", file.path()),
                )))
            }
        }
    }
    Ok(commit)
}

/// Opens or updates a proposal in the tenant's writer turn.
pub async fn propose(
    writers: &Writers,
    tenant: &TenantId,
    req: ProposalRequest,
) -> Result<Proposal, WriteError> {
    let owned = tenant.clone();
    writers
        .alone(tenant, move |s| s.propose(&owned, &req), |_| true)
        .await
}

/// Takes `step` on proposal `n` in the tenant's writer turn (an apply moves `main`).
pub async fn step(
    writers: &Writers,
    tenant: &TenantId,
    n: ProposalNumber,
    step: ProposalStep,
    not_after: std::time::SystemTime,
) -> Result<Proposal, WriteError> {
    let owned = tenant.clone();
    writers
        .alone(
            tenant,
            move |s| s.proposal_step(&owned, n, &step, Some(not_after)),
            |_| true,
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schemas() -> SchemaSet {
        SchemaSet::empty()
    }

    #[test]
    fn a_proposal_needs_a_title_and_a_file() {
        let open = |body: &str| open_body(body.as_bytes(), false, [true, true], &schemas());
        let body = r#"{"integration-file": {"content": {"aws": []}}, "title": "Add aws"}"#;
        let plan = open(body).unwrap();
        assert_eq!(plan.title.as_str(), "Add aws");
        assert!(plan.message.is_none());
        let no_title = r#"{"integration-file": {"content": {}}}"#;
        assert!(
            matches!(open(no_title), Err(PlanError::InvalidContent(e)) if e.pointer == "/title")
        );
        let no_file = r#"{"title": "x"}"#;
        assert!(matches!(open(no_file), Err(PlanError::InvalidContent(_))));
        let bad_message = r#"{"integration-file": {"content": {}}, "title": "x", "message": 3}"#;
        assert!(
            matches!(open(bad_message), Err(PlanError::InvalidContent(e)) if e.pointer == "/message")
        );
        // Each part under its PUT's rules: the configuration file needs its file_sha.
        let no_sha = r#"{"configuration-file": {"payload": {"folders": []}}, "title": "x"}"#;
        assert!(matches!(open(no_sha), Err(PlanError::Part { .. })));
        let denied = open_body(body.as_bytes(), false, [false, true], &schemas());
        assert!(matches!(denied, Err(PlanError::Part { .. })));
    }

    #[test]
    fn a_reviewer_needs_a_sub() {
        let who = Identity::new("Ann", "ann@x", "acme");
        assert!(matches!(reviewer(None, &who), Err(PlanError::SubRequired)));
        assert_eq!(reviewer(Some("ann"), &who).unwrap().sub, "ann");
    }

    #[test]
    fn an_approval_names_the_commit_reviewed() {
        assert!(approve_body(b"").is_err(), "an empty body approves nothing");
        assert!(approve_body(b"{}").is_err());
        let id = "ab".repeat(20);
        let named = approve_body(format!(r#"{{"commit": "{id}"}}"#).as_bytes()).unwrap();
        assert_eq!(named.as_str(), id);
        assert!(approve_body(br#"{"commit": "abc"}"#).is_err());
        assert!(approve_body(br#"{"commit": 1}"#).is_err());
        assert!(matches!(approve_body(b"{"), Err(PlanError::InvalidJson(_))));
    }

    #[test]
    fn a_description_may_not_forge_a_trailer() {
        let body = |m: &str| {
            serde_json::to_vec(&serde_json::json!({"integration-file": {"content": {}}, "title": "t", "message": m}))
                .unwrap()
        };
        let open = |m: &str| open_body(&body(m), false, [true, true], &schemas());
        assert!(open("why\n\nsee the ticket").is_ok());
        for forged in [
            "body\n\nApproved-by: eve <e@x>",
            "x\nproposal: 9",
            "Request-Id: r",
        ] {
            assert!(
                matches!(open(forged), Err(PlanError::InvalidContent(e)) if e.pointer == "/message"),
                "{forged}"
            );
        }
    }
}

//! `PlanError`: why the application layer refuses a write before storage sees it (the body, a document, its rules, its preconditions); `http/problem.rs` maps it to problem+json once.
use crate::domain::{ContentError, PlanFile};
use crate::validation::Violations;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("file_sha {0}")]
    InvalidFileSha(String),
    #[error("file_sha may only be sent for tenants with an active source-hosting installation")]
    FileShaNotAllowed,
    #[error("{0}")]
    InvalidContent(ContentError),
    /// Documents that break the operator's schemas: one file's, or both files' of a write of
    /// both (then each pointer names its part).
    #[error("{} {} the operator's schemas", files.iter().map(|f| f.path()).collect::<Vec<_>>().join(" and "), if files.len() == 1 { "breaks" } else { "break" })]
    SchemaViolation {
        files: Vec<PlanFile>,
        violations: Violations,
    },
    #[error("send file_sha (the sha from your last read) or an If-Match header")]
    PreconditionRequired,
    #[error("the token lacks the permission {0}")]
    Forbidden(&'static str),
    #[error("proposals need a token with a sub claim: approvals tell people apart by it")]
    SubRequired,
    /// An error of one part (one file) of a write of both files.
    #[error("{file}: {inner}", file = file.part_name())]
    Part {
        file: PlanFile,
        inner: Box<PlanError>,
    },
}

impl PlanError {
    /// This error, as the error of the part `file` of a write of both files.
    pub fn in_part(self, file: PlanFile) -> Self {
        match self {
            part @ PlanError::Part { .. } => part,
            inner => PlanError::Part {
                file,
                inner: Box::new(inner),
            },
        }
    }
}

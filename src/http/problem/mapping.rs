//! How the errors of the layers below become an `ApiError`: the application layer's `PlanError`, the writer queue's `WriteError`, storage's `StorageError` (500s keep their cause for the log only).
use super::ApiError;
use crate::auth::AuthError;
use crate::domain::PlanFile;
use crate::storage::StorageError;

/// The application layer's refusals, as the API answers them.
impl From<crate::plans::PlanError> for ApiError {
    fn from(e: crate::plans::PlanError) -> Self {
        use crate::plans::PlanError as P;
        match e {
            P::InvalidJson(m) => ApiError::InvalidJson(m),
            P::InvalidFileSha(m) => ApiError::InvalidFileSha(m),
            P::FileShaNotAllowed => ApiError::FileShaNotAllowed,
            P::InvalidContent(e) => ApiError::InvalidContent(e),
            P::SchemaViolation { files, violations } => {
                ApiError::SchemaViolation { files, violations }
            }
            P::PreconditionRequired => ApiError::PreconditionRequired,
            P::Forbidden(scope) => ApiError::Forbidden(scope),
            P::SubRequired => ApiError::SubRequired,
            P::Part { file, inner } => ApiError::Part {
                file,
                inner: Box::new((*inner).into()),
            },
        }
    }
}

impl ApiError {
    /// 503 `busy` with `Retry-After: retry_after`.
    pub fn busy(reason: impl Into<String>, retry_after: u64) -> Self {
        ApiError::Busy {
            reason: reason.into(),
            retry_after: retry_after.max(1),
        }
    }

    /// Maps a failed write of `file`: a full queue or a turn not had in time is 503 `busy`.
    pub fn from_write(e: crate::plans::writer::WriteError, file: PlanFile) -> Self {
        use crate::plans::writer::WriteError;
        match e {
            WriteError::Storage(e) => Self::from_storage(e, file),
            WriteError::QueueFull { .. } => {
                ApiError::busy(format!("too many writes of {} are waiting", file.path()), 1)
            }
            WriteError::TimedOut { waited, .. } => ApiError::busy(
                format!(
                    "the write of {} did not get its turn within {} s",
                    file.path(),
                    waited.as_secs()
                ),
                waited.as_secs().clamp(1, 5),
            ),
            WriteError::KeyInFlight { .. } => ApiError::IdempotencyKeyInFlight,
            e @ WriteError::Task { .. } => ApiError::Internal(e.to_string()),
        }
    }

    /// Maps a storage error for a request about `file`. Internal details stay in the error
    /// (logged), not in the response.
    pub fn from_storage(e: StorageError, file: PlanFile) -> Self {
        if e.is_out_of_descriptors() {
            return ApiError::busy("the service is out of file descriptors for now", 1);
        }
        match e {
            StorageError::TenantNotFound(t) => ApiError::TenantNotFound(t.to_string()),
            StorageError::ShaMismatch { current, .. } => ApiError::ShaMismatch {
                file: file.path(),
                current,
            },
            StorageError::PreconditionFailed { current, .. } => ApiError::PreconditionFailed {
                file: file.path(),
                current,
            },
            StorageError::UnknownRef { commit, .. } => ApiError::UnknownRef(commit),
            StorageError::KeyReused { commit, .. } => ApiError::IdempotencyKeyReused(commit),
            // The only last moment the API sets is the token's end.
            StorageError::Expired { .. } => ApiError::Unauthorized(AuthError::Invalid(
                "the token expired while the write waited its turn; nothing was written".into(),
            )),
            StorageError::Contended { .. } => {
                ApiError::busy(format!("too many concurrent writes to {}", file.path()), 1)
            }
            StorageError::RefLocked { lock, .. } => ApiError::busy(
                format!("{lock} is locked by another process (a git command): retry"),
                1,
            ),
            StorageError::StorageFull { .. } => ApiError::StorageFull(file.path()),
            StorageError::NotRepresentable { file, .. } => {
                ApiError::InvalidContent(crate::domain::ContentError::new(
                    match file {
                        PlanFile::Integration => "/content",
                        PlanFile::Configuration => "/payload",
                    },
                    crate::domain::yaml::YamlError::NotRepresentable.to_string(),
                ))
            }
            StorageError::TenantMoving { tenant } => ApiError::TenantMoving(tenant.to_string()),
            // The detail names no shard: shard addresses are the operator's business.
            StorageError::TenantMoved { tenant, .. } => ApiError::TenantMoved(tenant.to_string()),
            e @ StorageError::MoveConflict { .. } => ApiError::MoveConflict(e.to_string()),
            StorageError::Import { reason, .. } => ApiError::ImportFailed(reason),
            StorageError::WebhookNotFound { id, .. } => ApiError::WebhookNotFound(id.to_string()),
            StorageError::WebhookLimit { limit, .. } => ApiError::WebhookLimit(limit),
            StorageError::WebhookKeyReused { id, .. } => ApiError::WebhookKeyReused(id.to_string()),
            StorageError::ApprovalRequired { .. } => ApiError::ApprovalRequired,
            StorageError::ProposalNotFound { number, .. } => {
                ApiError::ProposalNotFound(number.get())
            }
            StorageError::ProposalRefused { refusal, .. } => ApiError::ProposalRefused(refusal),
            StorageError::ProposalStale {
                number,
                file,
                current,
                ..
            } => ApiError::ProposalStale {
                number: number.get(),
                file: file.path(),
                current,
            },
            StorageError::NothingProposed { .. } => ApiError::NothingProposed,
            StorageError::ProposalLimit { limit, .. } => ApiError::ProposalLimit(limit),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

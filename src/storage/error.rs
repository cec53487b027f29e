//! `StorageError`: what can go wrong in storage, with the tenant, file and operation.
use crate::domain::{BlobId, CommitId, TenantId};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("tenant {0} does not exist")]
    TenantNotFound(TenantId),
    #[error("tenant {0} already exists")]
    TenantExists(TenantId),
    #[error(
        "tenant {tenant}: tenant {existing} exists, and ids that differ only in letter case \
         would share one repository on a case-insensitive volume"
    )]
    TenantCaseClash { tenant: TenantId, existing: String },
    #[error("tenant {tenant}: commit {commit} is not in the history of main")]
    UnknownRef { tenant: TenantId, commit: CommitId },
    #[error("tenant {tenant}: {file} has changed; its current blob is {current}")]
    ShaMismatch {
        tenant: TenantId,
        file: &'static str,
        current: BlobId,
    },
    #[error("tenant {tenant}: If-Match does not match {file}; its current blob is {current}")]
    PreconditionFailed {
        tenant: TenantId,
        file: &'static str,
        current: BlobId,
    },
    #[error("tenant {tenant}: commit {commit} recorded this idempotency key for another request")]
    KeyReused { tenant: TenantId, commit: CommitId },
    #[error("tenant {tenant}: {file}: main kept moving; gave up after {attempts} attempts")]
    Contended {
        tenant: TenantId,
        file: &'static str,
        attempts: u32,
    },
    #[error("tenant {tenant}: no space left on the device while writing {file}")]
    StorageFull {
        tenant: TenantId,
        file: &'static str,
    },
    #[error("tenant {tenant}: {op}: {message}")]
    Git {
        tenant: TenantId,
        op: &'static str,
        message: String,
        code: i32,
        class: u32,
    },
    #[error("tenant {tenant}: git upload-pack failed: {message}")]
    UploadPack { tenant: TenantId, message: String },
    #[error("{op} ({}): {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.to_owned(),
            source,
        }
    }
}

//! `StorageError`: every way a storage call fails, with the tenant, file and operation it concerns; no git type (libgit2's errors are carried as text and codes).
use crate::domain::{BlobId, CommitId, PlanFile, ShardUrl, TenantId};
use std::path::{Path, PathBuf};

/// What can go wrong in storage, with the tenant, file and operation.
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
    #[error("tenant {tenant}: {} has changed; its current blob is {current}", file.path())]
    ShaMismatch {
        tenant: TenantId,
        file: PlanFile,
        current: BlobId,
    },
    #[error("tenant {tenant}: If-Match does not match {}; its current blob is {current}", file.path())]
    PreconditionFailed {
        tenant: TenantId,
        file: PlanFile,
        current: BlobId,
    },
    #[error("tenant {tenant}: commit {commit} recorded this idempotency key for another request")]
    KeyReused { tenant: TenantId, commit: CommitId },
    #[error("tenant {tenant}: the write's last moment (its token's end) passed while it waited its turn; nothing was written")]
    Expired { tenant: TenantId },
    #[error("tenant {tenant}: {file}: main kept moving; gave up after {attempts} attempts")]
    Contended {
        tenant: TenantId,
        file: &'static str,
        attempts: u32,
    },
    #[error(
        "tenant {tenant}: {lock} is held by another process (plain git, or a process that died \
         less than 10 minutes ago): retry; remove it by hand only if no process uses the \
         repository"
    )]
    RefLocked {
        tenant: TenantId,
        lock: &'static str,
    },
    #[error("{op}: the process is out of file descriptors")]
    OutOfDescriptors { op: &'static str },
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
    /// Content sent as JSON whose emission does not read back as the same data.
    #[error("tenant {tenant}: the content of {} cannot be stored as YAML without changing it", file.path())]
    NotRepresentable { tenant: TenantId, file: PlanFile },
    #[error("tenant {tenant} is moving to another shard; writes are refused until it is there")]
    TenantMoving { tenant: TenantId },
    #[error("tenant {tenant} moved to the shard at {to}")]
    TenantMoved { tenant: TenantId, to: ShardUrl },
    #[error("tenant {tenant}: {reason}")]
    MoveConflict { tenant: TenantId, reason: String },
    #[error("tenant {tenant}: import failed: {reason}")]
    Import { tenant: TenantId, reason: String },
    #[error("tenant {tenant}: no webhook {id}")]
    WebhookNotFound {
        tenant: TenantId,
        id: crate::domain::WebhookId,
    },
    #[error(
        "tenant {tenant}: webhook {id} was made with this idempotency key for another request"
    )]
    WebhookKeyReused {
        tenant: TenantId,
        id: crate::domain::WebhookId,
    },
    #[error("tenant {tenant} has {limit} webhooks already, the most it may have")]
    WebhookLimit { tenant: TenantId, limit: usize },
    #[error("tenant {tenant} requires approval: main moves only by applying an approved proposal")]
    ApprovalRequired { tenant: TenantId },
    #[error("tenant {tenant}: no proposal {number}")]
    ProposalNotFound {
        tenant: TenantId,
        number: crate::domain::ProposalNumber,
    },
    #[error("tenant {tenant}: {refusal}")]
    ProposalRefused {
        tenant: TenantId,
        refusal: crate::domain::proposal::Refusal,
    },
    #[error("tenant {tenant}: proposal {number} changes {}, which moved on main since its base; update the proposal", file.path())]
    ProposalStale {
        tenant: TenantId,
        number: crate::domain::ProposalNumber,
        file: PlanFile,
        current: BlobId,
    },
    #[error("tenant {tenant}: the proposal changes nothing: every file it sends is as on main")]
    NothingProposed { tenant: TenantId },
    #[error("tenant {tenant} has {limit} open proposals (or made the last number), the most it may have")]
    ProposalLimit { tenant: TenantId, limit: u64 },
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
    /// The same failure again, for another request that met it (a batch's writes share a
    /// lock and a sync): the same kind, status and message.
    pub(crate) fn again(&self) -> StorageError {
        match self {
            StorageError::TenantNotFound(t) => StorageError::TenantNotFound(t.clone()),
            StorageError::TenantMoving { tenant } => StorageError::TenantMoving {
                tenant: tenant.clone(),
            },
            StorageError::TenantMoved { tenant, to } => StorageError::TenantMoved {
                tenant: tenant.clone(),
                to: to.clone(),
            },
            StorageError::Contended {
                tenant,
                file,
                attempts,
            } => StorageError::Contended {
                tenant: tenant.clone(),
                file,
                attempts: *attempts,
            },
            StorageError::StorageFull { tenant, file } => StorageError::StorageFull {
                tenant: tenant.clone(),
                file,
            },
            StorageError::RefLocked { tenant, lock } => StorageError::RefLocked {
                tenant: tenant.clone(),
                lock,
            },
            StorageError::OutOfDescriptors { op } => StorageError::OutOfDescriptors { op },
            StorageError::ApprovalRequired { tenant } => StorageError::ApprovalRequired {
                tenant: tenant.clone(),
            },
            StorageError::Io { op, path, source } => StorageError::Io {
                op,
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            other => StorageError::Io {
                op: "write in a batch that failed",
                path: PathBuf::new(),
                source: std::io::Error::other(other.to_string()),
            },
        }
    }

    /// A failed system call: out of descriptors (`EMFILE`, `ENFILE`) is its own kind (a
    /// 503, never a 500), anything else an `Io` with its path.
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
            return StorageError::OutOfDescriptors { op };
        }
        StorageError::Io {
            op,
            path: path.to_owned(),
            source,
        }
    }

    /// Whether this failure is the process (or the system) out of file descriptors,
    /// whichever layer met it: a system call, libgit2, or a child process that could not be
    /// started.
    pub fn is_out_of_descriptors(&self) -> bool {
        match self {
            StorageError::OutOfDescriptors { .. } => true,
            StorageError::Io { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
            }
            StorageError::Git { message, .. } | StorageError::UploadPack { message, .. } => {
                message.contains("Too many open files")
            }
            _ => false,
        }
    }
}

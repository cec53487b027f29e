//! `Writers`: each tenant's writes take turns in a bounded queue that waits as a future, not on a thread.
//!
//! A write first joins its tenant's queue: when the queue is full it is refused at once, and
//! when its turn does not come within the wait it is refused then (both 503 `busy`). Only the
//! write whose turn it is occupies a blocking thread, so a hot tenant holds at most one of
//! them, whatever number of writers it has, and no shared budget while it waits. Writers of
//! one tenant in other processes still take turns on the repository's file lock (storage).
//!
//! This is also where a tenant's writes can later share work: the writer whose turn it is
//! could keep the repository open and commit the writes queued behind it together.
use crate::domain::TenantId;
use crate::gates::Gates;
pub use crate::storage::Committed;
use crate::storage::{CommitRequest, ShaCheck, Storage, StorageError};
use crate::upkeep::Upkeep;
use std::time::Duration;

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{waiting} writes of tenant {tenant} are already queued")]
    QueueFull { tenant: TenantId, waiting: usize },
    #[error("the write of tenant {tenant} did not get its turn within {} s", waited.as_secs())]
    TimedOut { tenant: TenantId, waited: Duration },
    #[error("a write of tenant {tenant} with this idempotency key is in flight")]
    KeyInFlight { tenant: TenantId },
    #[error("the write task of tenant {tenant} failed: {message}")]
    Task { tenant: TenantId, message: String },
}

/// Cheap to clone; shared by every worker.
#[derive(Clone)]
pub struct Writers {
    storage: Storage,
    upkeep: Upkeep,
    /// One turn per tenant.
    turns: Gates,
    /// Writes of one tenant queued or running at most.
    depth: usize,
    /// How long a write waits for its turn.
    wait: Duration,
    /// Turns to walk a history for a commit-hash `file_sha` before the write's turn: each a
    /// blocking thread for as long as the history is, so bounded in all and per tenant.
    walks: crate::gates::Turns,
}

/// History walks of writes at once, in all and for one tenant.
const WALKS: usize = 8;
const WALKS_PER_TENANT: usize = 2;

impl Writers {
    pub fn new(storage: Storage, upkeep: Upkeep, depth: usize, wait: Duration) -> Self {
        Self {
            storage,
            upkeep,
            turns: Gates::new(1),
            depth: depth.max(1),
            wait,
            walks: crate::gates::Turns::new(WALKS, WALKS_PER_TENANT, wait),
        }
    }

    /// True when `tenant`'s queue is full now, so that a write can be refused before its
    /// body is read and parsed (load shedding); [`Writers::write`] checks again.
    pub fn queue_full(&self, tenant: &TenantId) -> bool {
        self.turns.users(tenant) >= self.depth
    }

    /// Commits one or both files once it is this tenant's turn (a dry run too: it checks
    /// against the same head a real write would see). With an idempotency key, a request
    /// while another with that key is in flight is refused (409); storage looks for an
    /// earlier commit with the key in the write's own task, on the repository it commits to.
    pub async fn commit(
        &self,
        tenant: &TenantId,
        mut req: CommitRequest,
    ) -> Result<Committed, WriteError> {
        let lease = self.turns.lease(tenant);
        if lease.users > self.depth {
            return Err(WriteError::QueueFull {
                tenant: tenant.clone(),
                waiting: lease.users - 1,
            });
        }
        let task_err = |e: tokio::task::JoinError| WriteError::Task {
            tenant: tenant.clone(),
            message: e.to_string(),
        };
        // A request whose key is in flight, in this process or another, is refused at once
        // (409), before any wait, by the key's OS lock: a real write takes it now and holds
        // it until it is durable; a dry run only looks.
        let mut marker = None;
        if let Some(record) = &req.idempotency {
            let (storage, owned) = (self.storage.clone(), tenant.clone());
            let (key, dry_run) = (record.key.clone(), req.dry_run);
            // `None`: in flight; `Some(marker)`: free (a dry run holds no marker).
            let free = tokio::task::spawn_blocking(move || {
                if dry_run {
                    Ok((!storage.key_in_flight(&owned, &key)?).then_some(None))
                } else {
                    Ok(storage.claim_in_flight(&owned, &key)?.map(Some))
                }
            })
            .await
            .map_err(task_err)?
            .map_err(WriteError::Storage)?;
            marker = free.ok_or_else(|| WriteError::KeyInFlight {
                tenant: tenant.clone(),
            })?;
        }
        // A commit hash as file_sha: the history walk happens here, before the turn and the
        // write lock; under them only the commits added since are looked at.
        for change in &mut req.changes {
            if let (Some(ShaCheck::BlobOrCommit(id)), None) =
                (change.preconditions.file_sha, change.preconditions.ancestry)
            {
                let walk = self
                    .walks
                    .take(tenant)
                    .await
                    .ok_or_else(|| WriteError::TimedOut {
                        tenant: tenant.clone(),
                        waited: self.wait,
                    })?;
                let (storage, owned) = (self.storage.clone(), tenant.clone());
                let found = tokio::task::spawn_blocking(move || {
                    let _walk = walk;
                    storage.ancestry(&owned, id)
                })
                .await
                .map_err(task_err)??;
                change.preconditions.ancestry = Some(found);
            }
        }
        let turn = tokio::time::timeout(self.wait, lease.semaphore().clone().acquire_owned())
            .await
            .map_err(|_| WriteError::TimedOut {
                tenant: tenant.clone(),
                waited: self.wait,
            })?
            .expect("the semaphore is never closed");
        let (storage, upkeep, owned) = (self.storage.clone(), self.upkeep.clone(), tenant.clone());
        let dry_run = req.dry_run;
        // The turn (and the key's marker) move into the blocking task: they end when the write
        // does, even when the client goes away meanwhile.
        let (committed, due) = tokio::task::spawn_blocking(move || {
            let _turn = (turn, lease, marker);
            let committed = storage.commit(&owned, req)?;
            // A dry run wrote nothing, so it never starts a repack.
            let due = !dry_run
                && matches!(&committed, Committed::Written(o) if o.changed())
                && upkeep.due(&owned);
            Ok::<_, StorageError>((committed, due))
        })
        .await
        .map_err(task_err)??;
        if due {
            self.upkeep.spawn(tenant.clone());
        }
        Ok(committed)
    }
}

//! `Writers`: each tenant's writes (API writes and pushes) wait in a bounded queue, as futures, and are committed in batches by one blocking task per tenant at a time.
//!
//! A write joins its tenant's queue: when the queue is full it is refused at once, and when
//! it is still queued after the wait it is refused then (both 503 `busy`). The first write
//! of an idle tenant starts its runner, a blocking task that takes everything queued (up to
//! [`MAX_BATCH`]) and commits it as one batch: each write its own commit, checked against
//! the head the ones before it made, all made durable by one sync of their objects, one
//! move of `main` and one sync of the ref; then the next batch, until the queue is empty. So
//! a hot tenant holds one blocking thread, whatever number of writers it has, and its
//! writes share the syncs instead of waiting for each other's. Writers of the tenant in
//! other processes take turns on the repository's file lock (storage). A push's move of
//! `main` waits in the same queue and runs alone in its turn, so a push and the API writes
//! of its tenant share one depth, one wait and one blocking thread.
use crate::domain::{CommitId, Identity, RequestId, TenantId};
use crate::gates::{Gates, Lease};
pub use crate::storage::Committed;
use crate::storage::{
    CommitRequest, FastForward, InFlight, ShaCheck, StagedPush, Storage, StorageError,
};
use crate::upkeep::Upkeep;
use foldhash::fast::RandomState;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// The most writes one batch commits, whatever the queue's depth. With the default depth (16,
/// which counts the writes of the running batch too) a batch holds at most 16.
pub const MAX_BATCH: usize = 64;

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
    /// Counts each tenant's writes in flight (queued or running): the queue's depth.
    users: Gates,
    /// Each tenant's queued writes, and whether its runner is running. Only tenants with
    /// writes in flight are here (ids of verified tokens of existing tenants).
    queues: Arc<Mutex<HashMap<TenantId, Queue, RandomState>>>,
    /// Writes of one tenant queued or running at most.
    depth: usize,
    /// How long a write waits in its queue.
    wait: Duration,
    /// Turns to walk a history for a commit-hash `file_sha` before the write's turn: each a
    /// blocking thread for as long as the history is, so bounded in all and per tenant.
    walks: crate::gates::Turns,
    /// Writes per batch.
    batches: prometheus::Histogram,
}

/// History walks of writes at once, in all and for one tenant.
const WALKS: usize = 8;
const WALKS_PER_TENANT: usize = 2;

#[derive(Default)]
struct Queue {
    pending: VecDeque<Pending>,
    running: bool,
}

/// A queued write, and what it holds until it is done: its place in the count, its key's
/// marker.
struct Pending {
    id: u64,
    job: Job,
    _held: (Lease, Option<InFlight>),
}

/// What a queued write does: an API write (committed in a batch with its neighbours), or a
/// step that runs alone in its turn (a push's move of `main`, a proposal's step), which
/// answers its caller itself and says whether `main` moved. (A job is moved into its queue
/// once and out of it once: the size of a write's request costs nothing there.)
#[allow(clippy::large_enum_variant)]
enum Job {
    Commit {
        req: CommitRequest,
        reply: oneshot::Sender<Result<Committed, StorageError>>,
    },
    Alone(Box<dyn FnOnce(&Storage) -> bool + Send>),
}

impl Job {
    fn is_alone(&self) -> bool {
        matches!(self, Job::Alone(_))
    }
}

/// A push's checked pack, and `main`'s move from `old` to `new` it asks for.
#[derive(Debug)]
pub struct PushMove {
    pub old: CommitId,
    pub new: CommitId,
    pub staged: StagedPush,
    pub pusher: Identity,
    pub request_id: RequestId,
    /// The token's last moment, checked again under the write lock.
    pub not_after: std::time::SystemTime,
}

impl Writers {
    pub fn new(
        storage: Storage,
        upkeep: Upkeep,
        batches: prometheus::Histogram,
        depth: usize,
        wait: Duration,
    ) -> Self {
        Self {
            storage,
            upkeep,
            batches,
            users: Gates::new(1),
            queues: Arc::default(),
            depth: depth.max(1),
            wait,
            walks: crate::gates::Turns::new(WALKS, WALKS_PER_TENANT, wait),
        }
    }

    /// True when `tenant`'s queue is full now, so that a write can be refused before its
    /// body is read and parsed (load shedding); [`Writers::commit`] checks again.
    pub fn queue_full(&self, tenant: &TenantId) -> bool {
        self.users.users(tenant) >= self.depth
    }

    /// Commits one or both files in the tenant's next batch (a dry run too: it checks
    /// against the same head a real write would see). With an idempotency key, a request
    /// while another with that key is in flight is refused (409); storage looks for an
    /// earlier commit with the key in the batch, on the repository it commits to.
    pub async fn commit(
        &self,
        tenant: &TenantId,
        mut req: CommitRequest,
    ) -> Result<Committed, WriteError> {
        let lease = self.users.lease(tenant);
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
        // A commit hash as file_sha: the history walk happens here, before the queue and
        // the write lock; under them only the commits added since are looked at.
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
        self.queued(tenant, lease, marker, |reply| Job::Commit { req, reply })
            .await
    }

    /// Moves `main` for a checked push in the tenant's turn, as [`Writers::commit`] queues a
    /// write: refused when the queue is full (`QueueFull`) or the turn does not come in time
    /// (`TimedOut`).
    pub async fn push(&self, tenant: &TenantId, push: PushMove) -> Result<FastForward, WriteError> {
        let owned = tenant.clone();
        self.alone(
            tenant,
            move |storage| {
                storage.fast_forward(
                    &owned,
                    push.old,
                    push.new,
                    push.staged,
                    &push.pusher,
                    &push.request_id,
                    push.not_after,
                )
            },
            |moved| matches!(moved, FastForward::Moved),
        )
        .await
    }

    /// Runs `step` alone in the tenant's turn, queued as a write is (the same depth, wait and
    /// blocking thread): a push's move of `main`, a proposal's step. `wrote` tells from its
    /// answer whether it wrote objects (a repack may then be due).
    pub async fn alone<T: Send + 'static>(
        &self,
        tenant: &TenantId,
        step: impl FnOnce(&Storage) -> Result<T, StorageError> + Send + 'static,
        wrote: fn(&T) -> bool,
    ) -> Result<T, WriteError> {
        let lease = self.users.lease(tenant);
        if lease.users > self.depth {
            return Err(WriteError::QueueFull {
                tenant: tenant.clone(),
                waiting: lease.users - 1,
            });
        }
        let owned = tenant.clone();
        self.queued(tenant, lease, None, move |reply| {
            Job::Alone(Box::new(move |storage: &Storage| {
                let result =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(storage)));
                let Ok(result) = result else {
                    // Its caller is told by the dropped reply (500); the queue goes on.
                    tracing::error!(tenant = %owned, "a step run alone in the writer queue panicked");
                    return false;
                };
                let changed = result.as_ref().is_ok_and(wrote);
                let _ = reply.send(result);
                changed
            }))
        })
        .await
    }

    /// Queues `job` (made with its reply channel), starts the tenant's runner if it is idle,
    /// and waits for the answer at most the queue's wait while it is still queued.
    async fn queued<T>(
        &self,
        tenant: &TenantId,
        lease: Lease,
        marker: Option<InFlight>,
        job: impl FnOnce(oneshot::Sender<Result<T, StorageError>>) -> Job,
    ) -> Result<T, WriteError> {
        let (reply, answer) = oneshot::channel();
        let id = rand::random();
        let start = {
            let mut queues = self.queues.lock().expect("not poisoned");
            let queue = queues.entry(tenant.clone()).or_default();
            queue.pending.push_back(Pending {
                id,
                job: job(reply),
                _held: (lease, marker),
            });
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            let (writers, owned) = (self.clone(), tenant.clone());
            let runtime = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || writers.run(&owned, &runtime));
        }
        tokio::pin!(answer);
        match tokio::time::timeout(self.wait, &mut answer).await {
            Ok(result) => result,
            Err(_) => {
                // Still queued: it leaves the queue, refused. Already in a batch: a write
                // that runs is finished, and answered.
                if self.unqueue(tenant, id) {
                    return Err(WriteError::TimedOut {
                        tenant: tenant.clone(),
                        waited: self.wait,
                    });
                }
                answer.await
            }
        }
        .map_err(|_| WriteError::Task {
            tenant: tenant.clone(),
            message: "the tenant's writer ended without an answer".into(),
        })?
        .map_err(WriteError::Storage)
    }

    /// Takes the queued write `id` of `tenant` out; false when it is not queued any more.
    fn unqueue(&self, tenant: &TenantId, id: u64) -> bool {
        let mut queues = self.queues.lock().expect("not poisoned");
        let Some(queue) = queues.get_mut(tenant) else {
            return false;
        };
        let before = queue.pending.len();
        queue.pending.retain(|p| p.id != id);
        before != queue.pending.len()
    }

    /// The tenant's runner: batches of what is queued until nothing is; then it ends (the
    /// next write starts another). A push at the front runs alone; a batch stops before one.
    fn run(&self, tenant: &TenantId, runtime: &tokio::runtime::Handle) {
        loop {
            let mut batch: Vec<Pending> = {
                let mut queues = self.queues.lock().expect("not poisoned");
                let queue = queues.get_mut(tenant).expect("a running queue is kept");
                if queue.pending.is_empty() {
                    queues.remove(tenant);
                    return;
                }
                let n = if queue.pending[0].job.is_alone() {
                    1
                } else {
                    queue
                        .pending
                        .iter()
                        .take(MAX_BATCH)
                        .take_while(|p| !p.job.is_alone())
                        .count()
                };
                queue.pending.drain(..n).collect()
            };
            let changed = if batch[0].job.is_alone() {
                let Pending { job, _held, .. } = batch.pop().expect("one step");
                let Job::Alone(step) = job else {
                    unreachable!("is_alone")
                };
                step(&self.storage)
            } else {
                self.run_batch(tenant, batch)
            };
            // A dry run wrote nothing, so it never starts a repack.
            if changed && self.upkeep.due(tenant) {
                let (upkeep, owned) = (self.upkeep.clone(), tenant.clone());
                runtime.spawn(async move { upkeep.spawn(owned) });
            }
        }
    }

    /// A batch of API writes; whether one changed `main`.
    fn run_batch(&self, tenant: &TenantId, mut batch: Vec<Pending>) -> bool {
        self.batches.observe(batch.len() as f64);
        let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let reqs: Vec<&CommitRequest> = batch
                .iter()
                .map(|p| match &p.job {
                    Job::Commit { req, .. } => req,
                    Job::Alone(_) => unreachable!("a batch stops before a step run alone"),
                })
                .collect();
            self.storage.commit_batch(tenant, &reqs)
        }));
        let Ok(results) = results else {
            // A fault: this batch's writers are told (their answers are dropped: 500),
            // and the queue goes on.
            tracing::error!(%tenant, writes = batch.len(), "a batch of writes panicked");
            return false;
        };
        let mut changed = false;
        let mut again = Vec::new();
        for (pending, result) in batch.drain(..).zip(results) {
            let Pending { id, job, _held } = pending;
            match (job, result) {
                (Job::Commit { req, reply }, Some(result)) => {
                    changed |=
                        !req.dry_run && matches!(&result, Ok(Committed::Written(o)) if o.changed());
                    let _ = reply.send(result);
                }
                (job, _) => again.push(Pending { id, job, _held }),
            }
        }
        if !again.is_empty() {
            // Not tried: at the front of the queue, in their order, for the next batch.
            let mut queues = self.queues.lock().expect("not poisoned");
            let queue = queues.get_mut(tenant).expect("a running queue is kept");
            for pending in again.into_iter().rev() {
                queue.pending.push_front(pending);
            }
        }
        changed
    }
}

//! Webhooks: `Webhooks`, the handle the handlers use (the destination rules, the limit, a poke after a change), and its dispatcher: a runtime of its own that follows each tenant with subscriptions (one task per tenant, one per subscription) and delivers the commits on `main`'s first-parent line in order (`webhooks/backlog.rs`).
mod backlog;
mod budget;
mod deliver;
mod destination;
mod lookup;

pub use deliver::{signature, Message, Outcome, Sender};
pub use destination::{CheckError, Destinations, Refused};

use crate::config::WebhooksConfig;
use crate::domain::{CommitId, TenantId, WebhookId};
use crate::events::Events;
use crate::metrics::Metrics;
use crate::storage::{Storage, StorageError, Webhook, WebhookState};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify, Semaphore};

/// How often a tenant's task looks at its subscriptions file (changes by another process,
/// the CLI) and a moving tenant's placement; a change made through this process wakes it at
/// once, and so does a move of `main`.
const TICK: Duration = Duration::from_secs(10);
/// How often the data dir is scanned for tenants with subscriptions (an import, the CLI).
const SCAN: Duration = Duration::from_secs(10);

/// The webhook client could not be built (its TLS set-up).
#[derive(Debug, thiserror::Error)]
#[error("the webhook client could not be built: {0}")]
pub struct BuildError(#[from] reqwest::Error);

/// The handle: cheap to clone; the dispatcher stops when the last clone is dropped.
#[derive(Clone)]
pub struct Webhooks {
    core: Arc<Core>,
    _running: Arc<Running>,
}

/// What every task of the dispatcher shares.
struct Core {
    storage: Storage,
    events: Events,
    metrics: Metrics,
    config: WebhooksConfig,
    sender: Sender,
    /// Attempts in flight in the whole process.
    in_flight: Arc<Semaphore>,
    /// The CPU the dispatcher may use.
    budget: Arc<budget::CpuBudget>,
    /// Cursors claimed at once (each an open file and a step's events, at most 128 of at most
    /// 16 KiB each, for one step of at most 64 commits).
    claims: Semaphore,
    /// The tenants followed, and how to wake each one's task.
    tenants: Mutex<HashMap<TenantId, Arc<Notify>>>,
    /// The dispatcher's runtime, once started.
    runtime: Mutex<Option<tokio::runtime::Handle>>,
}

/// Ends the dispatcher's thread when dropped.
struct Running {
    stop: Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.stop.lock().expect("not poisoned").take());
    }
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Webhooks")
    }
}

impl Webhooks {
    pub fn new(
        storage: Storage,
        events: Events,
        metrics: Metrics,
        config: WebhooksConfig,
    ) -> Result<Self, BuildError> {
        let sender = Sender::new(
            Destinations::from_config(&config),
            Duration::from_secs(config.connect_timeout_secs),
            Duration::from_secs(config.attempt_timeout_secs),
        )?;
        Ok(Self {
            core: Arc::new(Core {
                storage,
                events,
                metrics,
                in_flight: Arc::new(Semaphore::new(config.max_in_flight)),
                budget: Arc::new(budget::CpuBudget::new(config.cpu_share)),
                claims: Semaphore::new(config.max_in_flight.max(16)),
                config,
                sender,
                tenants: Mutex::default(),
                runtime: Mutex::default(),
            }),
            _running: Arc::new(Running {
                stop: Mutex::default(),
            }),
        })
    }

    /// The destination rules (a subscription's URL is checked against them when made).
    pub fn rules(&self) -> &Destinations {
        self.core.sender.rules()
    }

    pub fn max_per_tenant(&self) -> usize {
        self.core.config.max_per_tenant
    }

    /// Starts the dispatcher's thread (`planfiles-webhooks`: one async worker, its own
    /// blocking pool for git reads and cursor syncs), which follows every tenant with
    /// subscriptions. Runs until the last handle is dropped.
    pub fn start(&self) -> std::io::Result<()> {
        let (entered, left) = (self.core.budget.clone(), self.core.budget.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(24)
            .thread_name("planfiles-webhooks")
            // Deliveries yield the CPU to reads and writes: a nice of 10 on each of the
            // runtime's threads (Linux sets it per thread), and each counted in the budget.
            .on_thread_start(move || {
                // SAFETY: setpriority on the calling thread (`who` 0) has no preconditions.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
                entered.enter();
            })
            .on_thread_stop(move || left.leave())
            .enable_all()
            .build()?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        *self.core.runtime.lock().expect("not poisoned") = Some(runtime.handle().clone());
        *self._running.stop.lock().expect("not poisoned") = Some(stop);
        runtime.spawn(scan(self.core.clone()));
        std::thread::Builder::new()
            .name("planfiles-webhooks".into())
            .spawn(move || {
                // Every handle gone (the service stopped): the tasks end with the runtime.
                let _ = stopped.recv();
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(())
    }

    /// A tenant's subscriptions changed through this process: its task reads them now.
    pub fn poke(&self, tenant: &TenantId) {
        self.core.follow(tenant);
    }
}

impl Core {
    /// Wakes the tenant's task, starting one when there is none (and the dispatcher runs).
    fn follow(self: &Arc<Self>, tenant: &TenantId) {
        let Some(runtime) = self.runtime.lock().expect("not poisoned").clone() else {
            return;
        };
        let mut tenants = self.tenants.lock().expect("not poisoned");
        if let Some(wake) = tenants.get(tenant) {
            wake.notify_one();
            return;
        }
        let wake = Arc::new(Notify::new());
        tenants.insert(tenant.clone(), wake.clone());
        runtime.spawn(follow_tenant(self.clone(), tenant.clone(), wake));
    }

    /// Runs storage work on the dispatcher's blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Storage) -> T + Send + 'static,
    ) -> Option<T> {
        let storage = self.storage.clone();
        tokio::task::spawn_blocking(move || work(&storage))
            .await
            .ok()
    }
}

/// Follows every tenant of the data dir that has subscriptions, now and every [`SCAN`].
async fn scan(core: Arc<Core>) {
    loop {
        if let Some(tenants) = core.blocking(Storage::tenants_with_webhooks).await {
            for tenant in tenants {
                core.follow(&tenant);
            }
        }
        tokio::time::sleep(SCAN).await;
    }
}

/// A tenant's share of the process's turns: attempts in flight, and cursors claimed (a
/// subscription's step, held while its attempts run: a tenant of slow receivers holds this
/// many of the process's claims at most).
pub(crate) struct TenantTurns {
    attempts: Semaphore,
    claims: Semaphore,
    /// Its share of the deliveries' name lookups.
    lookups: Arc<Semaphore>,
}

/// A running subscription: its definition's sender and its task.
struct Follower {
    def: watch::Sender<Webhook>,
    task: tokio::task::JoinHandle<()>,
}

/// One tenant: its subscriptions read again when their file changes, `main`'s head sent to
/// each subscription's task (`None` while the tenant is not writable here: moving), until the
/// tenant has none or is not here any more.
async fn follow_tenant(core: Arc<Core>, tenant: TenantId, wake: Arc<Notify>) {
    let per_tenant = Arc::new(TenantTurns {
        attempts: Semaphore::new(core.config.max_in_flight_per_tenant),
        claims: Semaphore::new(core.config.max_in_flight_per_tenant),
        lookups: Arc::new(Semaphore::new(lookup::PER_TENANT)),
    });
    let (head_tx, _) = watch::channel::<Option<CommitId>>(None);
    // The proposals' records ref, read with the head (`None`: no proposal yet).
    let (records_tx, _) = watch::channel::<Option<CommitId>>(None);
    let mut followers: HashMap<WebhookId, Follower> = HashMap::new();
    let mut stamp = None;
    let mut feed = None;
    let mut counted = [0i64; 2];
    let mut settled = None;
    'follow: loop {
        if feed.is_none() {
            feed = core.events.subscribe_heads(&tenant).await.ok();
        }
        let (head, records) = feed
            .as_mut()
            .and_then(|f: &mut crate::storage::Subscription| {
                let update = f.current();
                (!update.moving).then_some((update.head.commit, update.records))
            })
            .unzip();
        if head.is_none() {
            feed = None;
        }
        // One trip to the blocking pool per new head: the subscriptions file's stamp, and the
        // head made durable (its writer may not have synced it yet) before it is announced.
        let to_settle = head.filter(|h| settled != Some(*h));
        let (t, from) = (tenant.clone(), settled);
        let (now, settling) = core
            .blocking(move |s| {
                let now = s.webhooks_stamp(&t);
                (now, to_settle.map(|h| s.settle(&t, from, h)))
            })
            .await
            .unzip();
        let now = now.flatten();
        // Settled is settled, whatever the list says next (a task that goes on after a poke
        // does not sync the same head again).
        let head = match (to_settle, settling.flatten()) {
            (Some(h), Some(Ok(()))) => {
                settled = Some(h);
                Some(h)
            }
            (Some(_), other) => {
                tracing::warn!(%tenant, error = ?other.map(|r| r.err()), "could not sync main before its webhooks");
                *head_tx.borrow()
            }
            (None, _) => head,
        };
        if now.is_none() || now != stamp {
            let t = tenant.clone();
            match core.blocking(move |s| s.webhooks(&t)).await {
                Some(Ok(list)) if !list.is_empty() => {
                    stamp = now;
                    count(&core, &mut counted, &list);
                    let heads = (&head_tx, &records_tx);
                    reconcile(&core, &tenant, &per_tenant, heads, &mut followers, list);
                }
                Some(
                    Ok(_) | Err(StorageError::TenantNotFound(_) | StorageError::TenantMoved { .. }),
                )
                | None => {
                    for follower in std::mem::take(&mut followers).into_values() {
                        follower.task.abort();
                    }
                    count(&core, &mut counted, &[]);
                    if leave(&core.tenants, &tenant, &wake) {
                        break 'follow;
                    }
                    // Poked after that read (a subscription made meanwhile): read again.
                    stamp = None;
                    continue 'follow;
                }
                Some(Err(e)) => {
                    tracing::warn!(%tenant, error = %e, "could not read the tenant's webhooks")
                }
            }
        }
        let records = records.flatten();
        records_tx.send_if_modified(|r| std::mem::replace(r, records) != records);
        head_tx.send_if_modified(|h| std::mem::replace(h, head) != head);
        tokio::select! {
            changed = async {
                match feed.as_mut() {
                    Some(f) => f.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                if changed.is_none() {
                    feed = None;
                }
            }
            () = wake.notified() => {}
            () = tokio::time::sleep(TICK) => {}
        }
    }
}

/// A tenant's task leaves the tenants followed, unless it was poked since it last waited:
/// [`Core::follow`] pokes the task it finds under the same lock, so a subscription made while
/// the task was leaving is read by it (false: go on), or starts a new task once it left.
fn leave(
    tenants: &Mutex<HashMap<TenantId, Arc<Notify>>>,
    tenant: &TenantId,
    wake: &Notify,
) -> bool {
    use futures_util::FutureExt as _;
    let mut tenants = tenants.lock().expect("not poisoned");
    // A poke with no waiter is kept as a permit: taken here at once.
    if wake.notified().now_or_never().is_some() {
        return false;
    }
    tenants.remove(tenant);
    true
}

/// Starts, updates and stops subscriptions' tasks to match `list`.
fn reconcile(
    core: &Arc<Core>,
    tenant: &TenantId,
    per_tenant: &Arc<TenantTurns>,
    (head, records): (
        &watch::Sender<Option<CommitId>>,
        &watch::Sender<Option<CommitId>>,
    ),
    followers: &mut HashMap<WebhookId, Follower>,
    list: Vec<Webhook>,
) {
    followers.retain(|id, f| {
        let kept = list.iter().any(|h| &h.id == id);
        if !kept {
            f.task.abort();
        }
        kept
    });
    for hook in list {
        if let Some(f) = followers.get(&hook.id) {
            // A task that stopped (a panic marked it failing) starts again once resumed.
            let stopped = f.task.is_finished() && hook.state == WebhookState::Active;
            if !stopped {
                f.def
                    .send_if_modified(|d| std::mem::replace(d, hook.clone()) != hook);
                continue;
            }
        }
        let (def, def_rx) = watch::channel(hook.clone());
        let id = hook.id.clone();
        let work = tokio::spawn(backlog::follow_subscription(
            core.clone(),
            tenant.clone(),
            per_tenant.clone(),
            def_rx,
            head.subscribe(),
            records.subscribe(),
        ));
        let task = tokio::spawn(guarded(core.clone(), tenant.clone(), id, work));
        followers.insert(hook.id, Follower { def, task });
    }
}

/// Waits on a subscription's task: one that panics marks its subscription `failing` (seen
/// in its state, the gauge and the log), never leaves it `active` and silent. Aborting this
/// aborts the task.
async fn guarded(
    core: Arc<Core>,
    tenant: TenantId,
    id: WebhookId,
    work: tokio::task::JoinHandle<()>,
) {
    struct AbortOnDrop(tokio::task::JoinHandle<()>);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut work = AbortOnDrop(work);
    let Err(e) = (&mut work.0).await else {
        return;
    };
    if !e.is_panic() {
        return;
    }
    let why = e.into_panic();
    let why = why
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| why.downcast_ref::<&str>().copied())
        .unwrap_or("a panic");
    tracing::error!(%tenant, webhook = %id, panic = why, "a webhook's task stopped on an internal error: marked failing");
    let (t, i) = (tenant.clone(), id.clone());
    let now = std::time::SystemTime::now();
    let marked = core
        .blocking(move |s| s.mark_webhook_failing(&t, &i, now))
        .await;
    if !matches!(marked, Some(Ok(_))) {
        tracing::error!(%tenant, webhook = %id, "could not mark a stopped webhook failing");
    }
}

/// Moves the subscriptions gauge from what this tenant counted to what `list` says.
fn count(core: &Core, counted: &mut [i64; 2], list: &[Webhook]) {
    let failing = list
        .iter()
        .filter(|h| h.state == WebhookState::Failing)
        .count() as i64;
    let now = [list.len() as i64 - failing, failing];
    for (i, state) in ["active", "failing"].into_iter().enumerate() {
        core.metrics
            .webhook_subscriptions
            .with_label_values(&[state])
            .add(now[i] - counted[i]);
    }
    *counted = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_poked_while_its_task_leaves_is_followed_on() {
        let tenants = Mutex::new(HashMap::new());
        let acme = TenantId::parse("acme").unwrap();
        let wake = Arc::new(Notify::new());
        tenants.lock().unwrap().insert(acme.clone(), wake.clone());
        // A subscription made after the task read none: `follow` found the task, and poked it.
        wake.notify_one();
        assert!(!leave(&tenants, &acme, &wake), "the task goes on");
        assert!(tenants.lock().unwrap().contains_key(&acme));
        // Not poked since: it leaves, and the next poke starts a new task.
        assert!(leave(&tenants, &acme, &wake));
        assert!(!tenants.lock().unwrap().contains_key(&acme));
    }
}

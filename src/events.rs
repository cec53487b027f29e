//! `Events`: what streams and long-polls share: the change feed, the stream limits, browser tickets and the shutdown signal.
mod payload;
mod tickets;

pub use payload::{Author, FileEvent, FileStatus, HeadEvent, ProposalEvent};

pub use tickets::{Grant, Tickets, TICKET_TTL};

use crate::config::EventsConfig;
use crate::domain::TenantId;
use crate::metrics::Metrics;
use crate::storage::{ChangeFeed, Storage, StorageError, Subscription, Wants};
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Replays running at once in the process (each on a blocking thread), and for one tenant.
pub const REPLAYS: usize = 8;
pub const REPLAYS_PER_TENANT: usize = 2;
/// How long a stream waits for a replay turn: then 503 `busy` (a new stream), or the stream
/// ends and its client resumes later.
pub const REPLAY_WAIT: Duration = Duration::from_secs(5);

/// Cheap to clone; one per app.
#[derive(Clone)]
pub struct Events {
    inner: Arc<Inner>,
}

struct Inner {
    config: EventsConfig,
    storage: Storage,
    metrics: Metrics,
    /// Started by the first waiter (a server that nobody follows runs no feed thread).
    feed: Mutex<Option<ChangeFeed>>,
    slots: Mutex<Slots>,
    tickets: Tickets,
    /// One re-read at a time per tenant for long-polls woken by a change: the first renders
    /// the new version into the response cache, the others are answered from it.
    rereads: crate::gates::Gates,
    /// Turns to walk and read a tenant's history for streams that catch up (a resume, or a
    /// stream that fell behind): [`REPLAYS`] in all, [`REPLAYS_PER_TENANT`] for one tenant,
    /// each waited for at most [`REPLAY_WAIT`].
    replays: crate::gates::Turns,
    /// Set on SIGTERM: streams end, held requests are answered.
    shutdown: watch::Sender<bool>,
}

#[derive(Default)]
struct Slots {
    total: usize,
    /// Tenants with a stream or long-poll open (verified tokens of existing tenants); an
    /// entry goes with its tenant's last slot.
    per_tenant: HashMap<TenantId, usize, RandomState>,
}

/// What holds a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Stream,
    LongPoll,
}

/// Why a slot was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    #[error("the server has {0} event streams and held requests open, its limit")]
    Process(usize),
    #[error("this tenant has {0} event streams and held requests open, its limit")]
    Tenant(usize),
}

/// A stream's or long-poll's place under the limits, given back when dropped.
pub struct Slot {
    events: Events,
    tenant: TenantId,
    kind: Kind,
}

impl Events {
    pub fn new(storage: Storage, metrics: Metrics, config: EventsConfig) -> Self {
        let tickets = Tickets::new(config.max_streams, config.max_streams_per_tenant);
        Self {
            inner: Arc::new(Inner {
                config,
                storage,
                metrics,
                feed: Mutex::default(),
                slots: Mutex::default(),
                tickets,
                rereads: crate::gates::Gates::new(1),
                replays: crate::gates::Turns::new(REPLAYS, REPLAYS_PER_TENANT, REPLAY_WAIT),
                shutdown: watch::Sender::new(false),
            }),
        }
    }

    pub fn config(&self) -> &EventsConfig {
        &self.inner.config
    }

    pub fn storage(&self) -> &Storage {
        &self.inner.storage
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub fn tickets(&self) -> &Tickets {
        &self.inner.tickets
    }

    /// A turn to walk and read `tenant`'s history for a stream that catches up; `None` when
    /// it did not come within [`REPLAY_WAIT`].
    pub async fn replay_turn(&self, tenant: &TenantId) -> Option<crate::gates::Turn> {
        self.inner.replays.take(tenant).await
    }

    /// The tenant's gate for re-reads after a change (one at a time).
    pub fn rereads(&self, tenant: &TenantId) -> crate::gates::Lease {
        self.inner.rereads.lease(tenant)
    }

    /// A slot for a stream or a held request of `tenant`, unless the process or the tenant
    /// is at its limit (`events.max_streams`, `events.max_streams_per_tenant`).
    pub fn admit(&self, tenant: &TenantId, kind: Kind) -> Result<Slot, Full> {
        let config = &self.inner.config;
        let mut slots = self.inner.slots.lock().expect("not poisoned");
        if slots.total >= config.max_streams {
            return Err(Full::Process(config.max_streams));
        }
        let mine = slots.per_tenant.get(tenant).copied().unwrap_or(0);
        if mine >= config.max_streams_per_tenant {
            return Err(Full::Tenant(config.max_streams_per_tenant));
        }
        slots.total += 1;
        slots.per_tenant.insert(tenant.clone(), mine + 1);
        drop(slots);
        self.gauge(kind).inc();
        Ok(Slot {
            events: self.clone(),
            tenant: tenant.clone(),
            kind,
        })
    }

    fn gauge(&self, kind: Kind) -> &prometheus::IntGauge {
        match kind {
            Kind::Stream => &self.inner.metrics.event_streams,
            Kind::LongPoll => &self.inner.metrics.long_polls,
        }
    }

    /// Follows `tenant`'s `main` and what each move changed (an event stream); the first
    /// value is the head now.
    pub async fn subscribe(&self, tenant: &TenantId) -> Result<Subscription, StorageError> {
        self.follow(tenant, Wants::Changes).await
    }

    /// Follows `tenant`'s `main`, its heads alone: what changed may be absent from the
    /// updates (and is not read for a tenant that has only such waiters).
    pub async fn subscribe_heads(&self, tenant: &TenantId) -> Result<Subscription, StorageError> {
        self.follow(tenant, Wants::Heads).await
    }

    async fn follow(&self, tenant: &TenantId, wants: Wants) -> Result<Subscription, StorageError> {
        let feed = {
            let mut feed = self.inner.feed.lock().expect("not poisoned");
            match &*feed {
                Some(f) if f.is_running() => f.clone(),
                // None yet, or its thread ended (a fault): a new one.
                _ => {
                    let started = ChangeFeed::start(
                        self.inner.storage.clone(),
                        Duration::from_millis(self.inner.config.poll_interval_ms),
                    )
                    .map_err(|source| StorageError::Io {
                        op: "start the change feed's thread",
                        path: self.inner.storage.tenants_dir().to_owned(),
                        source,
                    })?;
                    feed.insert(started).clone()
                }
            }
        };
        feed.subscribe(tenant, wants).await
    }

    /// Ends every stream and answers every held request (on SIGTERM, before the server
    /// waits for in-flight requests).
    pub fn shut_down(&self) {
        self.inner.shutdown.send_replace(true);
    }

    /// Whether [`Events::shut_down`] was called: the service is stopping.
    pub fn is_shut_down(&self) -> bool {
        *self.inner.shutdown.borrow()
    }

    /// Resolves once [`Events::shut_down`] was called.
    pub fn shutting_down(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.inner.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|down| *down).await;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.events.inner.slots.lock().expect("not poisoned");
        slots.total -= 1;
        if let Some(n) = slots.per_tenant.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                slots.per_tenant.remove(&self.tenant);
            }
        }
        drop(slots);
        self.events.gauge(self.kind).dec();
    }
}

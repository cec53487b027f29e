//! `ChangeFeed`: one thread that tells every waiter of a tenant that its `main` or its proposals' records moved, and what changed on `main`.
//!
//! The thread watches the refs of each tenant that has a waiter with inotify (the folders and
//! events `HeadWatch` uses, and the proposals' refs), or, with `storage.watch_refs = false` or when a watch cannot be
//! added, reads each such tenant's ref once per poll interval. When `main` moved, it reads
//! once, for all of that tenant's waiters, the new head and what each commit since the last
//! head changed (that only while one of them reads it: [`Wants`]), and publishes that on the
//! tenant's `tokio::sync::watch` channel. A waiter is
//! a receiver of that channel: until a change comes it costs no thread and no CPU. All git
//! and file work happens on this thread, never on an async worker; its waits are `poll(2)` on
//! the inotify descriptor and an eventfd that new subscriptions ring.
mod thread;

use crate::domain::{CommitId, TenantId};
use crate::storage::{HeadState, Replay, Storage, StorageError};
use foldhash::fast::RandomState;
use inotify::Inotify;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// What a tenant's channel holds: its head, and how it got there from the head before.
#[derive(Debug, Clone)]
pub struct Update {
    pub head: HeadState,
    /// The proposals' records ref (`None`: no proposal yet), read after `head`: every step
    /// taken before `main` reached `head` is at or before it.
    pub records: Option<CommitId>,
    /// The head this update replaced; `None` for the first value of a channel.
    pub since: Option<CommitId>,
    /// What changed from `since` (up to at most [`FEED_REPLAY_COMMITS`] commits); `None`
    /// when it could not be read: each waiter then reads its own replay.
    pub replay: Option<Arc<Replay>>,
    /// The tenant began to move to another shard: its streams end here, and their clients
    /// resume where the tenant is served next (the same commit ids).
    pub moving: bool,
}

/// The most commits the feed reads for one move of `main`; the rest of a longer push is read
/// by each waiter in steps.
const FEED_REPLAY_COMMITS: usize = 256;

/// The answer to a waiter: a whole [`Subscription`], so that a waiter that leaves before it
/// takes it (its send fails, or the answer is dropped unread) unregisters it like any other.
type Reply = oneshot::Sender<Result<Subscription, StorageError>>;

/// What a waiter reads from its updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wants {
    /// The head and what changed (an event stream).
    Changes,
    /// The head alone (a held request, the webhooks' dispatcher): while a tenant has only
    /// such waiters, the feed reads no changes for it.
    Heads,
}

enum Request {
    Watch(TenantId, Wants, Reply),
    /// The tenant's last waiter left (it is no longer in `tenants`, unless a new waiter came).
    Unwatch(TenantId),
    /// Tests: a fault on the feed's thread.
    #[cfg(test)]
    Panic,
    /// Tests: the thread's loop ends.
    #[cfg(test)]
    Exit,
}

/// A tenant's channel, and how many of its waiters read what changed.
struct Channel {
    tx: watch::Sender<Arc<Update>>,
    change_readers: usize,
}

impl Channel {
    /// A new receiver for a waiter that `wants`.
    fn join(&mut self, wants: Wants) -> watch::Receiver<Arc<Update>> {
        if wants == Wants::Changes {
            self.change_readers += 1;
        }
        self.tx.subscribe()
    }
}

type Channels = HashMap<TenantId, Channel, RandomState>;

/// Shared by the feed's handles, its subscriptions and (weakly) its thread.
struct Shared {
    /// The channel of each tenant with a waiter. Tenant ids come from verified tokens of
    /// existing repositories; an entry goes when the tenant's last waiter does.
    tenants: Mutex<Channels>,
    requests: mpsc::Sender<Request>,
    /// Rung (an eventfd) when a request is queued, and when the feed is dropped.
    bell: Arc<OwnedFd>,
    /// False once the thread has ended (it never should): a new feed is then started.
    running: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn ring(&self) {
        ring(&self.bell);
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, Channels> {
        self.tenants.lock().expect("not poisoned")
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The thread holds the feed weakly: woken, it finds it gone and ends.
        ring(&self.bell);
    }
}

fn ring(bell: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd we own.
    unsafe { libc::write(bell.as_raw_fd(), (&raw const one).cast(), 8) };
}

/// The process's change feed. Cheap to clone.
#[derive(Clone)]
pub struct ChangeFeed {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangeFeed")
    }
}

impl ChangeFeed {
    /// Starts the feed's thread: with inotify when `storage` watches refs, else reading each
    /// watched tenant's ref every `poll_interval`.
    pub fn start(storage: Storage, poll_interval: Duration) -> std::io::Result<Self> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let bell = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let inotify = if storage.watches_refs() {
            match Inotify::init() {
                Ok(i) => Some(i),
                Err(e) => {
                    tracing::warn!(error = %e, "no inotify instance for the change feed: polling refs instead");
                    None
                }
            }
        } else {
            None
        };
        let (requests, queue) = mpsc::channel();
        let shared = Arc::new(Shared {
            tenants: Mutex::default(),
            requests,
            bell: bell.clone(),
            running: std::sync::atomic::AtomicBool::new(true),
        });
        thread::spawn(
            Arc::downgrade(&shared),
            storage,
            queue,
            bell,
            inotify,
            poll_interval,
        )?;
        Ok(Self { shared })
    }

    /// A subscription to `tenant`'s changes; its first value is the head now. With
    /// [`Wants::Heads`], updates may come without what changed (`replay: None`).
    /// `TenantNotFound` when the tenant has no repository.
    pub async fn subscribe(
        &self,
        tenant: &TenantId,
        wants: Wants,
    ) -> Result<Subscription, StorageError> {
        // A channel that said the tenant is moving serves no new waiter: the thread registers
        // it again (refused while it moves; a fresh channel once it came back).
        let existing = self
            .shared
            .tenants()
            .get_mut(tenant)
            .filter(|c| !c.tx.borrow().moving)
            .map(|c| c.join(wants));
        if let Some(rx) = existing {
            return Ok(Subscription {
                shared: self.shared.clone(),
                tenant: tenant.clone(),
                wants,
                rx: Some(rx),
            });
        }
        let (reply, answer) = oneshot::channel();
        self.shared
            .requests
            .send(Request::Watch(tenant.clone(), wants, reply))
            .map_err(|_| stopped(tenant))?;
        self.shared.ring();
        answer.await.map_err(|_| stopped(tenant))?
    }

    /// False once the feed's thread has ended; its subscriptions then end too.
    pub fn is_running(&self) -> bool {
        self.shared
            .running
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Tenants with at least one waiter.
    pub fn watched_tenants(&self) -> usize {
        self.shared.tenants().len()
    }
}

fn stopped(tenant: &TenantId) -> StorageError {
    StorageError::Io {
        op: "follow the change feed",
        path: format!("{tenant}.git").into(),
        source: std::io::Error::other("the change feed's thread has stopped"),
    }
}

/// A waiter's receiver of its tenant's updates. Dropping the last one of a tenant stops the
/// feed watching it.
pub struct Subscription {
    shared: Arc<Shared>,
    tenant: TenantId,
    wants: Wants,
    rx: Option<watch::Receiver<Arc<Update>>>,
}

impl Subscription {
    /// The latest update, marked seen.
    pub fn current(&mut self) -> Arc<Update> {
        self.rx().borrow_and_update().clone()
    }

    /// Waits for an update not yet seen, and marks it seen; `None` when the feed's thread
    /// ended (a fault): the waiter then ends, and its client comes back to a new feed.
    pub async fn changed(&mut self) -> Option<Arc<Update>> {
        let rx = self.rx();
        rx.changed().await.ok()?;
        Some(rx.borrow_and_update().clone())
    }

    fn rx(&mut self) -> &mut watch::Receiver<Arc<Update>> {
        self.rx.as_mut().expect("present until dropped")
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut tenants = self.shared.tenants();
        let rx = self.rx.take().expect("present until dropped");
        let channel = tenants.get_mut(&self.tenant);
        // The channel may be a newer one than this waiter's (its tenant moved and came back):
        // its count of readers is then others', and stays as it is.
        let last = channel.is_some_and(|c| {
            if self.wants == Wants::Changes && rx.same_channel(&c.tx.subscribe()) {
                c.change_readers = c.change_readers.saturating_sub(1);
            }
            drop(rx);
            c.tx.receiver_count() == 0
        });
        if last {
            tenants.remove(&self.tenant);
            drop(tenants);
            let _ = self
                .shared
                .requests
                .send(Request::Unwatch(self.tenant.clone()));
            self.shared.ring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::time::Instant;

    fn feed() -> (ChangeFeed, TenantId, tempfile::TempDir) {
        let (dir, storage, tenant) = crate::storage::test_storage();
        let feed = ChangeFeed::start(storage, Duration::from_millis(50)).unwrap();
        (feed, tenant, dir)
    }

    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn ask(feed: &ChangeFeed, request: Request) {
        feed.shared.requests.send(request).unwrap();
        feed.shared.ring();
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_before_its_answer_leaves_nothing_registered() {
        let (feed, tenant, _dir) = feed();
        let mut left_unanswered = 0;
        for _ in 0..20 {
            let mut asking = Box::pin(feed.subscribe(&tenant, Wants::Changes));
            // Polled once: the request is queued; then the waiter goes. (A round may find the
            // tenant still registered by an earlier request, or the thread quick enough, and
            // be answered at once.)
            if (&mut asking).now_or_never().is_none() {
                left_unanswered += 1;
            }
            drop(asking);
        }
        assert!(left_unanswered > 0, "no waiter left before its answer");
        eventually("no tenant stays registered", || feed.watched_tenants() == 0).await;
        let subscription = feed.subscribe(&tenant, Wants::Changes).await.unwrap();
        assert_eq!(feed.watched_tenants(), 1);
        drop(subscription);
        eventually("the last waiter's tenant goes", || {
            feed.watched_tenants() == 0
        })
        .await;
    }

    #[tokio::test]
    async fn a_moving_tenant_ends_its_waiters_and_takes_no_new_one() {
        let (dir, storage, tenant) = crate::storage::test_storage();
        let feed = ChangeFeed::start(storage.clone(), Duration::from_millis(50)).unwrap();
        let mut first = feed.subscribe(&tenant, Wants::Changes).await.unwrap();
        let to = crate::domain::ShardUrl::parse("http://b:8080").unwrap();
        storage.begin_move(&tenant, &to).unwrap();
        let update = tokio::time::timeout(Duration::from_secs(5), first.changed())
            .await
            .expect("the waiter is told")
            .expect("the feed runs");
        assert!(update.moving);
        // The tenant's channel is still registered (its waiter has not gone), yet a new
        // waiter is refused rather than handed a channel that will say nothing more.
        assert_eq!(feed.watched_tenants(), 1);
        assert!(matches!(
            feed.subscribe(&tenant, Wants::Changes).await,
            Err(StorageError::TenantMoving { .. })
        ));
        drop((first, dir));
    }

    /// Waits for the next update after a write of `text`.
    async fn next_after_write(
        storage: &Storage,
        tenant: &TenantId,
        waiter: &mut Subscription,
        text: &str,
    ) -> Arc<Update> {
        crate::storage::test_write(storage, tenant, text).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiter.changed())
            .await
            .expect("the waiter is told")
            .expect("the feed runs")
    }

    #[tokio::test]
    async fn what_changed_is_read_only_while_a_waiter_reads_it() {
        let (dir, storage, tenant) = crate::storage::test_storage();
        let feed = ChangeFeed::start(storage.clone(), Duration::from_millis(50)).unwrap();
        let mut heads = feed.subscribe(&tenant, Wants::Heads).await.unwrap();
        let update = next_after_write(&storage, &tenant, &mut heads, "a: 1\n").await;
        assert!(update.replay.is_none(), "no reader: nothing read");
        let reader = feed.subscribe(&tenant, Wants::Changes).await.unwrap();
        let update = next_after_write(&storage, &tenant, &mut heads, "a: 2\n").await;
        assert!(
            matches!(update.replay.as_deref(), Some(Replay::Changes { changes, .. }) if changes.len() == 1),
            "a reader: what changed comes with the head ({:?})",
            update.replay
        );
        // A second heads-only waiter joining leaves the reader's count alone; the reader
        // leaving ends the reads.
        let other = feed.subscribe(&tenant, Wants::Heads).await.unwrap();
        drop(reader);
        let update = next_after_write(&storage, &tenant, &mut heads, "a: 3\n").await;
        assert!(update.replay.is_none(), "the reader left: nothing read");
        drop((other, dir));
    }

    #[tokio::test]
    async fn a_panic_on_the_feed_thread_is_caught_and_the_feed_goes_on() {
        let (feed, tenant, _dir) = feed();
        ask(&feed, Request::Panic);
        let mut subscription = feed.subscribe(&tenant, Wants::Changes).await.unwrap();
        assert!(feed.is_running());
        assert!(subscription.current().since.is_none());
    }

    #[tokio::test]
    async fn when_the_thread_ends_every_waiter_learns_it() {
        let (feed, tenant, _dir) = feed();
        let mut subscription = feed.subscribe(&tenant, Wants::Changes).await.unwrap();
        ask(&feed, Request::Exit);
        let ended = tokio::time::timeout(Duration::from_secs(5), subscription.changed()).await;
        assert!(matches!(ended, Ok(None)), "the waiter is told");
        assert!(!feed.is_running());
    }
}

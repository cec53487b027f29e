//! `ChangeFeed`: one thread that tells every waiter of a tenant that its `main` moved, and what changed.
//!
//! The thread watches the refs of each tenant that has a waiter with inotify (the folders and
//! events `HeadWatch` uses), or, with `storage.watch_refs = false` or when a watch cannot be
//! added, reads each such tenant's ref once per poll interval. When `main` moved, it reads
//! once, for all of that tenant's waiters, the new head and what each commit since the last
//! head changed, and publishes that on the tenant's `tokio::sync::watch` channel. A waiter is
//! a receiver of that channel: until a change comes it costs no thread and no CPU. All git
//! and file work happens on this thread, never on an async worker; its waits are `poll(2)` on
//! the inotify descriptor and an eventfd that new subscriptions ring.
use super::repo;
use super::watch::{concerns_main, watched_folders, MASK};
use super::{HistoryEntry, Storage, StorageError};
use crate::domain::{BlobId, CommitId, PlanFile, RequestId, TenantId};
use foldhash::fast::RandomState;
use inotify::{EventMask, Inotify, WatchDescriptor};
use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// `main`'s commit and the blob ids of both files in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadState {
    pub commit: CommitId,
    pub integration: BlobId,
    pub configuration: BlobId,
}

impl HeadState {
    pub fn blob(&self, file: PlanFile) -> BlobId {
        match file {
            PlanFile::Integration => self.integration,
            PlanFile::Configuration => self.configuration,
        }
    }
}

/// One file changed by one commit: its history entry, and the commit's `Request-Id` trailer.
#[derive(Debug, Clone)]
pub struct FileChange {
    pub file: PlanFile,
    pub entry: HistoryEntry,
    pub request_id: Option<RequestId>,
}

/// What happened on `main` after a resume point.
#[derive(Debug, Clone)]
pub enum Replay {
    /// The changes of the commits after the resume point up to `through`, oldest first (a
    /// commit that changed both files gives two, integration first).
    Changes {
        changes: Vec<FileChange>,
        through: CommitId,
    },
    /// The resume point is not on `main`'s first-parent line (any more): start again here.
    Reset(HeadState),
}

/// How a stream catches up from a resume point to a head: the commits to stop at, oldest
/// first (the resume point, then one every step, then the head), each pair read as one
/// [`Replay`] without walking the line again; or a reset, when the resume point is unknown
/// or not on the head's first-parent line.
#[derive(Debug, Clone)]
pub enum ReplayPlan {
    Steps(Vec<CommitId>),
    Reset(HeadState),
}

/// What a tenant's channel holds: its head, and how it got there from the head before.
#[derive(Debug, Clone)]
pub struct Update {
    pub head: HeadState,
    /// The head this update replaced; `None` for the first value of a channel.
    pub since: Option<CommitId>,
    /// What changed from `since` (up to at most [`FEED_REPLAY_COMMITS`] commits); `None`
    /// when it could not be read: each waiter then reads its own replay.
    pub replay: Option<Arc<Replay>>,
}

/// The most commits the feed reads for one move of `main`; the rest of a longer push is read
/// by each waiter in steps.
const FEED_REPLAY_COMMITS: usize = 256;

/// The answer to a waiter: a whole [`Subscription`], so that a waiter that leaves before it
/// takes it (its send fails, or the answer is dropped unread) unregisters it like any other.
type Reply = oneshot::Sender<Result<Subscription, StorageError>>;

enum Request {
    Watch(TenantId, Reply),
    /// The tenant's last waiter left (it is no longer in `tenants`, unless a new waiter came).
    Unwatch(TenantId),
    /// Tests: a fault on the feed's thread.
    #[cfg(test)]
    Panic,
    /// Tests: the thread's loop ends.
    #[cfg(test)]
    Exit,
}

/// Shared by the feed's handles, its subscriptions and (weakly) its thread.
struct Shared {
    /// The channel of each tenant with a waiter. Tenant ids come from verified tokens of
    /// existing repositories; an entry goes when the tenant's last waiter does.
    tenants: Mutex<HashMap<TenantId, watch::Sender<Arc<Update>>, RandomState>>,
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

    fn tenants(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<TenantId, watch::Sender<Arc<Update>>, RandomState>> {
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
        let mut thread = Thread {
            shared: Arc::downgrade(&shared),
            storage,
            queue,
            bell,
            poll_all: inotify.is_none(),
            inotify,
            watches: HashMap::default(),
            by_tenant: HashMap::default(),
            polled: HashSet::default(),
            poll_interval,
            buffer: vec![0; 16 * 1024],
        };
        std::thread::Builder::new()
            .name("planfiles-feed".into())
            .spawn(move || thread.run())?;
        Ok(Self { shared })
    }

    /// A subscription to `tenant`'s changes; its first value is the head now.
    /// `TenantNotFound` when the tenant has no repository.
    pub async fn subscribe(&self, tenant: &TenantId) -> Result<Subscription, StorageError> {
        let existing = self
            .shared
            .tenants()
            .get(tenant)
            .map(watch::Sender::subscribe);
        if let Some(rx) = existing {
            return Ok(Subscription {
                shared: self.shared.clone(),
                tenant: tenant.clone(),
                rx: Some(rx),
            });
        }
        let (reply, answer) = oneshot::channel();
        self.shared
            .requests
            .send(Request::Watch(tenant.clone(), reply))
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

/// Runs `work`; a panic in it is logged, and `None` returned.
fn guarded<T>(what: &str, work: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(out) => Some(out),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(what, panic = %message, "the change feed's thread caught a panic; it goes on");
            None
        }
    }
}

/// Marks the feed stopped when its thread ends, however it ends, and drops every tenant's
/// channel, so that every waiter learns it.
struct StopGuard(Weak<Shared>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared
                .running
                .store(false, std::sync::atomic::Ordering::Release);
            let channels = std::mem::take(&mut *shared.tenants());
            drop(channels);
        }
    }
}

/// A waiter's receiver of its tenant's updates. Dropping the last one of a tenant stops the
/// feed watching it.
pub struct Subscription {
    shared: Arc<Shared>,
    tenant: TenantId,
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
        drop(self.rx.take());
        let last = tenants
            .get(&self.tenant)
            .is_some_and(|tx| tx.receiver_count() == 0);
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

/// The feed's thread and everything only it touches.
struct Thread {
    shared: Weak<Shared>,
    storage: Storage,
    queue: mpsc::Receiver<Request>,
    bell: Arc<OwnedFd>,
    inotify: Option<Inotify>,
    /// Which tenants each watch belongs to, and whether it is the repository folder.
    watches: HashMap<WatchDescriptor, Vec<(TenantId, bool)>, RandomState>,
    by_tenant: HashMap<TenantId, Vec<WatchDescriptor>, RandomState>,
    /// Tenants whose ref is read every poll interval (no complete inotify watch).
    polled: HashSet<TenantId, RandomState>,
    poll_all: bool,
    poll_interval: Duration,
    buffer: Vec<u8>,
}

impl Thread {
    /// The feed's loop. A panic in the work for one request or tenant is logged and that
    /// work skipped, so one bad repository cannot stop every tenant's events; should the
    /// loop itself end, every subscription ends with it and [`ChangeFeed::is_running`] says
    /// so (the next waiter starts a new feed).
    fn run(&mut self) {
        let _stop = StopGuard(self.shared.clone());
        let mut next_poll = Instant::now() + self.poll_interval;
        loop {
            let timeout = if self.polled.is_empty() {
                -1
            } else {
                let left = next_poll.saturating_duration_since(Instant::now());
                i32::try_from(left.as_millis()).unwrap_or(i32::MAX)
            };
            self.wait(timeout);
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            self.clear_bell();
            while let Ok(request) = self.queue.try_recv() {
                #[cfg(test)]
                if matches!(request, Request::Exit) {
                    return;
                }
                guarded("a request", || match request {
                    Request::Watch(tenant, reply) => {
                        let answer = self.watch(&shared, &tenant).map(|rx| Subscription {
                            shared: shared.clone(),
                            tenant,
                            rx: Some(rx),
                        });
                        // A waiter that left: its subscription is dropped here, and goes.
                        drop(reply.send(answer));
                    }
                    Request::Unwatch(tenant) => self.unwatch(&shared, &tenant),
                    #[cfg(test)]
                    Request::Panic => panic!("a fault on the feed's thread"),
                    #[cfg(test)]
                    Request::Exit => {}
                });
            }
            let mut dirty = guarded("reading inotify events", || self.drain_events(&shared))
                .unwrap_or_default();
            if !self.polled.is_empty() && Instant::now() >= next_poll {
                dirty.extend(self.polled.iter().cloned());
                next_poll = Instant::now() + self.poll_interval;
            }
            for tenant in dirty {
                guarded("refreshing a tenant", || self.refresh(&shared, &tenant));
            }
        }
    }

    /// Sleeps until the bell rings, an inotify event comes, or `timeout` ms pass (-1: none).
    fn wait(&self, timeout: i32) {
        let mut fds = [
            libc::pollfd {
                fd: self.bell.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.inotify.as_ref().map_or(-1, |i| i.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a live array of two pollfd (a negative fd is ignored by poll).
        unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
    }

    fn clear_bell(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from a non-blocking eventfd.
        unsafe { libc::read(self.bell.as_raw_fd(), (&raw mut count).cast(), 8) };
    }

    fn watch(
        &mut self,
        shared: &Shared,
        tenant: &TenantId,
    ) -> Result<watch::Receiver<Arc<Update>>, StorageError> {
        if let Some(tx) = shared.tenants().get(tenant) {
            return Ok(tx.subscribe());
        }
        let path = self.storage.repo_path(tenant);
        if !path.is_dir() {
            return Err(StorageError::TenantNotFound(tenant.clone()));
        }
        // Watches first, then the head: a change after a watch is in place is queued, one
        // before it shows in the head.
        let mut complete = !self.poll_all;
        if let Some(inotify) = &self.inotify {
            let mut watches = inotify.watches();
            for (folder, is_repo) in watched_folders(&path) {
                match watches.add(&folder, MASK) {
                    Ok(wd) => {
                        let owners = self.watches.entry(wd.clone()).or_default();
                        if !owners.iter().any(|(t, _)| t == tenant) {
                            owners.push((tenant.clone(), is_repo));
                        }
                        self.by_tenant.entry(tenant.clone()).or_default().push(wd);
                    }
                    Err(e) => {
                        tracing::warn!(%tenant, error = %e, "cannot watch a tenant's refs for the change feed: polling them");
                        complete = false;
                    }
                }
            }
        }
        if !complete {
            self.polled.insert(tenant.clone());
        }
        let head = match self.storage.head_state(tenant) {
            Ok(head) => head,
            Err(e) => {
                self.forget(tenant);
                return Err(e);
            }
        };
        let (tx, rx) = watch::channel(Arc::new(Update {
            head,
            since: None,
            replay: None,
        }));
        shared.tenants().insert(tenant.clone(), tx);
        Ok(rx)
    }

    fn unwatch(&mut self, shared: &Shared, tenant: &TenantId) {
        // A waiter that came after the last one left keeps the watch.
        if !shared.tenants().contains_key(tenant) {
            self.forget(tenant);
        }
    }

    fn forget(&mut self, tenant: &TenantId) {
        self.polled.remove(tenant);
        for wd in self.by_tenant.remove(tenant).unwrap_or_default() {
            let Some(owners) = self.watches.get_mut(&wd) else {
                continue;
            };
            owners.retain(|(t, _)| t != tenant);
            if owners.is_empty() {
                self.watches.remove(&wd);
                if let Some(inotify) = &self.inotify {
                    let _ = inotify.watches().remove(wd);
                }
            }
        }
    }

    /// The tenants whose refs the queued inotify events concern.
    fn drain_events(&mut self, shared: &Shared) -> HashSet<TenantId, RandomState> {
        let mut dirty = HashSet::default();
        let Some(inotify) = &mut self.inotify else {
            return dirty;
        };
        loop {
            let events = match inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the change feed's inotify events");
                    dirty.extend(shared.tenants().keys().cloned());
                    break;
                }
            };
            let mut any = false;
            let mut gone = Vec::new();
            for event in events {
                any = true;
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    dirty.extend(shared.tenants().keys().cloned());
                    continue;
                }
                let Some(owners) = self.watches.get(&event.wd) else {
                    continue;
                };
                let ignored = event.mask.contains(EventMask::IGNORED);
                for (tenant, is_repo) in owners {
                    if concerns_main(*is_repo, event.name) || ignored {
                        dirty.insert(tenant.clone());
                    }
                }
                if ignored {
                    gone.push(event.wd.clone());
                }
            }
            // A folder that went away (a repository moved or deleted): its tenants are polled.
            for wd in gone {
                for (tenant, _) in self.watches.remove(&wd).unwrap_or_default() {
                    self.polled.insert(tenant);
                }
            }
            if !any {
                break;
            }
        }
        dirty
    }

    /// Reads `tenant`'s head; when it moved, publishes the new head and what changed.
    fn refresh(&self, shared: &Shared, tenant: &TenantId) {
        let Some(tx) = shared.tenants().get(tenant).cloned() else {
            return;
        };
        let last = tx.borrow().head.commit;
        // The ref file alone first: most events (a lock file made, a write refused) leave
        // `main` where it was.
        if repo::file_head(&self.storage.repo_path(tenant)) == Some(last) {
            return;
        }
        let head = match self.storage.head_state(tenant) {
            Ok(head) => head,
            Err(e) => {
                tracing::warn!(%tenant, error = %e, "the change feed cannot read a tenant's head");
                return;
            }
        };
        if head.commit == last {
            return;
        }
        let replay = match self
            .storage
            .replay(tenant, last, head.commit, FEED_REPLAY_COMMITS)
        {
            Ok(replay) => Some(Arc::new(replay)),
            Err(e) => {
                tracing::warn!(%tenant, error = %e, "the change feed cannot read what changed; each waiter reads it");
                None
            }
        };
        tx.send_replace(Arc::new(Update {
            head,
            since: Some(last),
            replay,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Identity;
    use crate::storage::Durability;
    use futures_util::FutureExt;

    fn feed() -> (ChangeFeed, TenantId, tempfile::TempDir) {
        crate::storage::init_git();
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(
            dir.path(),
            Identity::new("p", "p@localhost", "localhost"),
            Durability::Fsync,
        )
        .unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        storage.create_tenant(&tenant, false).unwrap();
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
        for _ in 0..20 {
            let mut asking = Box::pin(feed.subscribe(&tenant));
            // Polled once: the request is queued; then the waiter goes.
            assert!((&mut asking).now_or_never().is_none());
            drop(asking);
        }
        eventually("no tenant stays registered", || feed.watched_tenants() == 0).await;
        let subscription = feed.subscribe(&tenant).await.unwrap();
        assert_eq!(feed.watched_tenants(), 1);
        drop(subscription);
        eventually("the last waiter's tenant goes", || {
            feed.watched_tenants() == 0
        })
        .await;
    }

    #[tokio::test]
    async fn a_panic_on_the_feed_thread_is_caught_and_the_feed_goes_on() {
        let (feed, tenant, _dir) = feed();
        ask(&feed, Request::Panic);
        let mut subscription = feed.subscribe(&tenant).await.unwrap();
        assert!(feed.is_running());
        assert!(subscription.current().since.is_none());
    }

    #[tokio::test]
    async fn when_the_thread_ends_every_waiter_learns_it() {
        let (feed, tenant, _dir) = feed();
        let mut subscription = feed.subscribe(&tenant).await.unwrap();
        ask(&feed, Request::Exit);
        let ended = tokio::time::timeout(Duration::from_secs(5), subscription.changed()).await;
        assert!(matches!(ended, Ok(None)), "the waiter is told");
        assert!(!feed.is_running());
    }
}

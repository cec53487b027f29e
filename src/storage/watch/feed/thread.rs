//! The change feed's thread: it follows the refs of the tenants with waiters (inotify, or polling) and publishes each move of `main`, read once for all of a tenant's waiters.
use super::{Channel, Request, Shared, Subscription, Update, Wants, FEED_REPLAY_COMMITS};
use crate::domain::TenantId;
use crate::storage::placement::Access;
use crate::storage::repo;
use crate::storage::watch::{concerns_main, watched_folders, MASK};
use crate::storage::{Storage, StorageError};
use foldhash::fast::RandomState;
use inotify::{EventMask, Inotify, WatchDescriptor};
use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{mpsc, Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Starts the feed's thread.
pub(super) fn spawn(
    shared: Weak<Shared>,
    storage: Storage,
    queue: mpsc::Receiver<Request>,
    bell: Arc<OwnedFd>,
    inotify: Option<Inotify>,
    poll_interval: Duration,
) -> std::io::Result<()> {
    let mut thread = Thread {
        shared,
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
    Ok(())
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

/// What a watched folder is to the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Folder {
    /// `refs/heads`, or the repository folder (where `packed-refs` is): see `concerns_main`.
    Main { is_repo: bool },
    /// `refs/proposals`: the records ref's moves.
    Proposals,
    /// `refs`, for the `proposals` folder made by the first proposal (or again after git
    /// removed it when it packed the refs).
    Refs,
}

impl Folder {
    /// Whether an event named `name` here may have moved `main` or the records.
    fn concerns(self, name: Option<&std::ffi::OsStr>) -> bool {
        match self {
            Folder::Main { is_repo } => concerns_main(is_repo, name),
            Folder::Proposals => true,
            Folder::Refs => name.is_none_or(|n| n == "proposals"),
        }
    }
}

/// The folders the feed watches in `repo`: those `HeadWatch` watches, `refs`, and
/// `refs/proposals` when it is there (`refs` first, so that a `proposals` folder made after
/// the look is seen).
fn feed_folders(repo: &std::path::Path) -> Vec<(std::path::PathBuf, Folder)> {
    let mut folders: Vec<_> = watched_folders(repo)
        .into_iter()
        .map(|(path, is_repo)| (path, Folder::Main { is_repo }))
        .collect();
    folders.push((repo.join("refs"), Folder::Refs));
    folders.push((repo.join("refs/proposals"), Folder::Proposals));
    folders
}

/// The feed's thread and everything only it touches.
struct Thread {
    shared: Weak<Shared>,
    storage: Storage,
    queue: mpsc::Receiver<Request>,
    bell: Arc<OwnedFd>,
    inotify: Option<Inotify>,
    /// Which tenants each watch belongs to, and which of their folders it is.
    watches: HashMap<WatchDescriptor, Vec<(TenantId, Folder)>, RandomState>,
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
                    Request::Watch(tenant, wants, reply) => {
                        let answer = self.watch(&shared, &tenant, wants).map(|rx| Subscription {
                            shared: shared.clone(),
                            tenant,
                            wants,
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
        wants: Wants,
    ) -> Result<watch::Receiver<Arc<Update>>, StorageError> {
        // A channel that told its waiters the tenant is moving serves no new one: the tenant
        // is registered again (refused while it moves or after it moved; a fresh channel
        // once it came back).
        if let Some(channel) = shared.tenants().get_mut(tenant) {
            if !channel.tx.borrow().moving {
                return Ok(channel.join(wants));
            }
        }
        let path = self.storage.locate(tenant, Access::Manage)?;
        // Watches first, then the head: a change after a watch is in place is queued, one
        // before it shows in the head.
        let complete = !self.poll_all && self.add_watches(tenant, &path);
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
        let records = match self.storage.records_head(tenant) {
            Ok(records) => records,
            Err(e) => {
                self.forget(tenant);
                return Err(e);
            }
        };
        let (tx, _) = watch::channel(Arc::new(Update {
            head,
            records,
            since: None,
            replay: None,
            moving: false,
        }));
        let mut channel = Channel {
            tx,
            change_readers: 0,
        };
        let rx = channel.join(wants);
        shared.tenants().insert(tenant.clone(), channel);
        Ok(rx)
    }

    /// Adds the watches of `tenant`'s folders (again: a folder watched already keeps its
    /// watch); whether every folder that must be watched is. `refs/proposals` may be absent:
    /// the watch on `refs` sees it made.
    fn add_watches(&mut self, tenant: &TenantId, path: &std::path::Path) -> bool {
        let Some(inotify) = &self.inotify else {
            return false;
        };
        let mut complete = true;
        let mut watches = inotify.watches();
        for (folder, kind) in feed_folders(path) {
            match watches.add(&folder, MASK) {
                Ok(wd) => {
                    let owners = self.watches.entry(wd.clone()).or_default();
                    if !owners.iter().any(|(t, _)| t == tenant) {
                        owners.push((tenant.clone(), kind));
                    }
                    let mine = self.by_tenant.entry(tenant.clone()).or_default();
                    if !mine.contains(&wd) {
                        mine.push(wd);
                    }
                }
                Err(e) if kind == Folder::Proposals && e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(%tenant, error = %e, "cannot watch a tenant's refs for the change feed: polling them");
                    complete = false;
                }
            }
        }
        complete
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
        let mut rewatch = HashSet::<TenantId, RandomState>::default();
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
                for (tenant, folder) in owners {
                    if folder.concerns(event.name) || ignored {
                        dirty.insert(tenant.clone());
                    }
                    if *folder == Folder::Refs && event.name.is_some_and(|n| n == "proposals") {
                        rewatch.insert(tenant.clone());
                    }
                }
                if ignored {
                    gone.push(event.wd.clone());
                }
            }
            // A folder that went away (a repository moved or deleted): its tenants are polled;
            // but `refs/proposals` (git removes it when it packs the refs) is watched again
            // when it comes back, through `refs`.
            for wd in gone {
                for (tenant, folder) in self.watches.remove(&wd).unwrap_or_default() {
                    if let Some(mine) = self.by_tenant.get_mut(&tenant) {
                        mine.retain(|w| *w != wd);
                    }
                    if folder != Folder::Proposals {
                        self.polled.insert(tenant);
                    }
                }
            }
            if !any {
                break;
            }
        }
        for tenant in rewatch {
            if let Ok(path) = self.storage.locate(&tenant, Access::Follow) {
                self.add_watches(&tenant, &path);
            }
        }
        dirty
    }

    /// Reads `tenant`'s head; when it moved, publishes the new head and what changed.
    fn refresh(&self, shared: &Shared, tenant: &TenantId) {
        // What changed is read only for a tenant with a waiter that reads it.
        let Some((tx, wanted)) = shared
            .tenants()
            .get(tenant)
            .map(|c| (c.tx.clone(), c.change_readers > 0))
        else {
            return;
        };
        let (last, last_records, moving) = {
            let update = tx.borrow();
            (update.head.commit, update.records, update.moving)
        };
        if moving {
            return;
        }
        let path = self.storage.repo_path(tenant);
        // Moving, moved, or already archived (the folder gone): the streams end, with what
        // landed before the move began.
        let placement = self.storage.locate(tenant, Access::Follow);
        let moving = matches!(
            placement,
            Err(StorageError::TenantMoving { .. } | StorageError::TenantMoved { .. })
        );
        // What changed is read for its readers, where reads may still happen: not once the
        // tenant moved away.
        let readable = wanted && !matches!(placement, Err(StorageError::TenantMoved { .. }));
        // The ref file alone first: most events (a lock file made, a write refused) leave
        // `main` where it was.
        if !moving
            && repo::file_head(&path) == Some(last)
            && repo::file_records(&path) == last_records
        {
            return;
        }
        let read = self
            .storage
            .head_and_changes(tenant, last, FEED_REPLAY_COMMITS, readable);
        // The records after `main`: a step taken before `main` reached the head read is in them.
        let records = match &read {
            Ok(_) if !moving => match self.storage.records_head(tenant) {
                Ok(records) => records,
                Err(e) => {
                    tracing::warn!(%tenant, error = %e, "the change feed cannot read a tenant's proposals");
                    last_records
                }
            },
            _ => last_records,
        };
        let (head, changes) = match read {
            Ok((head, _)) if !moving && head.commit == last && records == last_records => return,
            Ok((head, changes)) => (Some(head), changes),
            // Archived: there is nothing more to read.
            Err(_) if moving => (None, None),
            Err(e) => {
                tracing::warn!(%tenant, error = %e, "the change feed cannot read a tenant's head");
                return;
            }
        };
        let replay = match changes {
            Some(Ok(replay)) => Some(Arc::new(replay)),
            Some(Err(e)) => {
                tracing::warn!(%tenant, error = %e, "the change feed cannot read what changed; each waiter reads it");
                None
            }
            None => None,
        };
        let head = head.unwrap_or_else(|| tx.borrow().head.clone());
        tx.send_replace(Arc::new(Update {
            head,
            records,
            since: Some(last),
            replay,
            moving,
        }));
    }
}

//! `HeadWatch`: knows, without touching the disk, that a tenant's `main` has not moved since it
//! was last read, through inotify watches on the ref's folder and on `packed-refs`.
//!
//! The kernel queues an inotify event inside the rename or write that moves a ref, so draining
//! the queue before answering sees every change that finished before the request. Reading the
//! queue is a non-blocking read of an inotify descriptor, not disk I/O, and only when an epoll
//! set that holds the descriptor says events are queued: the kernel puts the descriptor on the
//! set's ready list inside the same call that queues the event, and a wait with a zero timeout
//! reads that list without a lock, where a read of the empty queue takes the queue's lock and
//! wait queue (a cached GET's one system call, 10% of its CPU at c=64). When a watch cannot be
//! added (the kernel's watch limit) or the queue overflows, tenants are simply not "known" and
//! readers fall back to reading the ref file.
//!
//! Each thread that looks heads up gets one of several inotify instances (shards), so that
//! lookups on different workers never wait for each other; a read that learns a head makes it
//! known in every shard.
pub(super) mod feed;

use crate::domain::{CommitId, TenantId};
use foldhash::fast::RandomState;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use rustix::event::epoll;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The most inotify instances one watch uses (the kernel allows 128 per user by default).
const MAX_SHARDS: usize = 8;

#[derive(Debug)]
pub struct HeadWatch {
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Debug)]
enum Shard {
    /// No instance yet: made by the next read that learns a head (tried again after the
    /// kernel refused one: no descriptors or instances left).
    Unused,
    Ready(Inner),
    /// Disabled (`storage.watch_refs = false`): nothing is ever known here.
    Off,
}

#[derive(Debug)]
struct Inner {
    inotify: Inotify,
    /// An epoll set holding `inotify` alone, level-triggered: ready while events are queued.
    queued: OwnedFd,
    /// Which tenants each watch belongs to, and whether it watches the repository folder
    /// (where only `packed-refs` matters) rather than `refs/heads`. Several tenant ids can
    /// name one folder (ids that differ in case on a case-insensitive volume): the kernel
    /// then gives one watch, and an event concerns all of them.
    watches: HashMap<WatchDescriptor, Vec<(TenantId, bool)>, RandomState>,
    /// Tenants whose `main` is known to be at this commit. Tenant ids come from verified
    /// tokens and existing repositories, so a fast hasher is safe from chosen collisions.
    known: HashMap<TenantId, CommitId, RandomState>,
    /// Counts drained events; `changed` and `unknown` say when a tenant's refs, or a folder
    /// not yet mapped to a tenant, last changed, so that a head read without the lock is only
    /// recorded when nothing changed since the read began.
    epoch: u64,
    changed: HashMap<TenantId, u64, RandomState>,
    unknown: u64,
    /// Where events are read into, kept so that a request does not zero a fresh buffer.
    buffer: Vec<u8>,
}

/// Whether an event named `name` in a watched folder may have moved `main`: anything in
/// `refs/heads`, and in the repository folder `packed-refs`, the placement record (a tenant
/// that moved away is read no more) or the folder itself.
pub(super) fn concerns_main(is_repo: bool, name: Option<&std::ffi::OsStr>) -> bool {
    !is_repo || name.is_none_or(|n| n == "packed-refs" || n == super::placement::FILE)
}

/// The folders of a repository whose changes may move `main`, and whether each is the
/// repository folder itself (where only `packed-refs` matters).
pub(super) fn watched_folders(repo: &Path) -> [(std::path::PathBuf, bool); 2] {
    [(repo.join("refs/heads"), false), (repo.to_owned(), true)]
}

pub(super) const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::MODIFY)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

/// Threads take shards in turn, so the workers of a server each get their own.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().expect("not poisoned")
}

impl HeadWatch {
    /// A watch for `threads` threads that look heads up (0: one per core), with one shard
    /// each, at most [`MAX_SHARDS`]; a shard without an inotify instance knows nothing, so
    /// its lookups read the ref file.
    pub fn new(threads: usize) -> Self {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Self::with_shards(threads.clamp(1, MAX_SHARDS), || Shard::Unused)
    }

    /// A watch that never knows anything: every read checks the ref file.
    pub fn disabled() -> Self {
        Self::with_shards(1, || Shard::Off)
    }

    /// False for [`HeadWatch::disabled`].
    pub fn enabled(&self) -> bool {
        !matches!(*lock(&self.shards[0]), Shard::Off)
    }

    fn with_shards(n: usize, shard: impl Fn() -> Shard) -> Self {
        Self {
            shards: (0..n).map(|_| Mutex::new(shard())).collect(),
        }
    }

    /// The commit `main` of `tenant` is known to be at, if nothing touched its refs since.
    /// Never blocks on the disk.
    pub fn known_head(&self, tenant: &TenantId) -> Option<CommitId> {
        self.known_head_in(THREAD.with(|t| *t) % self.shards.len(), tenant)
    }

    fn known_head_in(&self, shard: usize, tenant: &TenantId) -> Option<CommitId> {
        let mut guard = lock(&self.shards[shard]);
        let Shard::Ready(inner) = &mut *guard else {
            return None;
        };
        inner.drain();
        inner.known.get(tenant).copied()
    }

    /// Records that `main` of `tenant` (repository at `repo`) is at `commit`, if the ref still
    /// says so once the watches are in place. Blocking: adds watches and reads the ref, but
    /// never while it holds a shard's lock, so a slow volume does not stall cached GETs.
    pub fn note(
        &self,
        tenant: &TenantId,
        repo: &Path,
        commit: CommitId,
        read_head: impl Fn() -> Option<CommitId>,
    ) {
        // 1. Under each shard's lock: where its event count stands, and a handle to add watches.
        let mut pending = Vec::with_capacity(self.shards.len());
        for (i, shard) in self.shards.iter().enumerate() {
            let mut guard = lock(shard);
            if matches!(*guard, Shard::Unused) {
                if let Some(inner) = Inner::new() {
                    *guard = Shard::Ready(inner);
                }
            }
            let Shard::Ready(inner) = &mut *guard else {
                continue;
            };
            inner.drain();
            if inner.known.get(tenant) != Some(&commit) {
                pending.push((i, inner.epoch, inner.inotify.watches()));
            }
        }
        if pending.is_empty() {
            return;
        }
        // 2. Without any lock: the watches (path lookups), then the ref. A change after a
        // watch is in place is queued; one before it shows in the ref.
        let mut added = Vec::with_capacity(pending.len());
        for (i, since, mut watches) in pending {
            let mut wds = Vec::with_capacity(2);
            for (path, is_repo) in watched_folders(repo) {
                match watches.add(&path, MASK) {
                    Ok(wd) => wds.push((wd, is_repo)),
                    Err(_) => break,
                }
            }
            added.push((i, since, wds));
        }
        let at_commit = read_head() == Some(commit);
        // 3. Under each shard's lock again: map the watches, and record the head unless an
        // event for this tenant (or for a folder not mapped yet) came in since step 1.
        for (i, since, wds) in added {
            let mut guard = lock(&self.shards[i]);
            let Shard::Ready(inner) = &mut *guard else {
                continue;
            };
            let complete = wds.len() == 2;
            for (wd, is_repo) in wds {
                let owners = inner.watches.entry(wd).or_default();
                if !owners.iter().any(|(t, _)| t == tenant) {
                    owners.push((tenant.clone(), is_repo));
                }
            }
            inner.drain();
            let quiet =
                inner.unknown <= since && inner.changed.get(tenant).is_none_or(|&at| at <= since);
            if complete && at_commit && quiet {
                inner.known.insert(tenant.clone(), commit);
            }
        }
    }
}

impl Default for HeadWatch {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Inner {
    fn new() -> Option<Self> {
        let inotify = Inotify::init().ok()?;
        let queued = epoll::create(epoll::CreateFlags::CLOEXEC).ok()?;
        epoll::add(
            &queued,
            &inotify,
            epoll::EventData::new_u64(0),
            epoll::EventFlags::IN,
        )
        .ok()?;
        Some(Self {
            inotify,
            queued,
            watches: HashMap::default(),
            known: HashMap::default(),
            epoch: 0,
            changed: HashMap::default(),
            unknown: 0,
            buffer: vec![0; 16 * 1024],
        })
    }

    /// Whether events may be queued: the epoll set has the inotify descriptor ready, or it
    /// could not be asked (then the queue is read, as it always was).
    fn may_have_events(&self) -> bool {
        let mut ready = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 1];
        let now = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        !matches!(epoll::wait(&self.queued, &mut ready, Some(&now)), Ok((ready, _)) if ready.is_empty())
    }

    /// Applies every queued event: the tenants concerned are no longer known.
    fn drain(&mut self) {
        if !self.may_have_events() {
            return;
        }
        loop {
            let events = match self.inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.forget_all();
                    return;
                }
            };
            let mut any = false;
            for event in events {
                any = true;
                self.epoch += 1;
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    self.known.clear();
                    self.unknown = self.epoch;
                    continue;
                }
                let Some(owners) = self.watches.get(&event.wd) else {
                    self.unknown = self.epoch;
                    continue;
                };
                let ignored = event.mask.contains(EventMask::IGNORED);
                for (tenant, is_repo) in owners {
                    if concerns_main(*is_repo, event.name) || ignored {
                        self.known.remove(tenant);
                        self.changed.insert(tenant.clone(), self.epoch);
                    }
                }
                if ignored {
                    self.watches.remove(&event.wd);
                }
            }
            if !any {
                return;
            }
        }
    }

    fn forget_all(&mut self) {
        self.known.clear();
        self.unknown = self.epoch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn one_shard_per_thread_that_looks_up_heads_and_no_more_than_eight() {
        assert_eq!(HeadWatch::new(2).shards.len(), 2);
        assert_eq!(HeadWatch::new(32).shards.len(), MAX_SHARDS);
        assert!(!HeadWatch::new(0).shards.is_empty());
        assert!(HeadWatch::new(1).enabled());
        assert!(!HeadWatch::disabled().enabled());
    }

    #[test]
    fn a_ref_change_in_any_thread_is_seen_by_the_next_lookup_in_every_thread() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("t.git");
        std::fs::create_dir_all(repo.join("refs/heads")).unwrap();
        let tenant = TenantId::parse("t").unwrap();
        let commit = |n: u8| {
            CommitId(crate::domain::ObjectId::parse(&format!("{n:02x}").repeat(20)).unwrap())
        };
        let watch = std::sync::Arc::new(HeadWatch::with_shards(3, || Shard::Unused));
        watch.note(&tenant, &repo, commit(1), || Some(commit(1)));
        for shard in 0..3 {
            assert_eq!(watch.known_head_in(shard, &tenant), Some(commit(1)));
        }
        // Readers in other threads keep draining while the ref moves.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (watch, stop, tenant) = (watch.clone(), stop.clone(), tenant.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        watch.known_head(&tenant);
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            std::fs::write(repo.join("refs/heads/main.lock"), "x").unwrap();
            std::fs::rename(
                repo.join("refs/heads/main.lock"),
                repo.join("refs/heads/main"),
            )
            .unwrap();
            for shard in 0..watch.shards.len() {
                assert_eq!(
                    watch.known_head_in(shard, &tenant),
                    None,
                    "a moved ref was still known in shard {shard}"
                );
            }
            watch.note(&tenant, &repo, commit(1), || Some(commit(1)));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }

    fn commit(n: u8) -> CommitId {
        CommitId(crate::domain::ObjectId::parse(&format!("{n:02x}").repeat(20)).unwrap())
    }

    fn move_ref(repo: &Path) {
        std::fs::write(repo.join("refs/heads/main.lock"), "x").unwrap();
        std::fs::rename(
            repo.join("refs/heads/main.lock"),
            repo.join("refs/heads/main"),
        )
        .unwrap();
    }

    /// Two tenant ids that name one folder (letter case on a case-insensitive volume; here a
    /// symlink) share the kernel's watch: a change must make both unknown.
    #[test]
    fn every_alias_of_a_repository_is_invalidated() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("acme.git");
        std::fs::create_dir_all(repo.join("refs/heads")).unwrap();
        let alias = dir.path().join("Acme.git");
        std::os::unix::fs::symlink(&repo, &alias).unwrap();
        let (lower, upper) = (
            TenantId::parse("acme").unwrap(),
            TenantId::parse("Acme").unwrap(),
        );
        let watch = HeadWatch::with_shards(1, || Shard::Unused);
        watch.note(&lower, &repo, commit(1), || Some(commit(1)));
        watch.note(&upper, &alias, commit(1), || Some(commit(1)));
        assert_eq!(watch.known_head(&lower), Some(commit(1)));
        assert_eq!(watch.known_head(&upper), Some(commit(1)));
        move_ref(&repo);
        assert_eq!(watch.known_head(&lower), None, "the first alias");
        assert_eq!(watch.known_head(&upper), None, "the second alias");
    }

    /// A note that waits on the disk (here: a ref read that takes 600 ms) holds no lock that
    /// a cached lookup needs, and a change during that read keeps the head unknown.
    #[test]
    fn a_slow_ref_read_does_not_stall_lookups_and_a_change_during_it_is_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("t.git");
        std::fs::create_dir_all(repo.join("refs/heads")).unwrap();
        let (slow, other) = (TenantId::parse("t").unwrap(), TenantId::parse("u").unwrap());
        let watch = std::sync::Arc::new(HeadWatch::with_shards(1, || Shard::Unused));
        watch.note(&other, &repo, commit(2), || Some(commit(2)));
        let (reading, read_began) = std::sync::mpsc::channel();
        let noter = {
            let (watch, repo, slow) = (watch.clone(), repo.clone(), slow.clone());
            std::thread::spawn(move || {
                watch.note(&slow, &repo, commit(1), || {
                    let _ = reading.send(());
                    std::thread::sleep(std::time::Duration::from_millis(1500));
                    Some(commit(1))
                })
            })
        };
        read_began
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        let t = std::time::Instant::now();
        assert_eq!(watch.known_head(&other), Some(commit(2)));
        assert!(
            t.elapsed() < std::time::Duration::from_millis(1000),
            "a lookup waited {:?} for a note's disk read",
            t.elapsed()
        );
        // The ref moves while the slow read is under way (after its watches were added).
        move_ref(&repo);
        noter.join().unwrap();
        assert_eq!(
            watch.known_head(&slow),
            None,
            "a head read before a change must not be recorded after it"
        );
    }
}

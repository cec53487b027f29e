//! Durability: how a write reaches the disk before its 200. Either libgit2 fsyncs every file
//! and folder it writes (`fsync`), or writers share `syncfs` calls (`group`, group commit),
//! chosen from the volume (`auto`: group only where `syncfs` is known to flush).
use super::volume::Volume;
use serde::Deserialize;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How writes are made durable. One mode per process: libgit2's fsync switch is global.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Group commit: libgit2 writes without fsync; then one `syncfs` of the data volume, shared
    /// by every writer waiting at that moment, makes the objects durable, and a second one the
    /// ref. Two syncs per write however many tenants write at once. Only where `syncfs`
    /// reaches the disk ([`Volume::syncfs_flushes`]).
    Group,
    /// libgit2 fsyncs each object, ref and the folders that gained them: about 9 fsyncs per
    /// write, none shared. Works on every volume that honours `fsync`.
    Fsync,
}

/// `storage.durability` as configured.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DurabilitySetting {
    /// Group commit where `syncfs` is known to flush, per-file fsync everywhere else.
    #[default]
    Auto,
    Group,
    Fsync,
}

/// `durability = "group"` on a volume where `syncfs` is not known to reach the disk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "storage.durability = \"group\" on a {filesystem} volume, where syncfs(2) is not known to \
     reach the disk (the kernel never passes it to a FUSE daemon, for one): writes would be \
     acknowledged while only in memory. Use durability = \"auto\" or \"fsync\", or set \
     storage.trust_syncfs = true if you know that syncfs flushes this volume (virtiofs does)"
)]
pub struct GroupRefused {
    pub filesystem: String,
}

impl Durability {
    /// The mode for `setting` on `volume` (`None`: its type could not be read). `auto` is
    /// group commit only where `syncfs` is known to flush and the project has cut the power
    /// under it at the block level (ext4), or `trust_syncfs` says the operator knows it is
    /// safe; an explicit `group` is taken wherever `syncfs` flushes (xfs, btrfs, f2fs too)
    /// and refused elsewhere.
    pub fn choose(
        setting: DurabilitySetting,
        trust_syncfs: bool,
        volume: Option<&Volume>,
    ) -> Result<Durability, GroupRefused> {
        let flushes = trust_syncfs || volume.is_some_and(Volume::syncfs_flushes);
        let proven = trust_syncfs || volume.is_some_and(Volume::group_crash_tested);
        match setting {
            DurabilitySetting::Fsync => Ok(Durability::Fsync),
            DurabilitySetting::Auto if proven => Ok(Durability::Group),
            DurabilitySetting::Auto => Ok(Durability::Fsync),
            DurabilitySetting::Group if flushes => Ok(Durability::Group),
            DurabilitySetting::Group => Err(GroupRefused {
                filesystem: volume.map_or_else(|| "unknown".into(), |v| v.name().into_owned()),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Durability::Group => "group",
            Durability::Fsync => "fsync",
        }
    }
}

/// Rounds of `syncfs` on one volume, shared by the writers that wait for them.
pub struct SyncGroup {
    /// One `syncfs` of the volume (or, in unit tests, whatever stands in for it).
    sync_fn: Box<dyn Fn() -> io::Result<()> + Send + Sync>,
    state: Mutex<Rounds>,
    done: Condvar,
}

impl std::fmt::Debug for SyncGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncGroup")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// How many failed rounds are remembered. A writer whose window began before the oldest one
/// kept is failed without looking (failures are rare; this only bounds memory).
const FAILURES_KEPT: usize = 64;

#[derive(Debug, Default)]
struct Rounds {
    started: u64,
    finished: u64,
    running: bool,
    /// The most recent failed rounds, oldest first, and how each failed.
    failed: VecDeque<(u64, io::ErrorKind)>,
    /// The newest failed round dropped from `failed`.
    forgotten: u64,
    /// Callers waiting for a round to finish.
    waiting: usize,
    /// When a caller that does not wait (a write) last asked for a round.
    last_eager: Option<std::time::Instant>,
}

impl Rounds {
    /// The first round that may flush pages written from now on: the one running, whose
    /// `syncfs` may not have reached them yet, or else the next one.
    fn first_covering(&self) -> u64 {
        if self.running {
            self.started
        } else {
            self.started + 1
        }
    }

    /// How a round in `from..=to` failed, if one did. With `syncfs`, an error is reported
    /// once per descriptor: the round that met it returns it and later rounds return 0, so
    /// every writer whose pages that round may have flushed has to fail.
    fn failure_in(&self, from: u64, to: u64) -> Option<io::ErrorKind> {
        if from <= self.forgotten {
            return Some(io::ErrorKind::Other);
        }
        self.failed
            .iter()
            .find(|(round, _)| (from..=to).contains(round))
            .map(|(_, kind)| *kind)
    }

    fn record_failure(&mut self, round: u64, kind: io::ErrorKind) {
        if self.failed.len() == FAILURES_KEPT {
            if let Some((old, _)) = self.failed.pop_front() {
                self.forgotten = old;
            }
        }
        self.failed.push_back((round, kind));
    }
}

/// How long a reader that must make something durable (webhooks) waits for a write's round
/// before it starts one of its own.
pub const PATIENCE: Duration = Duration::from_millis(10);

/// A write asked for a round this recently: another is likely to come soon.
const EAGER_RECENT: Duration = Duration::from_millis(20);

/// Where a writer's window of rounds begins: taken before it writes (see [`SyncGroup::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncMark(u64);

impl SyncGroup {
    /// A group for the volume that holds `dir`.
    pub fn new(dir: &Path) -> io::Result<Self> {
        let volume = File::open(dir)?;
        if let Some(release) = kernel_release().filter(|r| !syncfs_reports_errors(r)) {
            tracing::warn!(
                kernel = %release,
                "syncfs reports no writeback errors before Linux 5.8: a write the disk lost \
                 would not be detected; set storage.durability = \"fsync\" on this kernel"
            );
        }
        Ok(Self::with_sync_fn(move || syncfs(&volume)))
    }

    /// A group whose rounds call `sync_fn` instead of `syncfs` (tests inject failures so).
    pub fn with_sync_fn(sync_fn: impl Fn() -> io::Result<()> + Send + Sync + 'static) -> Self {
        Self {
            sync_fn: Box::new(sync_fn),
            state: Mutex::default(),
            done: Condvar::new(),
        }
    }

    /// Marks the start of a writer's writes: every round from the one running now (which may
    /// flush some of them) counts for its [`SyncGroup::sync_from`].
    pub fn mark(&self) -> SyncMark {
        SyncMark(self.state.lock().expect("not poisoned").first_covering())
    }

    /// Returns once a `syncfs` that started after this call has finished, so everything
    /// written before the call is on disk. Callers arriving while a round runs share the
    /// next round. Fails when that round failed, or any round running at the call or after.
    pub fn sync(&self) -> io::Result<()> {
        self.sync_from(self.mark())
    }

    /// Like [`SyncGroup::sync`], and fails as well when any round from `mark` on failed: one
    /// of them may have flushed (and lost) pages written after the mark.
    pub fn sync_from(&self, mark: SyncMark) -> io::Result<()> {
        self.sync_within(mark, Duration::ZERO)
    }

    /// Like [`SyncGroup::sync`], for a caller that can wait a little (a webhook's cursor, a
    /// head about to be announced): while writes ask for rounds (one asked in the last
    /// [`EAGER_RECENT`]), it waits up to `patience` for one of theirs to start rather than
    /// start one that the next write would have to wait out.
    pub fn sync_patiently(&self, patience: Duration) -> io::Result<()> {
        self.sync_within(self.mark(), patience)
    }

    fn sync_within(&self, mark: SyncMark, patience: Duration) -> io::Result<()> {
        let mut s = self.state.lock().expect("not poisoned");
        let now = std::time::Instant::now();
        let patience = if patience.is_zero() {
            s.last_eager = Some(now);
            Duration::ZERO
        } else if s
            .last_eager
            .is_some_and(|t| now.duration_since(t) < EAGER_RECENT)
        {
            patience
        } else {
            Duration::ZERO
        };
        let deadline = now + patience;
        // Rounds up to `started` may have begun before our writes: we need a later one.
        let target = s.started + 1;
        let from = mark.0.min(s.first_covering());
        loop {
            if s.finished >= target {
                return match s.failure_in(from, target) {
                    Some(kind) => Err(io::Error::new(kind, "syncfs of the data volume failed")),
                    None => Ok(()),
                };
            }
            if s.running {
                s.waiting += 1;
                s = self.done.wait(s).expect("not poisoned");
                s.waiting -= 1;
                continue;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !left.is_zero() {
                s.waiting += 1;
                s = self.done.wait_timeout(s, left).expect("not poisoned").0;
                s.waiting -= 1;
                continue;
            }
            s.running = true;
            s.started += 1;
            let round = s.started;
            drop(s);
            let result = (self.sync_fn)();
            s = self.state.lock().expect("not poisoned");
            s.running = false;
            s.finished = round;
            if let Err(e) = result {
                tracing::error!(round, error = %e, "syncfs of the data volume failed");
                s.record_failure(round, e.kind());
            }
            self.done.notify_all();
        }
    }

    /// How many `syncfs` rounds have run.
    #[cfg(test)]
    fn rounds(&self) -> u64 {
        self.state.lock().expect("not poisoned").finished
    }

    /// How many callers wait for a running round.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state.lock().expect("not poisoned").waiting
    }
}

/// The running kernel's release (`uname -r`).
fn kernel_release() -> Option<String> {
    // SAFETY: uname fills the zeroed struct it is given; its fields are NUL-terminated.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut name) } != 0 {
        return None;
    }
    let release = unsafe { std::ffi::CStr::from_ptr(name.release.as_ptr()) };
    Some(release.to_string_lossy().into_owned())
}

/// Whether `syncfs` returns writeback errors on a kernel of this release (Linux 5.8 and
/// later). A release that does not parse is taken to be recent.
fn syncfs_reports_errors(release: &str) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (5, 8),
        _ => true,
    }
}

fn syncfs(file: &File) -> io::Result<()> {
    // SAFETY: syncfs takes a file descriptor, which `file` keeps open for the call.
    if unsafe { libc::syncfs(file.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn concurrent_callers_share_rounds_and_each_waits_for_a_fresh_one() {
        let dir = tempfile::tempdir().unwrap();
        let group = Arc::new(SyncGroup::new(dir.path()).unwrap());
        group.sync().unwrap();
        assert_eq!(group.rounds(), 1);
        group.sync().unwrap();
        assert_eq!(
            group.rounds(),
            2,
            "a caller never reuses a round that ran before it"
        );
        let threads: Vec<_> = (0..32)
            .map(|_| {
                let g = group.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        g.sync().unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let rounds = group.rounds() - 2;
        assert!(rounds >= 20, "{rounds}");
        assert!(
            rounds < 32 * 20,
            "{rounds} rounds for 640 calls: nothing was shared"
        );
    }

    /// A sync function whose calls each wait for a result sent by the test.
    fn scripted() -> (
        SyncGroup,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<io::Result<()>>,
    ) {
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (results, results_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let results_rx = Mutex::new(results_rx);
        let group = SyncGroup::with_sync_fn(move || {
            entered_tx.send(()).unwrap();
            results_rx.lock().unwrap().recv().unwrap()
        });
        (group, entered, results)
    }

    fn eio() -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }

    #[test]
    fn syncfs_reports_errors_from_linux_5_8() {
        for (release, reports) in [
            ("6.18.44-fc-v657", true),
            ("5.8.0", true),
            ("5.10.0-28-amd64", true),
            ("5.7.19", false),
            ("4.19.0-generic", false),
            ("3.10.0-1160.el7.x86_64", false),
            ("weird", true),
        ] {
            assert_eq!(syncfs_reports_errors(release), reports, "{release}");
        }
        assert!(kernel_release().is_some());
    }

    #[test]
    fn a_failed_round_that_was_running_at_the_call_fails_the_caller_too() {
        let (group, entered, results) = scripted();
        let group = Arc::new(group);
        // Round 1 runs (it may flush the writer's pages, and lose them).
        let first = std::thread::spawn({
            let g = group.clone();
            move || g.sync()
        });
        entered.recv().unwrap();
        // The writer calls sync() while round 1 runs, and waits for round 2.
        let writer = std::thread::spawn({
            let g = group.clone();
            move || g.sync()
        });
        while group.waiting() == 0 {
            std::thread::yield_now();
        }
        results.send(eio()).unwrap();
        assert!(first.join().unwrap().is_err());
        // Round 2 succeeds, as syncfs does once the descriptor has reported the error.
        entered.recv().unwrap();
        results.send(Ok(())).unwrap();
        let err = writer
            .join()
            .unwrap()
            .expect_err("the writer's pages may have been lost by round 1");
        assert_eq!(err.kind(), io::Error::from_raw_os_error(libc::EIO).kind());
        assert_eq!(group.rounds(), 2);
        // A caller that arrives after the failure, with nothing running, is not affected.
        let later = std::thread::spawn({
            let g = group.clone();
            move || g.sync()
        });
        entered.recv().unwrap();
        results.send(Ok(())).unwrap();
        later.join().unwrap().unwrap();
    }

    #[test]
    fn a_round_that_failed_between_mark_and_sync_fails_the_writer() {
        let (group, entered, results) = scripted();
        let group = Arc::new(group);
        let mark = group.mark();
        // The writer writes; meanwhile another writer's round flushes and fails.
        let other = std::thread::spawn({
            let g = group.clone();
            move || g.sync()
        });
        entered.recv().unwrap();
        results.send(eio()).unwrap();
        assert!(other.join().unwrap().is_err());
        // The writer's own round succeeds.
        let writer = std::thread::spawn({
            let g = group.clone();
            move || g.sync_from(mark)
        });
        entered.recv().unwrap();
        results.send(Ok(())).unwrap();
        assert!(writer.join().unwrap().is_err());
        // A mark taken after the failure is clean.
        let mark = group.mark();
        let clean = std::thread::spawn({
            let g = group.clone();
            move || g.sync_from(mark)
        });
        entered.recv().unwrap();
        results.send(Ok(())).unwrap();
        clean.join().unwrap().unwrap();
    }

    #[test]
    fn auto_trusts_syncfs_only_where_it_flushes_and_group_elsewhere_is_refused() {
        use DurabilitySetting::*;
        let ext4 = Volume::from_magic(0xEF53);
        let fuse = Volume::from_magic(0x6573_5546);
        let tmpfs = Volume::from_magic(0x0102_1994);
        let xfs = Volume::from_magic(0x5846_5342);
        let btrfs = Volume::from_magic(0x9123_683E);
        for (setting, trust, volume, expect) in [
            (Auto, false, Some(&ext4), Ok(Durability::Group)),
            // Not cut at the block level here: per-file fsync unless asked.
            (Auto, false, Some(&xfs), Ok(Durability::Fsync)),
            (Auto, false, Some(&btrfs), Ok(Durability::Fsync)),
            (Group, false, Some(&xfs), Ok(Durability::Group)),
            (Auto, true, Some(&btrfs), Ok(Durability::Group)),
            (Auto, false, Some(&fuse), Ok(Durability::Fsync)),
            (Auto, false, Some(&tmpfs), Ok(Durability::Fsync)),
            (Auto, false, None, Ok(Durability::Fsync)),
            (Auto, true, Some(&fuse), Ok(Durability::Group)),
            (Fsync, false, Some(&ext4), Ok(Durability::Fsync)),
            (Fsync, true, Some(&fuse), Ok(Durability::Fsync)),
            (Group, false, Some(&ext4), Ok(Durability::Group)),
            (Group, true, Some(&fuse), Ok(Durability::Group)),
            (Group, false, Some(&fuse), Err("fuse")),
            (Group, false, None, Err("unknown")),
        ] {
            let got = Durability::choose(setting, trust, volume).map_err(|e| e.filesystem);
            let label = format!("{setting:?} trust={trust} {:?}", volume.map(|v| v.name()));
            assert_eq!(got, expect.map_err(String::from), "{label}");
        }
    }
}

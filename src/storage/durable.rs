//! Durability: how a write reaches the disk before its 200. Either libgit2 fsyncs every file
//! and folder it writes (`fsync`), or writers share `syncfs` calls (`group`, group commit).
use serde::Deserialize;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Condvar, Mutex};

/// How writes are made durable. One mode per process: libgit2's fsync switch is global.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Group commit: libgit2 writes without fsync; then one `syncfs` of the data volume, shared
    /// by every writer waiting at that moment, makes the objects durable, and a second one the
    /// ref. Two syncs per write however many tenants write at once.
    #[default]
    Group,
    /// libgit2 fsyncs each object, ref and the folders that gained them: about 9 fsyncs per
    /// write, none shared. For volumes where `syncfs` is expensive (shared with busy writers).
    Fsync,
}

/// Rounds of `syncfs` on one volume, shared by the writers that wait for them.
#[derive(Debug)]
pub struct SyncGroup {
    volume: File,
    state: Mutex<Rounds>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct Rounds {
    started: u64,
    finished: u64,
    running: bool,
    /// The last round whose `syncfs` failed, and how.
    failed: Option<(u64, io::ErrorKind)>,
}

impl SyncGroup {
    /// A group for the volume that holds `dir`.
    pub fn new(dir: &Path) -> io::Result<Self> {
        Ok(Self {
            volume: File::open(dir)?,
            state: Mutex::default(),
            done: Condvar::new(),
        })
    }

    /// Returns once a `syncfs` that started after this call has finished, so everything
    /// written before the call is on disk. Callers arriving while a round runs share the
    /// next round.
    pub fn sync(&self) -> io::Result<()> {
        let mut s = self.state.lock().expect("not poisoned");
        // Rounds up to `started` may have begun before our writes: we need a later one.
        let target = s.started + 1;
        loop {
            if s.finished >= target {
                return match s.failed {
                    Some((round, kind)) if round >= target => {
                        Err(io::Error::new(kind, "syncfs of the data volume failed"))
                    }
                    _ => Ok(()),
                };
            }
            if s.running {
                s = self.done.wait(s).expect("not poisoned");
                continue;
            }
            s.running = true;
            s.started += 1;
            let round = s.started;
            drop(s);
            let result = syncfs(&self.volume);
            s = self.state.lock().expect("not poisoned");
            s.running = false;
            s.finished = round;
            if let Err(e) = result {
                s.failed = Some((round, e.kind()));
            }
            self.done.notify_all();
        }
    }

    /// How many `syncfs` rounds have run.
    #[cfg(test)]
    fn rounds(&self) -> u64 {
        self.state.lock().expect("not poisoned").finished
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
}

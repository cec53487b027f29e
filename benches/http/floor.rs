//! The file-system floor: exactly the file work of one planfiles commit and nothing else (no git, HTTP, JSON, YAML, zlib or SHA-1), with planfiles' own group commit; the contender every durable write is measured against in the same run.
//!
//! One commit: three loose objects' temporary files and the ref's lock written, a shared
//! `syncfs` that started after they were written, the objects renamed into `objects/xx/` and
//! `refs/heads/main.lock` over `main`, a second shared `syncfs`.
use super::load::Run;
use planfiles::storage::SyncGroup;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Repositories-to-be under one folder of the data volume, sharing one group commit.
pub struct Floor {
    root: PathBuf,
    sync: Arc<SyncGroup>,
}

/// About the sizes of a commit's objects (a blob of a small file, a tree of two entries, a
/// commit with trailers), compressed.
const OBJECT_BYTES: [usize; 3] = [120, 90, 230];

impl Floor {
    /// The floor's repositories in `root` (on the volume under test).
    pub fn new(root: &Path) -> Self {
        std::fs::create_dir_all(root).unwrap();
        Self {
            root: root.to_owned(),
            sync: Arc::new(SyncGroup::new(root).unwrap()),
        }
    }

    fn repo(&self, n: usize) -> PathBuf {
        let repo = self.root.join(format!("r{n:02}"));
        std::fs::create_dir_all(repo.join("refs/heads")).unwrap();
        for fanout in 0..256 {
            std::fs::create_dir_all(repo.join(format!("objects/{fanout:02x}"))).unwrap();
        }
        repo
    }

    /// One commit's file work in `repo`, in the order that keeps a power loss from naming
    /// bytes that are not durable (planfiles' own since issue 40): the objects' temporary
    /// files and the ref's lock written; a shared `syncfs`; the objects renamed into place and
    /// the lock over the ref; a second shared `syncfs`. `seq` makes its names new.
    fn commit(&self, repo: &Path, seq: u64) {
        let mark = self.sync.mark();
        let mut names = Vec::with_capacity(OBJECT_BYTES.len());
        for (i, bytes) in OBJECT_BYTES.iter().enumerate() {
            // Spread over the fan-out folders as object ids are.
            let id = seq * 3 + i as u64;
            let name = format!("{:02x}{id:038}", id.wrapping_mul(0x9E37_79B9) % 256);
            let fanout = repo.join(format!("objects/{}", &name[..2]));
            let tmp = fanout.join(format!("tmp_obj_{seq}_{i}"));
            std::fs::File::create(&tmp)
                .and_then(|mut f| f.write_all(&vec![b'x'; *bytes]))
                .unwrap();
            names.push((tmp, fanout.join(&name[2..])));
        }
        let lock = repo.join("refs/heads/main.lock");
        std::fs::File::create(&lock)
            .and_then(|mut f| f.write_all(format!("{:040x}\n", seq).as_bytes()))
            .unwrap();
        self.sync.sync_from(mark).unwrap();
        for (tmp, name) in names {
            std::fs::rename(tmp, name).unwrap();
        }
        std::fs::rename(&lock, repo.join("refs/heads/main")).unwrap();
        self.sync.sync().unwrap();
    }

    /// `count` commits one after another in one repository: their latencies.
    pub fn serial(&self, count: usize) -> Run {
        let repo = self.repo(0);
        let mut run = Run::empty();
        let started = Instant::now();
        for seq in 0..count as u64 {
            let t = Instant::now();
            self.commit(&repo, 1_000_000 + seq);
            run.hist.record(t.elapsed().as_micros() as u64).unwrap();
            run.requests += 1;
        }
        run.elapsed = started.elapsed();
        run
    }

    /// `writers` threads, each committing in a loop in `repos` repositories (writer `i` in
    /// repository `i % repos`, taking turns there as planfiles' writers of a tenant do) for
    /// `duration`: the commits made and their latencies.
    pub fn concurrent(&self, writers: usize, repos: usize, duration: Duration) -> Run {
        let repos: Vec<Arc<(PathBuf, std::sync::Mutex<()>)>> = (0..repos)
            .map(|n| Arc::new((self.repo(n), std::sync::Mutex::new(()))))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let seq = Arc::new(AtomicU64::new(10_000_000));
        let started = Instant::now();
        let threads: Vec<_> = (0..writers)
            .map(|i| {
                let repo = repos[i % repos.len()].clone();
                let (stop, seq) = (stop.clone(), seq.clone());
                let floor = Floor {
                    root: self.root.clone(),
                    sync: self.sync.clone(),
                };
                std::thread::spawn(move || {
                    let mut run = Run::empty();
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let _turn = repo.1.lock().unwrap();
                        floor.commit(&repo.0, seq.fetch_add(1, Ordering::Relaxed));
                        drop(_turn);
                        run.hist.record(t.elapsed().as_micros() as u64).unwrap();
                        run.requests += 1;
                    }
                    run
                })
            })
            .collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut total = Run::empty();
        for t in threads {
            total.add(&t.join().unwrap());
        }
        total.elapsed = started.elapsed();
        total
    }
}

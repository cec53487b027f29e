//! Upkeep figures: disk use and file count of a tenant with N commits before and after a
//! repack, and read and write latency without a repack and during one.
//!
//!     cargo run --release --example upkeep -- [COMMITS]
//!
//! Default: 10,000 commits (about 30 s of durable writes to build). Uses the storage API
//! directly, with the default durability (group commit), in a temporary directory.
use planfiles::domain::{Identity, PlanFile, TenantId};
use planfiles::storage::{self, CommitRequest, Preconditions, Storage};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn write(storage: &Storage, tenant: &TenantId, n: usize) {
    let req = CommitRequest::of(
        PlanFile::Integration,
        format!("aws:\n- account_id: '{n:012}'\n  regions: [us-east-1]\n  type: aws\n")
            .into_bytes(),
        Preconditions::default(),
        Identity::new("Bench", "bench@example.com", "bench"),
    );
    storage.commit(tenant, req).expect("write");
}

/// (bytes on disk, files) under `dir`.
fn usage(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let meta = e.metadata().unwrap();
        if meta.is_dir() {
            let (b, f) = usage(&e.path());
            total = (total.0 + b + meta.blocks() * 512, total.1 + f);
        } else {
            total = (total.0 + meta.blocks() * 512, total.1 + 1);
        }
    }
    total
}

struct Latencies(Vec<Duration>);

impl Latencies {
    fn pct(&mut self, p: f64) -> f64 {
        self.0.sort();
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        self.0[i].as_secs_f64() * 1000.0
    }

    fn line(mut self, what: &str) -> String {
        format!(
            "{what:<28} n={:<6} p50={:.3} ms  p99={:.3} ms  max={:.3} ms",
            self.0.len(),
            self.pct(0.5),
            self.pct(0.99),
            self.pct(1.0)
        )
    }
}

/// Reads and writes in two threads until `stop`; returns their latencies.
fn load(storage: &Storage, tenant: &TenantId, stop: Arc<AtomicBool>) -> (Latencies, Latencies) {
    let reader = {
        let (storage, tenant, stop) = (storage.clone(), tenant.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut l = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                storage.read(&tenant, PlanFile::Integration).expect("read");
                l.push(t.elapsed());
            }
            l
        })
    };
    let writer = {
        let (storage, tenant, stop) = (storage.clone(), tenant.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut l = Vec::new();
            let mut n = 1_000_000;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                write(&storage, &tenant, n);
                l.push(t.elapsed());
                n += 1;
            }
            l
        })
    };
    (
        Latencies(reader.join().unwrap()),
        Latencies(writer.join().unwrap()),
    )
}

fn main() {
    let commits: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    storage::init_git();
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(
        dir.path(),
        &dir.path().join("cursor.key"),
        Identity::new("planfiles", "p@localhost", "x"),
        planfiles::storage::Durability::Group,
    )
    .unwrap();
    let tenant = TenantId::parse("bench").unwrap();
    storage.create_tenant(&tenant, false).unwrap();
    let repo = storage.tenants_dir().join("bench.git");

    let t = Instant::now();
    for n in 0..commits {
        write(&storage, &tenant, n);
    }
    println!(
        "built {commits} commits in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (bytes, files) = usage(&repo);
    println!(
        "before repack: {:.1} MiB on disk, {files} files",
        bytes as f64 / 1048576.0
    );

    // Baseline: 2 s of reads and writes with no repack.
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            stop.store(true, Ordering::Relaxed);
        })
    };
    let (reads, writes) = load(&storage, &tenant, stop);
    timer.join().unwrap();
    println!("{}", reads.line("read, no repack"));
    println!("{}", writes.line("write, no repack"));

    // The same load while a full repack runs.
    let stop = Arc::new(AtomicBool::new(false));
    let repack = {
        let (storage, tenant, stop) = (storage.clone(), tenant.clone(), stop.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let report = storage.repack(&tenant, true).unwrap().unwrap();
            stop.store(true, Ordering::Relaxed);
            report
        })
    };
    let (reads, writes) = load(&storage, &tenant, stop);
    let report = repack.join().unwrap();
    println!(
        "repack: {} objects into one pack in {:.2} s; {} loose objects removed",
        report.objects_packed,
        report.duration.as_secs_f64(),
        report.loose_removed
    );
    println!("{}", reads.line("read, during repack"));
    println!("{}", writes.line("write, during repack"));
    let (bytes, files) = usage(&repo);
    println!(
        "after repack, with the writes made during it: {:.1} MiB on disk, {files} files",
        bytes as f64 / 1048576.0
    );
    let quiet = storage.repack(&tenant, true).unwrap().unwrap();
    let (bytes, files) = usage(&repo);
    println!(
        "after a quiet repack ({:.2} s, {} objects): {:.1} MiB on disk, {files} files",
        quiet.duration.as_secs_f64(),
        quiet.objects_packed,
        bytes as f64 / 1048576.0
    );
    let fsck = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["fsck", "--strict", "--no-dangling"])
        .status()
        .unwrap();
    println!(
        "git fsck --strict: {}",
        if fsck.success() { "clean" } else { "FAILED" }
    );
}

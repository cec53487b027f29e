//! The commit-hash force on a long history: where the ancestry walk happens and what the write lock holds.
//!
//!     cargo run --release --example ancestry -- [COMMITS]
//!
//! Builds a tenant with COMMITS commits (default 100,000; git fast-import), then forces a
//! configuration write with the hash of its first commit: the walk outside the write lock
//! (`Storage::ancestry`), the write under the lock with that answer, and the same write
//! without it (the whole walk under the lock, as before issue 18).
#[path = "../benches/http/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;

use planfiles::domain::{Identity, ObjectId, PlanFile, TenantId};
use planfiles::storage::{self, CommitRequest, Preconditions, ShaCheck, Storage};
use std::time::Instant;

fn main() {
    let commits: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::parse("deep").unwrap();
    let repo = dir.path().join("tenants/deep.git");
    let t = Instant::now();
    fixtures::history(&repo, commits);
    println!(
        "{commits} commits built in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let first = fixtures::git(&repo, &["rev-list", "--max-parents=0", "main"]);
    storage::init_git();
    let storage = Storage::open(
        dir.path(),
        &dir.path().join("cursor.key"),
        Identity::new("planfiles", "p@localhost", "localhost"),
        planfiles::storage::Durability::Group,
    )
    .unwrap();
    let id = ObjectId::parse(&first).unwrap();
    let write = |n: usize, ancestry| {
        CommitRequest::of(
            PlanFile::Configuration,
            format!("folders:\n- path: p{n}\n").into_bytes(),
            Preconditions {
                file_sha: Some(ShaCheck::BlobOrCommit(id)),
                if_match: None,
                ancestry,
            },
            Identity::new("Bench", "bench@example.com", "bench"),
        )
    };
    for round in 0..3 {
        let t = Instant::now();
        let found = storage.ancestry(&tenant, id).unwrap();
        let walk = t.elapsed();
        assert!(found.in_history);
        let t = Instant::now();
        let out = storage
            .commit(&tenant, write(2 * round, Some(found)))
            .unwrap()
            .written()
            .expect("no key");
        let with_hint = t.elapsed();
        assert!(out.files[0].forced && out.changed());
        let t = Instant::now();
        storage.commit(&tenant, write(2 * round + 1, None)).unwrap();
        let without = t.elapsed();
        println!(
            "round {round}: walk outside the lock {:.1} ms; write with its answer {:.1} ms; write walking under the lock {:.1} ms",
            walk.as_secs_f64() * 1e3,
            with_hint.as_secs_f64() * 1e3,
            without.as_secs_f64() * 1e3
        );
    }
}

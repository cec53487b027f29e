//! Shards behind HAProxy, measured in one run (issue 27): write throughput with 1 shard and with 2 shards behind HAProxy (and 1 shard without it, for the proxy's cost), and how long `tenant move` refuses writes for a small tenant and for one with 100,000 commits. `cargo bench --bench shards [-- SECONDS WRITERS]`; needs `haproxy`. On one machine the shards share its cores: the ratio measures overhead, not scale.
#[path = "../tests/common/cluster.rs"]
mod cluster;
#[path = "../tests/common/mod.rs"]
mod common;

use cluster::{haproxy_missing, tenants, Cluster, WRITE};
use common::token;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Blind PUTs of the integration file by `writers` threads over `tenants` at `base`, for
/// `secs`; returns acknowledged writes per second.
fn throughput(base: &str, tenants: &[String], writers: usize, secs: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let other = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (stop, done, other) = (stop.clone(), done.clone(), other.clone());
            let url = format!("{base}/plans/integration-file");
            let tenants = tenants.to_vec();
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                let auths: Vec<String> = tenants
                    .iter()
                    .map(|t| format!("Bearer {}", token(t, WRITE)))
                    .collect();
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let body = json!({"content": {"vanta": {"user_email": format!("w{w}-{i}@bench.example"), "workspace": "b"}}});
                    let res = client
                        .put(&url)
                        .header("Authorization", &auths[i % auths.len()])
                        .json(&body)
                        .send();
                    match res.map(|r| r.status().as_u16()) {
                        Ok(200) => done.fetch_add(1, Ordering::Relaxed),
                        _ => other.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    // Warm up, then count.
    std::thread::sleep(Duration::from_secs(1));
    let start_count = done.load(Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let n = done.load(Ordering::Relaxed) - start_count;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let refused = other.load(Ordering::Relaxed);
    if refused > 0 {
        println!("    ({refused} answers other than 200: 503 busy when a tenant's queue is full)");
    }
    rate
}

/// `(writes refused, import)` in ms, from the move command's last line.
fn parse_move(line: &str) -> (u64, u64) {
    let num = |after: &str| -> u64 {
        let rest = line.split(after).nth(1).unwrap_or("");
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0)
    };
    (num("writes refused for "), num("(import "))
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    if haproxy_missing() {
        return;
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let secs: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(8);
    let writers: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(32);
    let all = tenants(20);
    println!(
        "# shards behind HAProxy: {writers} writers, blind PUTs over 20 tenants, {secs} s each"
    );

    let one = Cluster::start(&all, 3600, 1);
    let direct = throughput(&one.shards[0].url, &all, writers, secs);
    let via_one = throughput(&one.front, &all, writers, secs);
    drop(one);
    let two = Cluster::start(&all, 3600, 2);
    let via_two = throughput(&two.front, &all, writers, secs);
    println!("| setup | commits/s |\n|---|---|");
    println!("| 1 shard, no HAProxy | {direct:.0} |");
    println!("| 1 shard behind HAProxy | {via_one:.0} |");
    println!("| 2 shards behind HAProxy | {via_two:.0} |");
    println!(
        "2 shards / 1 shard behind HAProxy: {:.2}x; HAProxy's cost on 1 shard: {:.2}x",
        via_two / via_one,
        via_one / direct
    );

    // How long a move refuses writes: a small tenant (its creation and the load's commits),
    // then one with 100,000 more (git fast-import, packed as upkeep would), each moved 3
    // times (there, back, there).
    println!("\n# writes refused by `tenant move` (median of 3 moves, ms)");
    println!("| tenant | commits | writes refused | of which the import |\n|---|---|---|---|");
    let big = &all[2];
    common::fast_commits(&two.shards[0].repo(big), 100_000, "integrations.yml");
    let packed = two.shards[0]
        .cli()
        .args(["maintain", big])
        .output()
        .unwrap();
    assert!(packed.status.success(), "{packed:?}");
    for tenant in [&all[0], big] {
        let repo = two.shards[two.home(tenant)].repo(tenant);
        let commits = common::git_in(&repo, &["rev-list", "--count", "refs/heads/main"]);
        let (mut refused, mut import) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let line = two.move_tenant(tenant, two.home(tenant));
            let (r, i) = parse_move(&line);
            refused.push(r);
            import.push(i);
        }
        println!(
            "| {tenant} | {commits} | {} | {} |",
            median(refused),
            median(import)
        );
    }
}

//! `cargo bench --bench events`: idle streams' memory and CPU, and how fast a commit reaches streams and long-polls.
//!
//! The release binary serves the demo tenants plus TENANTS copies of `acme`. Measured (issue
//! 15), each printed with its target:
//! - STREAMS open streams spread over TENANTS tenants: the server's RSS, and its CPU over
//!   IDLE_SECS idle seconds (heartbeats included).
//! - FANOUT streams on one tenant: for each of PUTS commits, the time from the commit's
//!   acknowledgement to its event on every stream (p50, p99 over the commits), for PUTs to
//!   this server, PUTs to a second process on the same data dir, and plain `git update-ref`.
//! - POLLS long-polls (`If-None-Match` + `Prefer: wait=60`) on one tenant: the time from the
//!   PUT's 200 to each answer, over LP_ROUNDS rounds.
//!
//! Small numbers for a smoke run: `STREAMS=200 TENANTS=20 IDLE_SECS=3 FANOUT=50 PUTS=10
//! POLLS=50 LP_ROUNDS=2 cargo bench --bench events`.
#[path = "../http/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;
mod streams;

use hdrhistogram::Histogram;
use planfiles::auth::{mint_hs256, MintRequest};
use planfiles::domain::TenantId;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SECRET: &str = "bench-secret-0123456789abcdef0123456789";
const ALL: [&str; 2] = ["jit.integrations.write", "jit.preferences.write"];

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn token(tenant: &str) -> String {
    mint_hs256(
        SECRET,
        &MintRequest {
            tenant: TenantId::parse(tenant).unwrap(),
            permissions: ALL.iter().map(|p| p.to_string()).collect(),
            sub: Some("bench".into()),
            email: Some("bench@example.com".into()),
            name: Some("Bench".into()),
            ttl_secs: 3600,
        },
    )
    .unwrap()
}

/// A `planfiles serve` on a random port over `data`; killed on drop.
struct Server {
    child: std::process::Child,
    host: String,
}

impl Server {
    fn start(dir: &Path, data: &Path) -> Self {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_planfiles"))
            .env_remove("PLANFILES_CONFIG")
            .env("PLANFILES_DATA_DIR", data)
            .env("PLANFILES_BIND", "127.0.0.1:0")
            .env("PLANFILES_JWT_SECRET", SECRET)
            .env("PLANFILES_LOG_FORMAT", "json")
            .env("PLANFILES_LOG", "warn,planfiles::cli=info")
            .current_dir(dir)
            .arg("serve")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut host = String::new();
        for line in lines.by_ref() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap_or_default();
            if let Some(addr) = v["addr"].as_str() {
                host = addr.to_owned();
                break;
            }
        }
        assert!(!host.is_empty(), "the server did not say where it listens");
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, host }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// User plus system CPU time of a process so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After the name: state is field 3 of the file, utime 14 and stime 15.
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// Lifts this process's open-file limit to its hard limit (children inherit it).
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: get/setrlimit on a live struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

struct Verdict {
    failed: Vec<String>,
}

impl Verdict {
    fn check(&mut self, what: &str, value: f64, limit: f64, unit: &str) {
        let met = value <= limit;
        println!(
            "  {what:<52} {value:>9.2} {unit:<4} target <= {limit} {unit}: {}",
            if met { "met" } else { "MISSED" }
        );
        if !met {
            self.failed.push(what.to_owned());
        }
    }
}

fn copy_tenants(data: &Path, tenants: usize) -> Vec<String> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("repos-fixture/tenants");
    fixtures::copy_tree(&fixture, &data.join("tenants"));
    (0..tenants)
        .map(|i| {
            let id = format!("bench{i:04}");
            fixtures::copy_tree(
                &fixture.join("acme.git"),
                &data.join(format!("tenants/{id}.git")),
            );
            id
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    raise_fd_limit();
    let streams = env("STREAMS", 10_000);
    let tenants = env("TENANTS", 1_000);
    let idle_secs = env("IDLE_SECS", 30) as u64;
    let fanout = env("FANOUT", 1_000);
    let puts = env("PUTS", 100);
    let polls = env("POLLS", 1_000);
    let lp_rounds = env("LP_ROUNDS", 5);
    let dir = tempfile::tempdir().unwrap();
    let data: PathBuf = dir.path().join("data");
    let ids = copy_tenants(&data, tenants.max(1));
    let server = Server::start(dir.path(), &data);
    let host = server.host.clone();
    let mut verdict = Verdict { failed: Vec::new() };
    println!("events bench: {streams} streams over {tenants} tenants, {fanout} streams x {puts} commits, {polls} long-polls x {lp_rounds}");

    // 1. Idle streams: memory and CPU.
    let rss_before = rss_mib(server.pid());
    let tokens: Vec<String> = ids.iter().map(|t| token(t)).collect();
    let idle = streams::open_idle(&host, &tokens, streams).await;
    let rss = rss_mib(server.pid());
    let cpu_start = cpu_time(server.pid());
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let cpu = (cpu_time(server.pid()) - cpu_start).as_secs_f64() / t.elapsed().as_secs_f64();
    let alive = idle.alive();
    println!("idle: {streams} streams open ({alive} still open after {idle_secs} s), RSS {rss_before:.1} MiB before");
    verdict.check(
        &format!("RSS with {streams} streams (MiB)"),
        rss,
        200.0,
        "MiB",
    );
    verdict.check(
        &format!("idle CPU over {idle_secs} s (% of one core)"),
        cpu * 100.0,
        2.0,
        "%",
    );
    drop(idle);
    // Closed streams free their slots when next written to (at the latest the heartbeat).
    streams::wait_streams_closed(&host, || async {}).await;

    // 2. Delivery to FANOUT streams of one tenant.
    let acme = token("acme");
    let repo = data.join("tenants/acme.git");
    let second = Server::start(dir.path(), &data);
    let fan = streams::Fanout::open(&host, &acme, fanout).await;
    let client = reqwest::Client::new();
    for (label, target) in [
        ("this process", 50.0),
        ("another process", 100.0),
        ("plain git", 100.0),
    ] {
        let mut every = Histogram::<u64>::new(3).unwrap();
        let mut each = Histogram::<u64>::new(3).unwrap();
        let mut lost = 0;
        for n in 0..puts {
            let (commit, acked) = match label {
                "this process" => put(&client, &host, &acme, n).await,
                "another process" => put(&client, &second.host, &acme, n).await,
                _ => {
                    let repo = repo.clone();
                    tokio::task::spawn_blocking(move || {
                        fixtures::git_cli_commit(&repo, &format!("git: '{n}'\n"));
                        (fixtures::git(&repo, &["rev-parse", "main"]), Instant::now())
                    })
                    .await
                    .unwrap()
                }
            };
            match fan.wait_for(&commit, Duration::from_secs(5)).await {
                Some(times) => {
                    let lat: Vec<u64> = times
                        .iter()
                        .map(|t| t.saturating_duration_since(acked).as_micros() as u64)
                        .collect();
                    for &l in &lat {
                        each.record(l).unwrap();
                    }
                    every.record(*lat.iter().max().unwrap()).unwrap();
                }
                None => lost += 1,
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "delivery, {label}: to every stream p50 {:.2} ms, p99 {:.2} ms; per stream p50 {:.2} ms, p99 {:.2} ms; commits not delivered to all: {lost}",
            ms(every.value_at_quantile(0.5)),
            ms(every.value_at_quantile(0.99)),
            ms(each.value_at_quantile(0.5)),
            ms(each.value_at_quantile(0.99)),
        );
        verdict.check(
            &format!("delivery p99 to all {fanout} streams, {label} (ms)"),
            ms(every.value_at_quantile(0.99)),
            target,
            "ms",
        );
        if lost > 0 {
            verdict
                .failed
                .push(format!("{label}: {lost} commits not delivered"));
        }
    }
    drop(fan);
    drop(second);
    let mut nudges = 0;
    streams::wait_streams_closed(&host, || {
        nudges += 1;
        let (client, host, acme) = (client.clone(), host.clone(), acme.clone());
        async move {
            put(&client, &host, &acme, 50_000 + nudges).await;
        }
    })
    .await;

    // 3. Long-polls.
    let mut answers = Histogram::<u64>::new(3).unwrap();
    for round in 0..lp_rounds {
        let times = streams::long_polls(&host, &acme, polls, || {
            put(&client, &host, &acme, 10_000 + round)
        })
        .await;
        for t in times {
            answers.record(t.as_micros() as u64).unwrap();
        }
    }
    println!(
        "long-polls: {polls} held, {lp_rounds} rounds: PUT 200 to answer p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (no target)",
        ms(answers.value_at_quantile(0.5)),
        ms(answers.value_at_quantile(0.99)),
        ms(answers.max()),
    );
    if verdict.failed.is_empty() {
        println!("all targets met");
    } else {
        println!("targets missed: {}", verdict.failed.join("; "));
    }
}

/// A forced PUT of the integration file: its commit and when its 200 arrived.
async fn put(client: &reqwest::Client, host: &str, token: &str, n: usize) -> (String, Instant) {
    let res = client
        .put(format!("http://{host}/plans/integration-file"))
        .bearer_auth(token)
        .json(&serde_json::json!({"content": {"github": {"org": format!("bench{n}")}}}))
        .send()
        .await
        .unwrap();
    let acked = Instant::now();
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    (body["commit_sha"].as_str().unwrap().to_owned(), acked)
}

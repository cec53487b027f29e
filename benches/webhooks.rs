//! `cargo bench --bench webhooks`: how fast a commit reaches webhook receivers, and what subscriptions cost a write.
//!
//! The release binary serves the demo tenants from a temporary data dir (`TMPDIR`: put it on
//! the volume to measure), with loopback destinations allowed; a receiver in this process
//! answers 200 and notes when each event arrived. Phases, in one run, WRITES serial PUTs each
//! (default 1,000):
//! 1. no subscription: the PUT p50 (the baseline);
//! 2. one subscription on the tenant: each event's lag, from the PUT's 200 to its arrival;
//! 3. 100 subscriptions on the tenant: the lag of every delivery, and the PUT p50 against 1;
//! 4. no subscription again (the baseline after, for the volume's drift);
//! 5. a receiver that hangs (every attempt cut at 2 s) on another tenant's 8 subscriptions,
//!    while phase 2 runs again: the PUT p99 and the lag of the healthy tenant.
//!
//! Then ROUNDS - 1 more rounds (default ROUNDS=3) of phases 3 and 4, each 100-subscription
//! phase after the last one's deliveries arrived: the PUT p50 with 100 subscriptions against
//! the no-subscription phases before and after it, per round, and their median and range
//! (one run's figure moves by 15 points or more from run to run on a shared machine).
//! Each round ends with a control: no subscription, and a thread of this process at the
//! dispatcher's nice (10) keeping the dispatcher's CPU budget busy: what that much CPU beside
//! the writes costs them on this machine, whoever spends it.
//!
//! Then SUBS subscriptions (default 10,000) over 100 tenants: the server's RSS before and
//! after, idle CPU over 5 s.
//!
//! Small numbers for a smoke run: `WRITES=100 SUBS=500 cargo bench --bench webhooks`;
//! `CPU_SHARE=0` runs the dispatcher without its CPU budget (`webhooks.cpu_share`).
#[path = "http/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use hdrhistogram::Histogram;
use planfiles::auth::{mint_hs256, MintRequest};
use planfiles::domain::TenantId;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "bench-secret-0123456789abcdef0123456789";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn token(tenant: &str, permissions: &[&str]) -> String {
    mint_hs256(
        SECRET,
        &MintRequest {
            tenant: TenantId::parse(tenant).unwrap(),
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
            sub: Some("bench".into()),
            email: Some("bench@example.com".into()),
            name: Some("Bench".into()),
            ttl_secs: 3600,
        },
    )
    .unwrap()
}

/// A `planfiles serve` over `dir/data` with `dir/config.toml`; killed on drop.
struct Server {
    child: std::process::Child,
    base: String,
}

impl Server {
    fn start(dir: &Path) -> Self {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_planfiles"))
            .env("PLANFILES_CONFIG", dir.join("config.toml"))
            .env("PLANFILES_DATA_DIR", dir.join("data"))
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
        let mut base = String::new();
        for line in lines.by_ref() {
            let v: Value = serde_json::from_str(&line.unwrap()).unwrap_or_default();
            if let Some(addr) = v["addr"].as_str() {
                base = format!("http://{addr}");
                break;
            }
        }
        assert!(!base.is_empty(), "the server did not say where it listens");
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, base }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// When each (path, webhook-id) arrived.
type Arrivals = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// A receiver: 200 at once on every path but `/hang/...`, which never answers.
fn receiver() -> (String, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let shared = arrivals.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The receivers stand for machines elsewhere: on these 2 cores they run at nice 19,
        // so that the CPU they need is not taken from the server's writes.
        // SAFETY: setpriority on the calling thread has no preconditions.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
        actix_web::rt::System::new().block_on(async move {
            let data = web::Data::new(shared);
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(data.clone())
                    .default_service(web::to(receive))
            })
            .workers(2)
            .bind("127.0.0.1:0")
            .unwrap();
            tx.send(server.addrs()[0]).unwrap();
            server.run().await.unwrap();
        })
    });
    (format!("http://{}", rx.recv().unwrap()), arrivals)
}

/// Takes the body, as a receiver does to check its signature (and as keep-alive needs: a
/// request whose body is left unread ends its connection, and the next delivery connects).
async fn receive(
    req: HttpRequest,
    _body: web::Bytes,
    arrivals: web::Data<Arrivals>,
) -> HttpResponse {
    let now = Instant::now();
    let path = req.path().to_owned();
    if path.starts_with("/hang/") {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let id = req
        .headers()
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    arrivals.lock().unwrap().entry((path, id)).or_insert(now);
    HttpResponse::Ok().finish()
}

fn subscribe(http: &reqwest::blocking::Client, base: &str, tenant: &str, url: &str) {
    let res = http
        .post(format!("{base}/plans/webhooks"))
        .bearer_auth(token(tenant, &["planfiles.webhooks.write"]))
        .json(&json!({"url": url}))
        .send()
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().unwrap());
}

fn unsubscribe_all(http: &reqwest::blocking::Client, base: &str, tenant: &str) {
    let t = token(tenant, &["planfiles.webhooks.write"]);
    let list: Value = http
        .get(format!("{base}/plans/webhooks"))
        .bearer_auth(&t)
        .send()
        .unwrap()
        .json()
        .unwrap();
    for hook in list["webhooks"].as_array().unwrap() {
        http.delete(format!(
            "{base}/plans/webhooks/{}",
            hook["id"].as_str().unwrap()
        ))
        .bearer_auth(&t)
        .send()
        .unwrap();
    }
}

/// `n` serial PUTs on `tenant`: each one's latency and its commit with the moment of its 200.
fn writes(
    http: &reqwest::blocking::Client,
    base: &str,
    tenant: &str,
    n: usize,
) -> (Histogram<u64>, Vec<(String, Instant)>) {
    let t = token(tenant, &["jit.integrations.write"]);
    let mut latency = Histogram::<u64>::new(3).unwrap();
    let mut acked = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let res = http
            .put(format!("{base}/plans/integration-file"))
            .bearer_auth(&t)
            .json(&json!({"content": {"bench": i}}))
            .send()
            .unwrap();
        let done = Instant::now();
        assert_eq!(res.status(), 200);
        let body: Value = res.json().unwrap();
        latency
            .record(done.duration_since(started).as_micros() as u64)
            .unwrap();
        acked.push((body["commit_sha"].as_str().unwrap().to_owned(), done));
    }
    (latency, acked)
}

/// Runs `f` while a thread at the dispatcher's nice (10) keeps `share` of a core busy in 1 ms
/// pieces: what that much CPU beside the writes costs them on this machine, whoever spends it.
fn beside_busy<T>(share: f64, f: impl FnOnce() -> T) -> T {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = std::thread::spawn({
        let stop = stop.clone();
        move || {
            // SAFETY: setpriority on the calling thread has no preconditions.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
            let piece = Duration::from_millis(1);
            let rest = piece.mul_f64((1.0 - share) / share);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let start = own_cpu();
                while own_cpu() - start < piece {
                    std::hint::black_box(0u64.wrapping_add(1));
                }
                std::thread::sleep(rest);
            }
        }
    });
    let out = f();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.join().unwrap();
    out
}

/// The calling thread's CPU time.
fn own_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Waits until every (path, commit) event arrived (at most 120 s); the lag of each.
fn lags(arrivals: &Arrivals, paths: &[String], acked: &[(String, Instant)]) -> Histogram<u64> {
    let mut lag = Histogram::<u64>::new(3).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let want = paths.len() * acked.len();
    loop {
        let got = arrivals.lock().unwrap();
        let mut found = 0;
        lag.reset();
        for path in paths {
            for (commit, at) in acked {
                let id = format!("msg_acme_{commit}_integration-file");
                if let Some(arrived) = got.get(&(path.clone(), id)) {
                    found += 1;
                    lag.record(arrived.saturating_duration_since(*at).as_micros() as u64)
                        .unwrap();
                }
            }
        }
        if found == want {
            return lag;
        }
        drop(got);
        assert!(
            Instant::now() < deadline,
            "{found} of {want} deliveries after 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn cpu_ms(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks * 10
}

/// The server's CPU while `work` runs: in all (threads that ended included) and by thread
/// name (threads that ended meanwhile are missing there), in ms.
fn cpu_of<T>(pid: u32, work: impl FnOnce() -> T) -> (T, u64, Vec<(String, u64)>) {
    let (all, threads) = (cpu_ms(pid), thread_cpu(pid));
    let out = work();
    let mut by_thread: Vec<(String, u64)> = thread_cpu(pid)
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(threads.get(k).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect();
    by_thread.sort_by_key(|s| std::cmp::Reverse(s.1));
    (out, cpu_ms(pid) - all, by_thread)
}

/// Seconds attempts have waited for the dispatcher's CPU budget so far (`/metrics`).
fn budget_wait(http: &reqwest::blocking::Client, base: &str) -> f64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("planfiles_webhook_cpu_budget_wait_seconds_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn per_write(n: usize, all: u64, by_thread: &[(String, u64)]) -> String {
    let us = |ms: u64| ms * 1000 / n as u64;
    let threads: Vec<String> = by_thread
        .iter()
        .map(|(k, v)| format!("{k} {}", us(*v)))
        .collect();
    format!("{} µs ({})", us(all), threads.join(", "))
}

/// CPU time (ms) of each thread group of process `pid` (threads named alike summed).
fn thread_cpu(pid: u32) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name: String = stat[open + 1..close]
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '-')
            .to_owned();
        let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        let ms = (f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)) * 10;
        *out.entry(name).or_default() += ms;
    }
    out
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("webhooks: bench");
        return;
    }
    let n = env("WRITES", 1000);
    let rounds = env("ROUNDS", 3).max(1);
    let subs = env("SUBS", 10_000);
    let dir = tempfile::tempdir().unwrap();
    fixtures::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("repos-fixture/tenants"),
        &dir.path().join("data/tenants"),
    );
    // CPU_SHARE: `webhooks.cpu_share` (default: the service's).
    let share = std::env::var("CPU_SHARE").map_or(String::new(), |s| format!("cpu_share = {s}\n"));
    // The control phase's busy thread: the dispatcher's CPU budget (the default 0.25 when
    // CPU_SHARE is unset or 0).
    let busy_share = std::env::var("CPU_SHARE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(0.25)
        .min(1.0);
    std::fs::write(
        dir.path().join("config.toml"),
        format!("[storage]\nseed_from = \"\"\n[validation]\nschemas_dir = \"\"\n[webhooks]\nallow_http = true\nallow_private_networks = true\nattempt_timeout_secs = 2\nmax_per_tenant = 200\nmax_in_flight = 256\n{share}"),
    )
    .unwrap();
    let (rx, arrivals) = receiver();
    let server = Server::start(dir.path());
    let base = server.base.clone();
    let http = reqwest::blocking::Client::new();
    println!(
        "webhooks bench: {n} serial PUTs per phase, data dir {}",
        dir.path().display()
    );

    let pid = server.child.id();
    let ((before, _), cpu_none, threads_none) = cpu_of(pid, || writes(&http, &base, "acme", n));

    subscribe(&http, &base, "acme", &format!("{rx}/one/0"));
    let ((one_writes, acked), cpu_one, threads_one) =
        cpu_of(pid, || writes(&http, &base, "acme", n));
    let one = lags(&arrivals, &["/one/0".to_owned()], &acked);
    let waited_one = budget_wait(&http, &base);
    unsubscribe_all(&http, &base, "acme");

    let paths: Vec<String> = (0..100).map(|i| format!("/many/{i}")).collect();
    for p in &paths {
        subscribe(&http, &base, "acme", &format!("{rx}{p}"));
    }
    let ((with_100, acked), cpu_100, threads_100) = cpu_of(pid, || writes(&http, &base, "acme", n));
    let (many, _, spent) = cpu_of(pid, || lags(&arrivals, &paths, &acked));
    let waited_many = budget_wait(&http, &base) - waited_one;
    unsubscribe_all(&http, &base, "acme");

    let (after, _) = writes(&http, &base, "acme", n);
    let (busy, _) = beside_busy(busy_share, || writes(&http, &base, "acme", n));

    for i in 0..8 {
        subscribe(&http, &base, "globex", &format!("{rx}/hang/{i}"));
    }
    // The hanging receiver's attempts are under way before the measured phase.
    let g = token("globex", &["jit.integrations.write"]);
    http.put(format!("{base}/plans/integration-file"))
        .bearer_auth(&g)
        .json(&json!({"content": {"hang": true}}))
        .send()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    subscribe(&http, &base, "acme", &format!("{rx}/beside/0"));
    let (beside_writes, acked) = writes(&http, &base, "acme", n);
    let beside = lags(&arrivals, &["/beside/0".to_owned()], &acked);
    unsubscribe_all(&http, &base, "acme");
    unsubscribe_all(&http, &base, "globex");

    println!();
    println!("| phase | PUT p50 ms | PUT p99 ms | lag p50 ms | lag p99 ms | lag max ms |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, w: &Histogram<u64>, l: Option<&Histogram<u64>>| {
        let lag = |q: f64| l.map_or("-".into(), |l| format!("{:.2}", ms(l.value_at_quantile(q))));
        println!(
            "| {name} | {:.2} | {:.2} | {} | {} | {} |",
            ms(w.value_at_quantile(0.5)),
            ms(w.value_at_quantile(0.99)),
            lag(0.5),
            lag(0.99),
            l.map_or("-".into(), |l| format!("{:.2}", ms(l.max())))
        );
    };
    row("no subscription (before)", &before, None);
    row("1 subscription", &one_writes, Some(&one));
    row("100 subscriptions on the tenant", &with_100, Some(&many));
    row("no subscription (after)", &after, None);
    row(
        "1 subscription, another tenant's 8 hang",
        &beside_writes,
        Some(&beside),
    );
    println!(
        "\nattempts waited for the CPU budget: {waited_one:.1} s in all with 1 subscription, {waited_many:.1} s with 100"
    );
    println!("\nthe server's CPU per write while the PUTs ran (by thread):");
    println!(
        "- no subscription: {}",
        per_write(n, cpu_none, &threads_none)
    );
    println!("- 1 subscription: {}", per_write(n, cpu_one, &threads_one));
    println!(
        "- 100 subscriptions: {}",
        per_write(n, cpu_100, &threads_100)
    );
    println!(
        "\nthe server's CPU after the 100-subscription phase's PUTs, until its {} deliveries arrived, by thread: {}",
        n * 100,
        spent
            .iter()
            .map(|(k, v)| format!("{k} {v} ms"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let p50 = |h: &Histogram<u64>| h.value_at_quantile(0.5) as f64;
    let gap = |none_before: f64, many: f64, none_after: f64| {
        (many / ((none_before + none_after) / 2.0) - 1.0) * 100.0
    };
    // Per round: the no-subscription p50 before, with 100 subscriptions, after, and the
    // control's; the gaps are derived from them.
    let mut rows = vec![(p50(&before), p50(&with_100), p50(&after), p50(&busy))];
    // More rounds of phases 3 and 4: the gap's spread, in the same run.
    for r in 1..rounds {
        let paths: Vec<String> = (0..100).map(|i| format!("/round{r}/{i}")).collect();
        for p in &paths {
            subscribe(&http, &base, "acme", &format!("{rx}{p}"));
        }
        let (many, acked) = writes(&http, &base, "acme", n);
        lags(&arrivals, &paths, &acked);
        unsubscribe_all(&http, &base, "acme");
        let (none, _) = writes(&http, &base, "acme", n);
        let (busy, _) = beside_busy(busy_share, || writes(&http, &base, "acme", n));
        let last_none = rows[rows.len() - 1].2;
        rows.push((last_none, p50(&many), p50(&none), p50(&busy)));
    }
    let gaps: Vec<f64> = rows.iter().map(|&(b, m, a, _)| gap(b, m, a)).collect();
    let busy_gaps: Vec<f64> = rows.iter().map(|&(b, _, a, c)| gap(b, c, a)).collect();
    println!("\nPUT p50 with 100 subscriptions vs without (against the mean of the no-subscription phases before and after it), by round:");
    for (i, ((b, m, a, _), (g, busy))) in rows.iter().zip(gaps.iter().zip(&busy_gaps)).enumerate() {
        println!(
            "- round {}: {:.2} ms against {:.2} and {:.2} ms: {g:+.1}% (control, no subscription and {busy_share} of a core busy at nice 10 beside: {busy:+.1}%)",
            i + 1,
            m / 1000.0,
            b / 1000.0,
            a / 1000.0
        );
    }
    let spread = |gaps: &[f64]| {
        let mut sorted = gaps.to_vec();
        sorted.sort_by(f64::total_cmp);
        format!(
            "median {:+.1}% (range {:+.1}% to {:+.1}%, {} rounds)",
            sorted[sorted.len() / 2],
            sorted[0],
            sorted[sorted.len() - 1],
            sorted.len()
        )
    };
    println!("100 subscriptions: {}", spread(&gaps));
    println!("control: {}", spread(&busy_gaps));

    // Many subscriptions at rest: memory and idle CPU.
    let rss_before = rss_mib(pid);
    let tenants = 100.min(subs.max(1));
    let t0 = Instant::now();
    for t in 0..tenants {
        let tenant = format!("bench-{t}");
        fixtures::copy_tree(
            &dir.path().join("data/tenants/initech.git"),
            &dir.path().join(format!("data/tenants/{tenant}.git")),
        );
    }
    for i in 0..subs {
        subscribe(
            &http,
            &base,
            &format!("bench-{}", i % tenants),
            &format!("{rx}/rest/{i}"),
        );
    }
    let made = t0.elapsed();
    std::thread::sleep(Duration::from_secs(12));
    let cpu0 = cpu_ms(pid);
    std::thread::sleep(Duration::from_secs(5));
    let idle = cpu_ms(pid) - cpu0;
    println!(
        "\n{subs} subscriptions over {tenants} tenants (made in {:.1} s): RSS {:.1} MiB -> {:.1} MiB ({:+.1} KiB each); idle CPU over 5 s: {idle} ms",
        made.as_secs_f64(),
        rss_before,
        rss_mib(pid),
        (rss_mib(pid) - rss_before) * 1024.0 / subs as f64
    );
}

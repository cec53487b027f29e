//! `cargo bench --bench isolation`: a victim tenant's latency alone and beside each noisy neighbour, series count and peak RSS.
//!
//! The release binary serves a copy of the demo tenants; `acme` is the victim, `globex` the
//! hot tenant, `initech` gets a large repository (a 1 MiB integration file and 16 MiB of
//! incompressible data) for the clone and `?ref=` attacks. Each run measures ROUNDS victim
//! rounds (PUT, GET after the change = cache miss, GET again = cache hit) with no attack,
//! then with each attack running (f, issue 24: 600 streams of `globex` resuming from the root
//! of a 10,000-commit history, again and again). Targets (issue 14): victim p99 at most max(3x unloaded,
//! unloaded + 20 ms), /metrics series unchanged while an attack runs (counted after an 11 s
//! warm-up, past the queue timeout, which adds the few series of its statuses, and again at its end), peak RSS under
//! 300 MiB. The victim runs on a thread of its own, the attackers on one runtime thread.
mod attacks;
#[path = "../http/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;

use attacks::{Attack, Target, Victim};
use hdrhistogram::Histogram;
use planfiles::auth::{mint_hs256, MintRequest};
use planfiles::domain::TenantId;
use std::io::BufRead;
use std::time::Duration;

const SECRET: &str = "bench-secret-0123456789abcdef0123456789";

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

/// Peak resident memory of a process (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Resident memory of a process now (VmRSS), in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn series(client: &reqwest::Client, base: &str) -> usize {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines().filter(|l| !l.starts_with('#')).count()
}

/// Latencies of the victim's PUT, GET (miss) and GET (hit).
struct Run {
    hists: [Histogram<u64>; 3],
    errors: usize,
}

async fn measure(victim: &Victim, rounds: u64, from: u64) -> Run {
    let mut hists = std::array::from_fn(|_| Histogram::<u64>::new(3).unwrap());
    let mut errors = 0;
    for n in from..from + rounds {
        match victim.round(n).await {
            Ok(times) => {
                for (h, t) in hists.iter_mut().zip(times) {
                    h.record(t.as_micros() as u64).unwrap();
                }
            }
            Err(_) => errors += 1,
        }
    }
    Run { hists, errors }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Runs the victim's rounds on a thread and runtime of its own, so that its latencies are
/// not the bench's own scheduling delays behind the attackers' tasks.
async fn measure_apart(victim: &std::sync::Arc<Victim>, rounds: u64, from: u64) -> Run {
    let victim = victim.clone();
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(measure(&victim, rounds, from))
    })
    .await
    .unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let rounds: u64 = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fixtures::copy_tree(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("repos-fixture/tenants"),
        &data.join("tenants"),
    );
    let big_commit = attacks::make_big(&data.join("tenants/initech.git"), 16);
    let resume_from = attacks::make_deep(&data.join("tenants/globex.git"), 10_000);
    // ATTACKS=ae runs only those rows; CONFIG=path serves with that config file (A/B runs).
    let only: Option<String> = std::env::var("ATTACKS").ok();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_planfiles"));
    match std::env::var_os("CONFIG") {
        Some(path) => child.env("PLANFILES_CONFIG", path),
        None => child.env_remove("PLANFILES_CONFIG"),
    };
    let mut child = child
        .env("PLANFILES_DATA_DIR", &data)
        .env("PLANFILES_BIND", "127.0.0.1:0")
        .env("PLANFILES_JWT_SECRET", SECRET)
        .env("PLANFILES_LOG_FORMAT", "json")
        .current_dir(dir.path())
        .arg("serve")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
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
    let base = format!("http://{host}");
    let all = ["jit.integrations.write", "jit.preferences.write"];
    let target = Target {
        host: host.clone(),
        hot_token: token("globex", &all),
        big_tenant: "initech".into(),
        big_token: token(
            "initech",
            &["planfiles.repos.read", "jit.integrations.read"],
        ),
        big_commit,
        resume_from,
        resumers: 600,
    };
    let victim = std::sync::Arc::new(Victim {
        base: base.clone(),
        token: token("acme", &all),
        client: reqwest::Client::new(),
    });
    let client = reqwest::Client::new();
    // Warm up: every series the victim and /metrics make exist before the first count.
    measure_apart(&victim, 20, 0).await;
    series(&client, &base).await;
    let series_unloaded = series(&client, &base).await;
    println!("isolation bench: {rounds} victim rounds per row; latencies in ms (p50 / p99)");
    println!(
        "{:<36} {:>15} {:>15} {:>15} {:>7} {:>9} {:>9} {:>8}",
        "attack", "PUT", "GET miss", "GET hit", "errors", "series", "RSS MiB", "attack n"
    );
    let base_run = measure_apart(&victim, rounds, 100).await;
    let row = |label: &str, run: &Run, series: String, sent: u64| {
        let cell = |h: &Histogram<u64>| {
            format!(
                "{:>6.2} / {:>6.2}",
                ms(h.value_at_quantile(0.5)),
                ms(h.value_at_quantile(0.99))
            )
        };
        println!(
            "{label:<36} {:>15} {:>15} {:>15} {:>7} {series:>9} {:>9.1} {sent:>8}",
            cell(&run.hists[0]),
            cell(&run.hists[1]),
            cell(&run.hists[2]),
            run.errors,
            peak_rss_mib(pid)
        );
    };
    row("none (unloaded)", &base_run, series_unloaded.to_string(), 0);
    let mut failed = Vec::new();
    for (i, attack) in Attack::ALL.into_iter().enumerate() {
        if only
            .as_deref()
            .is_some_and(|o| !o.contains(attack.letter()))
        {
            continue;
        }
        let running = attacks::start(attack, &target);
        // Past the queue timeout (10 s), so that the 503s of waits that end are seen too.
        tokio::time::sleep(Duration::from_secs(11)).await;
        // The series the attack's kinds of request add (their statuses, all from closed
        // sets) exist after this warm-up; the count must not grow with its volume.
        let series_before = series(&client, &base).await;
        let run = measure_apart(&victim, rounds, 10_000 * (i as u64 + 1)).await;
        let series_now = series(&client, &base).await;
        let sent = running.stop();
        tokio::time::sleep(Duration::from_millis(500)).await;
        row(
            attack.label(),
            &run,
            format!("{series_before}>{series_now}"),
            sent,
        );
        if attack == Attack::ResumingStreams {
            // What the streams leave behind once they are gone.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let after = rss_mib(pid);
            println!("{:<36} RSS {after:.1} MiB 2 s after the streams ended", "");
            if after >= 300.0 {
                failed.push(format!(
                    "RSS {after:.1} MiB >= 300 MiB after the streams ended"
                ));
            }
        }
        for (k, name) in ["PUT", "GET miss", "GET hit"].iter().enumerate() {
            let unloaded = base_run.hists[k].value_at_quantile(0.99);
            let allowed = (3 * unloaded).max(unloaded + 20_000);
            let p99 = run.hists[k].value_at_quantile(0.99);
            if p99 > allowed {
                failed.push(format!(
                    "{}: victim {name} p99 {:.2} ms > {:.2} ms",
                    attack.label(),
                    ms(p99),
                    ms(allowed)
                ));
            }
        }
        if run.errors > 0 {
            failed.push(format!("{}: {} victim errors", attack.label(), run.errors));
        }
        if series_now != series_before {
            failed.push(format!(
                "{}: /metrics series {series_before} -> {series_now} during the attack",
                attack.label()
            ));
        }
    }
    let rss = peak_rss_mib(pid);
    if rss >= 300.0 {
        failed.push(format!("peak RSS {rss:.1} MiB >= 300 MiB"));
    }
    let _ = child.kill();
    let _ = child.wait();
    if failed.is_empty() {
        println!("targets met: victim p99 <= max(3x, +20 ms) under every attack, series unchanged, peak RSS {rss:.1} MiB < 300 MiB");
    } else {
        println!("targets MISSED:");
        for f in &failed {
            println!("  {f}");
        }
    }
}

//! The change feed under abuse, on the real binary with real clients: streams that resume from the root of a long history take turns and never starve another tenant; streams past the descriptor limit are 503, never another request's 500.
use crate::common;

use common::process::{planfiles, serve_command};
use common::{fast_commits, fixture_dir, token, ALL};
use futures_util::StreamExt;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

/// A copy of the fixture in a temporary folder, as [`planfiles`] expects it.
fn data() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::copy_tree(
        &fixture_dir().join("tenants"),
        &dir.path().join("data/tenants"),
    );
    dir
}

/// What a stream's client saw: its status, and for a 200 the ids of its file events up to
/// the first `head` event (the end of its replay).
async fn resume(base: &str, token: &str, since: &str) -> (u16, Vec<String>) {
    let res = reqwest::Client::new()
        .get(format!("{base}/plans/events?since={since}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    if status != 200 {
        if status == 503 {
            assert!(res.headers().contains_key("retry-after"));
        }
        return (status, Vec::new());
    }
    let mut body = res.bytes_stream();
    let (mut buf, mut ids) = (String::new(), Vec::new());
    loop {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let kind = frame.lines().find_map(|l| l.strip_prefix("event: "));
            let id = frame.lines().find_map(|l| l.strip_prefix("id: "));
            match (kind, id) {
                (Some("head"), _) => return (status, ids),
                (Some("integration-file"), Some(id)) => ids.push(id.to_owned()),
                (Some(other), _) if other != "configuration-file" => {
                    panic!("unexpected event {other}")
                }
                _ => {}
            }
        }
        match body.next().await {
            Some(Ok(chunk)) => buf.push_str(std::str::from_utf8(&chunk).unwrap()),
            _ => return (0, ids),
        }
    }
}

/// Many streams resume from the root of a long history at once. Each replay walks the line
/// once and reads it in steps under the tenant's replay turns (two of eight), so another
/// tenant's writes and reads go on, and each stream gets every commit exactly once, in order
/// (or, past the turns' wait, 503 `busy`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resuming_streams_take_turns_and_other_tenants_stay_served() {
    let dir = data();
    let repo = dir.path().join("data/tenants/acme.git");
    let root = common::git_in(&repo, &["rev-list", "--max-parents=0", "main"]);
    fast_commits(&repo, 2_000, "integrations.yml");
    let expected: Vec<String> = common::git_in(
        &repo,
        &[
            "rev-list",
            "--reverse",
            "--first-parent",
            &format!("{root}..main"),
            "--",
            "integrations.yml",
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect();
    let server = serve_command(planfiles(dir.path()));
    let acme = token("acme", ALL);
    // The server's threads, sampled while the streams resume: replays run on blocking
    // threads, at most eight at once however many streams resume (before, each stream held
    // one for its whole replay: 70 threads here).
    let pid = server.pid();
    let warm = reqwest::get(server.url("/readyz")).await.unwrap();
    assert_eq!(warm.status(), 200);
    let before = threads(pid);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(before));
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(threads(pid), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    // Opened 5 ms apart, so that their quick checks do not pile up on the blocking pool
    // while their replays overlap.
    let mut streams = Vec::new();
    for _ in 0..60 {
        let (base, acme, root) = (server.addr.clone(), acme.clone(), root.clone());
        streams.push(tokio::spawn(
            async move { resume(&base, &acme, &root).await },
        ));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The victim: another tenant, writing and reading old versions meanwhile.
    let client = reqwest::Client::new();
    let globex = token("globex", ALL);
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let started = Instant::now();
        let put = client
            .put(server.url("/plans/integration-file"))
            .bearer_auth(&globex)
            .json(&serde_json::json!({"content": {"victim": i}}))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 200);
        let commit = put.json::<serde_json::Value>().await.unwrap()["commit_sha"]
            .as_str()
            .unwrap()
            .to_owned();
        let get = client
            .get(server.url(&format!("/plans/integration-file?ref={commit}")))
            .bearer_auth(&globex)
            .send()
            .await
            .unwrap();
        assert_eq!(get.status(), 200);
        slowest = slowest.max(started.elapsed());
    }
    let mut served = 0;
    for stream in streams {
        let (status, ids) = stream.await.unwrap();
        match status {
            200 => {
                served += 1;
                assert_eq!(ids.len(), expected.len(), "every commit once");
                assert!(ids == expected, "in main's order");
            }
            503 => {}
            other => panic!("a resuming stream got {other}"),
        }
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        peak <= before + 20,
        "{before} threads before, {peak} while 60 streams resumed: replays are not bounded"
    );
    assert!(served > 0);
    assert!(
        slowest < Duration::from_secs(3),
        "another tenant's PUT and GET ?ref= took {slowest:?} while streams resumed"
    );
}

/// The number of threads of process `pid`.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Under `ulimit -n 1024` (soft and hard: nothing to raise), the stream limits are fitted
/// under it at start (logged), streams past them are 503, and another tenant's GET and PUT
/// are served while they are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_past_the_descriptor_limit_are_503_and_other_tenants_are_served() {
    let dir = data();
    let mut cmd = planfiles(dir.path());
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let server = serve_command(cmd);
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains("\"descriptors\":1024") && log.contains("\"max_streams\":768"),
        "the limits in force are logged: {log}"
    );
    let acme = token("acme", ALL);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut held = Vec::new();
    let (mut ok, mut busy) = (0, 0);
    for _ in 0..450 {
        let res = client
            .get(server.url("/plans/events"))
            .bearer_auth(&acme)
            .send()
            .await
            .unwrap();
        match res.status().as_u16() {
            200 => {
                ok += 1;
                held.push(res);
            }
            503 => busy += 1,
            other => panic!("a stream got {other}"),
        }
    }
    assert_eq!(
        (ok, busy),
        (384, 66),
        "one tenant gets half the streams that fit"
    );
    let globex = token("globex", ALL);
    for _ in 0..20 {
        let get = client
            .get(server.url("/plans/integration-file"))
            .bearer_auth(&globex)
            .send()
            .await
            .unwrap();
        assert_eq!(get.status(), 200);
        let put = client
            .put(server.url("/plans/integration-file"))
            .bearer_auth(&globex)
            .json(&serde_json::json!({"content": {"n": 1}}))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 200);
    }
    // Another tenant's streams still fit.
    let other = client
        .get(server.url("/plans/events"))
        .bearer_auth(&globex)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    drop(held);
}

/// Under `ulimit -n 1024`, with the streams filled to the fitted limit and keyed writes to 70
/// tenants of 8 packs each (more repositories than are kept open, each with every pack mapped
/// by the key's lookup), every tenant's reads and writes are still served: the packs libgit2 keeps open are
/// capped to fit the descriptor reserve. None of it is ever a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kept_repositories_with_many_packs_leave_descriptors_for_writes() {
    let dir = data();
    let tenants = dir.path().join("data/tenants");
    // One repository of 8 packs (each round's commits change integrations.yml), copied.
    let template = tenants.join("acme.git");
    for _ in 0..8 {
        fast_commits(&template, 3, "integrations.yml");
        common::git_in(&template, &["repack", "-d", "-q"]);
    }
    let packs = std::fs::read_dir(template.join("objects/pack"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "pack")
        })
        .count();
    assert!(packs >= 8, "{packs} packs");
    let names: Vec<String> = (0..70).map(|i| format!("t{i:02}")).collect();
    for name in &names {
        common::copy_tree(&template, &tenants.join(format!("{name}.git")));
    }
    let mut cmd = planfiles(dir.path());
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let server = serve_command(cmd);
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains("\"open_packs\":64"),
        "the pack cap is logged: {log}"
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    // The streams, up to the fitted limit (768: half per tenant), on two tenants.
    let mut held = Vec::new();
    for tenant in ["acme", "globex"] {
        let t = token(tenant, ALL);
        for _ in 0..380 {
            let res = client
                .get(server.url("/plans/events"))
                .bearer_auth(&t)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            held.push(res);
        }
    }
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for round in 0..2 {
        for name in &names {
            let t = token(name, ALL);
            let history = client
                .get(server.url("/plans/integration-file/history?limit=500"))
                .bearer_auth(&t)
                .send()
                .await
                .unwrap();
            *statuses.entry(history.status().as_u16()).or_default() += 1;
            // A keyed write looks for its key in the last commits of main: every pack of the
            // repository it keeps open is mapped.
            let put = client
                .put(server.url("/plans/integration-file"))
                .bearer_auth(&t)
                .header("Idempotency-Key", format!("{name}-{round}"))
                .json(&serde_json::json!({"content": {"round": round}}))
                .send()
                .await
                .unwrap();
            *statuses.entry(put.status().as_u16()).or_default() += 1;
        }
    }
    let fds = std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .unwrap()
        .count();
    drop(held);
    assert_eq!(
        statuses.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "every history read and write is served: {statuses:?} ({fds} descriptors open)"
    );
    assert!(
        !server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("\"status\":500")),
        "a 500 was answered"
    );
}

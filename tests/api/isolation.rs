//! A shared service: what one client or tenant does cannot grow shared state or stall others.
use crate::common;

use common::TestApp;
use futures_util::StreamExt;

/// The number of series (sample lines) in `/metrics`.
async fn series(app: &TestApp) -> usize {
    let text = app.metrics().await;
    text.lines().filter(|l| !l.starts_with('#')).count()
}

/// Requests without a token, with made-up methods, paths and headers, add no series: every
/// label value comes from a closed set.
#[tokio::test]
async fn made_up_methods_paths_and_headers_add_no_metric_series() {
    let app = TestApp::spawn().await;
    let send = |i: usize| {
        let method = reqwest::Method::from_bytes(format!("XQ{i}").as_bytes()).unwrap();
        let path = match i % 4 {
            0 => format!("/x{i}"),
            1 => format!("/plans/integration-file/{i}"),
            2 => format!("/git/t{i}.git/info/refs"),
            _ => "/plans/integration-file".to_owned(),
        };
        let method = if i.is_multiple_of(5) {
            reqwest::Method::GET
        } else {
            method
        };
        app.client
            .request(method, app.url(&path))
            .header(format!("x-h{i}"), format!("v{i}"))
            .send()
    };
    // One of each kind first, and one read of /metrics, so that the series they add exist.
    for i in 0..20 {
        send(i).await.unwrap();
    }
    series(&app).await;
    let before = series(&app).await;
    let statuses: Vec<u16> = futures_util::stream::iter(20..10_020)
        .map(|i| async move { send(i).await.unwrap().status().as_u16() })
        .buffer_unordered(16)
        .collect()
        .await;
    let odd: std::collections::BTreeSet<_> = statuses
        .iter()
        .filter(|s| ![401, 404, 405].contains(*s))
        .collect();
    assert!(odd.is_empty(), "unexpected statuses {odd:?}");
    let after = series(&app).await;
    assert_eq!(
        after, before,
        "{before} series before, {after} after 10,000 made-up requests"
    );
}

/// A server whose limits are set by the test.
async fn spawn_with(limits: planfiles::http::Limits) -> TestApp {
    TestApp::with().limits(limits).spawn().await
}

/// A tenant whose writes pile up gets 503 `busy` with `Retry-After` for what does not fit in its
/// queue, at once, and for what waited too long; other tenants' writes go on meanwhile.
#[tokio::test]
async fn a_hot_tenants_writes_queue_per_tenant_and_overflow_is_busy() {
    let app = spawn_with(planfiles::http::Limits {
        write_queue_depth: 4,
        queue_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    })
    .await;
    let lock = common::hold_write_lock(&app.repo("globex"));
    let hot = common::token("globex", common::ALL);
    let started = std::time::Instant::now();
    let answers: Vec<(u16, Option<String>, std::time::Duration)> =
        futures_util::future::join_all((0..20).map(|i| {
            let (app, hot) = (&app, &hot);
            async move {
                let res = app
                    .put_integration(hot, &serde_json::json!({"content": {"n": i}}))
                    .await;
                let retry = res
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_owned());
                (res.status().as_u16(), retry, started.elapsed())
            }
        }))
        .await;
    let quick_busy = answers
        .iter()
        .filter(|(s, r, t)| *s == 503 && r.is_some() && *t < std::time::Duration::from_secs(1))
        .count();
    assert!(
        quick_busy >= 16,
        "the writes past a queue of 4 are refused at once: {answers:?}"
    );
    // Meanwhile another tenant writes as usual.
    let other = common::token("acme", common::ALL);
    let t = std::time::Instant::now();
    let res = app
        .put_integration(&other, &serde_json::json!({"content": {"ok": true}}))
        .await;
    assert_eq!(res.status(), 200);
    assert!(t.elapsed() < std::time::Duration::from_secs(1));
    drop(lock);
    // Once the lock is free, the tenant writes again.
    let res = app
        .put_integration(&hot, &serde_json::json!({"content": {"after": 1}}))
        .await;
    assert_eq!(res.status(), 200);
    app.fsck("globex");
}

/// A client that retries a refused write at once, ignoring `Retry-After`, is paced: each
/// refusal for a full queue takes a quarter second, so one connection's retry loop makes a
/// few requests a second instead of thousands that would take the CPU from other tenants.
#[tokio::test]
async fn retrying_at_once_into_a_full_queue_is_paced() {
    let app = spawn_with(planfiles::http::Limits {
        write_queue_depth: 1,
        queue_timeout: std::time::Duration::from_secs(5),
        ..Default::default()
    })
    .await;
    let lock = common::hold_write_lock(&app.repo("globex"));
    let hot = common::token("globex", common::ALL);
    // One write takes the queue's only place and waits on the lock.
    let first_body = serde_json::json!({"content": {"first": 1}});
    let queued = app.put_integration(&hot, &first_body);
    let retry_loop = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        let mut refused = 0;
        while started.elapsed() < std::time::Duration::from_secs(1) {
            let res = app
                .put_integration(&hot, &serde_json::json!({"content": {"retry": refused}}))
                .await;
            assert_eq!(res.status(), 503);
            assert!(res.headers().contains_key("retry-after"));
            refused += 1;
        }
        refused
    };
    let (first, refused) = tokio::join!(
        async {
            let res = queued.await;
            res.status().as_u16()
        },
        async {
            let n = retry_loop.await;
            drop(lock);
            n
        }
    );
    assert!(
        (2..=5).contains(&refused),
        "a retry loop on one connection made {refused} requests in 1 s"
    );
    assert_eq!(first, 200, "the queued write lands once the lock is free");
}

/// Sends the head of a PUT that declares `length` bytes, and then `sent` of them.
async fn start_put(
    app: &TestApp,
    tenant: &str,
    length: usize,
    sent: usize,
) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let host = app.addr.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "PUT /plans/integration-file HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
        common::token(tenant, common::ALL)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; sent]).await.unwrap();
    stream
}

/// Reads a raw HTTP response's status (or 0 when the connection closed without one).
async fn status_of(stream: &mut tokio::net::TcpStream) -> u16 {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// One tenant's stalled bodies hold at most its share of the body budget: another tenant's
/// PUT is read at once. And a body that trickles is cut off by the minimum rate (408) long
/// before the total body timeout.
#[tokio::test]
async fn stalled_bodies_of_one_tenant_hold_only_its_share_and_are_cut_off() {
    let app = spawn_with(planfiles::http::Limits {
        queue_timeout: std::time::Duration::from_secs(1),
        body_pace: planfiles::http::BodyPace {
            total: std::time::Duration::from_secs(60),
            min_bytes_per_sec: 8 * 1024,
        },
        ..Default::default()
    })
    .await;
    // 16 bodies of 1 MiB declared would take the whole 16 MiB budget.
    let mut stalled = Vec::new();
    for _ in 0..16 {
        stalled.push(start_put(&app, "globex", 1 << 20, 10).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // Another tenant's PUT of a body as large as the limit (1 MiB of JSON and spaces).
    let t = std::time::Instant::now();
    let mut body = serde_json::to_vec(&serde_json::json!({"content": {"ok": true}})).unwrap();
    body.resize(1 << 20, b' ');
    let res = app
        .client
        .put(app.url("/plans/integration-file"))
        .bearer_auth(common::token("acme", common::ALL))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(1),
        "another tenant's PUT waited {:?}",
        t.elapsed()
    );
    // Those past the tenant's 4 MiB share were refused (503) after the queue timeout; the
    // others are cut off once they fall below 8 KiB/s after the 5 s grace.
    let t = std::time::Instant::now();
    let mut statuses = Vec::new();
    for s in stalled.iter_mut() {
        statuses.push(status_of(s).await);
    }
    statuses.sort();
    assert_eq!(
        statuses.iter().filter(|s| **s == 408).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 503).count(),
        13,
        "{statuses:?}"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(8),
        "slow bodies were cut off after {:?}",
        t.elapsed()
    );
}

#[path = "../../benches/isolation/attacks.rs"]
mod attacks;

/// The short form of `cargo bench --bench isolation`: under each noisy-neighbour attack on
/// other tenants, every request of the victim tenant finishes within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_each_attack_the_victims_requests_finish_within_2_s() {
    let app = TestApp::spawn().await;
    let big_commit = attacks::make_big(&app.repo("initech"), 6);
    let resume_from = attacks::make_deep(&app.repo("globex"), 1_000);
    let target = attacks::Target {
        host: app.addr.trim_start_matches("http://").to_owned(),
        hot_token: common::token("globex", common::ALL),
        big_tenant: "initech".into(),
        big_token: common::token(
            "initech",
            &["planfiles.repos.read", "jit.integrations.read"],
        ),
        big_commit,
        resume_from,
        resumers: 100,
    };
    let victim = attacks::Victim {
        base: app.addr.clone(),
        token: common::token("acme", common::ALL),
        client: reqwest::Client::new(),
    };
    for attack in attacks::Attack::ALL {
        let running = attacks::start(attack, &target);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        for n in 0..10 {
            let round = tokio::time::timeout(std::time::Duration::from_secs(6), victim.round(n))
                .await
                .unwrap_or_else(|_| panic!("{}: a victim round hung", attack.label()))
                .unwrap_or_else(|e| panic!("{}: {e}", attack.label()));
            assert!(
                round.iter().all(|d| *d < std::time::Duration::from_secs(2)),
                "{}: victim PUT, GET miss, GET hit took {round:?}",
                attack.label()
            );
        }
        let sent = running.stop();
        assert!(sent > 0, "{}: the attack sent nothing", attack.label());
    }
    app.fsck("acme");
}

/// Parsing and rendering a large stored file (a `?ref=` read) happens off the async workers:
/// while two such reads run, requests on the same workers are answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_ref_reads_do_not_stall_the_workers() {
    let app = TestApp::spawn().await;
    let commit = attacks::make_big(&app.repo("initech"), 0);
    let t = common::token("initech", &["jit.integrations.read"]);
    let read = || {
        let client = reqwest::Client::new();
        let url = app.url(&format!("/plans/integration-file?ref={commit}"));
        let t = t.clone();
        async move {
            let started = std::time::Instant::now();
            let res = client.get(url).bearer_auth(t).send().await.unwrap();
            assert_eq!(res.status(), 200);
            res.bytes().await.unwrap();
            started.elapsed()
        }
    };
    let alone = read().await;
    let readers = [tokio::spawn(read()), tokio::spawn(read())];
    tokio::time::sleep(alone / 4).await;
    // New connections, spread over the server's two workers.
    let mut slowest = std::time::Duration::ZERO;
    for _ in 0..4 {
        let started = std::time::Instant::now();
        let res = reqwest::Client::new()
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        slowest = slowest.max(started.elapsed());
    }
    for r in readers {
        r.await.unwrap();
    }
    assert!(
        slowest < alone / 3,
        "/healthz took {slowest:?} while reads of {alone:?} each ran"
    );
}

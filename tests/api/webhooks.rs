//! Webhooks on the real server, delivered to a real receiver (tests/common/receiver.rs) that checks every signature: order and completeness against `git rev-list`, plain git's commits and resets, retries then `failing` then resume, refused destinations, the endpoints' errors.
use crate::common::receiver::{Mode, Receiver};
use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// The events `main`'s first-parent line holds after `from`, oldest first: (commit, type).
fn expected_events(app: &TestApp, tenant: &str, from: &str) -> Vec<(String, String)> {
    let repo = app.repo(tenant);
    let commits = git_in(
        &repo,
        &[
            "rev-list",
            "--first-parent",
            "--reverse",
            &format!("{from}..main"),
        ],
    );
    let mut out = Vec::new();
    for c in commits.lines() {
        let changed = git_in(
            &repo,
            &[
                "diff-tree",
                "--no-commit-id",
                "--name-only",
                "-r",
                &format!("{c}^"),
                c,
            ],
        );
        for (path, kind) in [
            ("integrations.yml", "integration-file.updated"),
            ("configuration.yml", "configuration-file.updated"),
        ] {
            if changed.lines().any(|l| l == path) {
                out.push((c.to_owned(), kind.to_owned()));
            }
        }
    }
    out
}

/// CPU time (ms) of the `planfiles-webhooks` threads of process `pid`.
fn dispatcher_cpu(pid: u32) -> u64 {
    let mut ticks = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let Some((name, rest)) = stat.split_once(") ") else {
            continue;
        };
        if name.ends_with("planfiles-webho") {
            let fields: Vec<&str> = rest.split(' ').collect();
            ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        }
    }
    ticks * 10
}

async fn subscribe(app: &TestApp, rx: &Receiver, path: &str, extra: Value) -> Value {
    let mut body = json!({"url": rx.url(path), "description": "tests"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let res = app.create_webhook(&webhooks_token("acme"), &body).await;
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    let created: Value = res.json().await.unwrap();
    assert_eq!(
        location,
        format!("/plans/webhooks/{}", created["id"].as_str().unwrap())
    );
    rx.set_secret(path, created["secret"].as_str().unwrap());
    created
}

async fn put_conf(app: &TestApp, t: &str, folder: &str) -> String {
    let sha = app.blob("acme", "configuration.yml");
    let res = app
        .put_configuration(
            t,
            &json!({"payload": {"folders": [{"path": folder}]}, "file_sha": sha}),
        )
        .await;
    assert_eq!(res.status(), 200);
    res.headers()["x-request-id"].to_str().unwrap().to_owned()
}

/// Every acknowledged write (one file, both files in one commit) and a plain-git commit
/// reach the receiver signed, once each, in `main`'s order; a subscription that asked for
/// one event type gets only those; the deliveries log says what happened.
#[tokio::test]
async fn every_commit_reaches_the_receiver_signed_in_order_plain_git_too() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let start = app.head("acme");
    let all = subscribe(&app, &rx, "/hook/all", json!({})).await;
    subscribe(
        &app,
        &rx,
        "/hook/conf",
        json!({"events": ["configuration-file.updated"]}),
    )
    .await;
    let t = token("acme", ALL);
    let mut request_ids = Vec::new();
    for n in 0..3 {
        let res = app
            .put_integration(
                &t,
                &json!({"content": {"github": {"org": format!("o{n}")}}}),
            )
            .await;
        assert_eq!(res.status(), 200);
        request_ids.push(res.headers()["x-request-id"].to_str().unwrap().to_owned());
        request_ids.push(put_conf(&app, &t, &format!("f{n}")).await);
    }
    let both = app
        .post_commits(&t, "", &json!({
            "integration-file": {"content": {"aws": []}},
            "configuration-file": {"payload": {"folders": []}, "file_sha": app.blob("acme", "configuration.yml")},
        }))
        .await;
    assert_eq!(both.status(), 200);
    let plain = app.outside_commit("acme", "integrations.yml", "plain: git\n");
    let want = expected_events(&app, "acme", &start);
    assert_eq!(
        want.len(),
        9,
        "3 + 3 PUTs, a commit of both, one plain-git commit"
    );

    let got = rx
        .wait_for("/hook/all", want.len(), Duration::from_secs(30))
        .await;
    assert!(got.iter().all(|d| d.verified), "every signature checks out");
    let seen: Vec<(String, String)> = got
        .iter()
        .map(|d| (d.commit().to_owned(), d.kind().to_owned()))
        .collect();
    assert_eq!(seen, want, "in main's order, no gap, no repeat");
    let ids: std::collections::HashSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids.len(), got.len(), "one webhook-id per event");
    let first = &got[0].body;
    assert_eq!(first["data"]["tenant"], "acme");
    assert_eq!(first["data"]["file"], "integration-file");
    assert_eq!(first["data"]["request_id"], request_ids[0].as_str());
    assert_eq!(first["data"]["author"]["name"], "Test Er");
    assert_eq!(
        first["data"]["forced"], true,
        "a PUT without file_sha is a forced write"
    );
    let file_sha = git_in(
        &app.repo("acme"),
        &[
            "rev-parse",
            &format!("{}:integrations.yml", got[0].commit()),
        ],
    );
    assert_eq!(first["data"]["file_sha"], file_sha.as_str());
    let last = &got.last().unwrap().body;
    assert_eq!(last["data"]["commit_sha"], plain.as_str());
    assert_eq!(
        last["data"]["request_id"],
        Value::Null,
        "plain git has none"
    );

    let conf_only: Vec<(String, String)> = want
        .iter()
        .filter(|(_, k)| k == "configuration-file.updated")
        .cloned()
        .collect();
    let got = rx
        .wait_for("/hook/conf", conf_only.len(), Duration::from_secs(30))
        .await;
    let seen: Vec<(String, String)> = got
        .iter()
        .map(|d| (d.commit().to_owned(), d.kind().to_owned()))
        .collect();
    assert_eq!(seen, conf_only);

    // The receiver records a delivery before it answers; the dispatcher logs the attempt only
    // once its cursor has moved durably after that answer: the log may lag a little.
    let id = all["id"].as_str().unwrap();
    let log = until(Duration::from_secs(30), || async {
        let log: Value = app
            .webhook_deliveries(&webhooks_token("acme"), id, "?limit=3")
            .await
            .json()
            .await
            .unwrap();
        let log = log["deliveries"].as_array().unwrap().clone();
        (log.first()
            .is_some_and(|d| d["commit_sha"] == plain.as_str()))
        .then_some(log)
    })
    .await
    .expect("the plain-git commit's delivery in the log");
    assert_eq!(log.len(), 3);
    assert_eq!(log[0]["commit_sha"], plain.as_str(), "newest first");
    assert_eq!(log[0]["status"], 200);
    assert_eq!(log[0]["attempt"], 1);
    let delivered = format!(
        "planfiles_webhook_attempts_total{{outcome=\"delivered\"}} {}",
        want.len() + conf_only.len()
    );
    let counted = until(Duration::from_secs(30), || async {
        app.metrics().await.contains(&delivered).then_some(())
    })
    .await;
    assert!(counted.is_some(), "{delivered}");
}

/// What `probe` gives once it gives something, asked every 20 ms for up to `within`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    within: Duration,
    probe: impl Fn() -> F,
) -> Option<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(found) = probe().await {
            return Some(found);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `main` moved back by plain git: `main.reset`, then what comes after the new head.
#[tokio::test]
async fn a_reset_main_sends_main_reset_and_goes_on_from_the_new_head() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let t = token("acme", ALL);
    let start = app.head("acme");
    subscribe(&app, &rx, "/hook/a", json!({})).await;
    put_conf(&app, &t, "one").await;
    rx.wait_for("/hook/a", 1, Duration::from_secs(20)).await;
    git_in(
        &app.repo("acme"),
        &["update-ref", "refs/heads/main", &start],
    );
    put_conf(&app, &t, "two").await;
    let got = rx.wait_for("/hook/a", 3, Duration::from_secs(20)).await;
    assert!(got.iter().all(|d| d.verified));
    assert_eq!(got[1].kind(), "main.reset");
    assert_eq!(got[1].body["data"]["commit_sha"], start.as_str());
    assert_eq!(got[1].body["data"]["previous_commit_sha"], got[0].commit());
    assert_eq!(got[2].kind(), "configuration-file.updated");
    assert_eq!(got[2].commit(), app.head("acme"));
}

/// A receiver answering 500: the attempts follow the schedule (1 s, 1 s), the subscription
/// is then `failing`; nothing after the failing event is sent meanwhile; `resume` delivers
/// the failed event and the rest, in order.
#[tokio::test]
async fn retries_follow_the_schedule_then_failing_then_resume_delivers_the_rest_in_order() {
    let rx = Receiver::start();
    rx.set_mode("/hook/a", Mode::Status(500));
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let t = token("acme", ALL);
    let w = webhooks_token("acme");
    let start = app.head("acme");
    let hook = subscribe(&app, &rx, "/hook/a", json!({})).await;
    let id = hook["id"].as_str().unwrap();
    put_conf(&app, &t, "one").await;
    put_conf(&app, &t, "two").await;
    let started = std::time::Instant::now();
    loop {
        let state: Value = app.webhook(&w, id).await.json().await.unwrap();
        if state["state"] == "failing" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never failing: {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tried = rx.deliveries("/hook/a");
    assert_eq!(tried.len(), 3, "one attempt and two retries: {tried:?}");
    assert!(tried.iter().all(|d| d.id == tried[0].id && d.verified));
    for pair in tried.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(850) && gap < Duration::from_secs(3),
            "{gap:?}"
        );
    }
    let log: Value = app
        .webhook_deliveries(&w, id, "")
        .await
        .json()
        .await
        .unwrap();
    let attempts: Vec<(u64, Value)> = log["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["attempt"].as_u64().unwrap(), a["status"].clone()))
        .collect();
    assert_eq!(
        attempts,
        vec![(3, json!(500)), (2, json!(500)), (1, json!(500))]
    );
    assert_eq!(log["deliveries"][0]["detail"], "receiver says 500");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.deliveries("/hook/a").len(), 3, "a failing one waits");

    rx.set_mode("/hook/a", Mode::Ok);
    let res = app.resume_webhook(&w, id).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap()["state"], "active");
    let got = rx.wait_for("/hook/a", 2, Duration::from_secs(20)).await;
    let ok: Vec<(String, String)> = got
        .iter()
        .filter(|d| d.answered == 200)
        .map(|d| (d.commit().to_owned(), d.kind().to_owned()))
        .collect();
    assert_eq!(ok, expected_events(&app, "acme", &start));
    assert_eq!(got[3].id, got[0].id, "the same webhook-id on every attempt");
}

/// With the default rules, loopback, `http` and hosts not listed are refused at creation
/// (422, nothing stored, nothing sent); a redirect is not followed; a subscription made
/// under looser rules is refused at its next attempt, recorded, and never sent.
#[tokio::test]
async fn refused_destinations_are_422_or_recorded_and_never_contacted() {
    let rx = Receiver::start();
    let w = webhooks_token("acme");
    let strict = TestApp::spawn_with_webhooks(planfiles::config::WebhooksConfig {
        allowed_hosts: vec!["hooks.example.com".into()],
        ..Default::default()
    })
    .await;
    for url in [
        rx.url("/hook/a"),
        "https://127.0.0.1/x".to_owned(),
        "https://[::1]/x".into(),
        "https://localhost/x".into(),
        "https://169.254.169.254/latest/meta-data".into(),
        "http://hooks.example.com/x".into(),
        "https://other.example.com/x".into(),
    ] {
        let res = strict.create_webhook(&w, &json!({"url": url})).await;
        assert_eq!(res.status(), 422, "{url}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["code"], "webhook_url_refused", "{url}: {body}");
    }
    let none: Value = strict.webhooks(&w).await.json().await.unwrap();
    assert_eq!(none["webhooks"], json!([]));
    drop(strict);

    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let t = token("acme", ALL);
    rx.set_mode("/hook/r", Mode::Redirect);
    let redirected = subscribe(&app, &rx, "/hook/r", json!({})).await;
    put_conf(&app, &t, "one").await;
    let started = std::time::Instant::now();
    while rx.deliveries("/hook/r").is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        rx.deliveries("/redirected").is_empty(),
        "no redirect followed"
    );
    let log: Value = app
        .webhook_deliveries(&w, redirected["id"].as_str().unwrap(), "")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(log["deliveries"][0]["status"], 302);

    // The same data dir under the default rules: the loopback receiver is refused at each
    // attempt, before a byte is sent.
    let dir = app.stop().await;
    let before = rx.deliveries("/hook/r").len();
    let app = TestApp::with()
        .data_dir(dir)
        .webhooks(planfiles::config::WebhooksConfig {
            retry_schedule_secs: vec![1],
            ..Default::default()
        })
        .spawn()
        .await;
    let id = redirected["id"].as_str().unwrap();
    let started = std::time::Instant::now();
    let log = loop {
        let log: Value = app
            .webhook_deliveries(&w, id, "")
            .await
            .json()
            .await
            .unwrap();
        if log["deliveries"][0]["status"] == "refused" {
            break log;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let detail = log["deliveries"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("only https"), "{detail}");
    assert_eq!(rx.deliveries("/hook/r").len(), before, "nothing sent");
    assert!(app
        .metrics()
        .await
        .contains("planfiles_webhook_attempts_total{outcome=\"refused\"}"));
}

/// The endpoints: the permission, bad bodies, unknown ids, the limit; the secret is shown
/// once; a delete stops deliveries.
#[tokio::test]
async fn the_endpoints_refuse_what_they_must_and_show_the_secret_once() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(planfiles::config::WebhooksConfig {
        max_per_tenant: 2,
        ..local_webhooks()
    })
    .await;
    let w = webhooks_token("acme");
    let reader = token("acme", ALL);
    let url = rx.url("/hook/a");
    type Case = (&'static str, String, Value, u16, &'static str);
    let cases: Vec<Case> = vec![
        (
            "no permission",
            reader.clone(),
            json!({"url": url}),
            403,
            "insufficient_scope",
        ),
        ("no url", w.clone(), json!({}), 400, "invalid_body"),
        (
            "unknown field",
            w.clone(),
            json!({"url": url, "secret": "mine"}),
            400,
            "invalid_body",
        ),
        (
            "unknown event",
            w.clone(),
            json!({"url": url, "events": ["push"]}),
            400,
            "invalid_body",
        ),
        (
            "no event",
            w.clone(),
            json!({"url": url, "events": []}),
            400,
            "invalid_body",
        ),
        (
            "not a URL",
            w.clone(),
            json!({"url": "hooks"}),
            400,
            "invalid_body",
        ),
        (
            "credentials",
            w.clone(),
            json!({"url": "https://u:p@hooks.example.com/"}),
            400,
            "invalid_body",
        ),
        (
            "ftp",
            w.clone(),
            json!({"url": "ftp://hooks.example.com/"}),
            400,
            "invalid_body",
        ),
    ];
    for (name, token, body, status, code) in cases {
        let res = app.create_webhook(&token, &body).await;
        assert_eq!(res.status(), status, "{name}");
        assert_eq!(res.json::<Value>().await.unwrap()["code"], code, "{name}");
    }
    let created = subscribe(&app, &rx, "/hook/a", json!({})).await;
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"));
    let id = created["id"].as_str().unwrap();
    let listed = app.webhooks(&w).await.text().await.unwrap();
    assert!(listed.contains(id) && !listed.contains(secret), "{listed}");
    let one = app.webhook(&w, id).await.text().await.unwrap();
    assert!(!one.contains("secret"), "{one}");
    assert_eq!(app.webhooks(&reader).await.status(), 403);
    assert!(
        !app.git("acme", &["log", "--all", "-p"]).contains(secret),
        "no git object holds it"
    );
    subscribe(&app, &rx, "/hook/b", json!({})).await;
    let res = app.create_webhook(&w, &json!({"url": url})).await;
    assert_eq!(res.status(), 422);
    assert_eq!(
        res.json::<Value>().await.unwrap()["code"],
        "webhook_limit_reached"
    );
    for (res, status, code) in [
        (app.webhook(&w, "wh_nope").await, 404, "webhook_not_found"),
        (
            app.webhook(&w, "wh_aaaaaaaaaaaaaaaaaaaaaaaaaa").await,
            404,
            "webhook_not_found",
        ),
        (
            app.delete_webhook(&w, "WH_AAAAAAAAAAAAAAAAAAAAAAAAAA")
                .await,
            404,
            "webhook_not_found",
        ),
        (
            app.resume_webhook(&w, "wh_aaaaaaaaaaaaaaaaaaaaaaaaaa")
                .await,
            404,
            "webhook_not_found",
        ),
        (
            app.webhook_deliveries(&w, id, "?limit=0").await,
            400,
            "invalid_query",
        ),
        (
            app.webhook(&webhooks_token("nobody"), id).await,
            404,
            "tenant_not_found",
        ),
    ] {
        assert_eq!(res.status(), status);
        assert_eq!(res.json::<Value>().await.unwrap()["code"], code);
    }
    assert_eq!(app.delete_webhook(&w, id).await.status(), 204);
    assert_eq!(app.webhook(&w, id).await.status(), 404);
    put_conf(&app, &reader, "after").await;
    rx.wait_for("/hook/b", 1, Duration::from_secs(20)).await;
    assert!(
        rx.deliveries("/hook/a").is_empty(),
        "a removed subscription gets nothing"
    );
}

/// `kill -9` while deliveries run (the receiver takes 30 ms an event, so some are in flight):
/// after a restart every commit is delivered, in `main`'s order, and an event is repeated only
/// when it was in flight at the kill (the same `webhook-id`). The subscription is made with
/// the CLI; no log line names its secret.
#[tokio::test]
async fn kill_9_during_deliveries_skips_nothing() {
    use crate::common::process::{data_dir_with_fixture, planfiles, serve};
    let rx = Receiver::start();
    rx.set_mode("/hook/k", Mode::Slow(Duration::from_millis(30)));
    let dir = data_dir_with_fixture();
    let config = dir.path().join("hooks.toml");
    std::fs::write(
        &config,
        "[webhooks]\nallow_http = true\nallow_private_networks = true\nretry_schedule_secs = [1]\n",
    )
    .unwrap();
    let cli = |args: &[&str]| {
        let out = planfiles(dir.path())
            .env("PLANFILES_CONFIG", &config)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let added: Value =
        serde_json::from_str(&cli(&["webhook", "add", "acme", &rx.url("/hook/k")])).unwrap();
    let secret = added["secret"].as_str().unwrap().to_owned();
    rx.set_secret("/hook/k", &secret);
    let id = added["id"].as_str().unwrap().to_owned();
    assert!(cli(&["webhook", "list", "acme"]).contains(&id));
    let repo = dir.path().join("data/tenants/acme.git");
    let start = git_in(&repo, &["rev-parse", "main"]);
    let env = [("PLANFILES_CONFIG", config.to_str().unwrap())];
    let mut server = serve(dir.path(), &env);
    for n in 0..40 {
        let res = server.put_integration("acme", json!({"n": n})).await;
        assert_eq!(res.status(), 200);
    }
    while rx.deliveries("/hook/k").len() < 10 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill9();
    let before_kill = rx.deliveries("/hook/k").len();
    let server = serve(dir.path(), &env);
    for n in 40..50 {
        let res = server.put_integration("acme", json!({"n": n})).await;
        assert_eq!(res.status(), 200);
    }
    let want = integration_event_ids(&repo, "acme", &start);
    assert_eq!(want.len(), 50);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (firsts, total) = loop {
        let got = rx.deliveries("/hook/k");
        assert!(got.iter().all(|d| d.verified));
        let mut firsts: Vec<String> = Vec::new();
        for d in &got {
            if !firsts.contains(&d.id) {
                firsts.push(d.id.clone());
            }
        }
        if firsts.len() >= want.len() || std::time::Instant::now() > deadline {
            break (firsts, got.len());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(firsts, want, "every event, in main's order");
    assert!(
        total - want.len() <= 1,
        "{} repeats: only the event in flight at the kill may come twice",
        total - want.len()
    );
    assert!(
        before_kill < want.len(),
        "the kill came while deliveries ran"
    );
    let log = server.log.lock().unwrap().join("\n");
    assert!(!log.contains(&secret[6..]), "a log line names the secret");
    // Caught up, the dispatcher waits: its threads take (almost) no CPU.
    let before = dispatcher_cpu(server.pid());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spent = dispatcher_cpu(server.pid()) - before;
    assert!(
        spent < 50,
        "the idle dispatcher spent {spent} ms of CPU in a second"
    );
}

/// A backlog longer than a change stream's replay (10,000 commits, made by plain git at
/// once): every one is delivered, in order, with no `main.reset` (the line is walked as far
/// back as it goes).
#[tokio::test]
async fn a_backlog_of_more_than_ten_thousand_commits_is_delivered_whole() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let start = app.head("acme");
    subscribe(
        &app,
        &rx,
        "/hook/b",
        json!({"events": ["integration-file.updated", "main.reset"]}),
    )
    .await;
    fast_commits(&app.repo("acme"), 10_100, "integrations.yml");
    let got = rx
        .wait_for("/hook/b", 10_100, Duration::from_secs(240))
        .await;
    assert!(
        got.iter().all(|d| d.kind() == "integration-file.updated"),
        "no reset"
    );
    let want = integration_event_ids(&app.repo("acme"), "acme", &start);
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids.len(), want.len());
    assert!(
        ids.iter().zip(&want).all(|(a, b)| a == b),
        "in main's order"
    );
}

/// Plain git's housekeeping beside live deliveries: `git gc` (which packs refs and objects, and
/// prunes with git's default grace: `--prune=now` beside live writers is unsafe, as git's own
/// documentation says) and `git pack-refs --all` in a loop while 40 writes land; every event
/// arrives, in order.
#[tokio::test]
async fn deliveries_go_on_beside_git_gc() {
    let rx = Receiver::start();
    rx.set_mode("/hook/g", Mode::Slow(Duration::from_millis(5)));
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let start = app.head("acme");
    subscribe(
        &app,
        &rx,
        "/hook/g",
        json!({"events": ["integration-file.updated"]}),
    )
    .await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc = {
        let (repo, stop) = (app.repo("acme"), stop.clone());
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for args in [&["gc", "--quiet"][..], &["pack-refs", "--all"]] {
                    let _ = std::process::Command::new("git")
                        .arg("--git-dir")
                        .arg(&repo)
                        .args(args)
                        .output();
                }
                runs += 1;
            }
            runs
        })
    };
    let t = token("acme", ALL);
    for n in 0..40 {
        let res = app
            .put_integration(&t, &json!({"content": {"gc": n}}))
            .await;
        assert_eq!(res.status(), 200);
    }
    let got = rx.wait_for("/hook/g", 40, Duration::from_secs(60)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = gc.join().unwrap();
    assert!(runs > 0);
    let want = integration_event_ids(&app.repo("acme"), "acme", &start);
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, want, "{runs} gc runs beside");
}

/// A creation retried with its `Idempotency-Key` (its first answer lost) answers the first
/// subscription, secret included, with `Idempotent-Replayed: true`; the key with another body
/// is 422; one subscription is made.
#[tokio::test]
async fn a_creation_retried_with_its_key_makes_one_subscription() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let w = webhooks_token("acme");
    let create = |body: Value, key: &'static str| {
        app.client
            .post(app.url("/plans/webhooks"))
            .bearer_auth(&w)
            .header("Idempotency-Key", key)
            .json(&body)
    };
    let body = json!({"url": rx.url("/hook/k")});
    let first = create(body.clone(), "create-1").send().await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let again = create(body.clone(), "create-1").send().await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        (&again["id"], &again["secret"]),
        (&first["id"], &first["secret"])
    );
    let other = create(json!({"url": rx.url("/hook/other")}), "create-1")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 422);
    assert_eq!(
        other.json::<Value>().await.unwrap()["code"],
        "idempotency_key_reused"
    );
    let bad = create(body, "").send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let list: Value = app.webhooks(&w).await.json().await.unwrap();
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 1);
}

/// A tenant of 20 slow receivers (2 s an answer) with events to deliver holds its share of
/// the process's claims, not all of them: another tenant's event arrives within 3 s.
#[tokio::test]
async fn a_tenant_of_slow_receivers_leaves_the_others_their_turns() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(planfiles::config::WebhooksConfig {
        max_in_flight: 4,
        max_in_flight_per_tenant: 2,
        ..local_webhooks()
    })
    .await;
    let w = webhooks_token("acme");
    for i in 0..20 {
        let path = format!("/slow/{i}");
        rx.set_mode(&path, Mode::Slow(Duration::from_secs(2)));
        let res = app.create_webhook(&w, &json!({"url": rx.url(&path)})).await;
        assert_eq!(res.status(), 201);
    }
    let g = webhooks_token("globex");
    let res = app
        .create_webhook(&g, &json!({"url": rx.url("/fast")}))
        .await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    rx.set_secret("/fast", created["secret"].as_str().unwrap());
    for n in 0..3 {
        let res = app
            .put_integration(&token("acme", ALL), &json!({"content": {"slow": n}}))
            .await;
        assert_eq!(res.status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let res = app
        .put_integration(&token("globex", ALL), &json!({"content": {"fast": 1}}))
        .await;
    assert_eq!(res.status(), 200);
    rx.wait_for("/fast", 1, Duration::from_secs(3)).await;
}

/// The README's receiver (`scripts/webhook-receiver.py`, Python's standard library only)
/// verifies a real delivery and refuses one signed with another secret.
#[tokio::test]
async fn the_readmes_receiver_verifies_deliveries_with_the_standard_library_only() {
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/webhook-receiver.py");
    for (name, right_secret) in [("right", true), ("wrong", false)] {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let res = app
            .create_webhook(
                &webhooks_token("acme"),
                &json!({"url": format!("http://127.0.0.1:{port}/"), "description": name}),
            )
            .await;
        assert_eq!(res.status(), 201);
        let created: Value = res.json().await.unwrap();
        let secret = if right_secret {
            created["secret"].as_str().unwrap().to_owned()
        } else {
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned()
        };
        let mut rx = std::process::Command::new("python3")
            .args(["-I", "-S"]) // no site-packages at all: the standard library only
            .arg(&script)
            .arg(&secret)
            .arg(port.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let sha = app.blob("acme", "configuration.yml");
        let res = app
            .put_configuration(
                &token("acme", ALL),
                &json!({"payload": {"folders": [{"path": format!("readme-{name}")}]}, "file_sha": sha}),
            )
            .await;
        assert_eq!(res.status(), 200);
        let head = app.head("acme");
        if right_secret {
            let opened = app
                .propose(
                    &crate::common::token_as("acme", "ann", &["jit.preferences.write"]),
                    &json!({"configuration-file": {"payload": {"folders": []}, "file_sha": app.blob("acme", "configuration.yml")}, "title": "Proposed"}),
                )
                .await;
            assert_eq!(opened.status(), 201);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let hooks_token = webhooks_token("acme");
        let id = created["id"].as_str().unwrap().to_owned();
        let want = if right_secret { 2 } else { 1 };
        let attempt = loop {
            let log: Value = app
                .send(
                    "GET",
                    &format!("/plans/webhooks/{id}/deliveries"),
                    &hooks_token,
                    None,
                    &[],
                )
                .await
                .json()
                .await
                .unwrap();
            let found = log["deliveries"].as_array().cloned().unwrap_or_default();
            if found.len() >= want {
                // The commit's attempt (the log is newest first).
                break found[found.len() - 1].clone();
            }
            assert!(std::time::Instant::now() < deadline, "no attempt: {log}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        rx.kill().unwrap();
        let out = rx.wait_with_output().unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        if right_secret {
            assert_eq!(attempt["status"], 204, "{attempt}");
            assert!(
                printed.contains(&format!(
                    "verified configuration-file.updated {}",
                    &head[..12]
                )),
                "{printed}"
            );
            assert!(
                printed.contains("verified proposal.opened ") && printed.contains(" #1 by ann"),
                "a proposal's step, which names no commit or file: {printed}"
            );
        } else {
            assert_eq!(attempt["status"], 401, "{attempt}");
            assert!(
                printed.contains("refused: no signature matches"),
                "{printed}"
            );
        }
        let res = app
            .send(
                "DELETE",
                &format!("/plans/webhooks/{id}"),
                &hooks_token,
                None,
                &[],
            )
            .await;
        assert_eq!(res.status(), 204);
    }
}

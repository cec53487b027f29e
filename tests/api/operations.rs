//! Operations: health, readiness, metrics, graceful shutdown, and the configuration docs.
use crate::common;

use common::process::{data_dir_with_fixture, serve};
use common::{git_in, problem, token, TestApp, ALL};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[tokio::test]
async fn health_and_readiness_need_no_token() {
    let app = TestApp::spawn().await;
    let res = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let res = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    // Without its tenants directory the service is not ready, but still alive.
    let tenants = app.data_dir.path().join("tenants");
    std::fs::rename(&tenants, app.data_dir.path().join("moved")).unwrap();
    let (status, body) = problem(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("not_ready")));
    assert_eq!(
        app.client
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    std::fs::rename(app.data_dir.path().join("moved"), &tenants).unwrap();
    assert_eq!(
        app.client
            .get(app.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_count_requests_commits_conflicts_and_forced_writes() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    assert_eq!(app.get_integration(&t).await.status(), 200);
    let sha = app.blob("acme", "integrations.yml");
    assert_eq!(
        app.put_integration(&t, &json!({"content": {"a": 1}, "file_sha": sha}))
            .await
            .status(),
        200
    );
    assert_eq!(
        app.put_integration(&t, &json!({"content": {"a": 2}, "file_sha": sha}))
            .await
            .status(),
        409
    );
    assert_eq!(
        app.put_integration(&t, &json!({"content": {"a": 3}}))
            .await
            .status(),
        200
    );
    let res = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = res.text().await.unwrap();
    let req = |m: &str, s: &str| {
        metric(&text, &format!("planfiles_http_requests_total{{method=\"{m}\",route=\"/plans/integration-file\",status=\"{s}\"}}"))
    };
    assert_eq!(req("GET", "200"), 1.0, "{text}");
    assert_eq!(req("PUT", "200"), 2.0);
    assert_eq!(req("PUT", "409"), 1.0);
    assert_eq!(
        metric(&text, "planfiles_commits_total{file=\"integration\"}"),
        2.0
    );
    assert_eq!(
        metric(&text, "planfiles_forced_writes_total{file=\"integration\"}"),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "planfiles_conflicts_total{file=\"integration\",status=\"409\"}"
        ),
        1.0
    );
    assert!(text.contains("planfiles_http_request_duration_seconds_bucket"));
}

#[tokio::test]
async fn metrics_can_require_a_token() {
    let app = TestApp::with().metrics_require_token().spawn().await;
    let (status, _) = problem(app.client.get(app.url("/metrics")).send().await.unwrap()).await;
    assert_eq!(status, 401);
    let res = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth(token("acme", ALL))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let res = app
        .client
        .get(app.url("/metrics"))
        .bearer_auth(token("acme", &["planfiles.metrics.read"]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// `/healthz` names the process: the same instance on every call, another after a restart
/// (what `tenant move` reads to know that an import under way ended with its target).
#[tokio::test]
async fn healthz_names_the_instance_and_a_restart_changes_it() {
    let dir = data_dir_with_fixture();
    let instance = |server: &common::process::Server| {
        let url = server.url("/healthz");
        async move {
            let body: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
            assert_eq!(body["status"], "ok");
            body["instance"].as_str().unwrap().to_owned()
        }
    };
    let mut first = serve(dir.path(), &[]);
    let id = instance(&first).await;
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(instance(&first).await, id, "the same process");
    first.stop("TERM");
    let second = serve(dir.path(), &[]);
    assert_ne!(instance(&second).await, id, "a restart");
}

/// SIGTERM with `server.drain_secs`: `/readyz` answers 503 at once while the service goes on
/// serving reads and writes on new connections (a load balancer polling `/readyz` stops
/// sending meanwhile); then the listener closes and the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_with_readiness_503_before_the_listener_closes() {
    let dir = data_dir_with_fixture();
    let config = dir.path().join("drain.toml");
    std::fs::write(&config, "[server]\ndrain_secs = 2\n").unwrap();
    let mut cmd = common::process::planfiles(dir.path());
    cmd.arg("--config").arg(&config);
    let mut server = common::process::serve_command(cmd);
    let client = reqwest::Client::new();
    let ready = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    server.signal("TERM");
    let signalled = Instant::now();
    // Readiness turns at once (the first probe within 1 s), each probe on a new connection.
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let status = loop {
        let res = fresh().get(server.url("/readyz")).send().await.unwrap();
        if res.status() != 200 || signalled.elapsed() > Duration::from_secs(1) {
            break res.status();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(status, 503, "readiness after SIGTERM");
    assert!(signalled.elapsed() < Duration::from_secs(1));
    // Still serving, on new connections: a write and a read.
    let res = fresh()
        .put(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .json(&json!({"content": {"during": "drain"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "a write while draining");
    let res = fresh()
        .get(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "a read while draining");
    assert!(signalled.elapsed() < Duration::from_millis(1500));
    let host = server.addr.trim_start_matches("http://").to_owned();
    let refused =
        tokio::task::spawn_blocking(move || refused_within(&host, Duration::from_secs(10)))
            .await
            .unwrap();
    let closed = signalled.elapsed();
    let status = tokio::task::spawn_blocking(move || server.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        closed >= Duration::from_secs(2) && closed < Duration::from_secs(5),
        "the listener closed {closed:?} after SIGTERM (drain_secs = 2)"
    );
    eprintln!(
        "drain: readiness 503 at once, listener closed after {closed:?} ({refused:?} of polling)"
    );
}

/// Connects to `host` until a connection is refused and returns how long that took; fails
/// once `bound` has passed. A connection still accepted is closed at once, so that it does not
/// hold the shutdown up.
fn refused_within(host: &str, bound: Duration) -> Duration {
    let addr: std::net::SocketAddr = host.parse().unwrap();
    let started = Instant::now();
    loop {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Err(_) => return started.elapsed(),
            Ok(accepted) => drop(accepted),
        }
        assert!(
            started.elapsed() < bound,
            "new connections were still accepted {bound:?} after the signal"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM while writes are in flight: every request the writers started ends in a response
/// (as many 200s as requests sent), each acknowledged commit is in `main`, new connections are
/// refused, and the process exits 0. The tenant's write lock is held across the signal (as
/// another planfiles process would hold it), so that each writer has a request in the server
/// when the signal comes, and those are answered after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_during_writes_finishes_in_flight_requests_and_exits_0() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    const WRITERS: usize = 6;
    let dir = data_dir_with_fixture();
    let mut server = serve(dir.path(), &[]);
    let host = server.addr.trim_start_matches("http://").to_owned();
    let repo = dir.path().join("data/tenants/acme.git");
    let stopping = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let addr = server.addr.clone();
        let (stopping, in_flight) = (stopping.clone(), in_flight.clone());
        writers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let t = token("acme", ALL);
            let mut sent = 0;
            let mut answered = Vec::new();
            while !stopping.load(SeqCst) {
                sent += 1;
                in_flight.fetch_add(1, SeqCst);
                let res = client
                    .put(format!("{addr}/plans/integration-file"))
                    .bearer_auth(&t)
                    .json(&json!({"content": {"w": w, "i": sent}}))
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("writer {w}: request {sent} got no response: {e}"));
                let status = res.status();
                let body: Value = res
                    .json()
                    .await
                    .unwrap_or_else(|e| panic!("writer {w}: response {sent} was cut off: {e}"));
                in_flight.fetch_sub(1, SeqCst);
                assert_eq!(status, 200, "writer {w}: {body}");
                let commit = body["commit_sha"].as_str().unwrap().to_owned();
                answered.push((commit, Instant::now()));
            }
            (sent, answered)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lock_path = repo.join("planfiles-write.lock");
    let lock = tokio::task::spawn_blocking(move || {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_path)
            .unwrap();
        lock.lock().unwrap();
        lock
    })
    .await
    .unwrap();
    // Each writer's next request now waits in the server for the lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_flight.load(SeqCst) < WRITERS {
        assert!(
            Instant::now() < deadline,
            "{} of {WRITERS} writers have a request in flight (did one fail?)",
            in_flight.load(SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for the server to read the last of them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stopping.store(true, SeqCst);
    server.signal("TERM");
    let signalled = Instant::now();
    let refused =
        tokio::task::spawn_blocking(move || refused_within(&host, Duration::from_secs(10)))
            .await
            .unwrap();
    // The requests in flight are still waiting: let them go.
    drop(lock);
    let status = tokio::task::spawn_blocking(move || server.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    let (mut requests, mut after_signal) = (0, 0);
    for w in writers {
        let (sent, answered) = w.await.unwrap();
        assert_eq!(answered.len(), sent, "requests sent vs responses");
        requests += sent;
        after_signal += answered.iter().filter(|(_, at)| *at > signalled).count();
        for (commit, _) in answered {
            assert!(
                common::git_succeeds(&repo, &["merge-base", "--is-ancestor", &commit, "main"]),
                "acknowledged {commit} missing after shutdown"
            );
        }
    }
    eprintln!(
        "{requests} requests, {requests} responses, {after_signal} answered after SIGTERM; \
         new connections refused after {refused:?}"
    );
    assert_eq!(
        after_signal, WRITERS,
        "each writer's request in flight at the signal is answered after it"
    );
    git_in(&repo, &["fsck", "--strict", "--no-dangling"]);
}

/// The configuration reference (docs/OPERATIONS.md) and `config.toml` list the same keys.
#[test]
fn the_configuration_reference_matches_config_toml() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let reference = std::fs::read_to_string(root.join("docs/OPERATIONS.md")).unwrap();
    let section = reference.split("\n## Configuration\n").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    let documented: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(k, _)| k.to_owned()))
        .filter(|k| k.contains('.') && !k.starts_with("PLANFILES_"))
        .collect();
    // Keys present in config.toml, including those shown commented out.
    let text = std::fs::read_to_string(root.join("config.toml")).unwrap();
    let mut keys = BTreeSet::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_owned();
            continue;
        }
        let line = line
            .strip_prefix("# ")
            .filter(|l| l.contains(" = \"") || l.contains(" = "))
            .unwrap_or(line);
        if let Some((key, _)) = line.split_once(" = ") {
            if !key.contains(' ') && !key.starts_with('#') {
                keys.insert(format!("{section}.{key}"));
            }
        }
    }
    assert_eq!(
        documented, keys,
        "docs/OPERATIONS.md configuration table vs config.toml"
    );
    // config.toml holds the built-in defaults (the commented-out keys default to none).
    let mut file = planfiles::config::Config::from_file(&root.join("config.toml")).unwrap();
    // The file names the folder (so a missing one stops the start); the value is the default.
    assert!(file.validation.schemas_dir_set);
    file.validation.schemas_dir_set = false;
    assert_eq!(
        file,
        planfiles::config::Config::default(),
        "config.toml vs built-in defaults"
    );
    // And the reference's default column gives each key's value in config.toml.
    let values: std::collections::BTreeMap<String, String> = {
        let mut section = String::new();
        let mut out = std::collections::BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = s.to_owned();
            } else if let Some((key, value)) = line.split_once(" = ") {
                if !line.starts_with('#') {
                    out.insert(format!("{section}.{key}"), value.to_owned());
                }
            }
        }
        out
    };
    let reference_section = reference.split("\n## Configuration\n").nth(1).unwrap();
    for line in reference_section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, key, default, ..] = cells[..] else {
            continue;
        };
        let key = key.trim_matches('`');
        let Some(value) = values.get(key) else {
            continue;
        };
        if key == "auth.secret" {
            assert_eq!(default, "demo value");
            continue;
        }
        assert_eq!(
            default.trim_matches('`'),
            value,
            "docs/OPERATIONS.md default of {key}"
        );
    }
}

/// `/openapi.json` is a valid OpenAPI 3.1 document that covers every endpoint, header and code.
#[tokio::test]
async fn openapi_document_is_valid_and_complete() {
    let app = TestApp::spawn().await;
    let res = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    for (path, methods) in [
        ("/plans/integration-file", &["get", "put"][..]),
        ("/plans/configuration-file", &["get", "put"][..]),
        ("/healthz", &["get"][..]),
        ("/readyz", &["get"][..]),
        ("/metrics", &["get"][..]),
        ("/openapi.json", &["get"][..]),
        ("/plans/integration-file/history", &["get"][..]),
        ("/plans/configuration-file/history", &["get"][..]),
        ("/git/{repo}/info/refs", &["get"][..]),
        ("/git/{repo}/git-upload-pack", &["post"][..]),
        ("/git/{repo}/git-receive-pack", &["post"][..]),
        ("/plans/events", &["get"][..]),
        ("/plans/events/tickets", &["post"][..]),
        ("/plans/commits", &["post"][..]),
        ("/plans/integration-file/restore", &["post"][..]),
        ("/plans/configuration-file/restore", &["post"][..]),
        ("/plans/integration-file/diff", &["get"][..]),
        ("/plans/configuration-file/diff", &["get"][..]),
    ] {
        for m in methods {
            assert!(doc["paths"][path][m].is_object(), "{m} {path} missing");
        }
    }
    // Every write documents its key, its dry run and the problems a write can answer.
    for (path, method) in [
        ("/plans/integration-file", "put"),
        ("/plans/configuration-file", "put"),
        ("/plans/commits", "post"),
        ("/plans/integration-file/restore", "post"),
        ("/plans/configuration-file/restore", "post"),
    ] {
        let op = &doc["paths"][path][method];
        let params: Vec<&str> = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for name in ["Idempotency-Key", "dry_run", "X-Request-Id"] {
            assert!(params.contains(&name), "{method} {path}: {name}");
        }
        for status in [
            "200", "400", "401", "403", "404", "408", "409", "412", "413", "415", "422", "500",
            "503", "507",
        ] {
            assert!(
                op["responses"][status].is_object(),
                "{method} {path}: {status}"
            );
        }
        let has_428 = op["responses"]["428"].is_object();
        assert_eq!(
            has_428,
            !path.starts_with("/plans/integration-file"),
            "{method} {path}: 428"
        );
    }
    let events = &doc["paths"]["/plans/events"]["get"];
    assert!(
        events["responses"]["200"]["content"]["text/event-stream"].is_object(),
        "the stream's media type"
    );
    for status in ["400", "401", "403", "503"] {
        assert!(events["responses"][status].is_object(), "events: {status}");
    }
    let get = &doc["paths"]["/plans/integration-file"]["get"];
    assert!(
        get["responses"]["304"]["headers"]["ETag"].is_object(),
        "the 304"
    );
    let put = &doc["paths"]["/plans/configuration-file"]["put"];
    for status in [
        "200", "400", "401", "403", "404", "409", "412", "413", "415", "422", "428", "503", "507",
    ] {
        assert!(
            put["responses"][status].is_object(),
            "PUT configuration: {status} undocumented"
        );
    }
    assert!(put["responses"]["200"]["headers"]["ETag"].is_object());
    let params: Vec<&str> = put["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(params.contains(&"If-Match") && params.contains(&"X-Request-Id"));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // Every problem code the service answers is in docs/API.md's table.
    let api_doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/API.md"),
    )
    .unwrap();
    for code in [
        "invalid_json",
        "invalid_file_sha",
        "file_sha_not_allowed",
        "unauthorized",
        "invalid_token",
        "insufficient_scope",
        "tenant_not_found",
        "not_found",
        "method_not_allowed",
        "sha_mismatch",
        "precondition_failed",
        "payload_too_large",
        "unsupported_media_type",
        "invalid_content",
        "precondition_required",
        "internal_error",
        "busy",
        "storage_full",
        "not_ready",
        "unknown_ref",
        "invalid_idempotency_key",
        "idempotency_key_in_flight",
        "idempotency_key_reused",
        "schema_violation",
    ] {
        assert!(
            api_doc.contains(&format!("`{code}`")),
            "{code} not documented"
        );
    }
    // A real validator, where one is installed (CI installs it).
    let path = app.data_dir.path().join("openapi.json");
    std::fs::write(&path, &text).unwrap();
    if !common::python_has(&["openapi_spec_validator"]) {
        return;
    }
    let out = std::process::Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "invalid OpenAPI: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `line` is the one line a request logs, in either format.
fn is_request_line(line: &str) -> bool {
    match serde_json::from_str::<Value>(line) {
        Ok(v) => v["message"] == "request",
        Err(_) => line.contains(" request ") && line.contains("status="),
    }
}

/// Tokens and the JWT secret never reach the log, in text or JSON format, whatever the request.
#[tokio::test]
async fn tokens_and_secrets_never_appear_in_logs() {
    for format in ["json", "text"] {
        let dir = data_dir_with_fixture();
        let mut server = serve(
            dir.path(),
            &[("PLANFILES_LOG_FORMAT", format), ("PLANFILES_LOG", "trace")],
        );
        let client = reqwest::Client::new();
        let good = token("acme", ALL);
        let forged = format!("{}x", &good[..good.len() - 1]);
        let expired = common::sign_hs256(
            common::SECRET,
            &json!({"alg": "HS256"}),
            &json!({"tenant_id": "acme", "exp": 1, "permissions": ALL}),
        );
        for t in [&good, &forged, &expired] {
            let _ = client
                .get(server.url("/plans/integration-file"))
                .bearer_auth(t)
                .send()
                .await
                .unwrap();
            let _ = client
                .put(server.url("/plans/integration-file"))
                .bearer_auth(t)
                .json(&json!({"content": {"a": 1}}))
                .send()
                .await
                .unwrap();
            let _ = client
                .get(server.url(&format!("/plans/integration-file?access_token={t}")))
                .send()
                .await
                .unwrap();
            let _ = client
                .get(server.url("/metrics"))
                .bearer_auth(t)
                .send()
                .await
                .unwrap();
        }
        // Every line is written and read once the process has exited.
        let status = tokio::task::spawn_blocking(move || {
            let status = server.stop("TERM");
            (status, server)
        })
        .await
        .unwrap();
        let (status, server) = status;
        assert_eq!(status.code(), Some(0));
        let log = server.log.lock().unwrap().join("\n");
        let request_lines = server
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| is_request_line(l))
            .count();
        assert_eq!(request_lines, 12, "{format}: one line per request: {log}");
        if format == "text" {
            // Text lines quote string fields, as log shippers' logfmt parsers expect.
            assert!(log.contains(r#"tenant="acme""#), "{log}");
        }
        // A JWT's signature alone identifies it; its header and payload are shared with others.
        for t in [&good, &forged, &expired] {
            let signature = t.rsplit('.').next().unwrap();
            assert!(
                !log.contains(signature),
                "{format}: a token signature is in the log"
            );
        }
        assert!(
            !log.contains(common::SECRET),
            "{format}: the JWT secret is in the log"
        );
        assert!(
            !log.contains("access_token"),
            "{format}: a query string is in the log"
        );
    }
}

/// One JSON line per request with the request id, tenant, route, status, latency and the
/// commit a write made.
#[tokio::test]
async fn each_request_logs_one_structured_line() {
    let dir = data_dir_with_fixture();
    let server = serve(dir.path(), &[("PLANFILES_LOG_FORMAT", "json")]);
    let client = reqwest::Client::new();
    let t = token("globex", ALL);
    let res = client
        .put(server.url("/plans/integration-file?x=1"))
        .bearer_auth(&t)
        .header("x-request-id", "log-line-1")
        .json(&json!({"content": {"logged": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let commit = res.json::<Value>().await.unwrap()["commit_sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let res = client
        .get(server.url("/plans/configuration-file"))
        .header("x-request-id", "log-line-2")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let started = std::time::Instant::now();
    let line = |id: &str| loop {
        let found = server.log.lock().unwrap().iter().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["request_id"] == id).then_some(v)
        });
        if let Some(v) = found {
            break v;
        }
        assert!(started.elapsed().as_secs() < 5, "no log line for {id}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let write = line("log-line-1");
    assert_eq!(write["message"], "request");
    assert_eq!(write["tenant"], "globex");
    assert_eq!(write["method"], "PUT");
    assert_eq!(write["route"], "/plans/integration-file");
    assert_eq!(write["status"], 200);
    assert_eq!(write["commit"], commit.as_str());
    assert!(write["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    // Rounded to the microsecond: no run of float noise.
    let shown = serde_json::to_string(&write["latency_ms"]).unwrap();
    assert!(
        shown.split('.').nth(1).is_none_or(|frac| frac.len() <= 3),
        "latency_ms = {shown}"
    );
    let refused = line("log-line-2");
    assert_eq!(refused["status"], 401);
    assert_eq!(refused["tenant"], "-");
    assert_eq!(refused["commit"], "-");
}

/// Probes are not request lines at the default level (a load balancer asks every few
/// seconds); at debug they are.
#[tokio::test]
async fn probes_are_logged_at_debug_only() {
    for (level, logged) in [("info", false), ("debug", true)] {
        let dir = data_dir_with_fixture();
        let server = serve(
            dir.path(),
            &[("PLANFILES_LOG_FORMAT", "json"), ("PLANFILES_LOG", level)],
        );
        let client = reqwest::Client::new();
        for (path, id) in [
            ("/healthz", "probe-1"),
            ("/readyz", "probe-2"),
            ("/openapi.json", "other"),
        ] {
            let res = client
                .get(server.url(path))
                .header("x-request-id", id)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
        }
        let started = std::time::Instant::now();
        let has = |id: &str| {
            server
                .log
                .lock()
                .unwrap()
                .iter()
                .any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["request_id"] == id))
        };
        while !has("other") {
            assert!(
                started.elapsed().as_secs() < 5,
                "no log line for the other request"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(has("probe-1") && has("probe-2"), logged, "at {level}");
    }
}

/// SIGINT (as SIGTERM): a request whose body is still arriving is answered, new connections
/// are refused, and the process exits 0 once it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_lets_a_request_in_flight_finish_and_refuses_new_connections() {
    use std::io::{Read, Write};
    let dir = data_dir_with_fixture();
    let mut server = serve(dir.path(), &[]);
    let host = server.addr.trim_start_matches("http://").to_owned();
    let body = r#"{"content": {"finished": "after the signal"}}"#;
    let (first, rest) = body.split_at(10);
    let mut stream = std::net::TcpStream::connect(&host).unwrap();
    write!(
        stream,
        "PUT /plans/integration-file HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{first}",
        token("globex", ALL),
        body.len()
    )
    .unwrap();
    stream.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    server.signal("INT");
    // New connections are refused soon after the signal; the bound leaves room for a loaded
    // machine but ends well before the body's pace check (5 s) would cut the request off.
    refused_within(&host, Duration::from_secs(3));
    stream.write_all(rest.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let status = tokio::task::spawn_blocking(move || server.wait())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "exit status after SIGINT");
    let stored = git_in(
        &dir.path().join("data/tenants/globex.git"),
        &["show", "main:integrations.yml"],
    );
    assert!(stored.contains("after the signal"), "{stored}");
}

#[tokio::test]
async fn the_service_accounts_git_config_does_not_change_tenant_repositories() {
    // A ~/.gitconfig that would make libgit2 keep a reflog of every ref update.
    let dir = data_dir_with_fixture();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".config/git")).unwrap();
    let config = "[core]\n\tlogAllRefUpdates = always\n";
    std::fs::write(home.join(".gitconfig"), config).unwrap();
    std::fs::write(home.join(".config/git/config"), config).unwrap();
    let home = home.to_str().unwrap();
    let xdg = format!("{home}/.config");
    let server = serve(
        dir.path(),
        &[("HOME", home), ("XDG_CONFIG_HOME", xdg.as_str())],
    );
    let res = server
        .put_integration("globex", json!({"global_config": "ignored"}))
        .await;
    assert_eq!(res.status(), 200);
    let repo = dir.path().join("data/tenants/globex.git");
    assert!(
        !repo.join("logs").exists(),
        "libgit2 read the service account's git config and wrote a reflog"
    );
    assert_eq!(
        git_in(&repo, &["log", "-1", "--format=%s"]),
        "Update integrations.yml"
    );
}

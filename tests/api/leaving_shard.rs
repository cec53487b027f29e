//! A tenant leaving a shard, as its clients see it on that shard: writes 503 `tenant_moving` with reads served while it moves, then 421 `tenant_moved` for everything; streams end with `event: moving` and held long-polls answer; and the import endpoint's refusals (table-driven).
use crate::common;

use common::{problem, token, TestApp, ALL};
use planfiles::domain::{Identity, ShardUrl, TenantId};
use planfiles::storage::{Durability, Storage};
use serde_json::{json, Value};
use std::time::Duration;

/// The data dir's storage, as `planfiles tenant move` (another process) opens it.
fn mover(app: &TestApp) -> Storage {
    Storage::open(
        app.data_dir.path(),
        &app.data_dir.path().join("cursor.key"),
        Identity::new("mover", "m@localhost", "localhost"),
        Durability::Fsync,
    )
    .unwrap()
}

fn target() -> ShardUrl {
    ShardUrl::parse("http://shard-b.internal:8080").unwrap()
}

#[tokio::test]
async fn a_moving_tenant_refuses_writes_serves_reads_then_answers_421() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let acme = TenantId::parse("acme").unwrap();
    let before: Value = app.get_integration(&t).await.json().await.unwrap();
    let head = app.head("acme");
    let placement = |app: &TestApp| {
        let (client, url) = (app.client.clone(), app.url("/admin/tenants/acme/placement"));
        async move {
            let res = client
                .get(url)
                .bearer_auth(token("acme", &["planfiles.repos.import"]))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            res.json::<Value>().await.unwrap()["placement"].clone()
        }
    };
    assert_eq!(placement(&app).await, "served");
    let storage = mover(&app);
    let start = storage.begin_move(&acme, &target()).unwrap();
    assert_eq!(start.head.to_string(), head, "the head handed over");
    assert_eq!(placement(&app).await, "moving");

    // Moving: a write is 503 with Retry-After and changes nothing; a read is served.
    let res = app
        .put_integration(&t, &json!({"content": {"moved": {"a": 1}}}))
        .await;
    assert_eq!(res.headers()["retry-after"], "1");
    let (status, body) = problem(res).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("tenant_moving"))
    );
    assert_eq!(app.head("acme"), head);
    let read = app.get_integration(&t).await;
    assert_eq!(read.status(), 200);
    let read: Value = read.json().await.unwrap();
    assert_eq!(read["file_sha"], before["file_sha"]);
    // Another tenant writes on.
    let other = app
        .put_integration(&token("globex", ALL), &json!({"content": {"x": {"a": 1}}}))
        .await;
    assert_eq!(other.status(), 200);
    // A new stream is refused for the moment of the move.
    let (status, body) = problem(app.events(Some(&t), "", None).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("tenant_moving"))
    );
    // A push is refused, and git prints why and when to try again; main stays.
    let pusher = token(
        "acme",
        &[
            "planfiles.repos.read",
            "jit.integrations.write",
            "jit.preferences.write",
        ],
    );
    let work = tempfile::tempdir().unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        std::process::Command::new("git")
            .current_dir(dir)
            .args([
                "-c",
                &format!("http.extraHeader=Authorization: Bearer {pusher}"),
            ])
            .args(["-c", "user.name=D", "-c", "user.email=d@x"])
            .args(args)
            .output()
            .unwrap()
    };
    assert!(git(
        work.path(),
        &["clone", "-q", &app.url("/git/acme.git"), "c"]
    )
    .status
    .success());
    let dir = work.path().join("c");
    std::fs::write(dir.join("integrations.yml"), "moved: {a: 2}\n").unwrap();
    assert!(git(&dir, &["commit", "-qam", "during the move"])
        .status
        .success());
    let pushed = git(&dir, &["push", "origin", "main"]);
    let stderr = String::from_utf8_lossy(&pushed.stderr);
    assert!(!pushed.status.success());
    assert!(
        stderr.contains("moving") && stderr.contains("retry") && stderr.contains("503"),
        "{stderr}"
    );
    assert_eq!(app.head("acme"), head);

    // Moved: every request of the tenant is 421, and names no shard.
    storage.finish_move(&acme, &target()).unwrap();
    for res in [
        app.get_integration(&t).await,
        app.put_integration(&t, &json!({"content": {}})).await,
        app.history(&t, "integration-file", "").await,
    ] {
        let (status, body) = problem(res).await;
        assert_eq!((status, body["code"].as_str()), (421, Some("tenant_moved")));
        assert!(
            !body["detail"].as_str().unwrap().contains("shard-b"),
            "{body}"
        );
    }
    let clone = app
        .client
        .get(app.url("/git/acme.git/info/refs?service=git-upload-pack"))
        .bearer_auth(token("acme", &["planfiles.repos.read"]))
        .send()
        .await
        .unwrap();
    assert_eq!(clone.status(), 421);
    assert_eq!(app.head("acme"), head, "nothing was written");
}

#[tokio::test]
async fn streams_end_and_long_polls_answer_when_the_move_begins() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let acme = TenantId::parse("acme").unwrap();
    let etag = app
        .get_integration(&t)
        .await
        .headers()
        .get("etag")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let stream = app.events(Some(&t), "", None).await;
    assert_eq!(stream.status(), 200);
    let held = {
        let (app_url, t, etag) = (app.url("/plans/integration-file"), t.clone(), etag.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let res = reqwest::Client::new()
                .get(app_url)
                .bearer_auth(t)
                .header("If-None-Match", etag)
                .header("Prefer", "wait=30")
                .send()
                .await
                .unwrap();
            (res.status().as_u16(), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let storage = mover(&app);
    tokio::task::spawn_blocking(move || storage.begin_move(&acme, &target()).unwrap())
        .await
        .unwrap();
    // The stream sends `event: moving` (without an id) and ends.
    let text = tokio::time::timeout(Duration::from_secs(10), stream.text())
        .await
        .expect("the stream ended")
        .unwrap();
    assert!(text.contains("event: head\n"), "{text}");
    assert!(
        text.trim_end()
            .ends_with("event: moving\ndata: {\"retry_after\":2}"),
        "{text}"
    );
    let (status, waited) = held.await.unwrap();
    assert_eq!(status, 304);
    assert!(waited < Duration::from_secs(10), "held {waited:?}");
}

#[tokio::test]
async fn the_import_endpoint_refuses_what_it_must() {
    let app = TestApp::spawn().await;
    let import = &["planfiles.repos.import"];
    let good = json!({"from": "http://shard-a.internal:8080", "head": "a".repeat(40)}).to_string();
    let cases: Vec<(&str, String, &str, String, u16, &str)> = vec![
        // (tenant in path, token, content type, body, status, code)
        (
            "acme",
            token("acme", ALL),
            "application/json",
            good.clone(),
            403,
            "insufficient_scope",
        ),
        (
            "acme",
            token("globex", import),
            "application/json",
            good.clone(),
            403,
            "wrong_tenant",
        ),
        (
            "a..b",
            token("acme", import),
            "application/json",
            good.clone(),
            404,
            "not_found",
        ),
        (
            "acme",
            token("acme", import),
            "text/plain",
            good.clone(),
            415,
            "unsupported_media_type",
        ),
        (
            "acme",
            token("acme", import),
            "application/json",
            "{".into(),
            400,
            "invalid_json",
        ),
        (
            "acme",
            token("acme", import),
            "application/json",
            json!({"from": "x"}).to_string(),
            400,
            "invalid_body",
        ),
        (
            "acme",
            token("acme", import),
            "application/json",
            json!({"from": "http://a", "head": "zz"}).to_string(),
            400,
            "invalid_body",
        ),
        (
            "acme",
            token("acme", import),
            "application/json",
            json!({"from": "http://a", "extra": 1}).to_string(),
            400,
            "invalid_json",
        ),
        // Not one of cluster.peers (none here): the shard never fetches from it.
        (
            "acme",
            token("acme", import),
            "application/json",
            good.clone(),
            403,
            "peer_not_allowed",
        ),
        (
            "acme",
            token("acme", import),
            "application/json",
            "x".repeat(8 * 1024 * 1024),
            413,
            "payload_too_large",
        ),
    ];
    let head = app.head("acme");
    for (tenant, tok, ct, body, want_status, want_code) in cases {
        let res = app.import(&tok, tenant, ct, body.clone()).await;
        let (status, problem) = problem(res).await;
        assert_eq!(
            (status, problem["code"].as_str().unwrap()),
            (want_status, want_code),
            "{tenant} {ct} {body:.80}: {problem}"
        );
    }
    assert_eq!(app.head("acme"), head);
}

#[test]
fn the_service_archives_a_moved_tenant_after_its_grace_and_still_answers_421() {
    let dir = common::process::data_dir_with_fixture();
    std::fs::write(
        dir.path().join("config.toml"),
        "[cluster]\nmoved_grace_secs = 1\n",
    )
    .unwrap();
    let server = common::process::serve(dir.path(), &[]);
    let storage = Storage::open(
        &dir.path().join("data"),
        &dir.path().join("data").join("cursor.key"),
        Identity::new("mover", "m@localhost", "localhost"),
        Durability::Fsync,
    )
    .unwrap();
    let acme = TenantId::parse("acme").unwrap();
    storage.begin_move(&acme, &target()).unwrap();
    storage.finish_move(&acme, &target()).unwrap();
    let repo = dir.path().join("data/tenants/acme.git");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while repo.exists() {
        assert!(std::time::Instant::now() < deadline, "not archived");
        std::thread::sleep(Duration::from_millis(100));
    }
    let archived: Vec<_> = std::fs::read_dir(dir.path().join("data/archive"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(archived.len(), 1);
    assert!(archived[0].starts_with("acme.git."), "{archived:?}");
    assert!(
        std::path::Path::new(&dir.path().join("data/archive").join(&archived[0]))
            .join("HEAD")
            .exists(),
        "the archive is the whole repository"
    );
    let res = reqwest::blocking::Client::new()
        .get(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .send()
        .unwrap();
    assert_eq!(res.status(), 421);
    // The tombstone keeps the tenant from being made again here.
    let out = common::process::planfiles(dir.path())
        .args(["tenant", "create", "acme"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("moved"),
        "{out:?}"
    );
}

/// Plain git's commits are refused while the tenant moves (a hook the move installs refuses
/// the ref transaction), so none can land after the head was handed over and vanish with the
/// move; once the move is aborted, git writes again.
#[tokio::test]
async fn plain_git_cannot_commit_while_the_tenant_moves() {
    let app = TestApp::spawn().await;
    let acme = TenantId::parse("acme").unwrap();
    let repo = app.repo("acme");
    let storage = mover(&app);
    let head = app.head("acme");
    let tree = common::git_in(&repo, &["rev-parse", "main^{tree}"]);
    let next = common::git_in(
        &repo,
        &["commit-tree", &tree, "-p", &head, "-m", "plain git"],
    );
    storage.begin_move(&acme, &target()).unwrap();
    let refused = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["update-ref", "refs/heads/main", &next, &head])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "git moved main during the move");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("moving to another shard"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(app.head("acme"), head);
    storage.begin_abort(&acme, &target()).unwrap();
    storage.end_abort(&acme, &target(), false).unwrap();
    common::git_in(&repo, &["update-ref", "refs/heads/main", &next, &head]);
    assert_eq!(app.head("acme"), next);
}

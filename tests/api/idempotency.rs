//! `Idempotency-Key`: replays, reuse, in-flight across processes, no-op retries, a look-back counted in commits and a retry after `kill -9`.
use crate::common;

use common::process::{data_dir_with_fixture, serve};
use common::{git_in, problem, token, TestApp, ALL};
use planfiles::domain::{Identity, TenantId};
use planfiles::storage::{Durability, InFlight, Storage};
use serde_json::{json, Value};

fn key(k: &str) -> [(&str, &str); 1] {
    [("Idempotency-Key", k)]
}

/// Marks `key` of `tenant` in flight as another process on the data dir would: through a
/// storage handle of its own. In flight until the marker is dropped.
fn claim_elsewhere(app: &TestApp, tenant: &str, key: &str) -> InFlight {
    let other = Storage::open(
        app.data_dir.path(),
        &app.data_dir.path().join("cursor.key"),
        Identity::new("other", "o@localhost", "localhost"),
        Durability::Fsync,
    )
    .unwrap();
    other
        .claim_in_flight(
            &TenantId::parse(tenant).unwrap(),
            &planfiles::domain::IdempotencyKey::parse(key.as_bytes()).unwrap(),
        )
        .unwrap()
        .expect("free")
}

/// A PUT of the integration file with `Idempotency-Key: k` (and its dry run).
trait PutKeyed {
    async fn put_keyed(&self, token: &str, body: &Value, k: &str) -> reqwest::Response;
    async fn dry_put_keyed(&self, token: &str, body: &Value, k: &str) -> reqwest::Response;
}

impl PutKeyed for TestApp {
    async fn put_keyed(&self, token: &str, body: &Value, k: &str) -> reqwest::Response {
        self.send("PUT", "/plans/integration-file", token, Some(body), &key(k))
            .await
    }

    async fn dry_put_keyed(&self, token: &str, body: &Value, k: &str) -> reqwest::Response {
        let path = "/plans/integration-file?dry_run=true";
        self.send("PUT", path, token, Some(body), &key(k)).await
    }
}

#[tokio::test]
async fn a_retry_answers_the_first_answer_even_after_main_moved() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let sha = app.blob("acme", "integrations.yml");
    let body = json!({"content": {"first": 1}, "file_sha": sha});
    let first = app.put_keyed(&t, &body, "k-1").await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let commit = first["commit_sha"].as_str().unwrap().to_owned();
    let tr = app.git("acme", &["log", "-1", "--format=%(trailers:only,unfold)"]);
    assert!(tr.contains("Idempotency-Key: k-1"), "{tr}");
    assert!(tr.contains("Idempotency-Fingerprint: hmac-sha256:"), "{tr}");
    // main moves on; the file_sha of the retry is stale now.
    let res = app
        .put_integration(&t, &json!({"content": {"later": 2}}))
        .await;
    assert_eq!(res.status(), 200);
    let head = app.head("acme");
    let retry = app.put_keyed(&t, &body, "k-1").await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(
        retry.headers()["etag"],
        format!("\"{}\"", first["file_sha"].as_str().unwrap()).as_str()
    );
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry, first, "the same answer");
    assert_eq!(app.head("acme"), head, "no new commit");
    // Another request with that key: 422.
    let other = json!({"content": {"first": 2}, "file_sha": sha});
    let (s, b) = problem(app.put_keyed(&t, &other, "k-1").await).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    assert!(b["detail"].as_str().unwrap().contains(&commit));
    // The same body to another endpoint is another request too.
    let (s, _) = problem(
        app.send("POST", "/plans/commits", &t, Some(&body), &key("k-1"))
            .await,
    )
    .await;
    assert_eq!(s, 422);
    assert_eq!(app.head("acme"), head);
}

#[tokio::test]
async fn every_write_takes_a_key() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let conf = app.blob("acme", "configuration.yml");
    let start = app.head("acme");
    let writes: Vec<(&str, &str, Value)> = vec![
        (
            "PUT",
            "/plans/configuration-file",
            json!({"payload": {"folders": []}, "file_sha": conf}),
        ),
        (
            "POST",
            "/plans/commits",
            json!({"integration-file": {"content": {"c": 1}}}),
        ),
        (
            "POST",
            "/plans/integration-file/restore",
            json!({"commit": start}),
        ),
    ];
    for (i, (method, path, body)) in writes.iter().enumerate() {
        let k = format!("key {i}");
        let first = app.send(method, path, &t, Some(body), &key(&k)).await;
        assert_eq!(first.status(), 200, "{path}");
        let first: Value = first.json().await.unwrap();
        // main moves on (another file) before the retry: the retry still replays.
        app.outside_commit("acme", "notes.txt", &format!("note {i}\n"));
        let head = app.head("acme");
        let again = app.send(method, path, &t, Some(body), &key(&k)).await;
        assert_eq!(again.status(), 200, "{path}");
        assert_eq!(again.headers()["idempotent-replayed"], "true", "{path}");
        assert_eq!(again.json::<Value>().await.unwrap(), first, "{path}");
        assert_eq!(app.head("acme"), head, "{path}");
    }
    assert_eq!(app.commits_since("acme", &start), 6);
}

/// A dry run is checked against its key as the real call would be: a replay, 422 for
/// another request, 409 while the key is in flight; and it records nothing.
#[tokio::test]
async fn a_dry_run_is_checked_against_its_key() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let a = json!({"content": {"a": 1}});
    // Recorded by a real write: a dry run of the same request replays it.
    let first: Value = app.put_keyed(&t, &a, "k").await.json().await.unwrap();
    let head = app.head("acme");
    let res = app.dry_put_keyed(&t, &a, "k").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["idempotent-replayed"], "true");
    assert_eq!(res.json::<Value>().await.unwrap(), first);
    // Another request with that key.
    let (s, b) = problem(
        app.dry_put_keyed(&t, &json!({"content": {"b": 2}}), "k")
            .await,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    // In flight elsewhere.
    let held = claim_elsewhere(&app, "acme", "busy");
    let (s, b) = problem(app.dry_put_keyed(&t, &a, "busy").await).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (409, Some("idempotency_key_in_flight"))
    );
    drop(held);
    // A dry run with a new key records nothing: the real call after it writes.
    let res = app
        .dry_put_keyed(&t, &json!({"content": {"c": 3}}), "new")
        .await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.head("acme"), head);
    let res = app
        .put_keyed(&t, &json!({"content": {"c": 3}}), "new")
        .await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.commits_since("acme", &head), 1);
}

/// `count` commits of `notes.txt` on top of `main`, made now by git fast-import.
fn outside_commits(repo: &std::path::Path, count: usize) {
    common::fast_commits(repo, count, "notes.txt");
}

/// The look-back covers the last 1,000 first-parent commits: a key 500 commits back is
/// replayed, one 1,100 back is not, also when the lookup builds on its scan of the last
/// lookup (the process keeps one per tenant).
#[tokio::test]
async fn keys_more_than_1000_commits_back_are_forgotten() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let body = json!({"content": {"deep": 1}});
    let first: Value = app.put_keyed(&t, &body, "deep").await.json().await.unwrap();
    outside_commits(&app.repo("globex"), 500);
    let res = app.put_keyed(&t, &body, "deep").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["idempotent-replayed"], "true");
    assert_eq!(res.json::<Value>().await.unwrap(), first);
    outside_commits(&app.repo("globex"), 600);
    let head = app.head("globex");
    let res = app.put_keyed(&t, &body, "deep").await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("idempotent-replayed").is_none());
    // Run as a new request: the file already holds that content, so a no-op at the head.
    let again: Value = res.json().await.unwrap();
    assert_eq!(again["commit_sha"], head.as_str());
    assert_eq!(app.commits_since("globex", &head), 0);
}

#[tokio::test]
async fn bad_keys_are_400_and_change_nothing() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let long = "k".repeat(256);
    // (HTTP trims spaces around a header's value, so those never reach the server.)
    for bad in ["", long.as_str(), "tab\there"] {
        let (s, b) = problem(app.put_keyed(&t, &json!({"content": {}}), bad).await).await;
        assert_eq!(
            (s, b["code"].as_str()),
            (400, Some("invalid_idempotency_key")),
            "{bad:?}"
        );
    }
    assert_eq!(app.head("acme"), head);
}

/// A keyed write that changes nothing makes no commit, but its key is recorded (durably,
/// on `refs/planfiles/no-ops`): a retry after another client's write answers the first
/// answer and does not write the old content over the new one; the key with another body is
/// 422.
#[tokio::test]
async fn a_no_op_is_recorded_so_its_retry_never_overwrites_a_later_write() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let current: Value = app.get_integration(&t).await.json().await.unwrap();
    let body = json!({"content": current["raw_content"]});
    let head = app.head("globex");
    let res = app.put_keyed(&t, &body, "retry-A").await;
    assert_eq!(res.status(), 200);
    let first: Value = res.json().await.unwrap();
    assert_eq!(first["commit_sha"], head.as_str());
    assert_eq!(app.head("globex"), head, "no commit");
    // Another client writes.
    let other = app
        .put_integration(&t, &json!({"content": {"a": "Y"}}))
        .await;
    assert_eq!(other.status(), 200);
    let after = app.head("globex");
    // The retry answers what the first request got, and writes nothing.
    let res = app.put_keyed(&t, &body, "retry-A").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["idempotent-replayed"], "true");
    assert_eq!(res.json::<Value>().await.unwrap(), first);
    assert_eq!(app.head("globex"), after, "Y is not overwritten");
    let (s, b) = problem(
        app.put_keyed(&t, &json!({"content": {"a": "X"}}), "retry-A")
            .await,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    assert_eq!(app.head("globex"), after);
    // The record is an ordinary commit on its own ref, which git checks like any other.
    let repo = app.repo("globex");
    let record = git_in(
        &repo,
        &["log", "-1", "--format=%B", "refs/planfiles/no-ops"],
    );
    assert!(record.contains("Idempotency-Key: retry-A"), "{record}");
    assert!(record.contains(&format!("Replays: {head}")), "{record}");
    assert!(common::git_succeeds(&repo, &["fsck", "--strict"]));
}

/// A key marked in flight by anyone with the data dir (here: this test, through its own
/// storage handle, as another process would) is 409 until it is released.
#[tokio::test]
async fn a_key_in_flight_elsewhere_is_409() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let held = claim_elsewhere(&app, "acme", "busy-key");
    let body = json!({"content": {"x": 1}});
    let (s, b) = problem(app.put_keyed(&t, &body, "busy-key").await).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (409, Some("idempotency_key_in_flight"))
    );
    assert_eq!(app.head("acme"), head);
    // Other keys are not held up.
    let res = app
        .put_keyed(&t, &json!({"content": {"y": 1}}), "free-key")
        .await;
    assert_eq!(res.status(), 200);
    drop(held);
    let res = app.put_keyed(&t, &body, "busy-key").await;
    assert_eq!(res.status(), 200);
}

/// A second request with a key whose first request is still being written in this process
/// is 409 at once, not queued behind it; once the first has answered, a retry replays it.
#[tokio::test]
async fn a_key_in_flight_in_this_process_is_409() {
    use std::sync::{mpsc, Arc, Mutex};
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new((entered_tx, release_rx)));
    let hook = planfiles::storage::WriteHook(Arc::new(move |_, _| {
        let gate = gate.lock().unwrap();
        gate.0.send(()).unwrap();
        gate.1.recv().unwrap();
    }));
    let app = std::sync::Arc::new(TestApp::with().write_hook(hook).spawn().await);
    let t = token("acme", ALL);
    let head = app.head("acme");
    let body = json!({"content": {"held": 1}});
    let first = {
        let (app, t, body) = (app.clone(), t.clone(), body.clone());
        tokio::spawn(async move {
            let res = app.put_keyed(&t, &body, "held").await;
            (res.status(), res.json::<Value>().await.unwrap())
        })
    };
    // The first write is made and waits in the hook, just before main moves.
    tokio::task::spawn_blocking(move || entered_rx.recv().unwrap())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let (s, b) = problem(app.put_keyed(&t, &body, "held").await).await;
    assert_eq!(
        (s, b["code"].as_str()),
        (409, Some("idempotency_key_in_flight"))
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "answered at once, not after the first"
    );
    release_tx.send(()).unwrap();
    let (status, answer) = first.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(app.commits_since("acme", &head), 1);
    let res = app.put_keyed(&t, &body, "held").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["idempotent-replayed"], "true");
    let replay: Value = res.json().await.unwrap();
    assert_eq!(replay["commit_sha"], answer["commit_sha"]);
    assert_eq!(app.commits_since("acme", &head), 1);
}

/// The look-back counts commits, never dates: a plain-git commit dated years ago on top of a
/// keyed write hides nothing beneath it.
#[tokio::test]
async fn an_old_dated_commit_on_top_hides_no_key() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let repo = app.repo("globex");
    let body = json!({"content": {"a": 1}});
    let first: Value = app.put_keyed(&t, &body, "k1").await.json().await.unwrap();
    let old = "2020-01-01T00:00:00Z";
    let commit = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["commit-tree", "main^{tree}", "-p", "main", "-m", "old"])
        .env("GIT_AUTHOR_NAME", "x")
        .env("GIT_AUTHOR_EMAIL", "x@x")
        .env("GIT_COMMITTER_NAME", "x")
        .env("GIT_COMMITTER_EMAIL", "x@x")
        .env("GIT_COMMITTER_DATE", old)
        .env("GIT_AUTHOR_DATE", old)
        .output()
        .unwrap();
    let commit = String::from_utf8(commit.stdout).unwrap().trim().to_owned();
    git_in(&repo, &["update-ref", "refs/heads/main", &commit]);
    let res = app.put_keyed(&t, &body, "k1").await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["idempotent-replayed"], "true");
    assert_eq!(res.json::<Value>().await.unwrap(), first);
    assert_eq!(app.head("globex"), commit, "nothing written");
    let (s, _) = problem(app.put_keyed(&t, &json!({"content": {"a": 2}}), "k1").await).await;
    assert_eq!(s, 422);
    assert_eq!(app.head("globex"), commit);
}

/// The process dies right after its commit (before or while answering); a retry against
/// another process on the same data dir replays that commit and makes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_kill_9_between_commit_and_answer_is_replayed() {
    let dir = data_dir_with_fixture();
    let repo = dir.path().join("data/tenants/acme.git");
    let start = git_in(&repo, &["rev-parse", "main"]);
    let mut first = serve(dir.path(), &[]);
    let body = json!({"content": {"killed": true}});
    let url = first.url("/plans/integration-file");
    let t = token("acme", ALL);
    let (b2, t2) = (body.clone(), t.clone());
    let request = tokio::spawn(async move {
        reqwest::Client::new()
            .put(url)
            .bearer_auth(t2)
            .header("Idempotency-Key", "killed-key")
            .json(&b2)
            .send()
            .await
    });
    // Kill -9 as soon as main has moved: the answer may not have been sent.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while git_in(&repo, &["rev-parse", "main"]) == start {
        assert!(
            std::time::Instant::now() < deadline,
            "the write never landed"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    first.kill9();
    let _ = request.await;
    let committed = git_in(&repo, &["rev-parse", "main"]);

    let second = serve(dir.path(), &[]);
    let res = reqwest::Client::new()
        .put(second.url("/plans/integration-file"))
        .bearer_auth(&t)
        .header("Idempotency-Key", "killed-key")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["idempotent-replayed"], "true");
    let b: Value = res.json().await.unwrap();
    assert_eq!(b["commit_sha"], committed.as_str());
    assert_eq!(b["content"], json!({"killed": true}));
    assert_eq!(
        git_in(&repo, &["rev-parse", "main"]),
        committed,
        "no second commit"
    );
    git_in(&repo, &["fsck", "--strict", "--no-dangling"]);
}

//! Plain git's housekeeping beside live writes: `git prune` with the default grace over aged objects (and its race, modelled step by step), `git gc --auto` and `git pack-refs`. After each, every acknowledged write is on `main`, readable, and `git fsck --strict` is clean. (A held `main.lock` is in `tests/durability.rs`.)
use crate::common;

use common::{git_in, token, TestApp, ALL};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Sets the modification time of every loose object of `repo` to `days` ago.
fn age_loose_objects(repo: &Path, days: u64) {
    let then = SystemTime::now() - Duration::from_secs(days * 86_400);
    for fanout in std::fs::read_dir(repo.join("objects")).unwrap() {
        let fanout = fanout.unwrap().path();
        let name = fanout.file_name().unwrap().to_string_lossy().into_owned();
        if name.len() != 2 || !fanout.is_dir() {
            continue;
        }
        for object in std::fs::read_dir(&fanout).unwrap() {
            let object = object.unwrap().path();
            std::fs::File::open(&object)
                .unwrap()
                .set_modified(then)
                .unwrap();
        }
    }
}

/// The objects `git prune` would look at: those no ref reaches.
fn unreachable(repo: &Path) -> Vec<String> {
    git_in(
        repo,
        &["fsck", "--unreachable", "--no-reflogs", "--no-progress"],
    )
    .lines()
    .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
    .collect()
}

async fn put(app: &TestApp, token: &str, content: Value) -> String {
    let res = app
        .put_integration(token, &json!({ "content": content }))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    body["commit_sha"].as_str().unwrap().to_owned()
}

/// What `git prune --expire=2.weeks.ago` does, step by step, with a write between its two
/// steps: it lists what no ref reaches, then deletes each listed loose object whose
/// modification time is older than the grace. A write that reuses such an object (the same
/// content again after `main` was moved back) must freshen it, as git does, or the sweep
/// deletes an object of an acknowledged commit.
#[tokio::test]
async fn an_object_a_write_reuses_is_freshened_before_prunes_sweep() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let repo = app.repo("acme");
    let start = app.head("acme");
    put(&app, &t, json!({"version": 1})).await;
    put(&app, &t, json!({"version": 2})).await;
    // Plain git moves main back; a month passes.
    git_in(&repo, &["update-ref", "refs/heads/main", &start]);
    age_loose_objects(&repo, 30);
    // Prune's mark: the first write's blob and tree are unreachable now.
    let listed = unreachable(&repo);
    assert!(listed.len() >= 6, "{listed:?}");
    // The same content again: 200, reusing those objects.
    let commit = put(&app, &t, json!({"version": 1})).await;
    // Prune's sweep: every listed loose object older than two weeks goes.
    let grace = SystemTime::now() - Duration::from_secs(14 * 86_400);
    let mut swept = 0;
    for id in &listed {
        let path = repo.join(format!("objects/{}/{}", &id[..2], &id[2..]));
        let old = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|m| m < grace);
        if old {
            std::fs::remove_file(&path).unwrap();
            swept += 1;
        }
    }
    assert!(
        swept > 0,
        "the sweep deleted nothing: the test proves nothing"
    );
    assert_eq!(app.head("acme"), commit);
    let got = app.get_integration(&t).await;
    assert_eq!(got.status(), 200);
    let got: Value = got.json().await.unwrap();
    assert_eq!(got["content"], json!({"version": 1}));
    app.fsck("acme");
}

/// A real `git prune --expire=2.weeks.ago` over 15,000 month-old loose objects, with writes
/// of the month-old contents running all along: nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_prune_beside_writes_that_reuse_old_objects_loses_nothing() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let repo = app.repo("acme");
    let start = app.head("acme");
    let contents: Vec<Value> = (0..4).map(|i| json!({"version": i})).collect();
    for c in &contents {
        put(&app, &t, c.clone()).await;
    }
    git_in(&repo, &["update-ref", "refs/heads/main", &start]);
    // 15,000 unreachable loose objects (5,000 commits made elsewhere, unpacked here).
    let scratch = tempfile::tempdir().unwrap();
    git_in(scratch.path(), &["init", "--bare", "-q"]);
    common::git_in(scratch.path(), &["symbolic-ref", "HEAD", "refs/heads/main"]);
    let mut stream = String::new();
    for i in 0..5_000 {
        let text = format!("n: {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter o <o@x> 1700000000 +0000\ndata 2\nx\nM 100644 inline f.yml\ndata {}\n{text}\n",
            text.len()
        ));
    }
    common::git_stdin(scratch.path(), &["fast-import", "--quiet"], &stream);
    let pack_dir = scratch.path().join("objects/pack");
    let pack = std::fs::read_dir(&pack_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "pack"))
        .unwrap();
    let unpacked = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["unpack-objects", "-q"])
        .stdin(std::fs::File::open(&pack).unwrap())
        .status()
        .unwrap();
    assert!(unpacked.success());
    age_loose_objects(&repo, 30);
    let prune = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["prune", "--expire=2.weeks.ago"])
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    let mut prune = prune;
    let mut n = 0;
    loop {
        let done = prune.try_wait().unwrap().is_some();
        acked.push(put(&app, &t, contents[n % contents.len()].clone()).await);
        n += 1;
        if done {
            break;
        }
    }
    assert!(prune.wait().unwrap().success());
    let on_main = git_in(&repo, &["rev-list", "main"]);
    for commit in &acked {
        assert!(on_main.contains(commit.as_str()), "{commit} is not on main");
    }
    for (i, commit) in acked.iter().enumerate().rev().take(8) {
        let got = reqwest::Client::new()
            .get(app.url(&format!("/plans/integration-file?ref={commit}")))
            .bearer_auth(&t)
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200, "write {i} ({commit}) cannot be read");
    }
    app.fsck("acme");
    eprintln!("{} writes beside git prune", acked.len());
}

/// `git gc --auto` (forced to run) and `git pack-refs --all` beside a stream of writes, keyed
/// ones that change nothing among them (their records are a ref too): every write lands, the
/// no-op records keep answering their keys, and the repository passes `git fsck --strict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gc_auto_and_pack_refs_beside_writes_lose_nothing() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let repo = app.repo("acme");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let housekeeping = common::git_in_a_loop(
        repo.clone(),
        vec![
            vec![
                "-c",
                "gc.auto=1",
                "-c",
                "gc.autoDetach=false",
                "gc",
                "--auto",
                "--quiet",
            ],
            vec!["pack-refs", "--all"],
        ],
        stop.clone(),
    );
    let mut acked = Vec::new();
    let mut keys = Vec::new();
    for i in 0..80 {
        // Every fourth write repeats the one before it with a key: a no-op record.
        let (content, key) = if i % 4 == 3 {
            (json!({"n": i - 1}), Some(format!("k{i}")))
        } else {
            (json!({"n": i}), None)
        };
        let mut req = reqwest::Client::new()
            .put(app.url("/plans/integration-file"))
            .bearer_auth(&t)
            .json(&json!({ "content": content }));
        if let Some(key) = &key {
            req = req.header("Idempotency-Key", key);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 200, "write {i}");
        let body: Value = res.json().await.unwrap();
        let commit = body["commit_sha"].as_str().unwrap().to_owned();
        if let Some(key) = key {
            keys.push((key, content, commit.clone()));
        }
        acked.push(commit);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = housekeeping.join().unwrap();
    assert!(
        runs >= 2,
        "housekeeping ran beside the writes ({runs} runs)"
    );
    let on_main = git_in(&repo, &["rev-list", "main"]);
    for commit in &acked {
        assert!(on_main.contains(commit.as_str()), "{commit} is not on main");
    }
    // Each key still answers its commit, from the packed records.
    for (key, content, commit) in keys {
        let res = reqwest::Client::new()
            .put(app.url("/plans/integration-file"))
            .bearer_auth(&t)
            .header("Idempotency-Key", &key)
            .json(&json!({ "content": content }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(
            res.headers()
                .get("idempotent-replayed")
                .map(|v| v.as_bytes()),
            Some(&b"true"[..])
        );
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["commit_sha"], commit.as_str(), "key {key}");
    }
    app.fsck("acme");
}

//! The compare-and-swap on `main` lost on purpose: plain git commits just before a write moves `main`.
use crate::common;

use common::{problem, token, TestApp, ALL};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A server whose next write finds `main` moved by a plain-git commit of `file`, made after
/// the write's own commit and just before its compare-and-swap (once).
async fn spawn_losing_the_race(file: &'static str, content: &'static str) -> TestApp {
    let once = Arc::new(AtomicBool::new(false));
    let hook = planfiles::storage::WriteHook(Arc::new(move |_, repo| {
        if !once.swap(true, Ordering::SeqCst) {
            common::commit_outside(repo, file, content);
        }
    }));
    TestApp::with().write_hook(hook).spawn().await
}

/// An outside commit to the other file: the write rebases onto it and keeps both changes.
#[tokio::test]
async fn a_lost_race_with_a_commit_to_the_other_file_is_rebased_on() {
    let app = spawn_losing_the_race("configuration.yml", "folders:\n- path: outside\n").await;
    let t = token("acme", ALL);
    let start = app.head("acme");
    let sha = app.blob("acme", "integrations.yml");
    let res = app
        .put_integration(&t, &json!({"content": {"mine": 1}, "file_sha": sha}))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["commit_sha"], app.head("acme"));
    // main: start, the outside commit, then ours on top of it.
    assert_eq!(app.commits_since("acme", &start), 2);
    assert_eq!(
        app.git("acme", &["log", "-1", "--format=%s", "main~1"]),
        "outside edit"
    );
    assert_eq!(
        app.git("acme", &["show", "main:integrations.yml"]),
        "mine: 1"
    );
    assert_eq!(
        app.git("acme", &["show", "main:configuration.yml"]),
        "folders:\n- path: outside"
    );
    app.fsck("acme");
}

/// An outside commit to the write's own file: the precondition no longer holds, 409, and the
/// outside commit stays as it is.
#[tokio::test]
async fn a_lost_race_with_a_commit_to_the_same_file_is_409() {
    let app = spawn_losing_the_race("integrations.yml", "theirs: 1\n").await;
    let t = token("acme", ALL);
    let start = app.head("acme");
    let sha = app.blob("acme", "integrations.yml");
    let res = app
        .put_integration(&t, &json!({"content": {"mine": 1}, "file_sha": sha}))
        .await;
    let (status, body) = problem(res).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("sha_mismatch")));
    assert_eq!(body["current_sha"], app.blob("acme", "integrations.yml"));
    assert_eq!(
        app.commits_since("acme", &start),
        1,
        "only the outside commit"
    );
    assert_eq!(
        app.git("acme", &["show", "main:integrations.yml"]),
        "theirs: 1"
    );
    let got: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(got["content"], json!({"theirs": 1}));
    app.fsck("acme");
}

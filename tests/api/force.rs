//! A commit hash as `file_sha` forces a configuration update only when it names a commit of `main`'s history.
use crate::common;

use common::{git_in, problem, token, TestApp, ALL};
use serde_json::{json, Value};

/// Commits that exist in the repository but are not reachable from `main` (dangling, or on a
/// side branch) do not force; neither does a commit hash on the integration file. Nothing
/// changes on a refusal.
#[tokio::test]
async fn only_a_commit_of_mains_history_forces_and_only_the_configuration_file() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let repo = app.repo("acme");
    let tree = git_in(&repo, &["rev-parse", "main^{tree}"]);
    let dangling = git_in(
        &repo,
        &["commit-tree", &tree, "-p", "main", "-m", "dangling"],
    );
    let side = git_in(&repo, &["commit-tree", &tree, "-p", "main~1", "-m", "side"]);
    git_in(&repo, &["update-ref", "refs/heads/side", &side]);
    let old_commit = app.git("acme", &["rev-parse", "main~1"]);
    let head = app.head("acme");
    let cases = [
        ("configuration", dangling.as_str(), "a dangling commit"),
        ("configuration", side.as_str(), "a commit on a side branch"),
        // acme has source hosting: a file_sha is allowed there, but only a blob id matches.
        (
            "integration",
            old_commit.as_str(),
            "a commit hash on the integration file",
        ),
    ];
    for (file, sha, what) in cases {
        let res = match file {
            "configuration" => {
                app.put_configuration(&t, &json!({"payload": {"folders": []}, "file_sha": sha}))
                    .await
            }
            _ => {
                app.put_integration(&t, &json!({"content": {"a": 1}, "file_sha": sha}))
                    .await
            }
        };
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (409, Some("sha_mismatch")),
            "{what}"
        );
        assert_eq!(app.head("acme"), head, "{what} changed main");
    }
}

/// After a forced write: the content and `commit_sha` answered are what `main` holds, and the
/// commit says it was forced.
#[tokio::test]
async fn a_forced_configuration_write_answers_what_it_wrote() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let old_commit = app.git("acme", &["rev-parse", "main~1"]);
    let payload = json!({"folders": [{"path": "src", "exclude": ["*.tmp"]}], "extra": "kept"});
    let res = app
        .put_configuration(&t, &json!({"payload": payload, "file_sha": old_commit}))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["content"], payload);
    assert_eq!(body["commit_sha"], app.head("acme"));
    assert_eq!(body["sha"], app.blob("acme", "configuration.yml"));
    let message = app.git("acme", &["log", "-1", "--format=%B"]);
    assert!(message.contains("Forced: true"), "{message}");
    let got: Value = app.get_configuration(&t).await.json().await.unwrap();
    assert_eq!(got["content"], payload);
}

//! Versions: commit messages, restore, diff, dry run and both files in one commit, through the real server and checked with the git CLI.
use crate::common;

use common::{git_in, problem, token, TestApp, ALL};
use serde_json::{json, Value};

const INT: &str = "integration-file";
const CONF: &str = "configuration-file";

fn subject(app: &TestApp, tenant: &str, rev: &str) -> String {
    app.git(tenant, &["log", "-1", "--format=%s", rev])
}

fn trailers(app: &TestApp, tenant: &str, rev: &str) -> String {
    app.git(
        tenant,
        &["log", "-1", "--format=%(trailers:only,unfold)", rev],
    )
}

/// The files a commit changed, as `git show --stat` names them.
fn changed_files(app: &TestApp, tenant: &str, rev: &str) -> Vec<String> {
    let out = app.git(tenant, &["show", "--format=", "--name-only", rev]);
    out.lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn a_message_becomes_the_subject_and_the_trailers_stay() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let res = app
        .send(
            "PUT",
            "/plans/integration-file",
            &t,
            Some(&json!({"content": {"a": 1}, "message": "Add\n the prod\taccount\u{7}"})),
            &[("X-Request-Id", "req-msg-1")],
        )
        .await;
    assert_eq!(res.status(), 200);
    // Each run of line breaks and tabs is one space; other control characters go.
    assert_eq!(subject(&app, "globex", "main"), "Add the prod account");
    let tr = trailers(&app, "globex", "main");
    assert!(tr.contains("Request-Id: req-msg-1"), "{tr}");
    assert!(tr.contains("Forced: true"), "{tr}");
    // The configuration file too; without a message the subject is the usual one.
    let sha = app.blob("globex", "configuration.yml");
    let res = app
        .put_configuration(
            &t,
            &json!({"payload": {"folders": []}, "file_sha": sha, "message": "Clear folders"}),
        )
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(subject(&app, "globex", "main"), "Clear folders");
    assert!(!trailers(&app, "globex", "main").contains("Forced"));
    let res = app.put_integration(&t, &json!({"content": {"a": 2}})).await;
    assert_eq!(res.status(), 200);
    assert_eq!(subject(&app, "globex", "main"), "Update integrations.yml");
    app.fsck("globex");
}

#[tokio::test]
async fn bad_messages_are_422_and_change_nothing() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let head = app.head("globex");
    let long = "x".repeat(201);
    let cases: &[(&str, Value)] = &[
        ("empty", json!("")),
        ("control characters only", json!("\n\r\t\u{1}")),
        ("spaces only", json!("   ")),
        ("201 characters", json!(long)),
        ("a number", json!(7)),
        ("an object", json!({"m": 1})),
    ];
    for (name, message) in cases {
        for (path, body) in [
            (
                "/plans/integration-file",
                json!({"content": {"a": 1}, "message": message}),
            ),
            (
                "/plans/configuration-file",
                json!({"payload": {}, "file_sha": app.blob("globex", "configuration.yml"), "message": message}),
            ),
            (
                "/plans/commits",
                json!({"integration-file": {"content": {"a": 1}}, "message": message}),
            ),
        ] {
            let method = if path == "/plans/commits" {
                "POST"
            } else {
                "PUT"
            };
            let (status, body) = problem(app.send(method, path, &t, Some(&body), &[]).await).await;
            assert_eq!(status, 422, "{name} on {path}: {body}");
            assert_eq!(body["code"], "invalid_content", "{name}");
            assert!(
                body["detail"].as_str().unwrap().starts_with("/message"),
                "{name}: {body}"
            );
        }
    }
    // 200 characters is fine.
    let res = app
        .put_integration(
            &t,
            &json!({"content": {"a": 1}, "message": "é".repeat(200)}),
        )
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.commits_since("globex", &head), 1);
}

#[tokio::test]
async fn restore_writes_the_old_bytes_exactly_with_a_trailer() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    // An old version with comments, committed as YAML text.
    let text = "# the old one\nkeep: \"yes\"\nlist: [1, 2]\n";
    let res = app.put_integration(&t, &json!({"content": text})).await;
    assert_eq!(res.status(), 200);
    let old: Value = res.json().await.unwrap();
    let old_commit = old["commit_sha"].as_str().unwrap().to_owned();
    let res = app
        .put_integration(&t, &json!({"content": {"new": true}}))
        .await;
    assert_eq!(res.status(), 200);

    let res = app
        .restore(
            &t,
            INT,
            &json!({"commit": old_commit, "message": "Back to the old one"}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["raw_content"], text);
    assert_eq!(body["content"], json!({"keep": "yes", "list": [1, 2]}));
    assert_eq!(body["file_sha"], old["file_sha"]);
    assert_eq!(etag, format!("\"{}\"", old["file_sha"].as_str().unwrap()));
    assert_eq!(body["commit_sha"].as_str().unwrap(), app.head("globex"));
    assert_eq!(
        app.git("globex", &["show", "main:integrations.yml"]) + "\n",
        text
    );
    assert_eq!(subject(&app, "globex", "main"), "Back to the old one");
    let tr = trailers(&app, "globex", "main");
    assert!(tr.contains(&format!("Restored-From: {old_commit}")), "{tr}");
    assert!(tr.contains("Forced: true"), "{tr}");
    assert_eq!(changed_files(&app, "globex", "main"), ["integrations.yml"]);

    // Restoring what is there already is a no-op: the current head, no commit.
    let head = app.head("globex");
    let res = app.restore(&t, INT, &json!({"commit": old_commit})).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["commit_sha"], head.as_str());
    assert_eq!(app.head("globex"), head);
    app.fsck("globex");
}

/// A restore takes the short id the console and git show (a unique prefix of 7 or more hex
/// digits): the trailer names the whole id. A prefix of no commit is 404, one shorter than 7
/// digits 422, and neither writes anything.
#[tokio::test]
async fn restore_takes_a_unique_prefix_of_the_commit() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let res = app
        .put_integration(&t, &json!({"content": "short: id\n"}))
        .await;
    assert_eq!(res.status(), 200);
    let old: Value = res.json().await.unwrap();
    let old_commit = old["commit_sha"].as_str().unwrap().to_owned();
    let res = app
        .put_integration(&t, &json!({"content": {"later": true}}))
        .await;
    assert_eq!(res.status(), 200);
    let head = app.head("globex");
    // An id of no object: change the last of its 7 digits until git knows none with it.
    let unknown = (0..16)
        .map(|d| format!("{}{:x}", &old_commit[..6], d))
        .find(|p| {
            app.git("globex", &["rev-parse", &format!("--disambiguate={p}")])
                .is_empty()
        })
        .unwrap();
    for (sent, want) in [
        (unknown.as_str(), (404, "unknown_ref")),
        (&old_commit[..6], (422, "invalid_content")),
    ] {
        let res = app.restore(&t, INT, &json!({"commit": sent})).await;
        let (status, problem) = problem(res).await;
        assert_eq!(
            (status, problem["code"].as_str().unwrap()),
            want,
            "{sent}: {problem}"
        );
        assert_eq!(app.head("globex"), head, "{sent}: something was written");
    }
    let short = old_commit[..7].to_ascii_uppercase();
    let res = app.restore(&t, INT, &json!({"commit": short})).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["raw_content"], "short: id\n");
    let tr = trailers(&app, "globex", "main");
    assert!(tr.contains(&format!("Restored-From: {old_commit}")), "{tr}");
    app.fsck("globex");
}

/// `?ref=` and a diff's `from` and `to` take the same short ids as a restore: the same body
/// as the whole id; a prefix of no commit is 404 `unknown_ref`, a bad one 400.
#[tokio::test]
async fn reads_and_diffs_take_a_unique_prefix_of_the_commit() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let res = app.put_integration(&t, &json!({"content": "a: 1\n"})).await;
    assert_eq!(res.status(), 200);
    let first: Value = res.json().await.unwrap();
    let first = first["commit_sha"].as_str().unwrap().to_owned();
    let res = app.put_integration(&t, &json!({"content": "a: 2\n"})).await;
    let second: Value = res.json().await.unwrap();
    let second = second["commit_sha"].as_str().unwrap().to_owned();
    let whole: Value = app
        .get_at(&t, "integration-file", &first)
        .await
        .json()
        .await
        .unwrap();
    let res = app.get_at(&t, "integration-file", &first[..8]).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap(), whole);
    let by_id: Value = app
        .diff(&t, "integration-file", &format!("from={first}&to={second}"))
        .await
        .json()
        .await
        .unwrap();
    let res = app
        .diff(
            &t,
            "integration-file",
            &format!("from={}&to={}", &first[..7], &second[..9]),
        )
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap(), by_id);
    let unknown = (0..16)
        .map(|d| format!("{}{:x}", &first[..6], d))
        .find(|p| {
            app.git("globex", &["rev-parse", &format!("--disambiguate={p}")])
                .is_empty()
        })
        .unwrap();
    for (query, want) in [
        (format!("from={unknown}"), (404, "unknown_ref")),
        (format!("from={}", &first[..6]), (400, "invalid_query")),
    ] {
        let (status, body) = problem(app.diff(&t, "integration-file", &query).await).await;
        assert_eq!((status, body["code"].as_str().unwrap()), want, "{query}");
    }
    let (status, body) = problem(app.get_at(&t, "integration-file", &unknown).await).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (404, "unknown_ref")
    );
}

#[tokio::test]
async fn restore_follows_the_preconditions_of_its_files_put() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let first = app.head("globex");
    let conf_sha = app.blob("globex", "configuration.yml");
    let res = app
        .put_configuration(
            &t,
            &json!({"payload": {"folders": [{"path": "x"}]}, "file_sha": conf_sha}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let current = app.blob("globex", "configuration.yml");
    // The configuration file needs file_sha (or If-Match).
    let (status, body) = problem(app.restore(&t, CONF, &json!({"commit": first})).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (428, Some("precondition_required"))
    );
    // A stale blob id is 409 with the current sha.
    let (status, body) = problem(
        app.restore(&t, CONF, &json!({"commit": first, "file_sha": conf_sha}))
            .await,
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("sha_mismatch")));
    assert_eq!(body["current_sha"], current.as_str());
    // A stale If-Match is 412.
    let res = app
        .send(
            "POST",
            "/plans/configuration-file/restore",
            &t,
            Some(&json!({"commit": first, "file_sha": current})),
            &[("If-Match", "\"0000000000000000000000000000000000000000\"")],
        )
        .await;
    assert_eq!(problem(res).await.0, 412);
    // The integration file of a tenant without source hosting takes no file_sha.
    let (status, body) = problem(
        app.restore(&t, INT, &json!({"commit": first, "file_sha": current}))
            .await,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("file_sha_not_allowed"))
    );
    // A commit that is not in main's history is 404 unknown_ref; a bad one 422.
    let orphan = git_in(
        &app.repo("globex"),
        &["commit-tree", "main^{tree}", "-m", "orphan"],
    );
    let (status, body) = problem(
        app.restore(&t, CONF, &json!({"commit": orphan, "file_sha": current}))
            .await,
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("unknown_ref")));
    for bad in [json!({}), json!({"commit": "abc"}), json!({"commit": 5})] {
        let mut bad = bad;
        bad["file_sha"] = json!(current);
        let (status, body) = problem(app.restore(&t, CONF, &bad).await).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("invalid_content")),
            "{bad}"
        );
    }
    // Reading is not enough.
    let reader = token("globex", &["jit.preferences.read"]);
    let (status, _) = problem(
        app.restore(
            &reader,
            CONF,
            &json!({"commit": first, "file_sha": current}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 403);
    // The right blob id restores; a commit hash as file_sha forces it.
    let res = app
        .restore(&t, CONF, &json!({"commit": first, "file_sha": current}))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.blob("globex", "configuration.yml"), conf_sha);
    assert!(!trailers(&app, "globex", "main").contains("Forced"));
}

#[tokio::test]
async fn diff_is_a_keyed_json_patch_and_the_text_of_git_diff() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let from = app.head("acme");
    let res = app.get_integration(&t).await;
    let mut content: Value = res.json::<Value>().await.unwrap()["content"].clone();
    let added = json!({"account_id": "555555555555", "regions": ["ap-south-1"], "type": "aws"});
    content["aws"]
        .as_array_mut()
        .unwrap()
        .insert(1, added.clone());
    content["drata"]["workspace"] = json!("acme-staging");
    let res = app.put_integration(&t, &json!({"content": content})).await;
    assert_eq!(res.status(), 200);
    let to = app.head("acme");

    let res = app.diff(&t, INT, &format!("from={from}")).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["from"]["commit_sha"], from.as_str());
    assert_eq!(body["to"]["commit_sha"], to.as_str());
    assert_eq!(
        body["to"]["file_sha"],
        app.blob("acme", "integrations.yml").as_str()
    );
    assert_eq!(
        body["patch"],
        json!([
            {"op": "add", "path": "/aws/1", "value": added},
            {"op": "replace", "path": "/drata/workspace", "value": "acme-staging"},
        ])
    );
    let git_diff = app.git("acme", &["diff", &from, &to, "--", "integrations.yml"]);
    assert_eq!(body["text"].as_str().unwrap().trim_end(), git_diff);

    // Explicit `to`, and the same commit twice: an empty patch and text.
    let res = app.diff(&t, INT, &format!("from={from}&to={from}")).await;
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["patch"], json!([]));
    assert_eq!(body["text"], "");
}

/// Folders are diffed by `path`: dropping the first of three is one `remove`, not two
/// replaces and a remove.
#[tokio::test]
async fn the_configuration_diff_is_keyed_by_path() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let folders = |paths: &[&str]| json!({"folders": paths.iter().map(|p| json!({"path": p, "exclude": [format!("{p}/tmp")]})).collect::<Vec<_>>()});
    for (i, paths) in [&["a", "b", "c"][..], &["b", "c"][..]]
        .into_iter()
        .enumerate()
    {
        let sha = app.blob("acme", "configuration.yml");
        let body = json!({"payload": folders(paths), "file_sha": sha});
        assert_eq!(app.put_configuration(&t, &body).await.status(), 200, "{i}");
    }
    let from = app.git("acme", &["rev-parse", "main~1"]);
    let res = app.diff(&t, CONF, &format!("from={from}")).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body["patch"],
        json!([{"op": "remove", "path": "/folders/0"}])
    );
}

#[tokio::test]
async fn diff_refuses_bad_queries_unknown_commits_and_missing_permission() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let orphan = git_in(
        &app.repo("acme"),
        &["commit-tree", "main^{tree}", "-m", "orphan"],
    );
    let cases = [
        ("", 400, "invalid_query"),
        ("from=xyz", 400, "invalid_query"),
        (
            &*format!("from={head}&to=abc") as &str,
            400,
            "invalid_query",
        ),
        (&*format!("from={orphan}"), 404, "unknown_ref"),
        (&*format!("from={head}&to={orphan}"), 404, "unknown_ref"),
    ];
    for (query, status, code) in cases {
        let (s, body) = problem(app.diff(&t, CONF, query).await).await;
        assert_eq!((s, body["code"].as_str()), (status, Some(code)), "{query}");
    }
    let other = token("acme", &["jit.integrations.read"]);
    let (s, _) = problem(app.diff(&other, CONF, &format!("from={head}")).await).await;
    assert_eq!(s, 403);
    let reader = token("acme", &["jit.preferences.read"]);
    let res = app.diff(&reader, CONF, &format!("from={head}")).await;
    assert_eq!(res.status(), 200);
}

/// `git count-objects -v` and every ref: what a dry run must leave as it was.
fn repo_state(app: &TestApp, tenant: &str) -> (String, String, Vec<String>) {
    let objects = app.git(tenant, &["count-objects", "-v"]);
    let refs = app.git(tenant, &["show-ref"]);
    let mut files: Vec<String> = walk(&app.repo(tenant));
    files.sort();
    (objects, refs, files)
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}

#[tokio::test]
async fn a_dry_run_checks_everything_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let before = repo_state(&app, "acme");
    let int_sha = app.blob("acme", "integrations.yml");
    let conf_sha = app.blob("acme", "configuration.yml");
    let res = app
        .send(
            "PUT",
            "/plans/integration-file?dry_run=true",
            &t,
            Some(&json!({"content": {"drata": {"workspace": "w"}}, "file_sha": int_sha})),
            &[("Idempotency-Key", "dry-1")],
        )
        .await;
    assert_eq!(res.status(), 200);
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["commit_sha"], Value::Null);
    assert_eq!(body["content"], json!({"drata": {"workspace": "w"}}));
    assert_eq!(
        body["patch"],
        json!([
            {"op": "remove", "path": "/aws"},
            {"op": "remove", "path": "/drata/user_email"},
            {"op": "replace", "path": "/drata/workspace", "value": "w"},
        ])
    );
    // The blob id a real write would make, and its ETag.
    assert_eq!(etag, format!("\"{}\"", body["file_sha"].as_str().unwrap()));
    assert_ne!(body["file_sha"], int_sha.as_str());

    let res = app
        .post_commits(
            &t,
            "?dry_run=true",
            &json!({
                "integration-file": {"content": {"x": 1}},
                "configuration-file": {"payload": {"folders": []}, "file_sha": conf_sha},
            }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["commit_sha"], Value::Null);
    assert_eq!(
        body[CONF]["patch"],
        json!([{"op": "remove", "path": "/folders/1"}, {"op": "remove", "path": "/folders/0"}])
    );
    let res = app
        .send(
            "POST",
            "/plans/configuration-file/restore?dry_run=true",
            &t,
            Some(&json!({"commit": app.head("acme"), "file_sha": conf_sha})),
            &[],
        )
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["patch"], json!([]));
    assert_eq!(body["commit_sha"], Value::Null);

    // Errors are a real call's: preconditions included.
    let stale = "0".repeat(40);
    let (s, b) = problem(
        app.send(
            "PUT",
            "/plans/integration-file?dry_run=true",
            &t,
            Some(&json!({"content": {}, "file_sha": stale})),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!((s, b["code"].as_str()), (409, Some("sha_mismatch")));
    let (s, b) = problem(
        app.send(
            "PUT",
            "/plans/configuration-file?dry_run=true",
            &t,
            Some(&json!({"payload": {}})),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str()),
        (428, Some("precondition_required"))
    );
    let (s, b) = problem(
        app.send(
            "PUT",
            "/plans/integration-file?dry_run=yes",
            &t,
            Some(&json!({"content": {}})),
            &[],
        )
        .await,
    )
    .await;
    assert_eq!((s, b["code"].as_str()), (400, Some("invalid_query")));

    assert_eq!(
        repo_state(&app, "acme"),
        before,
        "a dry run wrote something"
    );
}

#[tokio::test]
async fn both_files_go_in_one_commit() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let conf_sha = app.blob("acme", "configuration.yml");
    let int_sha = app.blob("acme", "integrations.yml");
    let res = app
        .post_commits(&t, "", &json!({
            "integration-file": {"content": {"aws": []}, "file_sha": int_sha},
            "configuration-file": {"payload": {"folders": [{"path": "a"}]}, "file_sha": conf_sha},
        }))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(app.commits_since("acme", &head), 1);
    let new = app.head("acme");
    assert_eq!(body["commit_sha"], new.as_str());
    assert_eq!(body[INT]["content"], json!({"aws": []}));
    assert_eq!(
        body[INT]["file_sha"],
        app.blob("acme", "integrations.yml").as_str()
    );
    assert_eq!(body[CONF]["content"], json!({"folders": [{"path": "a"}]}));
    assert_eq!(
        body[CONF]["sha"],
        app.blob("acme", "configuration.yml").as_str()
    );
    assert_eq!(
        changed_files(&app, "acme", "main"),
        ["configuration.yml", "integrations.yml"]
    );
    assert_eq!(
        subject(&app, "acme", "main"),
        "Update integrations.yml, configuration.yml"
    );
    assert!(!trailers(&app, "acme", "main").contains("Forced"));
    // One part only, with a message: only that part answers.
    let res = app
        .post_commits(&t, "", &json!({"configuration-file": {"payload": {}, "file_sha": app.blob("acme", "configuration.yml")}, "message": "Only config"}))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert!(body.get(INT).is_none(), "{body}");
    assert_eq!(changed_files(&app, "acme", "main"), ["configuration.yml"]);
    assert_eq!(subject(&app, "acme", "main"), "Only config");
    app.fsck("acme");
}

#[tokio::test]
async fn a_failed_part_writes_nothing_and_is_named_by_its_pointer() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let conf = app.blob("acme", "configuration.yml");
    let stale = "0".repeat(40);
    let ok_int = json!({"content": {"ok": 1}});
    let cases = [
        ("neither part", json!({}), 422, "invalid_content", None),
        (
            "part not an object",
            json!({"integration-file": 3}),
            422,
            "invalid_content",
            None,
        ),
        (
            "bad content",
            json!({"integration-file": {"content": 3}, "configuration-file": {"payload": {}, "file_sha": conf}}),
            422,
            "invalid_content",
            Some("/integration-file/content"),
        ),
        (
            "bad folders",
            json!({"integration-file": ok_int, "configuration-file": {"payload": {"folders": [{"path": ""}]}, "file_sha": conf}}),
            422,
            "invalid_content",
            Some("/configuration-file/payload/folders/0/path"),
        ),
        (
            "no file_sha for configuration",
            json!({"integration-file": ok_int, "configuration-file": {"payload": {}}}),
            428,
            "precondition_required",
            Some("/configuration-file/file_sha"),
        ),
        (
            "stale configuration",
            json!({"integration-file": ok_int, "configuration-file": {"payload": {}, "file_sha": stale}}),
            409,
            "sha_mismatch",
            Some("/configuration-file/file_sha"),
        ),
        (
            "bad file_sha",
            json!({"integration-file": ok_int, "configuration-file": {"payload": {}, "file_sha": "xyz"}}),
            400,
            "invalid_file_sha",
            Some("/configuration-file/file_sha"),
        ),
    ];
    for (name, body, status, code, pointer) in cases {
        let (s, b) = problem(app.post_commits(&t, "", &body).await).await;
        assert_eq!((s, b["code"].as_str()), (status, Some(code)), "{name}: {b}");
        if let Some(pointer) = pointer {
            assert_eq!(b["pointer"], pointer, "{name}: {b}");
            assert!(
                b["detail"].as_str().unwrap().starts_with(pointer),
                "{name}: {b}"
            );
        }
    }
    // Source hosting off: file_sha on the integration part is refused.
    let g = token("globex", ALL);
    let (s, b) = problem(
        app.post_commits(
            &g,
            "",
            &json!({"integration-file": {"content": {}, "file_sha": stale}}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b["code"].as_str(), b["pointer"].as_str()),
        (
            400,
            Some("file_sha_not_allowed"),
            Some("/integration-file/file_sha")
        )
    );
    // Each part needs its own write permission.
    let int_only = token("acme", &["jit.integrations.write"]);
    let (s, b) = problem(app.post_commits(&int_only, "", &json!({"integration-file": ok_int, "configuration-file": {"payload": {}, "file_sha": conf}})).await).await;
    assert_eq!(
        (s, b["pointer"].as_str()),
        (403, Some("/configuration-file"))
    );
    let res = app
        .post_commits(&int_only, "", &json!({"integration-file": ok_int}))
        .await;
    assert_eq!(res.status(), 200);
    let read_only = token("acme", &["jit.integrations.read", "jit.preferences.read"]);
    assert_eq!(
        problem(
            app.post_commits(&read_only, "", &json!({"integration-file": ok_int}))
                .await
        )
        .await
        .0,
        403
    );
    assert_eq!(
        app.commits_since("acme", &head),
        1,
        "only the last request wrote"
    );
    // Wrong method.
    let res = app.send("GET", "/plans/commits", &t, None, &[]).await;
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers()["allow"], "POST");
}

/// Both parts are judged in the contract's order: every part's permission (403), then the
/// 400s, then the 422s (parts, contents, message), then the preconditions (428, 412).
#[tokio::test]
async fn the_parts_of_a_commit_are_checked_in_the_contracts_order() {
    let app = TestApp::spawn().await;
    let head = app.head("acme");
    let conf = app.blob("acme", "configuration.yml");
    let all = token("acme", ALL);
    let int_only = token("acme", &["jit.integrations.write"]);
    let ok_conf = json!({"payload": {}, "file_sha": conf});
    let cases = [
        (
            "a bad message does not hide a part the token may not write",
            &int_only,
            json!({"integration-file": {"content": {}}, "configuration-file": ok_conf, "message": ""}),
            403,
            "insufficient_scope",
        ),
        (
            "a bad first part does not hide a forbidden second one",
            &int_only,
            json!({"integration-file": 3, "configuration-file": ok_conf}),
            403,
            "insufficient_scope",
        ),
        (
            "the second part's 400 comes before the first part's 422",
            &all,
            json!({"integration-file": {"content": 3}, "configuration-file": {"payload": {}, "file_sha": "xyz"}}),
            400,
            "invalid_file_sha",
        ),
        (
            "a bad message comes before a missing precondition",
            &all,
            json!({"configuration-file": {"payload": {}}, "message": ""}),
            422,
            "invalid_content",
        ),
        (
            "If-Match cannot match: this resource has no version of its own",
            &all,
            json!({"integration-file": {"content": {"x": 1}}}),
            412,
            "precondition_failed",
        ),
    ];
    for (name, t, body, status, code) in cases {
        let if_match = [("If-Match", format!("\"{conf}\""))];
        let headers: Vec<(&str, &str)> = if status == 412 {
            if_match.iter().map(|(k, v)| (*k, v.as_str())).collect()
        } else {
            Vec::new()
        };
        for query in ["", "?dry_run=true"] {
            let path = format!("/plans/commits{query}");
            let (s, b) = problem(app.send("POST", &path, t, Some(&body), &headers).await).await;
            assert_eq!(
                (s, b["code"].as_str()),
                (status, Some(code)),
                "{name} {query}: {b}"
            );
        }
    }
    assert_eq!(app.commits_since("acme", &head), 0);
}

/// A restore's commit is part of its body: an unknown one is 404 before a missing
/// precondition (428), and a bad message is 422 as on every write.
#[tokio::test]
async fn a_restore_is_checked_in_the_contracts_order() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let unknown = "1".repeat(40);
    let cases = [
        (
            "configuration-file",
            json!({"commit": unknown}),
            404,
            "unknown_ref",
        ),
        (
            "integration-file",
            json!({"commit": head, "message": ""}),
            422,
            "invalid_content",
        ),
        (
            "configuration-file",
            json!({"commit": head}),
            428,
            "precondition_required",
        ),
    ];
    for (file, body, status, code) in cases {
        let (s, b) = problem(app.restore(&t, file, &body).await).await;
        assert_eq!(
            (s, b["code"].as_str()),
            (status, Some(code)),
            "{file} {body}: {b}"
        );
    }
    assert_eq!(app.commits_since("acme", &head), 0);
}

/// A server whose next write finds `main` moved just before its compare-and-swap (once), by
/// a plain-git commit that sets `file` to `content` and keeps every other entry.
async fn spawn_losing_the_race(file: &'static str, content: &'static str) -> TestApp {
    use std::sync::atomic::{AtomicBool, Ordering};
    let once = std::sync::Arc::new(AtomicBool::new(false));
    let hook = planfiles::storage::WriteHook(std::sync::Arc::new(move |_, repo| {
        if once.swap(true, Ordering::SeqCst) {
            return;
        }
        let blob = common::git_stdin(repo, &["hash-object", "-w", "--stdin"], content);
        let mut entries: Vec<String> = git_in(repo, &["ls-tree", "main"])
            .lines()
            .filter(|l| !l.ends_with(&format!("\t{file}")))
            .map(str::to_owned)
            .collect();
        entries.push(format!("100644 blob {blob}\t{file}"));
        let tree = common::git_stdin(repo, &["mktree"], &(entries.join("\n") + "\n"));
        let commit = git_in(repo, &["commit-tree", &tree, "-p", "main", "-m", "outside"]);
        git_in(repo, &["update-ref", "refs/heads/main", &commit]);
    }));
    TestApp::with().write_hook(hook).spawn().await
}

#[tokio::test]
async fn a_commit_that_changed_neither_file_is_rebased_on() {
    let app = spawn_losing_the_race("notes.txt", "hello\n").await;
    let t = token("acme", ALL);
    let start = app.head("acme");
    let res = app
        .post_commits(&t, "", &json!({
            "integration-file": {"content": {"x": 1}, "file_sha": app.blob("acme", "integrations.yml")},
            "configuration-file": {"payload": {}, "file_sha": app.blob("acme", "configuration.yml")},
        }))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["commit_sha"], app.head("acme").as_str());
    assert_eq!(app.commits_since("acme", &start), 2);
    assert_eq!(app.git("acme", &["show", "main:notes.txt"]), "hello");
    assert_eq!(
        changed_files(&app, "acme", "main"),
        ["configuration.yml", "integrations.yml"]
    );
    app.fsck("acme");
}

#[tokio::test]
async fn a_commit_that_changed_one_of_the_files_is_a_409_for_that_part() {
    let app = spawn_losing_the_race("integrations.yml", "y: 2\n").await;
    let t = token("acme", ALL);
    let (s, b) = problem(app.post_commits(&t, "", &json!({
        "integration-file": {"content": {"x": 3}, "file_sha": app.blob("acme", "integrations.yml")},
        "configuration-file": {"payload": {"folders": []}, "file_sha": app.blob("acme", "configuration.yml")},
    })).await).await;
    assert_eq!(
        (s, b["pointer"].as_str()),
        (409, Some("/integration-file/file_sha"))
    );
    assert_eq!(
        b["current_sha"],
        app.blob("acme", "integrations.yml").as_str()
    );
    assert_eq!(
        subject(&app, "acme", "main"),
        "outside",
        "nothing but the outside commit"
    );
    app.fsck("acme");
}

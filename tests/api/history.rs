//! History endpoints and `?ref=` reads, cross-checked with `git log` and `git show`.
use crate::common;

use common::{git_in, problem, token, TestApp, ALL};
use serde_json::{json, Value};

/// What `git log --first-parent` lists for `file`, newest first.
fn git_log(app: &TestApp, tenant: &str, file: &str) -> Vec<String> {
    app.git(
        tenant,
        &["log", "--first-parent", "--format=%H", "main", "--", file],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

async fn page(app: &TestApp, tenant: &str, file: &str, query: &str) -> Value {
    let res = app.history(&token(tenant, ALL), file, query).await;
    assert_eq!(res.status(), 200, "{query}");
    res.json().await.unwrap()
}

fn commits(page: &Value) -> Vec<String> {
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["commit_sha"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn history_lists_only_the_commits_that_changed_the_file_newest_first() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    for n in 0..3 {
        let res = app.put_integration(&t, &json!({"content": {"n": n}})).await;
        assert_eq!(res.status(), 200);
    }
    let sha = app.blob("globex", "configuration.yml");
    let res = app
        .put_configuration(&t, &json!({"payload": {"folders": []}, "file_sha": sha}))
        .await;
    assert_eq!(res.status(), 200);

    for (file, path) in [
        ("integration-file", "integrations.yml"),
        ("configuration-file", "configuration.yml"),
    ] {
        let body = page(&app, "globex", file, "").await;
        assert_eq!(commits(&body), git_log(&app, "globex", path), "{file}");
        assert_eq!(body["next_cursor"], Value::Null);
    }

    let body = page(&app, "globex", "integration-file", "").await;
    let newest = &body["entries"][0];
    let c = newest["commit_sha"].as_str().unwrap();
    assert_eq!(
        newest["file_sha"],
        app.git("globex", &["rev-parse", &format!("{c}:integrations.yml")])
    );
    assert_eq!(
        newest["author"],
        json!({"name": "Test Er", "email": "tester@example.com"})
    );
    assert_eq!(
        newest["message"],
        app.git("globex", &["log", "-1", "--format=%B", c]) + "\n"
    );
    // globex has no source hosting: a PUT without file_sha is a forced write.
    assert_eq!(newest["forced"], true);
    // The author date in UTC, whatever the machine's time zone.
    assert_eq!(
        newest["date"].as_str().unwrap(),
        common::git_in_utc(
            &app.repo("globex"),
            &[
                "log",
                "-1",
                "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
                "--format=%ad",
                c
            ]
        ),
    );
    let config = page(&app, "globex", "configuration-file", "").await;
    assert_eq!(config["entries"][0]["commit_sha"], app.head("globex"));
    assert_eq!(config["entries"][0]["forced"], false);
}

#[tokio::test]
async fn history_pages_with_a_cursor_cover_every_commit_once_even_while_writes_go_on() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    for n in 0..7 {
        let res = app.put_integration(&t, &json!({"content": {"n": n}})).await;
        assert_eq!(res.status(), 200);
    }
    let expected = git_log(&app, "globex", "integrations.yml");
    assert!(expected.len() >= 8);
    let before = app.head("globex");
    let mut writes_between = 0;
    let mut seen = Vec::new();
    let mut query = "limit=3".to_owned();
    loop {
        let body = page(&app, "globex", "integration-file", &query).await;
        let got = commits(&body);
        assert!(got.len() <= 3);
        seen.extend(got);
        // A write between pages does not shift the pages already started.
        let res = app
            .put_integration(&t, &json!({"content": {"later": seen.len()}}))
            .await;
        assert_eq!(res.status(), 200, "a write between pages");
        writes_between += 1;
        match body["next_cursor"].as_str() {
            Some(cursor) => query = format!("limit=3&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, expected);
    // Each write between pages made a commit that the pages did not list.
    assert_eq!(app.commits_since("globex", &before), writes_between);
    assert!(writes_between >= 3);
}

#[tokio::test]
async fn a_cursor_holds_on_every_instance_that_shares_the_cursor_key_file() {
    // Shards (or containers) on their own data dirs, one `storage.cursor_key_file`.
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("cursor.key");
    let a = TestApp::with().cursor_key_file(&key).spawn().await;
    let b = TestApp::with().cursor_key_file(&key).spawn().await;
    let alone = TestApp::spawn().await;
    assert!(
        key.is_file(),
        "the first start makes the key where it is configured"
    );
    assert!(!a.data_dir.path().join("cursor.key").exists());
    // The fixture's acme has three versions of its integration file on every copy.
    let t = token("acme", ALL);
    let first = page(&a, "acme", "integration-file", "limit=1").await;
    let cursor = first["next_cursor"].as_str().unwrap();
    let query = format!("limit=1&cursor={cursor}");
    let on_a = page(&a, "acme", "integration-file", &query).await;
    let on_b = page(&b, "acme", "integration-file", &query).await;
    assert_eq!(commits(&on_b), commits(&on_a));
    assert_eq!(commits(&on_b).len(), 1);
    // An instance with its own key refuses the cursor.
    let res = alone.history(&t, "integration-file", &query).await;
    let (status, body) = problem(res).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_query"))
    );
}

#[tokio::test]
async fn bad_history_queries_are_400_invalid_query_and_need_the_read_permission() {
    let app = TestApp::spawn().await;
    let other_tenant_commit = app.head("acme");
    let cases = [
        "limit=0".to_owned(),
        "limit=501".to_owned(),
        "limit=abc".to_owned(),
        "limit=1&limit=2".to_owned(),
        "cursor=nothex".to_owned(),
        format!("cursor={other_tenant_commit}"),
        format!("cursor={}", "0".repeat(40)),
    ];
    for query in cases {
        let res = app
            .history(&token("globex", ALL), "integration-file", &query)
            .await;
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "invalid_query"),
            "{query}"
        );
    }
    let res = app
        .history(
            &token("globex", &["jit.preferences.read"]),
            "integration-file",
            "",
        )
        .await;
    assert_eq!(problem(res).await.0, 403);
    let res = app
        .history(
            &token("globex", &["jit.integrations.read"]),
            "integration-file",
            "limit=500",
        )
        .await;
    assert_eq!(res.status(), 200);
    let res = app
        .history(&token("nobody", ALL), "integration-file", "")
        .await;
    assert_eq!(problem(res).await.1["code"], "tenant_not_found");
}

#[tokio::test]
async fn an_old_version_is_read_with_ref() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let old = app.head("acme");
    let old_text = app.git("acme", &["show", &format!("{old}:integrations.yml")]);
    let current: Value = app.get_integration(&t).await.json().await.unwrap();
    app.put_integration(
        &t,
        &json!({"content": {"new": true}, "file_sha": current["file_sha"]}),
    )
    .await;

    let res = app.get_at(&t, "integration-file", &old).await;
    assert_eq!(res.status(), 200);
    let old_blob = app.git("acme", &["rev-parse", &format!("{old}:integrations.yml")]);
    assert_eq!(
        res.headers()["etag"].to_str().unwrap(),
        format!("\"{old_blob}\"")
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["raw_content"].as_str().unwrap().trim_end(), old_text);
    assert_eq!(body["file_sha"], old_blob);
    assert_eq!(body["commit_sha"], old);

    let upper = old.to_uppercase();
    let body: Value = app
        .get_at(&t, "configuration-file", &upper)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["sha"],
        app.git("acme", &["rev-parse", &format!("{old}:configuration.yml")])
    );

    // The first commit of the tenant is in history too.
    let root = app.git("acme", &["rev-list", "--max-parents=0", "main"]);
    assert_eq!(
        app.get_at(&t, "integration-file", &root).await.status(),
        200
    );
}

#[tokio::test]
async fn refs_outside_the_tenants_history_are_refused() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let blob = app.blob("acme", "integrations.yml");
    let tree = app.git("acme", &["rev-parse", "main^{tree}"]);
    let cases = [
        (app.head("globex"), 404, "unknown_ref"),
        ("0".repeat(40), 404, "unknown_ref"),
        (blob, 404, "unknown_ref"),
        (tree, 404, "unknown_ref"),
        ("main".to_owned(), 400, "invalid_query"),
        ("HEAD~1".to_owned(), 400, "invalid_query"),
        (app.head("acme")[..6].to_owned(), 400, "invalid_query"),
    ];
    for (r, status, code) in cases {
        let (s, body) = problem(app.get_at(&t, "integration-file", &r).await).await;
        assert_eq!((s, body["code"].as_str().unwrap()), (status, code), "{r}");
    }
    // A prefix of 7 or more hex digits names the commit, as git and the console abbreviate.
    let res = app
        .get_at(&t, "integration-file", &app.head("acme")[..12])
        .await;
    assert_eq!(res.status(), 200);
    // A dangling commit (never on main) is not history either.
    let dangling = git_in(
        &app.repo("acme"),
        &["commit-tree", "main^{tree}", "-m", "dangling"],
    );
    let (s, body) = problem(app.get_at(&t, "integration-file", &dangling).await).await;
    assert_eq!((s, body["code"].as_str().unwrap()), (404, "unknown_ref"));
    // Reading an old version needs the read permission.
    let res = app
        .get_at(
            &token("acme", &["jit.preferences.read"]),
            "integration-file",
            &app.head("acme"),
        )
        .await;
    assert_eq!(problem(res).await.0, 403);
}

#[tokio::test]
async fn a_commit_pushed_with_plain_git_is_served_and_listed_at_once() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    // Warm up any cache the server may have.
    let before: Value = app.get_integration(&t).await.json().await.unwrap();

    let work = tempfile::tempdir().unwrap();
    let clone = work.path().join("acme");
    let out = std::process::Command::new("git")
        .args(["clone", "-q"])
        .arg(app.repo("acme"))
        .arg(&clone)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(clone.join("integrations.yml"), "pushed: {by: hand}\n").unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(&clone)
            .args([
                "-c",
                "user.name=Hand Pusher",
                "-c",
                "user.email=hand@example.com",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["commit", "-qam", "Edit by hand"]);
    git(&["push", "-q", "origin", "main"]);

    let after: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_ne!(after["file_sha"], before["file_sha"]);
    assert_eq!(after["content"], json!({"pushed": {"by": "hand"}}));
    let history = page(&app, "acme", "integration-file", "limit=1").await;
    assert_eq!(history["entries"][0]["commit_sha"], app.head("acme"));
    assert_eq!(history["entries"][0]["author"]["name"], "Hand Pusher");
    assert_eq!(history["entries"][0]["forced"], false);
}

/// A file that rarely changes, under a long history: each page looks at a bounded number of
/// commits, so pages may be short or empty, but following the cursors lists exactly what
/// `git log` lists.
#[tokio::test]
async fn a_rarely_changed_file_pages_through_a_long_history_in_bounded_steps() {
    let app = TestApp::spawn().await;
    let repo = app.repo("globex");
    let head = app.head("globex");
    let config = app.blob("globex", "configuration.yml");
    // 5,000 commits that change only integrations.yml, on top of the current head.
    let mut stream = String::new();
    for i in 0..5_000 {
        let file = format!("n: {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter Import <import@example.com> {} +0000\ndata 7\nimport\n",
            1_700_000_000 + i
        ));
        if i == 0 {
            stream.push_str(&format!("from {head}\n"));
        }
        stream.push_str(&format!(
            "M 100644 {config} configuration.yml\nM 100644 inline integrations.yml\ndata {}\n{file}\n",
            file.len()
        ));
    }
    common::git_stdin(&repo, &["fast-import", "--quiet"], &stream);
    let expected = git_log(&app, "globex", "configuration.yml");
    let (mut seen, mut pages, mut empty) = (Vec::new(), 0, 0);
    let mut query = "limit=50".to_owned();
    loop {
        let started = std::time::Instant::now();
        let body = page(&app, "globex", "configuration-file", &query).await;
        assert!(
            started.elapsed().as_secs() < 2,
            "a page took {:?}",
            started.elapsed()
        );
        let got = commits(&body);
        empty += usize::from(got.is_empty());
        seen.extend(got);
        pages += 1;
        match body["next_cursor"].as_str() {
            Some(cursor) => query = format!("limit=50&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, expected);
    assert!(empty >= 1 && pages >= 3, "{pages} pages, {empty} empty");
    // A cursor must name a commit of the tenant: a blob id is refused.
    let res = app
        .history(
            &token("globex", ALL),
            "configuration-file",
            &format!("cursor={config}"),
        )
        .await;
    assert_eq!(problem(res).await.0, 400);
}

/// A cursor names where a page of `main`'s history ended, and nothing else: a commit that is
/// in the object store but not in that history (a refused or undone write, a side branch) is
/// refused, even with the tag of a real cursor, so its author and message never show.
#[tokio::test]
async fn a_cursor_cannot_start_a_page_at_a_commit_outside_the_history() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    for i in 0..3 {
        let res = app
            .put_integration(&t, &serde_json::json!({"content": {"n": i}}))
            .await;
        assert_eq!(res.status(), 200);
    }
    let res = app.history(&t, "integration-file", "limit=1").await;
    let page: Value = res.json().await.unwrap();
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    // The real cursor works.
    let res = app
        .history(&t, "integration-file", &format!("limit=1&cursor={cursor}"))
        .await;
    assert_eq!(res.status(), 200);
    // A dangling commit made with plain git, with the real cursor's tag.
    let repo = app.repo("acme");
    let tree = common::git_in(&repo, &["rev-parse", "main^{tree}"]);
    let dangling = common::git_in(&repo, &["commit-tree", &tree, "-p", "main", "-m", "secret"]);
    let (_, tag) = cursor.split_once('.').unwrap();
    for forged in [format!("{dangling}.{tag}"), dangling.clone()] {
        let res = app
            .history(&t, "integration-file", &format!("cursor={forged}"))
            .await;
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, "invalid_query")
        );
    }
}

/// Builds a commit with plain git: `parents`, and the tree of `base` with `integrations.yml`
/// set to `text`.
fn commit_with(app: &TestApp, base: &str, parents: &[&str], text: &str, msg: &str) -> String {
    let repo = app.repo("globex");
    let blob = common::git_stdin(&repo, &["hash-object", "-w", "--stdin"], text);
    let conf = app.git(
        "globex",
        &["rev-parse", &format!("{base}:configuration.yml")],
    );
    let tree = common::git_stdin(
        &repo,
        &["mktree"],
        &format!("100644 blob {blob}\tintegrations.yml\n100644 blob {conf}\tconfiguration.yml\n"),
    );
    let mut args = vec!["commit-tree", tree.as_str(), "-m", msg];
    for p in parents {
        args.extend(["-p", p]);
    }
    app.git("globex", &args)
}

/// Merges are followed on their first parent only: a merge that changes the file against its
/// first parent is listed, the side branch's commits never are, and a merge that keeps the
/// first parent's file is not. Pages of one entry walk across the merges the same way.
#[tokio::test]
async fn history_follows_merges_on_their_first_parent_only() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let base = app.head("globex");
    let older = git_log(&app, "globex", "integrations.yml");
    // A side branch from base, and a write on main meanwhile.
    let side = commit_with(&app, &base, &[&base], "side: 1\n", "side one");
    let res = app
        .put_integration(&t, &json!({"content": {"main": 1}}))
        .await;
    assert_eq!(res.status(), 200);
    let written = app.head("globex");
    // Merge 1 takes the side's file: a change against its first parent.
    let merge1 = commit_with(&app, &side, &[&written, &side], "side: 1\n", "merge one");
    // Merge 2 keeps main's file and ignores a newer side commit.
    let side2 = commit_with(&app, &side, &[&side], "side: 2\n", "side two");
    let merge2 = commit_with(&app, &merge1, &[&merge1, &side2], "side: 1\n", "merge two");
    app.git(
        "globex",
        &["update-ref", "refs/heads/main", &merge2, &written],
    );

    let mut expected = vec![merge1.clone(), written.clone()];
    expected.extend(older);
    let body = page(&app, "globex", "integration-file", "").await;
    assert_eq!(commits(&body), expected);
    assert_eq!(commits(&body), git_log(&app, "globex", "integrations.yml"));
    assert_eq!(body["entries"][0]["message"], "merge one\n");
    assert_eq!(
        body["entries"][0]["file_sha"],
        app.git(
            "globex",
            &["rev-parse", &format!("{merge1}:integrations.yml")]
        )
    );
    let mut seen = Vec::new();
    let mut query = "limit=1".to_owned();
    loop {
        let body = page(&app, "globex", "integration-file", &query).await;
        seen.extend(commits(&body));
        match body["next_cursor"].as_str() {
            Some(cursor) => query = format!("limit=1&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, expected);
    // The configuration file never changed on the first-parent line.
    let config = page(&app, "globex", "configuration-file", "").await;
    for c in [&merge1, &merge2, &side, &side2, &written] {
        assert!(!commits(&config).contains(c), "{c}");
    }
}

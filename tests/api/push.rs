//! `git push` to `/git/<tenant>.git`: a valid change lands on `main` with its pusher on a note; every refusal (other refs, tags, deletions, non-fast-forwards, other files, symlinks, broken YAML, a validator, a missing permission, a pack over the limit, a pack bomb) is printed by `git push` and changes nothing; pushes racing API writes lose nothing.
use crate::common::{self, git_in, shipped_schemas, token, TestApp, ALL};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const REPOS_READ: &str = "planfiles.repos.read";
pub(crate) const WRITE_BOTH: &[&str] = &[
    REPOS_READ,
    "jit.integrations.write",
    "jit.preferences.write",
];

pub(crate) fn git(dir: &Path, token: &str, args: &[&str]) -> Output {
    Command::new("git")
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("GIT_AUTHOR_NAME", "Client Author")
        .env("GIT_AUTHOR_EMAIL", "author@client.example")
        .env("GIT_COMMITTER_NAME", "Client Author")
        .env("GIT_COMMITTER_EMAIL", "author@client.example")
        .args([
            "-c",
            &format!("http.extraHeader=Authorization: Bearer {token}"),
        ])
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A clone of `tenant` in a new temporary directory.
pub(crate) fn clone(app: &TestApp, tenant: &str, token: &str) -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    ok(git(
        work.path(),
        token,
        &["clone", "-q", &app.url(&format!("/git/{tenant}.git")), "c"],
    ));
    let dir = work.path().join("c");
    (work, dir)
}

/// Writes `file` in the clone and commits it; the new commit's id.
fn commit(dir: &Path, file: &str, text: &str, message: &str) -> String {
    std::fs::write(dir.join(file), text).unwrap();
    ok(git(dir, "", &["add", "-A"]));
    ok(git(dir, "", &["commit", "-qm", message]));
    git_in(&dir.join(".git"), &["rev-parse", "HEAD"])
}

/// `git push origin <args>`: whether it succeeded, and what it printed.
pub(crate) fn push(dir: &Path, token: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["push", "origin"];
    all.extend_from_slice(args);
    let out = git(dir, token, &all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_valid_push_lands_on_main_with_its_author_and_its_pusher() {
    let app = TestApp::spawn().await;
    let t = token("acme", WRITE_BOTH);
    // An API write first: the writer keeps the repository open, from before the push makes
    // its first pack (acme was never packed); its next write must see the pushed commits.
    let res = app
        .put_integration(
            &token("acme", ALL),
            &json!({"content": {"before": {"a": 1}}}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let (_work, dir) = clone(&app, "acme", &t);
    let text = "aws:\n  - account_id: \"123456789012\"\n    regions: [us-east-1]\n    type: aws\n# pushed\n";
    let first = commit(&dir, "integrations.yml", text, "Add a comment by push");
    let second = commit(
        &dir,
        "configuration.yml",
        "folders:\n  - path: src\n",
        "Scan src only",
    );
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(pushed, "{stderr}");
    assert!(stderr.contains("remote: planfiles: main is at"), "{stderr}");
    assert_eq!(app.head("acme"), second);
    let repo = app.repo("acme");
    git_in(&repo, &["fsck", "--strict"]);
    assert_eq!(
        git_in(&repo, &["log", "-2", "--format=%an <%ae> %s", "main"]),
        "Client Author <author@client.example> Scan src only\nClient Author <author@client.example> Add a comment by push"
    );
    let note = git_in(&repo, &["notes", "--ref=planfiles", "show", &second]);
    assert!(
        note.starts_with("Pushed-By: Test Er <tester@example.com>\nRequest-Id: "),
        "{note}"
    );
    assert!(git_in(&repo, &["merge-base", "--is-ancestor", &first, "main"]).is_empty());
    let body: Value = app
        .get_integration(&token("acme", ALL))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["raw_content"], text);
    // The history shows the client's commits.
    let page: Value = app
        .history(&token("acme", ALL), "configuration-file", "limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["entries"][0]["commit_sha"], second.as_str());
    assert_eq!(
        page["entries"][0]["author"]["email"],
        "author@client.example"
    );
    // ... and who pushed them, which an API write's entry does not carry.
    assert_eq!(
        page["entries"][0]["pushed_by"],
        json!({"name": "Test Er", "email": "tester@example.com"})
    );
    let api: Value = app
        .history(&token("acme", ALL), "integration-file", "limit=2")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(api["entries"][0]["commit_sha"], first.as_str());
    assert!(api["entries"][1].get("pushed_by").is_none(), "{api}");
}

#[tokio::test]
async fn refused_pushes_say_why_and_change_nothing() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("acme", WRITE_BOTH);
    let only_integrations = token("acme", &[REPOS_READ, "jit.integrations.write"]);
    let valid = |i: u32| {
        format!(
            "aws:\n  - account_id: \"{:012}\"\n    regions: [us-east-1]\n    type: aws\n",
            100_000 + i
        )
    };
    // Each case: what it does in a fresh clone (returns the push's arguments and token), and
    // what git must print.
    type Setup = Box<dyn Fn(&Path) -> (Vec<String>, String)>;
    let cases: Vec<(&str, Setup, &str)> = vec![
        (
            "another branch",
            Box::new({
                let t = t.clone();
                move |d: &Path| {
                    commit(d, "integrations.yml", &valid(1), "x");
                    (vec!["main:refs/heads/other".into()], t.clone())
                }
            }),
            "only refs/heads/main can be pushed here",
        ),
        (
            "a tag",
            Box::new({
                let t = t.clone();
                move |d: &Path| {
                    ok(git(d, "", &["tag", "v1"]));
                    (vec!["v1".into()], t.clone())
                }
            }),
            "only refs/heads/main can be pushed here",
        ),
        (
            "a deletion",
            Box::new({
                let t = t.clone();
                move |_d: &Path| (vec![":refs/heads/main".into()], t.clone())
            }),
            "main cannot be deleted",
        ),
        (
            "a forced non-fast-forward",
            Box::new({
                let t = t.clone();
                move |d: &Path| {
                    ok(git(d, "", &["reset", "-q", "--hard", "HEAD~1"]));
                    commit(d, "integrations.yml", &valid(2), "rewritten");
                    (vec!["--force".into(), "main".into()], t.clone())
                }
            }),
            "non-fast-forward",
        ),
        (
            "a third file",
            Box::new({
                let t = t.clone();
                move |d: &Path| {
                    commit(d, "notes.txt", "hello\n", "a third file");
                    (vec!["main".into()], t.clone())
                }
            }),
            "notes.txt: a tenant's repository holds only integrations.yml and configuration.yml",
        ),
        (
            "a symlink",
            Box::new({
                let t = t.clone();
                move |d: &Path| {
                    std::fs::remove_file(d.join("configuration.yml")).unwrap();
                    std::os::unix::fs::symlink("integrations.yml", d.join("configuration.yml"))
                        .unwrap();
                    ok(git(d, "", &["add", "-A"]));
                    ok(git(d, "", &["commit", "-qm", "a link"]));
                    (vec!["main".into()], t.clone())
                }
            }),
            "configuration.yml must be a regular file (mode 100644), not mode 120000",
        ),
        (
            "broken YAML",
            Box::new({
                let t = t.clone();
                move |d: &Path| {
                    commit(d, "integrations.yml", "aws: [unclosed\n", "broken");
                    (vec!["main".into()], t.clone())
                }
            }),
            "integrations.yml at ",
        ),
        (
            "a validator, in the second of three commits",
            Box::new({
                let t = t.clone();
                move |d: &Path| {
                    commit(d, "integrations.yml", &valid(3), "one");
                    let bad = commit(
                        d,
                        "integrations.yml",
                        &valid(4).replace("000000100004", "12"),
                        "two",
                    );
                    commit(d, "integrations.yml", &valid(5), "three");
                    std::fs::write(d.join(".bad"), &bad[..10]).unwrap();
                    (vec!["main".into()], t.clone())
                }
            }),
            "/aws/0/account_id: \"12\" does not match",
        ),
        (
            "the configuration file without its permission",
            Box::new({
                let t = only_integrations.clone();
                move |d: &Path| {
                    commit(d, "configuration.yml", "folders:\n  - path: web\n", "conf");
                    (vec!["main".into()], t.clone())
                }
            }),
            "configuration.yml at ",
        ),
    ];
    for (name, setup, want) in cases {
        let head = app.head("acme");
        let (_work, dir) = clone(&app, "acme", &t);
        let (args, tok) = setup(&dir);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (pushed, stderr) = push(&dir, &tok, &args);
        assert!(!pushed, "{name}: the push went through");
        assert!(stderr.contains(want), "{name}: git printed {stderr}");
        if let Ok(bad) = std::fs::read_to_string(dir.join(".bad")) {
            assert!(
                stderr.contains(&format!("integrations.yml at {bad}")),
                "{name}: the commit is named: {stderr}"
            );
            assert!(
                stderr.contains("remote: planfiles: integrations.yml at"),
                "{name}: the line is printed: {stderr}"
            );
        }
        if name.contains("permission") {
            assert!(
                stderr.contains("the token lacks jit.preferences.write"),
                "{stderr}"
            );
        }
        assert_eq!(app.head("acme"), head, "{name}: main moved");
        // Nothing of a refused push is kept: no pack, no quarantine.
        let objects = app.repo("acme").join("objects");
        let kept: Vec<String> = std::fs::read_dir(objects.join("pack"))
            .into_iter()
            .flatten()
            .chain(std::fs::read_dir(&objects).unwrap())
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.ends_with(".pack") || n.starts_with("planfiles-incoming-"))
            .collect();
        assert!(kept.is_empty(), "{name}: kept {kept:?}");
        for r in ["refs/heads/other", "refs/tags/v1"] {
            assert!(
                !common::git_succeeds(&app.repo("acme"), &["rev-parse", "--verify", "-q", r]),
                "{name}: {r} exists"
            );
        }
    }
}

#[tokio::test]
async fn a_pack_over_the_limit_or_a_pack_bomb_is_refused() {
    let app = TestApp::spawn().await;
    let t = token("acme", WRITE_BOTH);
    // Incompressible bytes past git.push_max_bytes (10 MiB): 413, which git prints.
    let (_work, dir) = clone(&app, "acme", &t);
    let head = app.head("acme");
    let mut noise = vec![0u8; 11 * 1024 * 1024];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(dir.join("integrations.yml"), &noise).unwrap();
    ok(git(&dir, "", &["commit", "-qam", "big"]));
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(!pushed);
    assert!(stderr.contains("413"), "{stderr}");
    assert_eq!(app.head("acme"), head);
    // 64 MiB of zeros compress to a small pack: refused from the object's header, fast.
    let (_work, dir) = clone(&app, "acme", &t);
    std::fs::write(dir.join("integrations.yml"), vec![b'0'; 64 * 1024 * 1024]).unwrap();
    ok(git(&dir, "", &["commit", "-qam", "bomb"]));
    let started = std::time::Instant::now();
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(!pushed);
    assert!(stderr.contains("inflates to 67108864 bytes"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(app.head("acme"), head);
}

/// Pushes and API writes of one tenant at once: every push git reported pushed and every
/// API write answered 200 is in `main`'s history afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_racing_api_writes_lose_nothing() {
    let app = TestApp::spawn().await;
    let t = token("globex", WRITE_BOTH);
    let url = app.url("/git/globex.git");
    let mut pushers = Vec::new();
    for p in 0..3 {
        let (t, url) = (t.clone(), url.clone());
        pushers.push(tokio::task::spawn_blocking(move || {
            let work = tempfile::tempdir().unwrap();
            ok(git(work.path(), &t, &["clone", "-q", &url, "c"]));
            let dir = work.path().join("c");
            let mut acked = Vec::new();
            for i in 0..6 {
                for _attempt in 0..20 {
                    ok(git(&dir, &t, &["fetch", "-q", "origin"]));
                    ok(git(&dir, "", &["reset", "-q", "--hard", "origin/main"]));
                    let text = format!("folders:\n  - path: pusher{p}/{i}\n");
                    let c = commit(&dir, "configuration.yml", &text, &format!("push {p}.{i}"));
                    if push(&dir, &t, &["main"]).0 {
                        acked.push(c);
                        break;
                    }
                }
            }
            acked
        }));
    }
    let mut api_acked = Vec::new();
    for i in 0..20 {
        let res = app
            .put_integration(
                &token("globex", ALL),
                &json!({"content": {"github": {"org": format!("o{i}")}}}),
            )
            .await;
        assert_eq!(res.status(), 200);
        let body: Value = res.json().await.unwrap();
        api_acked.push(body["commit_sha"].as_str().unwrap().to_owned());
    }
    let mut pushed = Vec::new();
    for p in pushers {
        pushed.extend(p.await.unwrap());
    }
    assert!(pushed.len() >= 6, "pushes went through: {}", pushed.len());
    let repo = app.repo("globex");
    for c in pushed.iter().chain(&api_acked) {
        assert!(
            common::git_succeeds(&repo, &["merge-base", "--is-ancestor", c, "main"]),
            "acknowledged commit {c} is not in main's history"
        );
    }
    git_in(&repo, &["fsck", "--strict"]);
}

/// A merge made by `git pull` (the client's side first) would take main's own commits off
/// its first-parent line: refused with the advice to rebase; the rebased push goes in, and
/// each of its commits is checked.
#[tokio::test]
async fn a_merge_that_leaves_main_off_the_first_parent_line_is_refused() {
    let app = TestApp::spawn().await;
    let t = token("acme", WRITE_BOTH);
    let (_work, dir) = clone(&app, "acme", &t);
    commit(&dir, "integrations.yml", "fixed: {a: 1}\n", "local change");
    let res = app
        .put_configuration(
            &token("acme", ALL),
            &json!({"payload": {"folders": []}, "file_sha": app.blob("acme", "configuration.yml")}),
        )
        .await;
    assert_eq!(res.status(), 200);
    ok(git(
        &dir,
        &t,
        &["pull", "-q", "--no-rebase", "--no-edit", "origin", "main"],
    ));
    let head = app.head("acme");
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(!pushed, "the merge went in");
    assert!(stderr.contains("rebase on main"), "{stderr}");
    assert_eq!(app.head("acme"), head);
    ok(git(&dir, &t, &["reset", "-q", "--hard", "HEAD~1"]));
    ok(git(&dir, &t, &["pull", "-q", "--rebase", "origin", "main"]));
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(pushed, "{stderr}");
    // main's earlier head is still on its first-parent line.
    assert_eq!(git_in(&app.repo("acme"), &["rev-parse", "main~1"]), head);
    // A rebased line with a broken commit in it is refused.
    commit(
        &dir,
        "integrations.yml",
        "aws: [unclosed\n",
        "broken for a moment",
    );
    commit(&dir, "integrations.yml", "fixed: {a: 2}\n", "fixed again");
    let head = app.head("acme");
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(
        !pushed && stderr.contains("integrations.yml at "),
        "{stderr}"
    );
    assert_eq!(app.head("acme"), head);
}

/// The real binary with a data dir given relative to its working folder (as `cargo run` and
/// config.toml's default `data` do): a push lands.
#[tokio::test]
async fn a_push_lands_with_a_relative_data_dir() {
    use crate::common::process::{data_dir_with_fixture, planfiles, serve_command};
    let dir = data_dir_with_fixture();
    let mut cmd = planfiles(dir.path());
    cmd.env("PLANFILES_DATA_DIR", "data");
    let server = serve_command(cmd);
    let t = token("acme", WRITE_BOTH);
    let work = tempfile::tempdir().unwrap();
    ok(git(
        work.path(),
        &t,
        &["clone", "-q", &server.url("/git/acme.git"), "c"],
    ));
    let clone = work.path().join("c");
    let pushed = commit(&clone, "integrations.yml", "relative: {a: 1}\n", "relative");
    let (ok_, stderr) = push(&clone, &t, &["main"]);
    assert!(ok_, "{stderr}");
    assert_eq!(
        git_in(
            &dir.path().join("data/tenants/acme.git"),
            &["rev-parse", "main"]
        ),
        pushed
    );
}

/// A push waits in its tenant's writer queue as an API write does: with the queue full (one
/// API write waiting behind another process's write lock, depth 1) a push is refused at once
/// as busy and changes nothing; once the queue drains the same push, rebased, lands after the
/// API write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_takes_its_turn_in_the_tenants_writer_queue() {
    let app = TestApp::with()
        .limits(planfiles::http::Limits {
            write_queue_depth: 1,
            queue_timeout: std::time::Duration::from_secs(10),
            ..Default::default()
        })
        .spawn()
        .await;
    let t = token("globex", WRITE_BOTH);
    let (_work, dir) = clone(&app, "globex", &t);
    let head = app.head("globex");
    let lock = common::hold_write_lock(&app.repo("globex"));
    let queued = {
        let (url, t) = (app.url("/plans/integration-file"), token("globex", ALL));
        tokio::spawn(async move {
            reqwest::Client::new()
                .put(url)
                .bearer_auth(t)
                .json(&json!({"content": {"github": {"org": "queued"}}}))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    // The API write is in the queue (waiting on the lock) before the push comes.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let pushed = commit(
        &dir,
        "configuration.yml",
        "folders:\n  - path: pushed\n",
        "push",
    );
    let started = std::time::Instant::now();
    let (t2, dir2) = (t.clone(), dir.clone());
    let (ok_push, said) = tokio::task::spawn_blocking(move || push(&dir2, &t2, &["main"]))
        .await
        .unwrap();
    assert!(!ok_push, "a push into a full queue is refused: {said}");
    assert!(said.contains("busy"), "git says why: {said}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "refused at once, not after the lock: {:?}",
        started.elapsed()
    );
    assert_eq!(app.head("globex"), head, "nothing moved");
    drop(lock);
    assert_eq!(queued.await.unwrap(), 200);
    let (t2, dir2) = (t.clone(), dir.clone());
    let (ok_push, said) = tokio::task::spawn_blocking(move || {
        ok(git(
            &dir2,
            &t2,
            &["pull", "-q", "--rebase", "origin", "main"],
        ));
        push(&dir2, &t2, &["main"])
    })
    .await
    .unwrap();
    assert!(ok_push, "{said}");
    let repo = app.repo("globex");
    let main = git_in(&repo, &["rev-parse", "main"]);
    assert_ne!(main.trim(), pushed, "rebased onto the API write");
    assert_eq!(
        git_in(&repo, &["show", "main:configuration.yml"]),
        "folders:\n  - path: pushed"
    );
    assert!(git_in(&repo, &["show", "main:integrations.yml"]).contains("queued"));
}

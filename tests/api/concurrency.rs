//! Concurrent writers on one tenant: no acknowledged write is lost, and writes to the two
//! files never conflict with each other.
use crate::common;

use common::{token, TestApp, ALL};
use serde_json::{json, Value};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_modify_write_with_file_sha_loses_nothing() {
    let app = Arc::new(TestApp::spawn().await);
    let t = token("acme", ALL);
    let start_head = app.head("acme");
    const WRITERS: usize = 8;
    const EACH: usize = 5;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (app, t) = (app.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut conflicts) = (0, 0);
            for i in 0..EACH {
                loop {
                    let cur: Value = app.get_configuration(&t).await.json().await.unwrap();
                    let mut content = cur["content"].clone();
                    content["folders"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"path": format!("w{w}-{i}")}));
                    let res = app
                        .put_configuration(&t, &json!({"payload": content, "file_sha": cur["sha"]}))
                        .await;
                    match res.status().as_u16() {
                        200 => {
                            ok += 1;
                            break;
                        }
                        409 => conflicts += 1,
                        other => panic!("unexpected {other}: {}", res.text().await.unwrap()),
                    }
                }
            }
            (ok, conflicts)
        }));
    }
    let mut acknowledged = 0;
    let mut conflicts = 0;
    for task in tasks {
        let (ok, c) = task.await.unwrap();
        acknowledged += ok;
        conflicts += c;
    }
    assert_eq!(acknowledged, WRITERS * EACH);
    let commits = app.commits_since("acme", &start_head);
    assert_eq!(
        commits, acknowledged,
        "every 200 is exactly one commit ({conflicts} conflicts)"
    );
    let body: Value = app.get_configuration(&t).await.json().await.unwrap();
    let paths: Vec<&str> = body["content"]["folders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for w in 0..WRITERS {
        for i in 0..EACH {
            assert!(
                paths.contains(&format!("w{w}-{i}").as_str()),
                "w{w}-{i} was lost"
            );
        }
    }
    app.fsck("acme");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_sha_exactly_one_writer_wins() {
    let app = Arc::new(TestApp::spawn().await);
    let t = token("acme", ALL);
    for round in 0..5 {
        let sha = app.blob("acme", "integrations.yml");
        let mut tasks = Vec::new();
        for w in 0..6 {
            let (app, t, sha) = (app.clone(), t.clone(), sha.clone());
            tasks.push(tokio::spawn(async move {
                app.put_integration(
                    &t,
                    &json!({"content": {"round": round, "writer": w}, "file_sha": sha}),
                )
                .await
                .status()
                .as_u16()
            }));
        }
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.unwrap());
        }
        statuses.sort();
        assert_eq!(statuses, [200, 409, 409, 409, 409, 409], "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_to_the_two_files_never_conflict() {
    let app = Arc::new(TestApp::spawn().await);
    let t = token("acme", ALL);
    let start_head = app.head("acme");
    const N: usize = 20;
    let integration = {
        let (app, t) = (app.clone(), t.clone());
        tokio::spawn(async move {
            for i in 0..N {
                let sha = app.get_integration(&t).await.json::<Value>().await.unwrap()["file_sha"]
                    .clone();
                let res = app
                    .put_integration(&t, &json!({"content": {"i": i}, "file_sha": sha}))
                    .await;
                assert_eq!(res.status(), 200, "integration write {i}");
            }
        })
    };
    let configuration = {
        let (app, t) = (app.clone(), t.clone());
        tokio::spawn(async move {
            for i in 0..N {
                let sha = app
                    .get_configuration(&t)
                    .await
                    .json::<Value>()
                    .await
                    .unwrap()["sha"]
                    .clone();
                let res = app.put_configuration(&t, &json!({"payload": {"folders": [{"path": format!("p{i}")}]}, "file_sha": sha})).await;
                assert_eq!(res.status(), 200, "configuration write {i}");
            }
        })
    };
    integration.await.unwrap();
    configuration.await.unwrap();
    let commits = app.commits_since("acme", &start_head);
    assert_eq!(commits, 2 * N);
    let body: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(body["content"], json!({"i": N - 1}));
    app.fsck("acme");
}

/// One commit of `configuration.yml` made with plain git, moved in with a compare-and-swap
/// (`update-ref NEW OLD`) as a careful outside tool would. Returns false when `main` moved
/// under it.
fn outside_configuration_commit(repo: &std::path::Path, i: usize) -> bool {
    use common::{git_in, git_stdin, git_succeeds};
    let head = git_in(repo, &["rev-parse", "main"]);
    let integration = git_in(repo, &["rev-parse", &format!("{head}:integrations.yml")]);
    let blob = git_stdin(
        repo,
        &["hash-object", "-w", "--stdin"],
        &format!("folders:\n- path: outside-{i}\n"),
    );
    let tree = git_stdin(
        repo,
        &["mktree"],
        &format!(
            "100644 blob {blob}\tconfiguration.yml\n100644 blob {integration}\tintegrations.yml\n"
        ),
    );
    let message = format!("outside {i}");
    let commit = git_in(repo, &["commit-tree", &tree, "-p", &head, "-m", &message]);
    git_succeeds(repo, &["update-ref", "refs/heads/main", &commit, &head])
}

/// planfiles writers take turns on a lock, so only an outside writer moves `main` between a
/// write's read and its compare-and-swap: the write must rebase onto the new head, keep the
/// other file as the outside commit left it, and still answer 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_rebases_when_plain_git_moves_main_under_it() {
    let app = Arc::new(TestApp::spawn().await);
    let t = token("acme", ALL);
    let start_head = app.head("acme");
    let repo = app.repo("acme");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let landed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let outside = {
        let (repo, stop, landed) = (repo.clone(), stop.clone(), landed.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                if outside_configuration_commit(&repo, i) {
                    landed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
    };
    // At least 30 writes, and on until the outside writer has landed 3 commits among them.
    let started = std::time::Instant::now();
    let mut n = 0;
    while n < 30 || landed.load(std::sync::atomic::Ordering::Relaxed) < 3 {
        assert!(
            started.elapsed().as_secs() < 30,
            "the outside writer is stuck"
        );
        let sha = app.get_integration(&t).await.json::<Value>().await.unwrap()["file_sha"].clone();
        let res = app
            .put_integration(&t, &json!({"content": {"i": n}, "file_sha": sha}))
            .await;
        assert_eq!(res.status(), 200, "integration write {n}");
        n += 1;
        // Pauses of 0-15 ms leave the outside writer (about six git commands a commit) room
        // to land some commits; the others race with the writes.
        tokio::time::sleep(std::time::Duration::from_millis(n as u64 % 4 * 5)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    outside.join().unwrap();
    let (landed, writes) = (landed.load(std::sync::atomic::Ordering::Relaxed), n);
    let commits = app.commits_since("acme", &start_head);
    assert_eq!(
        commits,
        writes + landed,
        "every write of either kind is in history"
    );
    // No planfiles commit undid an outside change: each one changed integrations.yml only.
    let changed = app.git(
        "acme",
        &[
            "log",
            "--format=",
            "--name-only",
            "--committer=planfiles",
            &format!("{start_head}..main"),
        ],
    );
    let files: Vec<&str> = changed.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(files, vec!["integrations.yml"; writes]);
    app.fsck("acme");
}

/// A repository kept open between writes or reads still sees what others did to it: `git gc`
/// and `git repack -ad` run beside a stream of writes and reads of the version before
/// (packing the loose objects the open repositories knew, and deleting them) never make a
/// write or a read fail, and every write lands on `main` in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_and_reads_beside_git_gc_and_repack_all_land() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let repo = app.repo("acme");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Not `--prune=now`: that deletes the objects of a write in flight (not yet reachable),
    // beside planfiles as beside git itself.
    let gc = common::git_in_a_loop(
        repo.clone(),
        vec![vec!["gc", "--quiet"], vec!["repack", "-a", "-d", "-q"]],
        stop.clone(),
    );
    let mut last: Option<String> = None;
    for i in 0..120 {
        let res = app.put_integration(&t, &json!({"content": {"n": i}})).await;
        assert_eq!(res.status(), 200, "write {i}: {:?}", res.text().await);
        let body: serde_json::Value = res.json().await.unwrap();
        if let Some(before) = &last {
            let old = app.get_at(&t, "integration-file", before).await;
            assert_eq!(old.status(), 200, "read {i}: {:?}", old.text().await);
            let old: serde_json::Value = old.json().await.unwrap();
            assert_eq!(old["content"], json!({"n": i - 1}), "read {i}");
        }
        last = Some(body["commit_sha"].as_str().unwrap().to_owned());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = gc.join().unwrap();
    assert!(
        runs >= 2,
        "gc and repack ran beside the writes ({runs} runs)"
    );
    assert_eq!(app.head("acme"), last.unwrap());
    let got: serde_json::Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(got["content"], json!({"n": 119}));
    app.fsck("acme");
}

//! Upkeep: repositories are packed while served, nothing is lost, and readers and writers go on.
use crate::common;

use common::process::planfiles;
use common::{git_in, token, TestApp, ALL};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `git count-objects -v` as (loose objects, packs).
fn count_objects(repo: &Path) -> (usize, usize) {
    let out = git_in(repo, &["count-objects", "-v"]);
    let field = |name: &str| -> usize {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("count"), field("packs"))
}

/// The packs of `repo` once there is one, or 0 after 5 s.
async fn packs_within_5s(repo: &Path) -> usize {
    for _ in 0..100 {
        let packs = count_objects(repo).1;
        if packs > 0 {
            return packs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    0
}

async fn write_n(app: &TestApp, tenant: &str, n: usize) -> Vec<String> {
    let t = token(tenant, ALL);
    let mut commits = Vec::new();
    for i in 0..n {
        let res = app.put_integration(&t, &json!({"content": {"n": i}})).await;
        assert_eq!(res.status(), 200);
        let body: Value = res.json().await.unwrap();
        commits.push(body["commit_sha"].as_str().unwrap().to_owned());
    }
    commits
}

#[tokio::test]
async fn loose_objects_are_packed_in_the_background_while_serving() {
    let app = TestApp::spawn_with_repack(64).await;
    let commits = write_n(&app, "globex", 150).await;
    // The last repack may still be running.
    let repo = app.repo("globex");
    let packs = packs_within_5s(&repo).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (loose, packs_now) = count_objects(&repo);
    assert!(packs.max(packs_now) > 0, "no pack was written");
    // 150 writes make 450 loose objects; repacks keep far fewer around.
    assert!(loose < 300, "{loose} loose objects left");
    app.fsck("globex");
    let history = app.git("globex", &["rev-list", "main"]);
    for c in &commits {
        assert!(history.contains(c.as_str()), "commit {c} is not in history");
    }
    let body = app.metrics().await;
    // The series exists from the start; a repack made it count.
    let repacks = body
        .lines()
        .find_map(|l| {
            l.strip_prefix("planfiles_repacks_total{kind=\"incremental\",result=\"ok\"} ")
        })
        .and_then(|v| v.parse::<f64>().ok());
    assert!(repacks.is_some_and(|n| n >= 1.0), "{body}");
    let got: Value = app
        .get_integration(&token("globex", ALL))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["content"], json!({"n": 149}));
}

#[tokio::test]
async fn reads_and_writes_go_on_during_repeated_full_repacks_in_another_process() {
    let app = TestApp::spawn().await;
    let dir = app.data_dir.path().to_owned();
    write_n(&app, "acme", 30).await;
    let stop = Arc::new(AtomicBool::new(false));
    // `planfiles maintain` in a loop: another process, as an operator's cron job would be.
    let repacker = {
        let stop = stop.clone();
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut cmd = planfiles(&dir);
                cmd.env("PLANFILES_DATA_DIR", &dir);
                let out = cmd.args(["maintain", "acme"]).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                runs += 1;
            }
            runs
        })
    };
    let t = token("acme", ALL);
    let mut acknowledged = Vec::new();
    for i in 0..150 {
        let current: Value = app.get_integration(&t).await.json().await.unwrap();
        let res = app
            .put_integration(
                &t,
                &json!({"content": {"i": i}, "file_sha": current["file_sha"]}),
            )
            .await;
        assert_eq!(res.status(), 200, "write {i} during repack");
        let body: Value = res.json().await.unwrap();
        acknowledged.push(body["commit_sha"].as_str().unwrap().to_owned());
        let hist = app.history(&t, "integration-file", "limit=5").await;
        assert_eq!(hist.status(), 200);
    }
    stop.store(true, Ordering::Relaxed);
    let runs = repacker.join().unwrap();
    assert!(runs >= 2, "only {runs} repacks ran");
    app.fsck("acme");
    let history = app.git("acme", &["rev-list", "main"]);
    for c in &acknowledged {
        assert!(history.contains(c.as_str()));
    }
    // A final maintain leaves one pack and no loose objects.
    let out = planfiles(&dir)
        .env("PLANFILES_DATA_DIR", &dir)
        .args(["maintain", "acme"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("acme: "));
    assert_eq!(count_objects(&app.repo("acme")), (0, 1));
    app.fsck("acme");
}

#[tokio::test]
async fn merges_leave_a_large_pack_alone_and_keep_the_pack_count_bounded() {
    use planfiles::domain::{Identity, TenantId};
    use planfiles::storage::Storage;
    let app = TestApp::spawn().await;
    let storage = Storage::open(
        app.data_dir.path(),
        &app.data_dir.path().join("cursor.key"),
        Identity::new("t", "t@x", "x"),
        planfiles::storage::Durability::Group,
    )
    .unwrap();
    let tenant = TenantId::parse("globex").unwrap();
    let pack_dir = app.repo("globex").join("objects/pack");
    let pack_names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&pack_dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().into_string().ok())
            .filter(|n| n.ends_with(".pack"))
            .collect();
        v.sort();
        v
    };
    write_n(&app, "globex", 120).await;
    let report = storage.repack(&tenant, true).unwrap().unwrap();
    assert_eq!(report.kind, "full");
    let big = pack_names();
    assert_eq!(big.len(), 1);
    let mut kinds = Vec::new();
    let mut commits = Vec::new();
    for _ in 0..12 {
        commits.extend(write_n(&app, "globex", 2).await);
        let report = storage.repack(&tenant, false).unwrap().unwrap();
        kinds.push(report.kind);
        let packs = pack_names();
        assert!(packs.len() <= 8, "{} packs", packs.len());
        assert!(
            packs.contains(&big[0]),
            "the large pack was rewritten ({:?})",
            report.kind
        );
    }
    assert!(kinds.contains(&"merge"), "{kinds:?}");
    assert_eq!(count_objects(&app.repo("globex")).0, 0);
    app.fsck("globex");
    let history = app.git("globex", &["rev-list", "main"]);
    for c in &commits {
        assert!(history.contains(c.as_str()));
    }
    let got: Value = app
        .get_integration(&token("globex", ALL))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["content"], json!({"n": 1}));
}

/// Loose objects in `repo`: 3,000 blobs, so that upkeep's sample folder (`objects/17`) holds
/// some (the chance that it holds none is below 1e-5).
fn add_loose_objects(repo: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = String::new();
    for i in 0..3000 {
        let path = dir.path().join(format!("b{i}"));
        std::fs::write(&path, format!("loose {i}\n")).unwrap();
        paths.push_str(&format!("{}\n", path.display()));
    }
    common::git_stdin(repo, &["hash-object", "-w", "--stdin-paths"], &paths);
}

/// A dry run writes nothing, so it never starts a repack, even when one is due; the real
/// write after it does start one.
#[tokio::test]
async fn a_dry_run_never_starts_a_repack() {
    let app = TestApp::spawn_with_repack(64).await;
    let repo = app.repo("globex");
    add_loose_objects(&repo);
    let before = count_objects(&repo);
    assert_eq!(before.1, 0, "no pack yet");
    let t = token("globex", ALL);
    let body = json!({"content": {"dry": 1}});
    let res = app
        .send(
            "PUT",
            "/plans/integration-file?dry_run=true",
            &t,
            Some(&body),
            &[],
        )
        .await;
    assert_eq!(res.status(), 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count_objects(&repo), before, "a dry run started a repack");
    assert_eq!(app.put_integration(&t, &body).await.status(), 200);
    let packs = packs_within_5s(&repo).await;
    assert!(packs > 0, "the real write started no repack");
}

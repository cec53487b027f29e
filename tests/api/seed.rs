//! Seeding an empty data dir: once however many instances start together, redone after a kill.
use crate::common;

use common::process::{serve, Server};
use common::{copy_tree, fixture_dir, git_in, token, ALL};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

fn repo(dir: &Path, tenant: &str) -> PathBuf {
    dir.join(format!("data/tenants/{tenant}.git"))
}

/// A config file that seeds from `fixture`.
fn seeding_config(dir: &Path, fixture: &Path) -> PathBuf {
    let config = dir.join("planfiles.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\nseed_from = {:?}\n",
            fixture.display().to_string()
        ),
    )
    .unwrap();
    config
}

/// Every tenant passes `git fsck --strict`, and nothing of a seed is left behind.
fn assert_seeded_and_clean(dir: &Path) {
    for tenant in TENANTS {
        git_in(&repo(dir, tenant), &["fsck", "--strict"]);
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.join("data/tenants"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".seed-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(!dir.join("data/planfiles-seed.pending").exists());
}

async fn put(client: &reqwest::Client, server: &Server, i: usize) -> Option<String> {
    let res = client
        .put(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .json(&json!({"content": {"i": i}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    body["commit_sha"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_started_together_on_an_empty_data_dir_seed_once_and_lose_no_write() {
    const INSTANCES: usize = 6;
    const EXTRA_TENANTS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    // The demo tenants and more, so that the seed takes a while.
    let fixture = dir.path().join("fixture");
    copy_tree(&fixture_dir(), &fixture);
    for n in 0..EXTRA_TENANTS {
        copy_tree(
            &fixture_dir().join("tenants/acme.git"),
            &fixture.join(format!("tenants/extra{n}.git")),
        );
    }
    let config = seeding_config(dir.path(), &fixture);
    let (ready, started) = mpsc::channel();
    for _ in 0..INSTANCES {
        let (dir, config, ready) = (dir.path().to_owned(), config.clone(), ready.clone());
        std::thread::spawn(move || {
            let server = serve(&dir, &[("PLANFILES_CONFIG", config.to_str().unwrap())]);
            ready.send(server).unwrap();
        });
    }
    // Write through every instance that listens while the others are still starting.
    let client = reqwest::Client::new();
    let mut servers: Vec<Server> = Vec::new();
    let mut acknowledged = Vec::new();
    let mut i = 0;
    while servers.len() < INSTANCES {
        match started.recv_timeout(Duration::from_millis(5)) {
            Ok(server) => servers.push(server),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("{e}"),
        }
        for server in &servers {
            i += 1;
            acknowledged.extend(put(&client, server, i).await);
        }
    }
    for server in &servers {
        i += 1;
        acknowledged.extend(put(&client, server, i).await);
        let res = client
            .get(server.url("/plans/configuration-file"))
            .bearer_auth(token("globex", ALL))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    assert!(!acknowledged.is_empty());
    let acme = repo(dir.path(), "acme");
    for commit in &acknowledged {
        assert!(
            common::git_succeeds(&acme, &["merge-base", "--is-ancestor", commit, "main"]),
            "acknowledged {commit} is not in history"
        );
    }
    assert_seeded_and_clean(dir.path());
    for n in 0..EXTRA_TENANTS {
        git_in(
            &repo(dir.path(), &format!("extra{n}")),
            &["fsck", "--strict"],
        );
    }
    let got: Value = client
        .get(servers[0].url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["content"], json!({"i": i}));
}

#[tokio::test]
async fn a_seed_cut_off_by_a_kill_is_redone_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = seeding_config(dir.path(), &fixture_dir());
    let tenants = dir.path().join("data/tenants");
    let fixture = fixture_dir().join("tenants");
    // What a seeder killed half-way leaves: its marker, one tenant renamed into place (and
    // already written to since), one half-copied temporary folder, one tenant not begun.
    std::fs::create_dir_all(&tenants).unwrap();
    std::fs::write(dir.path().join("data/planfiles-seed.pending"), "").unwrap();
    copy_tree(&fixture.join("acme.git"), &tenants.join("acme.git"));
    let acme = repo(dir.path(), "acme");
    let tree = git_in(&acme, &["rev-parse", "main^{tree}"]);
    let before = git_in(
        &acme,
        &["commit-tree", &tree, "-p", "main", "-m", "after the seed"],
    );
    git_in(&acme, &["update-ref", "refs/heads/main", &before]);
    let partial = tenants.join(".seed-globex.git-AbC123");
    copy_tree(
        &fixture.join("globex.git/objects"),
        &partial.join("objects"),
    );
    std::fs::write(partial.join("HEAD"), "ref: refs/heads/main\n").unwrap();

    let server = serve(
        dir.path(),
        &[("PLANFILES_CONFIG", config.to_str().unwrap())],
    );
    assert_seeded_and_clean(dir.path());
    assert!(!partial.exists());
    assert_eq!(
        git_in(&acme, &["rev-parse", "main"]),
        before,
        "an existing tenant was overwritten"
    );
    for tenant in ["globex", "initech"] {
        assert_eq!(
            git_in(&repo(dir.path(), tenant), &["rev-parse", "main"]),
            git_in(
                &fixture.join(format!("{tenant}.git")),
                &["rev-parse", "main"]
            ),
        );
        let res = reqwest::Client::new()
            .get(server.url("/plans/integration-file"))
            .bearer_auth(token(tenant, ALL))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{tenant}");
    }
    drop(server);
    // A complete seed is not redone: the next start changes nothing.
    std::fs::remove_dir_all(repo(dir.path(), "initech")).unwrap();
    let _server = serve(
        dir.path(),
        &[("PLANFILES_CONFIG", config.to_str().unwrap())],
    );
    assert!(!repo(dir.path(), "initech").exists());
}

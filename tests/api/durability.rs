//! Acknowledged writes survive crashes and a second process; stale locks do not block writes.
use crate::common;

use common::process::{data_dir_with_fixture, serve, Server};
use common::{git_in, token, ALL};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

fn repo(dir: &Path, tenant: &str) -> PathBuf {
    dir.join(format!("data/tenants/{tenant}.git"))
}

fn fsck_all(dir: &Path) {
    for tenant in ["acme", "globex", "initech"] {
        git_in(&repo(dir, tenant), &["fsck", "--strict", "--no-dangling"]);
    }
}

/// How many packs acme's repository holds.
fn packs(dir: &Path) -> usize {
    std::fs::read_dir(repo(dir, "acme").join("objects/pack"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension() == Some("pack".as_ref()))
                .count()
        })
        .unwrap_or(0)
}

/// Forced integration writes until the server goes away; returns the acknowledged commits.
async fn write_until_gone(addr: String, tenant: &'static str, writer: usize) -> Vec<String> {
    let client = reqwest::Client::new();
    let t = token(tenant, ALL);
    let mut acknowledged = Vec::new();
    for i in 0.. {
        let res = client
            .put(format!("{addr}/plans/integration-file"))
            .bearer_auth(&t)
            .json(&json!({"content": {"writer": writer, "i": i}}))
            .send()
            .await;
        match res {
            Ok(r) if r.status() == 200 => {
                let body: Value = r.json().await.unwrap_or(Value::Null);
                if let Some(c) = body["commit_sha"].as_str() {
                    acknowledged.push(c.to_owned());
                }
            }
            Ok(r) => assert!(r.status().is_server_error(), "unexpected {}", r.status()),
            Err(_) => break,
        }
    }
    acknowledged
}

/// Commits on `main` of `tenant`.
fn count_commits(dir: &Path, tenant: &str) -> usize {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo(dir, tenant))
        .args(["rev-list", "--count", "main"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The value of a metric line of `/metrics` (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_writes_loses_no_acknowledged_write() {
    let dir = data_dir_with_fixture();
    // Each round its own way of writing: group commit (the default), libgit2's fsyncs, and
    // group commit with repacks every few writes, so that kills land in repacks too; then
    // 16 writers on one tenant, so that kills land in batches of its writes.
    let configs = [
        "",
        "[storage]\ndurability = \"fsync\"\n",
        "[storage]\nrepack_loose_objects = 16\n",
        "",
    ];
    let mut signed: Vec<(&str, String)> = Vec::new();
    for (round, config) in configs.into_iter().enumerate() {
        let batched = round == 3;
        let config_file = dir.path().join(format!("round-{round}.toml"));
        std::fs::write(&config_file, config).unwrap();
        let mut server = serve(
            dir.path(),
            &[("PLANFILES_CONFIG", config_file.to_str().unwrap())],
        );
        let mut writers = Vec::new();
        for w in 0..if batched { 16 } else { 4 } {
            let tenant = if w % 2 == 0 || batched {
                "acme"
            } else {
                "globex"
            };
            writers.push((
                tenant,
                tokio::spawn(write_until_gone(server.addr.clone(), tenant, w)),
            ));
        }
        // Some writes in (a cold debug binary takes a while for its first), then a moment more.
        let before = count_commits(dir.path(), "acme");
        let started = Instant::now();
        while count_commits(dir.path(), "acme") < before + 3 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no write landed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100 + 170 * round as u64)).await;
        if config.contains("repack") {
            // Kill only once a repack has written a pack: the writes and repacks go on.
            let started = Instant::now();
            while packs(dir.path()) == 0 {
                assert!(started.elapsed() < Duration::from_secs(20), "no repack ran");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if batched {
            // Batches of more than one write have been committed before the kill.
            let started = Instant::now();
            loop {
                let metrics = reqwest::get(server.url("/metrics"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                let single = metric(&metrics, "planfiles_write_batch_writes_bucket{le=\"1\"}");
                let all = metric(&metrics, "planfiles_write_batch_writes_count");
                if all > single {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no batch of several writes"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        server.kill9();
        let mut total = 0;
        for (tenant, w) in writers {
            let acknowledged = w.await.unwrap();
            total += acknowledged.len();
            for commit in acknowledged {
                let out = std::process::Command::new("git")
                    .arg("--git-dir")
                    .arg(repo(dir.path(), tenant))
                    .args(["merge-base", "--is-ancestor", &commit, "main"])
                    .status()
                    .unwrap();
                assert!(
                    out.success(),
                    "round {round}: acknowledged {commit} of {tenant} is not in history"
                );
                signed.push((tenant, commit));
            }
        }
        assert!(
            total > 0,
            "round {round}: no write was acknowledged before the kill"
        );
        fsck_all(dir.path());
    }
    // After the crashes the service starts and writes at once.
    let server = serve(dir.path(), &[]);
    let res = server
        .put_integration("acme", json!({"after": "restart"}))
        .await;
    assert_eq!(res.status(), 200);
    // Every acknowledged commit is signed by the key the service still publishes: the key
    // made at the first start outlived four kills, and no signature was left half written.
    let allowed = dir.path().join("allowed_signers");
    let keys = reqwest::Client::new()
        .get(server.url("/plans/signing-keys"))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    std::fs::write(&allowed, keys.text().await.unwrap()).unwrap();
    if !common::ssh_keygen_present() {
        return;
    }
    for tenant in ["acme", "globex"] {
        let commits: Vec<&str> = signed
            .iter()
            .filter(|(t, _)| *t == tenant)
            .map(|(_, c)| c.as_str())
            .collect();
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(repo(dir.path(), tenant))
            .arg("-c")
            .arg(format!("gpg.ssh.allowedSignersFile={}", allowed.display()))
            .args(["log", "--no-walk=unsorted", "--format=%H %G?"])
            .args(&commits)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), commits.len(), "{tenant}: {text}");
        for line in text.lines() {
            assert!(
                line.ends_with(" G"),
                "{tenant}: not a good signature: {line}"
            );
        }
    }
}

/// When this machine booted, from `/proc/stat`.
fn boot_time() -> SystemTime {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::time::UNIX_EPOCH + Duration::from_secs(secs)
}

#[tokio::test]
async fn an_abandoned_ref_lock_is_cleared() {
    // What a process killed in the middle of moving main leaves behind: 11 minutes ago, or
    // before the machine booted (a power loss). No live process can hold either.
    for made in [
        SystemTime::now() - Duration::from_secs(660),
        boot_time() - Duration::from_secs(60),
    ] {
        let dir = data_dir_with_fixture();
        let lock = repo(dir.path(), "acme").join("refs/heads/main.lock");
        let f = std::fs::File::create(&lock).unwrap();
        f.set_modified(made).unwrap();
        drop(f);
        let server = serve(dir.path(), &[]);
        let started = Instant::now();
        let res = reqwest::Client::new()
            .put(server.url("/plans/integration-file"))
            .bearer_auth(token("acme", ALL))
            .json(&json!({"content": {"after": "crash"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        assert!(!lock.exists());
        git_in(
            &repo(dir.path(), "acme"),
            &["fsck", "--strict", "--no-dangling"],
        );
    }
}

/// A live git transaction (`git update-ref --stdin`, prepared: it holds `main.lock`, as a
/// slow hook or a long push does) keeps its lock however long it takes: planfiles' writes
/// answer 503 `busy` meanwhile, and git's commit then succeeds.
#[tokio::test]
async fn a_ref_lock_held_by_a_live_git_transaction_is_never_taken_away() {
    use std::io::{BufRead, Write};
    let dir = data_dir_with_fixture();
    let acme = repo(dir.path(), "acme");
    let server = serve(dir.path(), &[]);
    let head = git_in(&acme, &["rev-parse", "main"]);
    let tree = git_in(&acme, &["rev-parse", "main^{tree}"]);
    let next = git_in(&acme, &["commit-tree", &tree, "-p", &head, "-m", "by git"]);
    let mut git = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&acme)
        .args(["update-ref", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_git = git.stdin.take().unwrap();
    let mut from_git = std::io::BufReader::new(git.stdout.take().unwrap());
    writeln!(
        to_git,
        "start\nupdate refs/heads/main {next} {head}\nprepare"
    )
    .unwrap();
    to_git.flush().unwrap();
    let mut line = String::new();
    for want in ["start: ok", "prepare: ok"] {
        line.clear();
        from_git.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), want);
    }
    let lock = acme.join("refs/heads/main.lock");
    assert!(lock.exists());
    let put = || async {
        let started = Instant::now();
        let res = reqwest::Client::new()
            .put(server.url("/plans/integration-file"))
            .bearer_auth(token("acme", ALL))
            .json(&json!({"content": {"by": "planfiles"}}))
            .send()
            .await
            .unwrap();
        (
            res.status().as_u16(),
            res.headers().contains_key("retry-after"),
            started.elapsed(),
            res.json::<Value>().await.unwrap(),
        )
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(7) {
        let (status, retry_after, took, body) = put().await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["code"], "busy");
        assert!(retry_after);
        assert!(took < Duration::from_secs(5), "a write waited {took:?}");
        assert!(lock.exists(), "a live transaction's lock was removed");
    }
    writeln!(to_git, "commit").unwrap();
    drop(to_git);
    line.clear();
    from_git.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "commit: ok", "git's own commit failed");
    assert!(git.wait().unwrap().success());
    assert_eq!(git_in(&acme, &["rev-parse", "main"]), next);
    let (status, _, _, body) = put().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(git_in(&acme, &["rev-parse", "main~1"]), next);
    git_in(&acme, &["fsck", "--strict", "--no-dangling"]);
}

#[tokio::test]
async fn a_ref_lock_held_by_a_live_writer_is_left_alone() {
    let dir = data_dir_with_fixture();
    let repo = repo(dir.path(), "acme");
    let server = serve(dir.path(), &[]);
    // A live peer: holds the tenant's write lock and an old-looking main.lock.
    let peer = common::hold_write_lock(&repo);
    let lock = repo.join("refs/heads/main.lock");
    let f = std::fs::File::create(&lock).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(60))
        .unwrap();
    let put = tokio::spawn({
        let url = server.url("/plans/integration-file");
        async move {
            reqwest::Client::new()
                .put(url)
                .bearer_auth(token("acme", ALL))
                .json(&json!({"content": {"x": 1}}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(lock.exists(), "a lock held by a live writer was removed");
    assert!(
        !put.is_finished(),
        "the write did not wait for the live writer"
    );
    // The peer finishes: drops its ref lock and its write lock.
    std::fs::remove_file(&lock).unwrap();
    drop(peer);
    assert_eq!(put.await.unwrap(), 200);
}

/// The real binary over a fixture copy, with no leeway on a token's end.
fn serve_without_leeway() -> (tempfile::TempDir, Server) {
    let dir = data_dir_with_fixture();
    let config = dir.path().join("leeway.toml");
    std::fs::write(&config, "[auth]\nleeway_secs = 0\n").unwrap();
    let server = serve(
        dir.path(),
        &[("PLANFILES_CONFIG", config.to_str().unwrap())],
    );
    (dir, server)
}

/// A token of acme that ends `secs` from now.
fn acme_token(secs: u64, permissions: &[&str]) -> String {
    common::sign_hs256(
        common::SECRET,
        &json!({"alg": "HS256", "typ": "JWT"}),
        &json!({"tenant_id": "acme", "permissions": permissions, "exp": common::now() + secs,
                "sub": "tester"}),
    )
}

/// A write that waits for its turn (here behind another process's write lock) past its
/// token's end is refused with 401 and writes nothing, as a request sent with that token then
/// would be; one whose token is still accepted when its turn comes is written.
#[tokio::test]
async fn a_write_whose_token_expires_while_it_waits_is_refused() {
    let (dir, server) = serve_without_leeway();
    let acme = repo(dir.path(), "acme");
    let short = |secs: u64| acme_token(secs, ALL);
    for (lifetime, want) in [(2, 401), (60, 200)] {
        let head = git_in(&acme, &["rev-parse", "main"]);
        // Another process's writer holds the tenant's write lock for 4 s.
        let peer = common::hold_write_lock(&acme);
        let token = short(lifetime);
        let put = tokio::spawn({
            let (url, token) = (server.url("/plans/integration-file"), token.clone());
            async move {
                let res = reqwest::Client::new()
                    .put(url)
                    .bearer_auth(token)
                    .json(&json!({"content": {"lifetime": lifetime}}))
                    .send()
                    .await
                    .unwrap();
                (res.status().as_u16(), res.text().await.unwrap())
            }
        });
        tokio::time::sleep(Duration::from_secs(4)).await;
        drop(peer);
        let (status, body) = put.await.unwrap();
        assert_eq!(status, want, "a token of {lifetime} s: {body}");
        if want == 401 {
            assert!(body.contains("expired while the write waited"), "{body}");
            assert_eq!(
                git_in(&acme, &["rev-parse", "main"]),
                head,
                "it was written"
            );
        } else {
            assert_ne!(git_in(&acme, &["rev-parse", "main"]), head);
        }
    }
}

/// A push whose token ends while it waits for the tenant's write lock (another process's
/// writer holds it) moves nothing, as an API write would not, and git says why; one whose
/// token is still accepted when its turn comes lands.
#[tokio::test]
async fn a_push_whose_token_expires_while_it_waits_is_refused() {
    let (dir, server) = serve_without_leeway();
    let acme = repo(dir.path(), "acme");
    let short = |secs: u64| {
        acme_token(
            secs,
            &[
                "planfiles.repos.read",
                "jit.integrations.write",
                "jit.preferences.write",
            ],
        )
    };
    let work = tempfile::tempdir().unwrap();
    let git = |token: &str, args: &[&str]| {
        std::process::Command::new("git")
            .current_dir(work.path())
            .env("GIT_TERMINAL_PROMPT", "0")
            .args([
                "-c",
                &format!("http.extraHeader=Authorization: Bearer {token}"),
            ])
            .args(["-c", "user.name=P", "-c", "user.email=p@x.example"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = git(
        &short(600),
        &["clone", "-q", &server.url("/git/acme.git"), "c"],
    );
    assert!(out.status.success(), "{out:?}");
    for (lifetime, lands) in [(2, false), (60, true)] {
        let head = git_in(&acme, &["rev-parse", "main"]);
        std::fs::write(
            work.path().join("c/integrations.yml"),
            format!("pushed: {lifetime}\n"),
        )
        .unwrap();
        let out = git("", &["-C", "c", "commit", "-qam", "pushed"]);
        assert!(out.status.success(), "{out:?}");
        // Another process's writer holds the tenant's write lock for 4 s.
        let peer = common::hold_write_lock(&acme);
        let token = short(lifetime);
        let push = std::thread::spawn({
            let git_dir = work.path().join("c");
            move || {
                std::process::Command::new("git")
                    .current_dir(git_dir)
                    .env("GIT_TERMINAL_PROMPT", "0")
                    .args([
                        "-c",
                        &format!("http.extraHeader=Authorization: Bearer {token}"),
                    ])
                    .args(["push", "origin", "main"])
                    .output()
                    .unwrap()
            }
        });
        tokio::time::sleep(Duration::from_secs(4)).await;
        drop(peer);
        let out = push.join().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.success(),
            lands,
            "a token of {lifetime} s: {stderr}"
        );
        if lands {
            assert_ne!(git_in(&acme, &["rev-parse", "main"]), head);
        } else {
            assert!(
                stderr.contains("the token expired while the push waited"),
                "{stderr}"
            );
            assert_eq!(git_in(&acme, &["rev-parse", "main"]), head, "it was pushed");
            let out = git("", &["-C", "c", "reset", "-q", "--hard", "origin/main"]);
            assert!(out.status.success(), "{out:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_on_one_data_dir_lose_no_write() {
    let dir = data_dir_with_fixture();
    let servers: Vec<Server> = vec![serve(dir.path(), &[]), serve(dir.path(), &[])];
    let start = git_in(&repo(dir.path(), "acme"), &["rev-parse", "main"]);
    const WRITERS: usize = 6;
    const EACH: usize = 5;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let t = token("acme", ALL);
            let mut acknowledged = 0;
            for i in 0..EACH {
                let mut attempt = 0;
                loop {
                    // Alternate between the two instances, as a load balancer would.
                    let addr = &addrs[(w + i + attempt) % 2];
                    attempt += 1;
                    let cur: Value = client
                        .get(format!("{addr}/plans/configuration-file"))
                        .bearer_auth(&t)
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    let mut content = cur["content"].clone();
                    content["folders"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"path": format!("w{w}-{i}")}));
                    let res = client
                        .put(format!("{addr}/plans/configuration-file"))
                        .bearer_auth(&t)
                        .json(&json!({"payload": content, "file_sha": cur["sha"]}))
                        .send()
                        .await
                        .unwrap();
                    match res.status().as_u16() {
                        200 => {
                            acknowledged += 1;
                            break;
                        }
                        409 => continue,
                        other => panic!("unexpected {other}"),
                    }
                }
            }
            acknowledged
        }));
    }
    // Blind writers of the integration file beside them, on both instances, so that each
    // instance commits batches of several writes while the other moves main too. They go on
    // until both instances have committed such a batch.
    let stop = Arc::new(AtomicBool::new(false));
    let mut blind = Vec::new();
    for w in 0..8 {
        let (addr, stop) = (servers[w % 2].addr.clone(), stop.clone());
        blind.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let t = token("acme", ALL);
            let mut commits = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) || i < EACH {
                i += 1;
                let res = client
                    .put(format!("{addr}/plans/integration-file"))
                    .bearer_auth(&t)
                    .json(&json!({"content": {"blind": w, "n": i}}))
                    .send()
                    .await
                    .unwrap();
                match res.status().as_u16() {
                    200 => {
                        let body: Value = res.json().await.unwrap();
                        commits.push(body["commit_sha"].as_str().unwrap().to_owned());
                    }
                    503 => tokio::time::sleep(Duration::from_millis(20)).await,
                    other => panic!("blind writer {w}: unexpected {other}"),
                }
            }
            commits
        }));
    }
    let started = Instant::now();
    loop {
        let mut batched = 0;
        for server in &servers {
            let metrics = reqwest::get(server.url("/metrics"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let single = metric(&metrics, "planfiles_write_batch_writes_bucket{le=\"1\"}");
            let all = metric(&metrics, "planfiles_write_batch_writes_count");
            batched += usize::from(all > single);
        }
        if batched == servers.len() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "an instance committed no batch of several writes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged = 0;
    for t in tasks {
        acknowledged += t.await.unwrap();
    }
    let repo = repo(dir.path(), "acme");
    for b in blind {
        for commit in b.await.unwrap() {
            acknowledged += 1;
            let on_main = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(&repo)
                .args(["merge-base", "--is-ancestor", &commit, "main"])
                .status()
                .unwrap();
            assert!(on_main.success(), "acknowledged {commit} is not on main");
        }
    }
    // Every acknowledged write is its own commit on main's first-parent line.
    let commits: usize = git_in(
        &repo,
        &[
            "rev-list",
            "--first-parent",
            "--count",
            &format!("{start}..main"),
        ],
    )
    .parse()
    .unwrap();
    assert_eq!(commits, acknowledged);
    let text = git_in(&repo, &["show", "main:configuration.yml"]);
    for w in 0..WRITERS {
        for i in 0..EACH {
            assert!(text.contains(&format!("w{w}-{i}")), "w{w}-{i} lost");
        }
    }
    git_in(&repo, &["fsck", "--strict", "--no-dangling"]);
}

/// Whether strace can trace here; the reason when it cannot.
fn strace_missing() -> Option<String> {
    match std::process::Command::new("strace").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "strace -V failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => Some(format!("strace not found ({e})")),
    }
}

#[tokio::test]
async fn fsync_mode_syncs_objects_that_were_already_there_before_main_moves() {
    if let Some(reason) = strace_missing() {
        common::skip_unless_ci("the strace order test", &reason);
        return;
    }
    let dir = data_dir_with_fixture();
    let acme = repo(dir.path(), "acme");
    // Plain git wrote the blob (without fsync, as a `group` instance before its syncfs
    // would): libgit2 finds it there and only touches it.
    let text = "written: before\n";
    use std::io::Write;
    let mut hash = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&acme)
        .args(["hash-object", "-w", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    hash.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = hash.wait_with_output().unwrap();
    let blob = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    // And the tree the PUT will make (head's, with integrations.yml replaced).
    let entries = git_in(&acme, &["ls-tree", "main"])
        .lines()
        .map(|l| match l.strip_suffix("\tintegrations.yml") {
            Some(_) => format!("100644 blob {blob}\tintegrations.yml\n"),
            None => format!("{l}\n"),
        })
        .collect::<String>();
    let mut mktree = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&acme)
        .arg("mktree")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    mktree
        .stdin
        .take()
        .unwrap()
        .write_all(entries.as_bytes())
        .unwrap();
    let out = mktree.wait_with_output().unwrap();
    let tree = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let loose = |id: &str| format!("objects/{}/{}", &id[..2], &id[2..]);
    for id in [&blob, &tree] {
        assert!(acme.join(loose(id)).is_file());
    }

    let config = dir.path().join("fsync.toml");
    std::fs::write(&config, "[storage]\ndurability = \"fsync\"\n").unwrap();
    let server = serve(
        dir.path(),
        &[("PLANFILES_CONFIG", config.to_str().unwrap())],
    );
    let trace = dir.path().join("trace");
    let Some(strace) = attach_strace(
        server.pid(),
        &trace,
        "fsync,fdatasync,rename,renameat,renameat2",
    ) else {
        return;
    };
    let res = reqwest::Client::new()
        .put(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .json(&json!({ "content": text }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body["file_sha"],
        blob.as_str(),
        "the PUT stored other bytes"
    );
    let trace = detach_strace(strace, &trace);
    assert_eq!(git_in(&acme, &["rev-parse", "main^{tree}"]), tree);
    let lines: Vec<&str> = trace.lines().collect();
    let moved = lines
        .iter()
        .position(|l| l.contains("rename") && l.contains("refs/heads/main.lock"))
        .unwrap_or_else(|| panic!("main never moved:\n{trace}"));
    for id in [&blob, &tree] {
        let object = loose(id);
        let synced = lines
            .iter()
            .position(|l| l.contains("fsync(") && l.contains(&object));
        assert!(
            synced.is_some_and(|s| s < moved),
            "{object} was not fsynced before main moved:\n{trace}"
        );
    }
    git_in(&acme, &["fsck", "--strict", "--no-dangling"]);
}

/// strace attached to `pid` (and its threads), writing the `syscalls` it makes to `out`;
/// `None`, with the reason printed, where it cannot attach. The caller waits for it
/// ([`detach_strace`]).
#[allow(clippy::zombie_processes)]
fn attach_strace(pid: u32, out: &Path, syscalls: &str) -> Option<std::process::Child> {
    let mut strace = std::process::Command::new("strace")
        .args(["-f", "-y", "-e", &format!("trace={syscalls}"), "-o"])
        .arg(out)
        .args(["-p", &pid.to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // strace says "Process N attached" once it traces, or why it cannot.
    let mut stderr = std::io::BufReader::new(strace.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        use std::io::BufRead;
        if stderr.read_line(&mut line).unwrap_or(0) == 0 || line.contains("ptrace") {
            let _ = strace.kill();
            let _ = strace.wait();
            common::skip_unless_ci(
                "the strace order test",
                &format!("strace cannot attach here: {}", line.trim()),
            );
            return None;
        }
        if line.contains("attached") {
            // strace goes on writing to stderr: keep reading it, or it dies of SIGPIPE.
            std::thread::spawn(move || {
                use std::io::Read;
                let _ = stderr.read_to_end(&mut Vec::new());
            });
            return Some(strace);
        }
    }
}

/// Stops tracing (SIGTERM: strace detaches and flushes) and returns what it wrote.
fn detach_strace(strace: std::process::Child, out: &Path) -> String {
    let mut strace = strace;
    std::process::Command::new("kill")
        .args(["-TERM", &strace.id().to_string()])
        .status()
        .unwrap();
    strace.wait().unwrap();
    std::fs::read_to_string(out).unwrap()
}

/// The line where a call of `syscall` that matches `what` returned (a whole line, or the
/// "resumed" half of one another thread interrupted), searching from `from`.
fn returned(
    lines: &[&str],
    from: usize,
    syscall: &str,
    what: impl Fn(&str) -> bool,
) -> Option<usize> {
    let mut pending = std::collections::HashSet::new();
    for (i, l) in lines.iter().enumerate().skip(from) {
        let pid = l.split_whitespace().next().unwrap_or("");
        if l.contains(&format!("{syscall}(")) && what(l) {
            if l.contains("<unfinished") {
                pending.insert(pid.to_owned());
            } else {
                return Some(i);
            }
        } else if l.contains(&format!("<... {syscall} resumed>")) && pending.contains(pid) {
            return Some(i);
        }
    }
    None
}

/// The order a 200 promises, in both durability modes, seen in the syscalls of the real
/// binary: the objects are synced before `main` moves, and the ref is synced before the
/// response's bytes are written to the socket.
#[tokio::test]
async fn a_write_syncs_objects_then_moves_main_then_syncs_it_before_answering() {
    if let Some(reason) = strace_missing() {
        common::skip_unless_ci("the strace order test", &reason);
        return;
    }
    for mode in ["group", "fsync"] {
        let dir = data_dir_with_fixture();
        let config = dir.path().join("mode.toml");
        std::fs::write(&config, format!("[storage]\ndurability = \"{mode}\"\n")).unwrap();
        let server = serve(
            dir.path(),
            &[("PLANFILES_CONFIG", config.to_str().unwrap())],
        );
        let out = dir.path().join("trace");
        let Some(strace) = attach_strace(
            server.pid(),
            &out,
            "fsync,fdatasync,syncfs,rename,renameat,renameat2,write,writev,pwrite64,sendto,sendmsg",
        ) else {
            return;
        };
        let res = reqwest::Client::new()
            .put(server.url("/plans/integration-file"))
            .bearer_auth(token("acme", ALL))
            .json(&json!({ "content": {"mode": mode} }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let trace = detach_strace(strace, &out);
        let lines: Vec<&str> = trace.lines().collect();
        let moved = lines
            .iter()
            .position(|l| l.contains("rename") && l.contains("refs/heads/main.lock"))
            .unwrap_or_else(|| panic!("{mode}: main never moved:\n{trace}"));
        let objects_synced = match mode {
            "group" => (0..moved)
                .rev()
                .find(|&i| returned(&lines, i, "syncfs", |_| true).is_some_and(|r| r < moved)),
            _ => returned(&lines, 0, "fsync", |l| l.contains("/objects/")).filter(|&i| i < moved),
        };
        assert!(
            objects_synced.is_some(),
            "{mode}: no sync of the objects before main moved:\n{trace}"
        );
        synced_before_the_answer(mode, &lines, &trace, moved);
    }
}

/// A push keeps the order an API write keeps, in both modes, seen in the syscalls of the real
/// binary and of the `git` it runs: the pushed pack and its index are fsynced before any name
/// of theirs is made (inside the quarantine and when moved into `objects/pack`); the notes'
/// objects and both refs' locks are durable before they are named; `main` is synced before
/// report-status says ok.
#[tokio::test]
async fn a_push_syncs_its_pack_notes_and_refs_before_it_names_them_and_answers() {
    if let Some(reason) = strace_missing() {
        common::skip_unless_ci("the strace order test", &reason);
        return;
    }
    let write = token(
        "acme",
        &[
            "planfiles.repos.read",
            "jit.integrations.write",
            "jit.preferences.write",
        ],
    );
    for mode in ["group", "fsync"] {
        let dir = data_dir_with_fixture();
        let config = dir.path().join("mode.toml");
        std::fs::write(&config, format!("[storage]\ndurability = \"{mode}\"\n")).unwrap();
        let server = serve(
            dir.path(),
            &[("PLANFILES_CONFIG", config.to_str().unwrap())],
        );
        let work = tempfile::tempdir().unwrap();
        let client = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .current_dir(work.path())
                .env("GIT_TERMINAL_PROMPT", "0")
                .args([
                    "-c",
                    &format!("http.extraHeader=Authorization: Bearer {write}"),
                ])
                .args(["-c", "user.name=P", "-c", "user.email=p@x.example"])
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        client(&["clone", "-q", &server.url("/git/acme.git"), "c"]);
        std::fs::write(
            work.path().join("c/integrations.yml"),
            format!("pushed: {mode}\n"),
        )
        .unwrap();
        client(&["-C", "c", "commit", "-qam", "pushed"]);
        let out = dir.path().join("trace");
        let Some(strace) = attach_strace(
            server.pid(),
            &out,
            "fsync,fdatasync,syncfs,rename,renameat,renameat2,link,linkat,write,writev,pwrite64,sendto,sendmsg",
        ) else {
            return;
        };
        client(&["-C", "c", "push", "-q", "origin", "main"]);
        let trace = detach_strace(strace, &out);
        let lines: Vec<&str> = trace.lines().collect();
        let moved = lines
            .iter()
            .position(|l| l.contains("rename") && l.contains("refs/heads/main.lock"))
            .unwrap_or_else(|| panic!("{mode}: main never moved:\n{trace}"));
        // The pack and its index: git fsyncs each before it names it in the quarantine (a
        // link, or a rename), and the service moves them into objects/pack after that.
        for tmp in ["tmp_pack_", "tmp_idx_"] {
            let synced = lines
                .iter()
                .position(|l| l.contains("fsync(") && l.contains(tmp))
                .unwrap_or_else(|| panic!("{mode}: {tmp} never fsynced:\n{trace}"));
            let named = lines
                .iter()
                .position(|l| (l.contains("rename") || l.contains("link(")) && l.contains(tmp))
                .unwrap_or_else(|| panic!("{mode}: {tmp} never named:\n{trace}"));
            assert!(
                synced < named,
                "{mode}: {tmp} named before it was synced:\n{trace}"
            );
        }
        let migrated = lines
            .iter()
            .position(|l| {
                l.contains("rename(") && l.contains("planfiles-incoming-") && l.contains("/pack-")
            })
            .unwrap_or_else(|| panic!("{mode}: the pack never moved in:\n{trace}"));
        assert!(
            lines[..migrated]
                .iter()
                .any(|l| l.contains("fsync(") && l.contains("tmp_idx_")),
            "{mode}: the pack moved in before git synced it:\n{trace}"
        );
        assert!(
            migrated < moved,
            "{mode}: main moved before the pack was in:\n{trace}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("rename") && l.contains("refs/notes/planfiles.lock")),
            "{mode}: the notes never moved:\n{trace}"
        );
        synced_before_the_answer(mode, &lines, &trace, moved);
    }
}

/// After `main` moved (line `moved`): the ref is synced before the 200's bytes are written
/// (a PUT's answer, or a push's report-status: one response with a length, sent whole), and
/// no name came before its bytes were durable.
fn synced_before_the_answer(mode: &str, lines: &[&str], trace: &str, moved: usize) {
    let answered = lines
        .iter()
        .enumerate()
        .skip(moved)
        .find(|(_, l)| {
            ["write(", "writev(", "sendto(", "sendmsg("]
                .iter()
                .any(|c| l.contains(c))
                && (l.contains("TCP") || l.contains("socket:"))
                && l.contains("HTTP/1.1 200")
        })
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("{mode}: no response after main moved:\n{trace}"));
    let ref_synced = match mode {
        "group" => returned(lines, moved, "syncfs", |_| true),
        _ => returned(lines, moved, "fsync", |l| l.contains("refs/heads")),
    };
    assert!(
        ref_synced.is_some_and(|r| r < answered),
        "{mode}: the ref was not synced before the response was written:\n{trace}"
    );
    no_name_before_its_bytes_are_synced(mode, lines, trace);
}

/// No file is renamed to the name readers use (an object from its `tmp_obj_` file, `main`
/// from `main.lock`) before its bytes are durable: in group mode a `syncfs` that began after
/// the last write to any of them returned before the first such rename; in fsync mode each
/// was fsynced before its rename. A power loss after a rename then never leaves a named file
/// empty or zeroed (ext4 can commit a rename before the data it names).
fn no_name_before_its_bytes_are_synced(mode: &str, lines: &[&str], trace: &str) {
    let staged = |l: &str| {
        l.contains("tmp_obj_")
            || l.contains("refs/heads/main.lock")
            || l.contains("refs/notes/planfiles.lock")
    };
    let renames: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("rename") && staged(lines[i]))
        .collect();
    assert!(
        renames.len() >= 2,
        "{mode}: no object or ref renamed:\n{trace}"
    );
    match mode {
        "group" => {
            let first = renames[0];
            let last_write = (0..first)
                .rev()
                .find(|&i| lines[i].contains("write(") && staged(lines[i]))
                .unwrap_or_else(|| panic!("{mode}: nothing written before the renames:\n{trace}"));
            let synced = (last_write..first).any(|i| {
                lines[i].contains("syncfs(")
                    && returned(lines, i, "syncfs", |_| true).is_some_and(|r| r < first)
            });
            assert!(
                synced,
                "{mode}: a file was named before a syncfs made its bytes durable:\n{trace}"
            );
        }
        _ => {
            for &r in &renames {
                // rename("<dir>/tmp_obj_…", "<dir>/…") or renameat(…): the source path.
                let source = lines[r]
                    .split('"')
                    .nth(1)
                    .unwrap_or_else(|| panic!("no path in {}", lines[r]));
                let synced =
                    (0..r).any(|i| lines[i].contains("fsync(") && lines[i].contains(source));
                assert!(
                    synced,
                    "{mode}: {source} was renamed before it was fsynced:\n{trace}"
                );
            }
        }
    }
}

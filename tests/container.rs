//! The container image and `deploy/compose.yaml` (issue 51) on a real Docker engine, reached only through ports published on 127.0.0.1: the image runs read-only as its non-root user and keeps writes through `docker kill`, drains on `docker stop` under load, passes the README's walkthrough; compose's two shards behind HAProxy move a tenant while `docker network disconnect` cuts the target off, losing nothing and never writable on both. Runs only with PLANFILES_CONTAINER_TESTS=require (a dockerd, the base image of scripts/docker-base.sh, docker compose or docker-compose); the image takes the binary this test run built, or PLANFILES_CONTAINER_BINARY; .ci/run sets the first.
mod common;

use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const SECRET: &str = "container-test-secret-0123456789abcdef";
/// The tag the tests build the repository's Dockerfile under (compose's test project too).
const IMAGE: &str = "planfiles-test:latest";

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn wanted() -> bool {
    let on = std::env::var("PLANFILES_CONTAINER_TESTS").as_deref() == Ok("require");
    if !on {
        eprintln!("SKIPPED the container tests: set PLANFILES_CONTAINER_TESTS=require (docker, scripts/docker-base.sh, docker compose)");
    }
    on
}

/// Docker commands that undo what a test made, run when it ends, failed or not.
struct Cleanup(Vec<Vec<String>>);

impl Cleanup {
    fn push(&mut self, cmd: &[&str]) {
        self.0.push(cmd.iter().map(|s| s.to_string()).collect());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for cmd in self.0.iter().rev() {
            let _ = Command::new(&cmd[0]).args(&cmd[1..]).output();
        }
    }
}

/// The binary the image takes, as a path in the repository: a copy of the one this test run
/// built in `target/container/` (so CI needs no second, release, build, and the build
/// context holds no other folder of `target/`), or `PLANFILES_CONTAINER_BINARY`
/// (`target/release/planfiles`, as the README builds it).
fn binary() -> String {
    static COPIED: OnceLock<String> = OnceLock::new();
    if let Ok(path) = std::env::var("PLANFILES_CONTAINER_BINARY") {
        return path;
    }
    COPIED
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/container");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::copy(env!("CARGO_BIN_EXE_planfiles"), dir.join("planfiles")).unwrap();
            "target/container/planfiles".to_owned()
        })
        .clone()
}

/// The repository's Dockerfile built once for the run, as the README builds it (with the
/// binary of [`binary`]).
fn image() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let arg = format!("BINARY={}", binary());
        docker(&[
            "build",
            "-q",
            "--build-arg",
            &arg,
            "-t",
            IMAGE,
            env!("CARGO_MANIFEST_DIR"),
        ]);
    });
    IMAGE
}

/// A container of the image on `volume`, read-only with a tmpfs on /tmp, its port 8080
/// published on 127.0.0.1; its id and address.
fn run(volume: &str, cleanup: &mut Cleanup) -> (String, String) {
    let id = docker(&[
        "run",
        "-d",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "-v",
        &format!("{volume}:/data"),
        "-p",
        "127.0.0.1::8080",
        "-e",
        &format!("PLANFILES_JWT_SECRET={SECRET}"),
        image(),
    ]);
    cleanup.push(&["docker", "volume", "rm", "-f", volume]);
    cleanup.push(&["docker", "rm", "-f", &id]);
    let addr = published(&id);
    (id, addr)
}

/// The 127.0.0.1 address of a container's port 8080.
fn published(id: &str) -> String {
    let port = docker(&["port", id, "8080/tcp"]);
    let port = port.lines().next().unwrap().rsplit(':').next().unwrap();
    format!("http://127.0.0.1:{port}")
}

fn token(tenant: &str) -> String {
    common::sign_hs256(
        SECRET,
        &json!({"alg": "HS256", "typ": "JWT"}),
        &json!({"tenant_id": tenant, "permissions": common::ALL, "exp": common::now() + 600,
                "sub": "c", "email": "c@example.com", "name": "Container Test"}),
    )
}

async fn ready(addr: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if let Ok(res) = reqwest::get(format!("{addr}/readyz")).await {
            if res.status() == 200 {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < within,
            "{addr} not ready within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that opens a new connection for each request: a request is then either refused
/// at connect or sent whole, and a response cut off is a fault of the server's.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// What a writer saw: the commits acknowledged with 200, and the requests cut off after
/// they were sent (neither refused at connect nor answered).
#[derive(Default)]
struct Seen {
    acked: Vec<String>,
    cut: Vec<String>,
    /// When a request first failed (refused, reset, or cut off).
    failed_at: Option<Instant>,
}

/// Unconditional PUTs to `addr` until `stop`, or until a request fails when `until_failed`
/// (behind Docker's port proxy a closed listener is a connection accepted and then reset, not
/// refused); statuses other than 200 are retried after a pause.
fn blind_writer(
    addr: String,
    tenant: &'static str,
    w: usize,
    stop: Arc<AtomicBool>,
    until_failed: bool,
) -> tokio::task::JoinHandle<Seen> {
    tokio::spawn(async move {
        let client = fresh_client();
        let mut seen = Seen::default();
        for i in 0.. {
            if stop.load(SeqCst) {
                break;
            }
            let res = client
                .put(format!("{addr}/plans/integration-file"))
                .bearer_auth(token(tenant))
                .json(&json!({"content": {"w": w, "i": i}}))
                .send()
                .await;
            match res {
                Ok(r) if r.status() == 200 => match r.json::<Value>().await {
                    Ok(body) => seen
                        .acked
                        .push(body["commit_sha"].as_str().unwrap().to_owned()),
                    Err(e) => seen.cut.push(e.to_string()),
                },
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(_) if until_failed => {
                    seen.failed_at = Some(Instant::now());
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        seen
    })
}

/// A tenant's repository copied out of a container, for the host's git (and its ssh-keygen,
/// which checks signatures).
fn copy_repo(id: &str, tenant: &str, into: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(into).unwrap();
    let to = into.join(format!("{tenant}.git"));
    docker(&[
        "cp",
        &format!("{id}:/data/tenants/{tenant}.git"),
        to.to_str().unwrap(),
    ]);
    to
}

/// Every commit in `acked` is in `repo`'s main and signed by a key `/plans/signing-keys` of
/// `addr` lists; the repository passes `git fsck --strict`.
async fn all_kept_and_signed(repo: &Path, acked: &[String], addr: &str) {
    let signers = repo.with_extension("signers");
    let keys = reqwest::Client::new()
        .get(format!("{addr}/plans/signing-keys"))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    std::fs::write(&signers, keys).unwrap();
    let log = common::git_in(
        repo,
        &[
            "-c",
            &format!("gpg.ssh.allowedSignersFile={}", signers.display()),
            "log",
            "--format=%H %G?",
            "main",
        ],
    );
    let verdicts: std::collections::HashMap<&str, &str> =
        log.lines().filter_map(|l| l.split_once(' ')).collect();
    for c in acked {
        assert_eq!(
            verdicts.get(c.as_str()).copied(),
            Some("G"),
            "acknowledged commit {c}: missing from main, or not signed by the service"
        );
    }
    common::git_in(repo, &["fsck", "--strict"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_image_runs_read_only_keeps_writes_through_kill_and_drains_on_stop() {
    if !wanted() {
        return;
    }
    let mut cleanup = Cleanup(Vec::new());
    let size: u64 = docker(&["image", "inspect", image(), "--format", "{{.Size}}"])
        .parse()
        .unwrap();
    eprintln!("image {IMAGE}: {} MB", size / 1_000_000);
    assert_eq!(
        docker(&["image", "inspect", IMAGE, "--format", "{{.Config.User}}"]),
        "planfiles:planfiles"
    );
    let volume = format!("planfiles-test-kill-{}", std::process::id());
    let (id, addr) = run(&volume, &mut cleanup);
    let took = ready(&addr, Duration::from_secs(30)).await;
    eprintln!("docker run to ready: {} ms", took.as_millis());
    assert_eq!(docker(&["exec", &id, "id", "-u"]), "10001");
    let touch = Command::new("docker")
        .args(["exec", &id, "touch", "/usr/local/bin/x"])
        .output()
        .unwrap();
    assert!(!touch.status.success(), "the root file system is writable");

    // docker kill (SIGKILL) under 4 writers: every 200 is in main's history after a start.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| blind_writer(addr.clone(), "acme", w, stop.clone(), true))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    docker(&["kill", &id]);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap().acked);
    }
    assert!(acked.len() > 20, "{} writes acknowledged", acked.len());
    docker(&["start", &id]);
    let addr = published(&id);
    ready(&addr, Duration::from_secs(30)).await;
    let host = tempfile::tempdir().unwrap();
    let repo = copy_repo(&id, "acme", host.path());
    all_kept_and_signed(&repo, &acked, &addr).await;
    eprintln!(
        "docker kill under 4 writers: {} writes acknowledged, 0 lost, all signed, fsck --strict clean",
        acked.len()
    );

    // docker stop under load: readiness 503 at once, the writes go on being served while the
    // service drains (drain_secs = 5 in the image), every write that landed was answered (no
    // response lost), exit 0 within 30 s.
    let before = common::git_in(&repo, &["rev-parse", "main"]);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| blind_writer(addr.clone(), "acme", 10 + w, stop.clone(), true))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = {
        let id = id.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            docker(&["stop", "-t", "30", &id]);
            started.elapsed()
        })
    };
    let signalled = Instant::now();
    let probe = fresh_client();
    let turned = loop {
        let res = probe.get(format!("{addr}/readyz")).send().await;
        match res {
            Ok(r) if r.status() == 503 => break signalled.elapsed(),
            Ok(_) if signalled.elapsed() < Duration::from_secs(3) => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            other => panic!("readiness after docker stop: {other:?}"),
        }
    };
    let took = stopping.join().unwrap();
    stop.store(true, SeqCst);
    let (mut during, mut cut, mut served_for) = (Vec::new(), Vec::new(), Duration::MAX);
    for w in writers {
        let seen = w.await.unwrap();
        during.extend(seen.acked);
        cut.extend(seen.cut);
        let failed_at = seen
            .failed_at
            .expect("a writer never failed: did the stop stop?");
        served_for = served_for.min(failed_at.saturating_duration_since(signalled));
    }
    assert!(cut.is_empty(), "responses cut off by docker stop: {cut:?}");
    assert!(
        served_for > Duration::from_secs(4),
        "writes failed {served_for:?} after docker stop, inside the 5 s drain"
    );
    assert!(took < Duration::from_secs(30), "docker stop took {took:?}");
    assert_eq!(
        docker(&["inspect", &id, "--format", "{{.State.ExitCode}}"]),
        "0"
    );
    docker(&["start", &id]);
    let addr = published(&id);
    ready(&addr, Duration::from_secs(30)).await;
    let repo = copy_repo(&id, "acme", &host.path().join("after-stop"));
    all_kept_and_signed(&repo, &during, &addr).await;
    // Every write that landed got its 200: none was made and its answer lost.
    let landed: HashSet<String> = common::git_in(&repo, &["rev-list", &format!("{before}..main")])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(landed, during.iter().cloned().collect::<HashSet<_>>());
    eprintln!(
        "docker stop under 4 writers: readiness 503 after {} ms, writes served for {} ms, exited 0 after {} ms; {} writes acknowledged meanwhile, each in main, and main has no other",
        turned.as_millis(),
        served_for.as_millis(),
        took.as_millis(),
        during.len()
    );
    assert!(
        turned < Duration::from_secs(1),
        "readiness turned after {turned:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walkthrough_passes_on_the_read_only_image() {
    if !wanted() {
        return;
    }
    let mut cleanup = Cleanup(Vec::new());
    let volume = format!("planfiles-test-walk-{}", std::process::id());
    let (id, addr) = run(&volume, &mut cleanup);
    ready(&addr, Duration::from_secs(30)).await;
    let client = reqwest::Client::new();
    // 1. A token, minted in the container with its secret.
    let t = docker(&[
        "exec",
        &id,
        "planfiles",
        "token",
        "--tenant",
        "acme",
        "--sub",
        "dana",
        "--email",
        "dana@acme.example",
        "--name",
        "Dana Whitfield",
    ]);
    // 2. The client in the same binary reads the file as stored.
    let text = docker(&[
        "exec",
        "-e",
        &format!("PLANFILES_TOKEN={t}"),
        &id,
        "planfiles",
        "get",
        "integration",
    ]);
    assert!(
        text.contains("aws:") && text.contains("123456789012"),
        "{text}"
    );
    // 3. Read, add an account, PUT with the sha.
    let file = format!("{addr}/plans/integration-file");
    let cur: Value = client
        .get(&file)
        .bearer_auth(&t)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut content = cur["content"].clone();
    content["aws"]
        .as_array_mut()
        .unwrap()
        .push(json!({"account_id": "999988887777", "regions": ["eu-central-1"], "type": "aws"}));
    let put = json!({"content": content, "file_sha": cur["file_sha"]});
    let send = |body: &Value| client.put(&file).bearer_auth(&t).json(body).send();
    assert_eq!(send(&put).await.unwrap().status(), 200, "step 3");
    // 4. The same PUT again: stale sha, 409.
    assert_eq!(send(&put).await.unwrap().status(), 409, "step 4");
    // 5. The schemas refuse a short account id and an unknown region: 422.
    let bad = json!({"content": "aws:\n  - account_id: \"12345\"\n    regions: [us-east-9]\n    type: aws\n"});
    let res = send(&bad).await.unwrap();
    assert_eq!(res.status(), 422, "step 5 (the image's schemas)");
    // 6. A configuration update forced with a commit of the history.
    let commit = docker(&[
        "exec",
        &id,
        "git",
        "--git-dir",
        "/data/tenants/acme.git",
        "rev-parse",
        "main",
    ]);
    let res = client
        .put(format!("{addr}/plans/configuration-file"))
        .bearer_auth(&t)
        .json(&json!({"payload": {"folders": [{"path": "services", "exclude": ["**/testdata/**"]}]}, "file_sha": commit}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "step 6");
    // 7. The history, with git in the container.
    let log = docker(&[
        "exec",
        &id,
        "git",
        "--git-dir",
        "/data/tenants/acme.git",
        "log",
        "-2",
        "--format=%an|%s",
    ]);
    assert_eq!(
        log, "Dana Whitfield|Update configuration.yml\nDana Whitfield|Update integrations.yml",
        "step 7"
    );
    eprintln!("the README walkthrough on the read-only image: steps 1-7 as the README says");
}

/// `docker compose`, or `docker-compose` (Debian 12's 1.29) where the plugin is missing.
fn compose_command() -> Vec<&'static str> {
    let plugin = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if plugin {
        vec!["docker", "compose"]
    } else {
        vec!["docker-compose"]
    }
}

/// A compose project of `deploy/compose.yaml` on free loopback ports.
struct Compose {
    base: Vec<&'static str>,
    project: String,
    ports: [u16; 3],
}

impl Compose {
    fn command(&self, args: &[&str]) -> Command {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/compose.yaml");
        let mut cmd = Command::new(self.base[0]);
        cmd.args(&self.base[1..])
            .arg("-f")
            .arg(file)
            .args(["-p", &self.project])
            .args(args)
            .env("PLANFILES_PORT", self.ports[0].to_string())
            .env("PLANFILES_SHARD_A_PORT", self.ports[1].to_string())
            .env("PLANFILES_SHARD_B_PORT", self.ports[2].to_string())
            .env("PLANFILES_IMAGE", IMAGE)
            .env("PLANFILES_BINARY", binary())
            .env("PLANFILES_HAPROXY_IMAGE", "planfiles-haproxy-test:latest");
        cmd
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap();
        assert!(
            out.status.success(),
            "compose {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn url(&self, which: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[which])
    }
}

/// The project comes down with its volumes when the test ends, failed or not.
impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self.command(&["down", "-v", "--remove-orphans"]).output();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Read-modify-write on `tenant`'s configuration file at `addr` until `stop`: the file's
/// sha read, a PUT with it; 409, 421, 503 and refused connections are read again and retried.
fn guarded_writer(
    addr: String,
    t: String,
    name: &'static str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Seen, std::collections::BTreeMap<u16, usize>)> {
    tokio::spawn(async move {
        let client = fresh_client();
        let mut seen = Seen::default();
        let mut statuses = std::collections::BTreeMap::new();
        let url = format!("{addr}/plans/configuration-file");
        for i in 0.. {
            if stop.load(SeqCst) {
                break;
            }
            let sha = match client.get(&url).bearer_auth(&t).send().await {
                Ok(r) if r.status() == 200 => r
                    .json::<Value>()
                    .await
                    .ok()
                    .and_then(|v| v["sha"].as_str().map(str::to_owned)),
                _ => None,
            };
            let Some(sha) = sha else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let body =
                json!({"payload": {"folders": [{"path": format!("{name}-{i}")}]}, "file_sha": sha});
            match client.put(&url).bearer_auth(&t).json(&body).send().await {
                Ok(r) if r.status() == 200 => match r.json::<Value>().await {
                    Ok(v) => seen
                        .acked
                        .push(v["commit_sha"].as_str().unwrap().to_owned()),
                    Err(e) => seen.cut.push(e.to_string()),
                },
                Ok(r) => {
                    *statuses.entry(r.status().as_u16()).or_insert(0) += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) if e.is_connect() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => seen.cut.push(e.to_string()),
            }
        }
        (seen, statuses)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compose_moves_a_tenant_between_shards_through_a_network_cut() {
    if !wanted() {
        return;
    }
    let compose = Compose {
        base: compose_command(),
        project: format!("pftest{}", std::process::id()),
        ports: [free_port(), free_port(), free_port()],
    };
    image();
    let started = Instant::now();
    compose.run(&["up", "-d", "--build"]);
    let (front, a, b) = (compose.url(0), compose.url(1), compose.url(2));
    ready(&front, Duration::from_secs(60)).await;
    ready(&a, Duration::from_secs(60)).await;
    ready(&b, Duration::from_secs(60)).await;
    eprintln!(
        "compose up (built) to three ready: {} ms",
        started.elapsed().as_millis()
    );

    // Each demo tenant through HAProxy, with a token minted in either shard's container
    // (the shared secret file).
    let mint = |shard: &str, tenant: &str| {
        compose.run(&[
            "exec",
            "-T",
            shard,
            "planfiles",
            "token",
            "--tenant",
            tenant,
        ])
    };
    let client = fresh_client();
    for (shard, tenant) in [
        ("shard-a", "acme"),
        ("shard-b", "globex"),
        ("shard-a", "initech"),
    ] {
        let res = client
            .get(format!("{front}/plans/integration-file"))
            .bearer_auth(mint(shard, tenant))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{tenant} through HAProxy");
    }

    // Writers on globex: through HAProxy, and straight at each shard.
    let t = mint("shard-a", "globex");
    let stop = Arc::new(AtomicBool::new(false));
    let writers = [
        guarded_writer(front.clone(), t.clone(), "front", stop.clone()),
        guarded_writer(a.clone(), t.clone(), "a", stop.clone()),
        guarded_writer(b.clone(), t.clone(), "b", stop.clone()),
    ];
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The move; the target is cut off the network as the source stops taking writes.
    let b_id = compose.run(&["ps", "-q", "shard-b"]);
    let network = format!("{}_default", compose.project);
    let mv = [
        "exec",
        "-T",
        "shard-a",
        "planfiles",
        "tenant",
        "move",
        "globex",
        "--to",
        "http://shard-b:8080",
        "--haproxy",
        "/router/admin.sock",
        "--map",
        "/router/tenants.map",
        "--backend",
        "shard_b",
    ];
    let mut first = compose
        .command(&mv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A move that never ends fails the test instead of hanging it.
    let pid = first.id();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(120));
        let _ = Command::new("kill").arg(pid.to_string()).status();
    });
    let lines = std::io::BufReader::new(first.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let mut cut = false;
    for line in lines {
        let line = line.unwrap();
        if line.starts_with("step 1/4") && !cut {
            docker(&["network", "disconnect", &network, &b_id]);
            cut = true;
        }
        printed.push(line);
    }
    assert!(cut, "the move never began: {printed:?}");
    let first_status = first.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().unwrap(), &mut stderr).unwrap();
    eprintln!(
        "the move with the target cut off: {first_status}\n{}\n{stderr}",
        printed.join("\n")
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    docker(&["network", "connect", "--alias", "shard-b", &network, &b_id]);
    ready(&b, Duration::from_secs(30)).await;
    // The same command again finishes the move (or finds it finished).
    let again = compose.command(&mv).output().unwrap();
    let said = String::from_utf8_lossy(&again.stdout).into_owned();
    assert!(
        again.status.success(),
        "the move run again: {said}{}",
        String::from_utf8_lossy(&again.stderr)
    );
    eprintln!("the move run again:\n{said}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, SeqCst);
    let mut acked = Vec::new();
    for (w, name) in writers.into_iter().zip(["front", "a", "b"]) {
        let (seen, statuses) = w.await.unwrap();
        assert!(
            seen.cut.is_empty(),
            "{name}: requests cut off: {:?}",
            seen.cut
        );
        eprintln!(
            "writer {name}: {} acknowledged, refused {statuses:?}",
            seen.acked.len()
        );
        acked.extend(seen.acked);
    }
    assert!(acked.len() > 10, "{} writes acknowledged", acked.len());

    // Every write any shard acknowledged is on the shard the tenant ended on: never two
    // writable shards. The source answers 421, the target and HAProxy 200.
    let host = tempfile::tempdir().unwrap();
    let repo = copy_repo(&b_id, "globex", host.path());
    all_kept_and_signed(&repo, &acked, &b).await;
    let get = |addr: String| {
        let (client, t) = (client.clone(), t.clone());
        async move {
            client
                .get(format!("{addr}/plans/configuration-file"))
                .bearer_auth(t)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(
        (
            get(front.clone()).await,
            get(a.clone()).await,
            get(b.clone()).await
        ),
        (200, 421, 200)
    );
    let map = compose.run(&["exec", "-T", "haproxy", "cat", "/router/tenants.map"]);
    assert!(
        map.lines()
            .any(|l| l.split_whitespace().eq(["globex", "shard_b"])),
        "{map}"
    );
    let refused = said
        .lines()
        .last()
        .and_then(|l| l.split("writes refused for ").nth(1))
        .unwrap_or("?")
        .split(';')
        .next()
        .unwrap_or("?")
        .to_owned();
    eprintln!(
        "compose move through a network cut: {} writes acknowledged, 0 lost, all signed; writes refused for {refused}",
        acked.len()
    );
}

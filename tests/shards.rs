//! Shards behind HAProxy (issue 27): two real `planfiles serve` processes, HAProxy 2.6 routing by the token's tenant through a map, and `planfiles tenant move` run as its own process under a read-modify-write load, killed with SIGKILL at each step and run again. Skipped, with the reason printed, where `haproxy` is not installed (CI installs it).
mod common;

use common::process::{planfiles, serve_command, Server};
use common::token;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WRITE: &[&str] = &["jit.integrations.write", "jit.preferences.write"];

fn haproxy_missing() -> bool {
    let found = Command::new("haproxy").arg("-v").output().is_ok();
    if !found {
        eprintln!("SKIPPED: haproxy is not installed (apt-get install haproxy); the shard tests need it");
    }
    !found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Shard {
    dir: PathBuf,
    url: String,
    backend: &'static str,
    server: Option<Server>,
}

impl Shard {
    fn repo(&self, tenant: &str) -> PathBuf {
        self.dir.join(format!("data/tenants/{tenant}.git"))
    }

    fn cli(&self) -> Command {
        planfiles(&self.dir)
    }
}

/// Two shards, HAProxy in front, `tenants` spread over them (even ones on a, odd ones on b).
struct Cluster {
    _root: tempfile::TempDir,
    root: PathBuf,
    shards: [Shard; 2],
    haproxy: Child,
    front: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.haproxy.kill();
        let _ = self.haproxy.wait();
    }
}

impl Cluster {
    fn start(tenants: &[String], grace_secs: u64) -> Self {
        let root_dir = tempfile::tempdir().unwrap();
        let root = root_dir.path().to_owned();
        let ports = [free_port(), free_port()];
        let names = ["a", "b"];
        let shards = [0, 1].map(|i| {
            let dir = root.join(names[i]);
            std::fs::create_dir_all(dir.join("data")).unwrap();
            // Shards share the data dir secret (docs/SCALING.md): idempotency fingerprints
            // and history cursors made on one hold on the others.
            std::fs::write(dir.join("data/cursor.key"), "5eed".repeat(16)).unwrap();
            let url = format!("http://127.0.0.1:{}", ports[i]);
            let peer = format!("http://127.0.0.1:{}", ports[1 - i]);
            std::fs::write(
                dir.join("config.toml"),
                format!(
                    "[storage]\nseed_from = \"\"\n[cluster]\nself_url = \"{url}\"\npeers = [\"{peer}\"]\nmoved_grace_secs = {grace_secs}\n"
                ),
            )
            .unwrap();
            Shard {
                dir,
                url,
                backend: ["shard_a", "shard_b"][i],
                server: None,
            }
        });
        let mut map = String::from("# tenant backend\n");
        for (i, t) in tenants.iter().enumerate() {
            let shard = &shards[i % 2];
            let out = shard
                .cli()
                .args(["tenant", "create", t, "--source-hosting"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            map.push_str(&format!("{t} {}\n", shard.backend));
        }
        std::fs::write(root.join("tenants.map"), map).unwrap();
        let mut cluster = Self {
            haproxy: Command::new("true").spawn().unwrap(),
            front: String::new(),
            _root: root_dir,
            root,
            shards,
        };
        for (i, port) in ports.iter().enumerate() {
            let mut cmd = cluster.shards[i].cli();
            cmd.env("PLANFILES_BIND", format!("127.0.0.1:{port}"));
            cluster.shards[i].server = Some(serve_command(cmd));
        }
        cluster.start_haproxy(ports);
        cluster
    }

    fn start_haproxy(&mut self, ports: [u16; 2]) {
        let front = free_port();
        let template = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/haproxy.cfg"),
        )
        .unwrap();
        // The shipped example, pointed at this test's files and ports.
        let cfg = template
            .replace("/etc/haproxy/tenants.map", self.map().to_str().unwrap())
            .replace("/run/haproxy/admin.sock", self.socket().to_str().unwrap())
            .replace("bind :8080", &format!("bind 127.0.0.1:{front}"))
            .replace("10.0.0.1:8080", &format!("127.0.0.1:{}", ports[0]))
            .replace("10.0.0.2:8080", &format!("127.0.0.1:{}", ports[1]))
            .replace(" check\n", " check inter 500ms\n");
        let path = self.root.join("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        let _ = self.haproxy.wait();
        self.haproxy = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.front = format!("http://127.0.0.1:{front}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", front)).is_err() || !self.socket().exists()
        {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Health checks mark the servers up.
        std::thread::sleep(Duration::from_millis(700));
    }

    fn map(&self) -> PathBuf {
        self.root.join("tenants.map")
    }

    fn socket(&self) -> PathBuf {
        self.root.join("admin.sock")
    }

    /// The shard the map file sends `tenant` to.
    fn home(&self, tenant: &str) -> usize {
        let map = std::fs::read_to_string(self.map()).unwrap();
        let backend = map
            .lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some(tenant)).then(|| w.next().unwrap().to_owned())
            })
            .unwrap();
        self.shards.iter().position(|s| s.backend == backend).unwrap()
    }

    /// `planfiles tenant move` from shard `from` to the other shard, as a child process
    /// whose stdout lines are returned through a channel.
    fn start_move(&self, tenant: &str, from: usize) -> (Child, std::sync::mpsc::Receiver<String>) {
        let to = &self.shards[1 - from];
        let mut child = self.shards[from]
            .cli()
            .args(["tenant", "move", tenant, "--to", &to.url, "--haproxy"])
            .arg(self.socket())
            .arg("--map")
            .arg(self.map())
            .args(["--backend", to.backend])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    }

    /// Moves `tenant` from shard `from` to the other one; returns the command's last line.
    fn move_tenant(&self, tenant: &str, from: usize) -> String {
        let (mut child, lines) = self.start_move(tenant, from);
        let last = lines.iter().last().unwrap_or_default();
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(status.success(), "tenant move {tenant}: {status}: {err}");
        last
    }

    fn git(&self, repo: &Path, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .arg("--git-dir")
            .arg(repo)
            .args(args)
            .output()
            .unwrap()
    }

    /// The checks of the issue, on the files as they are now.
    fn check(&self, tenants: &[String], acked: &[(String, String)]) {
        for t in tenants {
            let home = self.home(t);
            let here = self.shards[home].repo(t);
            assert!(here.is_dir(), "{t} is not on its shard");
            assert!(
                !here.join("planfiles-placement").exists(),
                "{t} is not writable on its shard"
            );
            let other = self.shards[1 - home].repo(t);
            assert!(
                !other.is_dir() || other.join("planfiles-placement").exists(),
                "{t} is writable on both shards"
            );
        }
        for shard in &self.shards {
            for entry in std::fs::read_dir(shard.dir.join("data/tenants")).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "git") {
                    let out = self.git(&path, &["fsck", "--strict", "--no-dangling"]);
                    assert!(out.status.success(), "git fsck --strict {}: {out:?}", path.display());
                }
            }
        }
        for (t, commit) in acked {
            let repo = self.shards[self.home(t)].repo(t);
            let out = self.git(&repo, &["merge-base", "--is-ancestor", commit, "refs/heads/main"]);
            assert!(out.status.success(), "acknowledged commit {commit} of {t} is not on its shard");
        }
    }
}

/// What the writers saw.
#[derive(Default)]
struct Seen {
    acked: Vec<(String, String)>,
    statuses: BTreeMap<u16, usize>,
    bad: Vec<String>,
}

/// Read-modify-write with file_sha through HAProxy, on random tenants, until `stop`.
fn write_load(
    front: String,
    tenants: Vec<String>,
    writers: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<std::thread::JoinHandle<()>>, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let handles = (0..writers)
        .map(|w| {
            let (front, tenants, stop, seen) =
                (front.clone(), tenants.clone(), stop.clone(), seen.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                let url = format!("{front}/plans/integration-file");
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let t = &tenants[(w * 7 + i) % tenants.len()];
                    let auth = format!("Bearer {}", token(t, WRITE));
                    let res = match client.get(&url).header("Authorization", &auth).send() {
                        Ok(res) => res,
                        Err(e) => {
                            seen.lock().unwrap().bad.push(format!("GET {t}: {e}"));
                            break;
                        }
                    };
                    if res.status() != 200 {
                        let status = res.status().as_u16();
                        let mut s = seen.lock().unwrap();
                        *s.statuses.entry(status).or_default() += 1;
                        if status != 503 && status != 421 {
                            s.bad.push(format!("GET {t}: {status}: {}", res.text().unwrap_or_default()));
                        }
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    let before: Value = res.json().unwrap();
                    let mut content = before["content"].clone();
                    content["vanta"] = json!({"user_email": format!("w{w}-{i}@load.example"), "workspace": t});
                    let res = client
                        .put(&url)
                        .header("Authorization", &auth)
                        .json(&json!({"content": content, "file_sha": before["file_sha"]}))
                        .send();
                    let res = match res {
                        Ok(res) => res,
                        Err(e) => {
                            seen.lock().unwrap().bad.push(format!("PUT {t}: {e}"));
                            break;
                        }
                    };
                    let status = res.status().as_u16();
                    let retry_after = res.headers().contains_key("retry-after");
                    let body: Value = res.json().unwrap_or_default();
                    let mut s = seen.lock().unwrap();
                    *s.statuses.entry(status).or_default() += 1;
                    match status {
                        200 => s.acked.push((t.clone(), body["commit_sha"].as_str().unwrap().to_owned())),
                        409 | 421 => {}
                        503 if retry_after => {}
                        _ => s.bad.push(format!("PUT {t}: {status}: {body}")),
                    }
                    drop(s);
                    if status != 200 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();
    (handles, seen)
}

/// An `EventSource`-like follower of one tenant through HAProxy: it reconnects after a
/// stream ends (or a 503, 421) with `Last-Event-ID`, and records every file event's id.
fn follow(
    front: String,
    tenant: String,
    stop: Arc<AtomicBool>,
) -> (std::thread::JoinHandle<()>, Arc<Mutex<(Option<String>, Vec<String>, usize)>>) {
    // (the head it started at, the commit ids of file events, reconnections)
    let state = Arc::new(Mutex::new((None, Vec::new(), 0)));
    let shared = state.clone();
    let handle = std::thread::spawn(move || {
        let client = reqwest::blocking::Client::builder()
            .timeout(None)
            .build()
            .unwrap();
        let mut last: Option<String> = None;
        while !stop.load(Ordering::Relaxed) {
            let mut req = client
                .get(format!("{front}/plans/events"))
                .header("Authorization", format!("Bearer {}", token(&tenant, WRITE)));
            if let Some(id) = &last {
                req = req.header("Last-Event-ID", id);
            }
            let res = match req.send() {
                Ok(res) if res.status() == 200 => res,
                _ => {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            };
            shared.lock().unwrap().2 += 1;
            let (mut event, mut id) = (String::new(), None::<String>);
            for line in BufReader::new(res).lines() {
                let Ok(line) = line else { break };
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(e) = line.strip_prefix("event: ") {
                    event = e.to_owned();
                } else if let Some(i) = line.strip_prefix("id: ") {
                    id = Some(i.to_owned());
                } else if line.is_empty() {
                    if let Some(i) = id.take() {
                        let mut s = shared.lock().unwrap();
                        if event == "head" && s.0.is_none() {
                            s.0 = Some(i.clone());
                        }
                        if event == "integration-file" || event == "configuration-file" {
                            s.1.push(i.clone());
                        }
                        last = Some(i);
                    }
                    event.clear();
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    (handle, state)
}

fn tenants(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t{i:02}")).collect()
}

#[test]
fn tenants_move_between_shards_under_load_with_no_lost_write() {
    if haproxy_missing() {
        return;
    }
    let all = tenants(20);
    // Grace 0: a moved tenant is archived at once, and its old shard answers 421 from its
    // tombstone.
    let cluster = Cluster::start(&all, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let (writers, seen) = write_load(cluster.front.clone(), all.clone(), 8, stop.clone());
    let followed = all[4].clone();
    let stop_following = Arc::new(AtomicBool::new(false));
    let (follower, events) = follow(cluster.front.clone(), followed.clone(), stop_following.clone());
    std::thread::sleep(Duration::from_millis(1500));
    let mut lines = Vec::new();
    // Five tenants move, the followed one twice (there and back).
    for t in [&all[0], &all[1], &all[4], &all[2], &all[3], &all[4]] {
        lines.push(cluster.move_tenant(t, cluster.home(t)));
        std::thread::sleep(Duration::from_millis(700));
    }
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!("moves: {lines:#?}\nstatuses: {:?}, acknowledged: {}", seen.statuses, seen.acked.len());
    assert!(seen.bad.is_empty(), "unexpected answers: {:#?}", seen.bad);
    assert!(seen.acked.len() > 50, "the load wrote too little: {}", seen.acked.len());
    assert!(seen.statuses.get(&503).is_some() || seen.statuses.get(&421).is_some(),
        "no write met a move: {:?}", seen.statuses);
    cluster.check(&all, &seen.acked);
    // Every acknowledged write of the followed tenant was seen once, in order, across its
    // three shards' streams.
    let home = cluster.home(&followed);
    let repo = cluster.shards[home].repo(&followed);
    let deadline = Instant::now() + Duration::from_secs(20);
    let want = loop {
        let (start, got, _) = events.lock().unwrap().clone();
        let start = start.expect("the follower got a head");
        let out = cluster.git(&repo, &["rev-list", "--first-parent", "--reverse", &format!("{start}..refs/heads/main")]);
        let want: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect();
        if got.len() >= want.len() || Instant::now() > deadline {
            break want;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    stop_following.store(true, Ordering::Relaxed);
    let (_, got, connections) = events.lock().unwrap().clone();
    let unique: HashSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "an event came twice");
    assert_eq!(got, want, "the followed stream has a gap");
    assert!(connections >= 3, "the follower did not move with its tenant: {connections} connections");
    let acked_followed = seen.acked.iter().filter(|(t, _)| t == &followed).count();
    assert!(acked_followed > 0);
    drop(follower);
    // The old shard of a moved tenant answers 421 (archived: from its tombstone).
    let old = &cluster.shards[1 - cluster.home(&all[0])];
    assert!(!old.repo(&all[0]).exists(), "archived after a grace of 0");
    let res = reqwest::blocking::Client::new()
        .get(format!("{}/plans/integration-file", old.url))
        .header("Authorization", format!("Bearer {}", token(&all[0], WRITE)))
        .send()
        .unwrap();
    assert_eq!(res.status(), 421);
    let problem: Value = res.json().unwrap();
    assert_eq!(problem["code"], "tenant_moved");
}

#[test]
fn a_move_killed_at_each_step_is_run_again_and_loses_nothing() {
    if haproxy_missing() {
        return;
    }
    let all = tenants(3);
    let cluster = Cluster::start(&all, 3600);
    let moved = &all[0];
    let mut homes = vec![cluster.home(moved)];
    // A keyed write before the moves: its retry after them replays where the tenant is then.
    let keyed = |client: &reqwest::blocking::Client| {
        let url = format!("{}/plans/integration-file", cluster.front);
        client
            .put(&url)
            .header("Authorization", format!("Bearer {}", token(moved, WRITE)))
            .header("Idempotency-Key", "move-retry-1")
            .json(&json!({"content": {"vanta": {"user_email": "keyed@x.example", "workspace": "k"}}}))
            .send()
            .unwrap()
    };
    let client = reqwest::blocking::Client::new();
    let first = keyed(&client);
    assert_eq!(first.status(), 200);
    let first: Value = first.json().unwrap();
    let mut acked = Vec::new();
    let mut statuses = BTreeMap::new();
    for step in 1..=4 {
        // The load runs through the kill and the rerun, and stops for the checks (git fsck
        // beside a running repack can miss an object that moves into a pack).
        let stop = Arc::new(AtomicBool::new(false));
        let (writers, seen) = write_load(cluster.front.clone(), all.clone(), 4, stop.clone());
        std::thread::sleep(Duration::from_millis(400));
        // The same command runs again after the kill, as an operator would run it.
        let from = cluster.home(moved);
        let (mut child, lines) = cluster.start_move(moved, from);
        let marker = format!("step {step}/4");
        let mut printed = Vec::new();
        for line in lines.iter() {
            let hit = line.starts_with(&marker);
            printed.push(line);
            if hit {
                child.kill().unwrap();
                break;
            }
        }
        child.wait().unwrap();
        assert!(printed.iter().any(|l| l.starts_with(&marker)), "{printed:?}");
        // Killed: the tenant is still served (reads through HAProxy answer).
        let res = client
            .get(format!("{}/plans/integration-file", cluster.front))
            .header("Authorization", format!("Bearer {}", token(moved, WRITE)))
            .send()
            .unwrap();
        assert!(
            [200, 421].contains(&res.status().as_u16()),
            "after a kill at step {step}: {}",
            res.status()
        );
        // Run again: it finishes the move.
        let last = cluster.move_tenant(moved, from);
        assert!(last.starts_with("moved "), "{last}");
        homes.push(cluster.home(moved));
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        let seen = std::mem::take(&mut *seen.lock().unwrap());
        assert!(seen.bad.is_empty(), "unexpected answers at step {step}: {:#?}", seen.bad);
        for (status, n) in seen.statuses {
            *statuses.entry(status).or_insert(0) += n;
        }
        acked.extend(seen.acked);
        cluster.check(&all, &acked);
    }
    eprintln!("homes: {homes:?}; statuses: {statuses:?}, acknowledged: {}", acked.len());
    assert_eq!(homes, [0, 1, 0, 1, 0], "each run moved the tenant once");
    // The key travelled with the history: the retry replays on the shard the tenant is on now.
    let retry = keyed(&client);
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let retry: Value = retry.json().unwrap();
    assert_eq!(retry["commit_sha"], first["commit_sha"]);
}

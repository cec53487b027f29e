//! Two planfiles shards behind HAProxy, built from `deploy/haproxy.cfg`, for `tests/shards.rs` and `benches/shards.rs`: tenants spread over them, `tenant move` as a child process, a read-modify-write load and an `EventSource`-like follower through HAProxy, and the end checks.
#![allow(dead_code)]
use crate::common::process::{planfiles, serve_command, Server};
use crate::common::token;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const WRITE: &[&str] = &["jit.integrations.write", "jit.preferences.write"];

/// True (the test is skipped, saying why) where HAProxy is not installed, unless
/// `PLANFILES_SHARD_TESTS=require` (CI), where that fails the test.
pub fn haproxy_missing() -> bool {
    let found = Command::new("haproxy").arg("-v").output().is_ok();
    let why = "haproxy is not installed (apt-get install haproxy); the shard tests need it";
    if !found && std::env::var("PLANFILES_SHARD_TESTS").as_deref() == Ok("require") {
        panic!("{why}, and PLANFILES_SHARD_TESTS=require");
    }
    if !found {
        eprintln!("SKIPPED: {why}");
    }
    !found
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Shard {
    pub dir: PathBuf,
    pub url: String,
    pub backend: &'static str,
    pub server: Option<Server>,
}

impl Shard {
    pub fn repo(&self, tenant: &str) -> PathBuf {
        self.dir.join(format!("data/tenants/{tenant}.git"))
    }

    pub fn cli(&self) -> Command {
        planfiles(&self.dir)
    }
}

/// Two shards, HAProxy in front, `tenants` spread over them.
pub struct Cluster {
    pub _root: tempfile::TempDir,
    pub root: PathBuf,
    pub shards: [Shard; 2],
    pub haproxy: Child,
    pub front: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failed test shows what the shards logged at warn and above.
        if std::thread::panicking() {
            for shard in &self.shards {
                if let Some(server) = &shard.server {
                    for line in server.log.lock().unwrap().iter() {
                        if line.contains("\"ERROR\"") || line.contains("\"WARN\"") {
                            eprintln!("{}: {line}", shard.backend);
                        }
                    }
                }
            }
        }
        let _ = self.haproxy.kill();
        let _ = self.haproxy.wait();
    }
}

impl Cluster {
    /// Tenant `i` goes to shard `i % spread` (2: both shards, 1: all on shard a).
    pub fn start(tenants: &[String], grace_secs: u64, spread: usize) -> Self {
        let root_dir = tempfile::tempdir().unwrap();
        let root = root_dir.path().to_owned();
        let ports = [free_port(), free_port()];
        let names = ["a", "b"];
        let shards = [0, 1].map(|i| {
            let dir = root.join(names[i]);
            crate::common::shared_shard_secrets(&dir.join("data"));
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
            let shard = &shards[i % spread];
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
        // The shipped example, pointed at this test's files and ports (each piece must be
        // there: the example and this test cannot drift apart unnoticed).
        let mut cfg = template;
        for (from, to) in [
            ("map(tenants.map,", format!("map({},", self.map().display())),
            (
                "unix@admin.sock",
                format!("unix@{}", self.socket().display()),
            ),
            ("bind 127.0.0.1:8080", format!("bind 127.0.0.1:{front}")),
            ("127.0.0.1:8081", format!("127.0.0.1:{}", ports[0])),
            ("127.0.0.1:8082", format!("127.0.0.1:{}", ports[1])),
            (" check\n", " check inter 500ms\n".to_owned()),
        ] {
            assert!(cfg.contains(from), "deploy/haproxy.cfg has no {from:?}");
            cfg = cfg.replace(from, &to);
        }
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

    pub fn map(&self) -> PathBuf {
        self.root.join("tenants.map")
    }

    pub fn socket(&self) -> PathBuf {
        self.root.join("admin.sock")
    }

    /// The shard the map file sends `tenant` to.
    pub fn home(&self, tenant: &str) -> usize {
        let map = std::fs::read_to_string(self.map()).unwrap();
        let backend = map
            .lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some(tenant)).then(|| w.next().unwrap().to_owned())
            })
            .unwrap();
        self.shards
            .iter()
            .position(|s| s.backend == backend)
            .unwrap()
    }

    /// `planfiles tenant move` from shard `from` to the other shard, as a child process
    /// whose stdout lines are returned through a channel.
    pub fn start_move(
        &self,
        tenant: &str,
        from: usize,
    ) -> (Child, std::sync::mpsc::Receiver<String>) {
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
    pub fn move_tenant(&self, tenant: &str, from: usize) -> String {
        let (mut child, lines) = self.start_move(tenant, from);
        let last = lines.iter().last().unwrap_or_default();
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(status.success(), "tenant move {tenant}: {status}: {err}");
        last
    }

    /// The checks of the issue, on the files as they are now.
    pub fn check(&self, tenants: &[String], acked: &[(String, String)]) {
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
                    crate::common::git_in(&path, &["fsck", "--strict", "--no-dangling"]);
                }
            }
        }
        for (t, commit) in acked {
            let repo = self.shards[self.home(t)].repo(t);
            let args = ["merge-base", "--is-ancestor", commit, "refs/heads/main"];
            assert!(
                crate::common::git_succeeds(&repo, &args),
                "acknowledged commit {commit} of {t} is not on its shard"
            );
        }
    }
}

/// What the writers saw.
#[derive(Default)]
pub struct Seen {
    pub acked: Vec<(String, String)>,
    pub statuses: BTreeMap<u16, usize>,
    pub bad: Vec<String>,
}

/// Read-modify-write with file_sha through HAProxy, on random tenants, until `stop`.
pub fn write_load(
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
                            s.bad.push(format!(
                                "GET {t}: {status}: {}",
                                res.text().unwrap_or_default()
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    let before: Value = res.json().unwrap();
                    let mut content = before["content"].clone();
                    content["vanta"] =
                        json!({"user_email": format!("w{w}-{i}@load.example"), "workspace": t});
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
                        200 => s
                            .acked
                            .push((t.clone(), body["commit_sha"].as_str().unwrap().to_owned())),
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

/// What a follower saw: the head it started at, the commit ids of its file events, and how
/// many times it connected.
pub type Followed = (Option<String>, Vec<String>, usize);

/// An `EventSource`-like follower of one tenant through HAProxy: it reconnects after a
/// stream ends (or a 503, 421) with `Last-Event-ID`, and records every file event's id.
pub fn follow(
    front: String,
    tenant: String,
    stop: Arc<AtomicBool>,
) -> (std::thread::JoinHandle<()>, Arc<Mutex<Followed>>) {
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

pub fn tenants(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t{i:02}")).collect()
}

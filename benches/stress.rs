//! Stress: read-modify-write writers against several server processes, some killed with -9.
//!
//!     cargo bench --bench stress -- [SECONDS] [WRITERS] [PROCESSES] [KILL_EVERY_SECS]
//!
//! Defaults: 30 seconds, 16 writers, 2 processes, a `kill -9` of one process (then a restart)
//! every 5 s (0: never). Half the writers edit each file of one tenant. At the end every
//! acknowledged write is looked for in git history, and the repository is checked with
//! `git fsck --strict`. Prints attempts, 200s, 409s, other answers and lost writes (must be 0).
// The benchmark's git and file helpers (the rest of that module is unused here).
#[allow(dead_code)]
#[path = "http/fixtures.rs"]
mod fixtures;

use fixtures::{copy_tree, git};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `n`th positional argument (`cargo bench` adds flags such as `--bench`).
fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .nth(n - 1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// A free port on loopback, for a process that is restarted on the same address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `planfiles serve` on `port` and waits until it answers.
fn spawn_server(bin: &Path, data: &Path, port: u16) -> std::process::Child {
    let child = Command::new(bin)
        .env("PLANFILES_DATA_DIR", data)
        .env("PLANFILES_BIND", format!("127.0.0.1:{port}"))
        .env("PLANFILES_JWT_SECRET", SECRET)
        .env("PLANFILES_LOG", "warn")
        .env_remove("PLANFILES_CONFIG")
        .stderr(Stdio::inherit())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

const SECRET: &str = "stress-secret-0123456789abcdef";

fn main() {
    let seconds = arg(1, 30);
    let writers = arg(2, 16) as usize;
    let processes = arg(3, 2).max(1) as usize;
    let kill_every = arg(4, 5);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_planfiles"));
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &root.join("repos-fixture/tenants"),
        &dir.path().join("tenants"),
    );

    let ports: Vec<u16> = (0..processes).map(|_| free_port()).collect();
    let addrs: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let children: Vec<_> = ports
        .iter()
        .map(|&p| spawn_server(&bin, dir.path(), p))
        .collect();
    let children = std::sync::Arc::new(std::sync::Mutex::new(children));

    let token = {
        let out = Command::new(&bin)
            .args(["token", "--tenant", "acme", "--ttl", "36000"])
            .env("PLANFILES_JWT_SECRET", SECRET)
            .env("PLANFILES_DATA_DIR", dir.path())
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let repo: PathBuf = dir.path().join("tenants/acme.git");
    let start_head = git(&repo, &["rev-parse", "main"]);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    // The crash injector: every KILL_EVERY_SECS, kill -9 one process (in turn) and restart it.
    let kills = {
        let (children, bin, data, ports) = (
            children.clone(),
            bin.clone(),
            dir.path().to_owned(),
            ports.clone(),
        );
        std::thread::spawn(move || {
            let mut kills = 0usize;
            if kill_every == 0 {
                return kills;
            }
            loop {
                std::thread::sleep(Duration::from_secs(kill_every));
                if Instant::now() + Duration::from_secs(1) >= deadline {
                    return kills;
                }
                let slot = kills % ports.len();
                let mut children = children.lock().unwrap();
                let _ = children[slot].kill();
                let _ = children[slot].wait();
                children[slot] = spawn_server(&bin, &data, ports[slot]);
                kills += 1;
            }
        })
    };
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..writers {
            let (addrs, token) = (addrs.clone(), token.clone());
            tasks.push(tokio::spawn(async move {
                let client = reqwest::Client::new();
                let (mut attempts, mut ok, mut conflicts, mut other) = (0u64, 0u64, 0u64, 0u64);
                let mut acknowledged = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let addr = &addrs[(w + attempts as usize) % addrs.len()];
                    // Half the writers edit the configuration file, half the integration file.
                    let (path, sha_field, body_field) = if w % 2 == 0 {
                        ("/plans/configuration-file", "sha", "payload")
                    } else {
                        ("/plans/integration-file", "file_sha", "content")
                    };
                    attempts += 1;
                    let Ok(cur) = client
                        .get(format!("{addr}{path}"))
                        .bearer_auth(&token)
                        .send()
                        .await
                    else {
                        other += 1;
                        continue;
                    };
                    // A process killed mid-answer: try again (on the next process).
                    let Ok(cur) = cur.error_for_status() else {
                        other += 1;
                        continue;
                    };
                    let Ok(cur) = cur.json::<Value>().await else {
                        other += 1;
                        continue;
                    };
                    let mut content = cur["content"].clone();
                    let entry = format!("w{w}-{i}");
                    if w % 2 == 0 {
                        content["folders"]
                            .as_array_mut()
                            .unwrap()
                            .push(json!({"path": entry}));
                    } else {
                        content[entry.as_str()] = json!(i);
                    }
                    let res = client
                        .put(format!("{addr}{path}"))
                        .bearer_auth(&token)
                        .json(&json!({body_field: content, "file_sha": cur[sha_field]}))
                        .send()
                        .await;
                    match res.map(|r| r.status().as_u16()) {
                        Ok(200) => {
                            ok += 1;
                            acknowledged.push((path, entry));
                            i += 1;
                        }
                        Ok(409) => conflicts += 1,
                        _ => other += 1,
                    }
                }
                (attempts, ok, conflicts, other, acknowledged)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.unwrap());
        }
        all
    });
    let kills = kills.join().unwrap();
    for c in children.lock().unwrap().iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let read = |file: &str| {
        planfiles::domain::yaml::parse_mapping(&git(&repo, &["show", &format!("main:{file}")]))
            .unwrap()
    };
    let integration = read("integrations.yml");
    let folders: std::collections::HashSet<String> = read("configuration.yml")["folders"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str().map(String::from))
        .collect();
    let (mut attempts, mut ok, mut conflicts, mut other, mut lost) = (0, 0, 0, 0, 0);
    for (a, o, c, x, acknowledged) in &results {
        attempts += a;
        ok += o;
        conflicts += c;
        other += x;
        for (path, entry) in acknowledged {
            let found = if path.contains("integration") {
                integration.contains_key(entry)
            } else {
                folders.contains(entry)
            };
            if !found {
                lost += 1;
            }
        }
    }
    let commits: u64 = git(
        &repo,
        &["rev-list", "--count", &format!("{start_head}..main")],
    )
    .parse()
    .unwrap();
    let fsck = Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["fsck", "--strict", "--no-dangling"])
        .status()
        .unwrap()
        .success();
    println!("seconds={seconds} writers={writers} processes={processes} kill_9={kills}");
    println!("attempts={attempts} ok_200={ok} conflicts_409={conflicts} other={other}");
    println!("commits_added={commits} lost_writes={lost} fsck_clean={fsck}");
    // A write cut off by a kill may have committed without an answer: it counts as other.
    assert!(
        ok <= commits && commits <= ok + other,
        "every 200 is one commit, and only writes without an answer add more"
    );
    assert_eq!(lost, 0, "acknowledged writes were lost");
    assert!(fsck);
}

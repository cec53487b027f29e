//! Stress: many read-modify-write writers against one or more server processes for a while,
//! then every acknowledged write is looked for in git history.
//!
//!     cargo run --release --example stress -- [SECONDS] [WRITERS] [PROCESSES]
//!
//! Defaults: 30 seconds, 16 writers, 2 processes. Prints attempts, 200s, 409s and lost writes.
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

const SECRET: &str = "stress-secret-0123456789abcdef";

fn main() {
    let seconds = arg(1, 30);
    let writers = arg(2, 16) as usize;
    let processes = arg(3, 2) as usize;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/planfiles");
    assert!(
        bin.is_file(),
        "build the binary first: cargo build --release"
    );
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &root.join("repos-fixture/tenants"),
        &dir.path().join("tenants"),
    );

    let mut children = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..processes {
        let port = 20_000 + (std::process::id() as usize % 20_000) + i;
        let child = Command::new(&bin)
            .env("PLANFILES_DATA_DIR", dir.path())
            .env("PLANFILES_BIND", format!("127.0.0.1:{port}"))
            .env("PLANFILES_JWT_SECRET", SECRET)
            .env("PLANFILES_LOG", "warn")
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        children.push(child);
        addrs.push(format!("http://127.0.0.1:{port}"));
    }
    std::thread::sleep(Duration::from_millis(500));

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
                    let cur: Value = cur.json().await.unwrap();
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
    for mut c in children {
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
    println!("seconds={seconds} writers={writers} processes={processes}");
    println!("attempts={attempts} ok_200={ok} conflicts_409={conflicts} other={other}");
    println!("commits_added={commits} lost_writes={lost} fsck_clean={fsck}");
    assert_eq!(commits, ok, "every 200 is one commit");
    assert_eq!(lost, 0, "acknowledged writes were lost");
    assert!(fsck);
}

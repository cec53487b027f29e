//! The container image (issue 51), on a real Docker engine: the repository's Dockerfile built, run read-only as its non-root user with data on a volume, reached only through a port published on 127.0.0.1; writes survive `docker kill` and a restart (git fsck --strict clean); `docker stop` drains: readiness 503 at once, the container exits 0 within 30 s. Runs only with PLANFILES_CONTAINER_TESTS=require (a dockerd, the base image from scripts/docker-base.sh and a release build); .ci/run does not set it yet.
mod common;

use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

const SECRET: &str = "container-test-secret-0123456789abcdef";

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
        eprintln!("SKIPPED the container tests: set PLANFILES_CONTAINER_TESTS=require (docker, scripts/docker-base.sh, cargo build --release)");
    }
    on
}

/// A container of the image on `volume`, its port 8080 published on 127.0.0.1; its id and
/// the address.
fn run(image: &str, volume: &str) -> (String, String) {
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
        image,
    ]);
    let port = docker(&["port", &id, "8080/tcp"]);
    let port = port
        .lines()
        .next()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    (id, format!("http://127.0.0.1:{port}"))
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
        assert!(started.elapsed() < within, "not ready within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_read_only_keeps_writes_through_kill_and_drains_on_stop() {
    if !wanted() {
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let image = format!("planfiles-test:{}", std::process::id());
    docker(&["build", "-q", "-t", &image, root]);
    let size: u64 = docker(&["image", "inspect", &image, "--format", "{{.Size}}"])
        .parse()
        .unwrap();
    eprintln!("image {image}: {} MB", size / 1_000_000);
    assert_eq!(
        docker(&["image", "inspect", &image, "--format", "{{.Config.User}}"]),
        "planfiles:planfiles"
    );
    let volume = format!("planfiles-test-{}", std::process::id());
    let (id, addr) = run(&image, &volume);
    let took = ready(&addr, Duration::from_secs(30)).await;
    eprintln!("start to ready: {} ms", took.as_millis());
    assert_eq!(docker(&["exec", &id, "id", "-u"]), "10001");
    let client = reqwest::Client::new();
    // Writes under load, then docker kill (SIGKILL): every 200 is in main's history.
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (client, addr, acked) = (client.clone(), addr.clone(), acked.clone());
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let res = client
                    .put(format!("{addr}/plans/integration-file"))
                    .bearer_auth(token("acme"))
                    .json(&json!({"content": {"w": w, "i": i}}))
                    .send()
                    .await;
                match res {
                    Ok(r) if r.status() == 200 => {
                        let body: serde_json::Value = r.json().await.unwrap();
                        acked
                            .lock()
                            .unwrap()
                            .push(body["commit_sha"].as_str().unwrap().to_owned());
                    }
                    _ => break,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    docker(&["kill", &id]);
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 20, "{} writes acknowledged", acked.len());
    docker(&["start", &id]);
    let port = docker(&["port", &id, "8080/tcp"]);
    let addr = format!(
        "http://127.0.0.1:{}",
        port.lines().next().unwrap().rsplit(':').next().unwrap()
    );
    ready(&addr, Duration::from_secs(30)).await;
    let repo = "/data/tenants/acme.git";
    let line: std::collections::HashSet<String> =
        docker(&["exec", &id, "git", "-C", repo, "rev-list", "main"])
            .lines()
            .map(str::to_owned)
            .collect();
    for c in &acked {
        assert!(
            line.contains(c),
            "acknowledged commit {c} lost after docker kill"
        );
    }
    docker(&["exec", &id, "git", "-C", repo, "fsck", "--strict"]);
    eprintln!(
        "docker kill under 4 writers: {} writes acknowledged, 0 lost",
        acked.len()
    );
    // docker stop drains: readiness 503 at once, exit 0 within 30 s.
    let stopping = {
        let id = id.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            docker(&["stop", "-t", "30", &id]);
            started.elapsed()
        })
    };
    let mut saw_503 = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match client.get(format!("{addr}/readyz")).send().await {
            Ok(r) if r.status() == 503 => {
                saw_503 = true;
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(_) => break,
        }
    }
    let took = stopping.join().unwrap();
    assert!(took < Duration::from_secs(30), "docker stop took {took:?}");
    assert_eq!(
        docker(&["inspect", &id, "--format", "{{.State.ExitCode}}"]),
        "0"
    );
    eprintln!(
        "docker stop: exited 0 after {} ms; readiness 503 seen: {saw_503}",
        took.as_millis()
    );
    docker(&["rm", &id]);
    docker(&["volume", "rm", &volume]);
    docker(&["image", "rm", &image]);
}

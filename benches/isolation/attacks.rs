//! Noisy neighbours for the isolation bench and its short test: each attack loads other tenants until stopped.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// The attacks of issue 14's noisy-neighbour measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// a. 64 connections writing one hot tenant.
    HotWrites,
    /// b. 16 connections trickling 1 MiB bodies.
    TrickledBodies,
    /// c. 8 stalled clones and 8 slow clones.
    Clones,
    /// d. `?ref=` GETs of a 1 MiB document in a loop.
    RefReads,
    /// e. requests without a token, with random methods and paths.
    Junk,
    /// f. event streams of the hot tenant, each resuming from the root of a long history
    /// again and again (`Target::resumers` of them).
    ResumingStreams,
}

impl Attack {
    pub const ALL: [Attack; 6] = [
        Attack::HotWrites,
        Attack::TrickledBodies,
        Attack::Clones,
        Attack::RefReads,
        Attack::Junk,
        Attack::ResumingStreams,
    ];

    /// The row's letter, as `ATTACKS=` names it (the bench only; tests include this file).
    #[allow(dead_code)]
    pub fn letter(self) -> char {
        self.label().chars().next().unwrap_or('?')
    }

    pub fn label(self) -> &'static str {
        match self {
            Attack::HotWrites => "a. 64 writers on one hot tenant",
            Attack::TrickledBodies => "b. 16 trickled 1 MiB bodies",
            Attack::Clones => "c. 8 stalled + 8 slow clones",
            Attack::RefReads => "d. ?ref= GETs of a 1 MiB file",
            Attack::Junk => "e. no token, random methods/paths",
            Attack::ResumingStreams => "f. streams resuming a deep history",
        }
    }
}

/// Where the attacks go: the server and the attackers' tenants and tokens.
#[derive(Debug, Clone)]
pub struct Target {
    /// `127.0.0.1:port`
    pub host: String,
    /// A token with both write permissions for the hot tenant.
    pub hot_token: String,
    /// The tenant whose repository is large (several MiB of pack), and a token for it with
    /// `planfiles.repos.read` and the read permissions.
    pub big_tenant: String,
    pub big_token: String,
    /// A commit of the big tenant: its `main` (what a clone wants), whose integration file
    /// is about 1 MiB.
    pub big_commit: String,
    /// A commit of the hot tenant far back in its history (`make_deep`), and how many
    /// streams resume from it at once.
    pub resume_from: String,
    pub resumers: usize,
}

/// A running attack; its connections close when it is stopped.
pub struct Running {
    tasks: Vec<JoinHandle<()>>,
    /// Requests (or connections) the attack started.
    pub sent: Arc<AtomicU64>,
}

impl Running {
    pub fn stop(self) -> u64 {
        for t in &self.tasks {
            t.abort();
        }
        self.sent.load(Ordering::Relaxed)
    }
}

pub fn start(attack: Attack, target: &Target) -> Running {
    let sent = Arc::new(AtomicU64::new(0));
    let target = Arc::new(target.clone());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()
        .unwrap();
    let spawn = |n: usize, f: fn(Arc<Target>, reqwest::Client, Arc<AtomicU64>, usize) -> Task| {
        (0..n)
            .map(|i| tokio::spawn(f(target.clone(), client.clone(), sent.clone(), i)))
            .collect::<Vec<_>>()
    };
    let tasks = match attack {
        Attack::HotWrites => spawn(64, hot_writer),
        Attack::TrickledBodies => spawn(16, trickler),
        Attack::Clones => spawn(16, cloner),
        Attack::RefReads => spawn(8, ref_reader),
        Attack::Junk => spawn(16, junk),
        Attack::ResumingStreams => spawn(target.resumers, resumer),
    };
    Running { tasks, sent }
}

type Task = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

fn hot_writer(t: Arc<Target>, client: reqwest::Client, sent: Arc<AtomicU64>, i: usize) -> Task {
    Box::pin(async move {
        for n in 0u64.. {
            let _ = client
                .put(format!("http://{}/plans/integration-file", t.host))
                .bearer_auth(&t.hot_token)
                .json(&serde_json::json!({"content": {"writer": i, "n": n}}))
                .send()
                .await;
            sent.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Declares 1 MiB and sends 1 KiB every 100 ms (10 KiB/s), reconnecting when cut off.
fn trickler(t: Arc<Target>, _: reqwest::Client, sent: Arc<AtomicU64>, _: usize) -> Task {
    Box::pin(async move {
        loop {
            let Ok(mut s) = TcpStream::connect(&t.host).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            sent.fetch_add(1, Ordering::Relaxed);
            let head = format!(
                "PUT /plans/integration-file HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                t.host, t.hot_token, 1 << 20
            );
            if s.write_all(head.as_bytes()).await.is_err() {
                continue;
            }
            while s.write_all(&[b' '; 1024]).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let mut probe = [0u8; 1];
                // The server answered (408, 503) or closed: start again.
                if let Ok(Ok(_)) =
                    tokio::time::timeout(Duration::from_millis(1), s.peek(&mut probe)).await
                {
                    break;
                }
            }
        }
    })
}

fn pkt(text: &str) -> String {
    format!("{:04x}{text}", text.len() + 4)
}

/// The first half stall (send a full clone request, never read); the others read 4 KiB
/// every 100 ms.
fn cloner(t: Arc<Target>, _: reqwest::Client, sent: Arc<AtomicU64>, i: usize) -> Task {
    Box::pin(async move {
        let stalled = i.is_multiple_of(2);
        let request = format!(
            "{}0000{}",
            pkt(&format!(
                "want {} multi_ack_detailed side-band-64k ofs-delta agent=isolation\n",
                t.big_commit
            )),
            pkt("done\n")
        );
        loop {
            let Ok(mut s) = TcpStream::connect(&t.host).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            sent.fetch_add(1, Ordering::Relaxed);
            let head = format!(
                "POST /git/{}.git/git-upload-pack HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nUser-Agent: git/2.47\r\nContent-Type: application/x-git-upload-pack-request\r\nContent-Length: {}\r\n\r\n",
                t.big_tenant, t.host, t.big_token, request.len()
            );
            if s.write_all(head.as_bytes()).await.is_err()
                || s.write_all(request.as_bytes()).await.is_err()
            {
                continue;
            }
            if stalled {
                // Hold the connection without reading until the server gives up on it.
                let mut probe = [0u8; 1];
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let closed = matches!(
                        tokio::time::timeout(Duration::from_millis(1), s.peek(&mut probe)).await,
                        Ok(Ok(0)) | Ok(Err(_))
                    );
                    if closed {
                        break;
                    }
                }
            } else {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

fn ref_reader(t: Arc<Target>, client: reqwest::Client, sent: Arc<AtomicU64>, _: usize) -> Task {
    Box::pin(async move {
        loop {
            sent.fetch_add(1, Ordering::Relaxed);
            if let Ok(res) = client
                .get(format!(
                    "http://{}/plans/integration-file?ref={}",
                    t.host, t.big_commit
                ))
                .bearer_auth(&t.big_token)
                .send()
                .await
            {
                let _ = res.bytes().await;
            }
        }
    })
}

fn junk(t: Arc<Target>, client: reqwest::Client, sent: Arc<AtomicU64>, _: usize) -> Task {
    Box::pin(async move {
        loop {
            let n: u32 = rand::random();
            let method = reqwest::Method::from_bytes(format!("M{n:X}").as_bytes()).unwrap();
            let path = match n % 3 {
                0 => format!("/r{n:x}/{}", n.wrapping_mul(7)),
                1 => format!("/plans/integration-file/{n}"),
                _ => format!("/git/t{n}.git/info/refs?service=x{n}"),
            };
            let _ = client
                .request(method, format!("http://{}{path}", t.host))
                .header(format!("x-junk-{n}"), n.to_string())
                .send()
                .await;
            sent.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Resumes a stream from `resume_from` and reads its replay up to the `head` event, again and
/// again; a refusal (503) is retried after 10 ms.
fn resumer(t: Arc<Target>, client: reqwest::Client, sent: Arc<AtomicU64>, _: usize) -> Task {
    use futures_util::StreamExt;
    Box::pin(async move {
        loop {
            sent.fetch_add(1, Ordering::Relaxed);
            let res = client
                .get(format!(
                    "http://{}/plans/events?since={}",
                    t.host, t.resume_from
                ))
                .bearer_auth(&t.hot_token)
                .send()
                .await;
            let Ok(res) = res else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            if res.status() != 200 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            let mut body = res.bytes_stream();
            let mut tail = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                tail.extend_from_slice(&chunk);
                if tail.windows(12).any(|w| w == b"event: head\n") {
                    break;
                }
                let keep = tail.len().saturating_sub(11);
                tail.drain(..keep);
            }
        }
    })
}

/// `commits` commits on top of the repository's `main`, each changing the integration file
/// (git fast-import, so many in a second); returns the commit they start after.
pub fn make_deep(repo: &std::path::Path, commits: usize) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let head = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["rev-parse", "main"])
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap().trim().to_owned();
    let mut stream = String::new();
    for i in 0..commits {
        let msg = format!("deep {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter d <d@x> {} +0000\ndata {}\n{msg}",
            1_700_000_000 + i,
            msg.len()
        ));
        if i == 0 {
            stream.push_str(&format!("from {head}\n"));
        }
        let text = format!("deep: {i}\n");
        stream.push_str(&format!(
            "M 100644 inline integrations.yml\ndata {}\n{text}\n",
            text.len()
        ));
    }
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    head
}

/// The victim tenant's requests: a PUT, the GET after it (a cache miss) and another GET (a
/// cache hit); each round returns the three latencies.
pub struct Victim {
    pub base: String,
    pub token: String,
    pub client: reqwest::Client,
}

impl Victim {
    pub async fn round(&self, n: u64) -> Result<[Duration; 3], String> {
        let url = format!("{}/plans/integration-file", self.base);
        let t = Instant::now();
        let res = self
            .client
            .put(&url)
            .bearer_auth(&self.token)
            .json(&serde_json::json!({"content": {"victim": n}}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if res.status() != 200 {
            return Err(format!("victim PUT: {}", res.status()));
        }
        let put = t.elapsed();
        let mut gets = [Duration::ZERO; 2];
        for g in gets.iter_mut() {
            let t = Instant::now();
            let res = self
                .client
                .get(&url)
                .bearer_auth(&self.token)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if res.status() != 200 {
                return Err(format!("victim GET: {}", res.status()));
            }
            res.bytes().await.map_err(|e| e.to_string())?;
            *g = t.elapsed();
        }
        Ok([put, gets[0], gets[1]])
    }
}

/// A YAML integration file of about `bytes` bytes.
pub fn big_integration_file(bytes: usize) -> String {
    let mut out = String::from("integrations:\n");
    let mut i = 0u64;
    while out.len() < bytes {
        out.push_str(&format!(
            "  - account_id: \"{:012}\"\n    type: aws\n    regions: [us-east-1, eu-west-1]\n",
            i
        ));
        i += 1;
    }
    out
}

/// Commits, with plain git, a ~1 MiB integration file and `noise_mib` MiB of incompressible
/// data to the repository at `repo`, moving `main`; returns the new head.
pub fn make_big(repo: &std::path::Path, noise_mib: usize) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let git = |args: &[&str], input: Option<&[u8]>| {
        let mut child = Command::new("git")
            .arg("--git-dir")
            .arg(repo)
            .args(args)
            .env("GIT_AUTHOR_NAME", "bench")
            .env("GIT_AUTHOR_EMAIL", "bench@example.com")
            .env("GIT_COMMITTER_NAME", "bench")
            .env("GIT_COMMITTER_EMAIL", "bench@example.com")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(input) = input {
            stdin.write_all(input).unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let doc = git(
        &["hash-object", "-w", "--stdin"],
        Some(big_integration_file(1 << 20).as_bytes()),
    );
    let mut noise = vec![0u8; noise_mib << 20];
    rand::fill(&mut noise[..]);
    let noise = git(&["hash-object", "-w", "--stdin"], Some(&noise));
    let config = git(&["rev-parse", "main:configuration.yml"], None);
    let tree = git(
        &["mktree"],
        Some(
            format!(
                "100644 blob {config}\tconfiguration.yml\n100644 blob {doc}\tintegrations.yml\n100644 blob {noise}\tnoise.bin\n"
            )
            .as_bytes(),
        ),
    );
    let commit = git(&["commit-tree", &tree, "-p", "main", "-m", "big"], None);
    git(&["update-ref", "refs/heads/main", &commit], None);
    commit
}

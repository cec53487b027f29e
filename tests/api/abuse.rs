//! Slow and abusive clients against the real binary: slowloris, idle connections, and many
//! large bodies at once. Each reports what it measured.
use crate::common;

use common::process::{serve, Server};
use common::{copy_tree, fixture_dir, token, ALL};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The binary with short timeouts: 1 s for request heads, `body_secs` for bodies.
/// A server with `head_secs` for a client to send its headers and `body_secs` for its body.
fn start_with(dir: &std::path::Path, head_secs: u64, body_secs: u64) -> Server {
    start_configured(
        dir,
        &format!("client_request_timeout_secs = {head_secs}\nbody_timeout_secs = {body_secs}\n"),
    )
}

/// The binary with these lines added to its `[server]` table.
fn start_configured(dir: &std::path::Path, server: &str) -> Server {
    copy_tree(&fixture_dir().join("tenants"), &dir.join("data/tenants"));
    let config = dir.join("planfiles.toml");
    std::fs::write(
        &config,
        format!("[server]\n{server}workers = 2\n[storage]\nrepack_loose_objects = 0\n"),
    )
    .unwrap();
    serve(dir, &[("PLANFILES_CONFIG", config.to_str().unwrap())])
}

/// A server that gives headers 1 s, so that slow clients are cut off quickly.
fn start(dir: &std::path::Path) -> Server {
    start_with(dir, 1, 30)
}

fn host(server: &Server) -> String {
    server.addr.trim_start_matches("http://").to_owned()
}

/// Peak resident memory of a process in MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap()
        / 1024.0
}

/// The soft limit on open files of this process.
fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1024)
}

async fn get_ok(client: &reqwest::Client, server: &Server) -> Duration {
    let t = Instant::now();
    let res = client
        .get(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    t.elapsed()
}

#[tokio::test]
async fn a_slowloris_client_is_cut_off_by_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut stream = TcpStream::connect(host(&server)).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let started = Instant::now();
    let mut cut_off = None;
    // One header byte every 200 ms: a complete head would take minutes.
    for byte in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        .iter()
        .cycle()
    {
        std::thread::sleep(Duration::from_millis(200));
        if stream.write_all(&[*byte]).is_err() {
            cut_off = Some(started.elapsed());
            break;
        }
        stream.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 256];
        let read = stream.read(&mut buf);
        stream.set_nonblocking(false).unwrap();
        match read {
            Ok(0) => {
                cut_off = Some(started.elapsed());
                break;
            }
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                assert!(text.starts_with("HTTP/1.1 408"), "{text}");
                cut_off = Some(started.elapsed());
                break;
            }
            Err(_) if started.elapsed() > Duration::from_secs(10) => break,
            Err(_) => {}
        }
    }
    let cut_off = cut_off.expect("the slow client was never cut off");
    eprintln!("slowloris: cut off after {cut_off:?} (client_request_timeout_secs = 1)");
    assert!(cut_off < Duration::from_secs(4), "{cut_off:?}");
    get_ok(&reqwest::Client::new(), &server).await;
}

#[tokio::test]
async fn a_thousand_idle_connections_do_not_stop_normal_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let wanted = 1000;
    let n = wanted.min(open_files_limit().saturating_sub(200) / 2);
    if n < wanted {
        eprintln!(
            "open-file limit {}: using {n} idle connections",
            open_files_limit()
        );
    }
    let idle: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(host(&server)).unwrap())
        .collect();
    // Half of them start a request and stop.
    for s in idle.iter().step_by(2) {
        (&*s).write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    }
    let client = reqwest::Client::new();
    let mut slowest = Duration::ZERO;
    for _ in 0..50 {
        slowest = slowest.max(get_ok(&client, &server).await);
    }
    eprintln!("{n} idle connections open: slowest of 50 GETs took {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    drop(idle);
    get_ok(&client, &server).await;
}

// The default 5 s for headers: the client writes 200 MiB over 200 connections at once, and
// on a loaded machine some connections' headers leave it later than 1 s after their connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_1_mib_puts_stay_within_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), 5, 30);
    let client = reqwest::Client::new();
    get_ok(&client, &server).await;
    let before = peak_rss_mib(server.pid());
    let head = common::git_in(
        &dir.path().join("data/tenants/acme.git"),
        &["rev-parse", "main"],
    );
    // Just under the 1 MiB limit, valid, but with a stale file_sha: parsed in full, then 409.
    let filler = "x".repeat(1024 * 1024 - 200);
    let body = serde_json::to_vec(&json!({
        "content": {"notes": filler},
        "file_sha": "0000000000000000000000000000000000000000"
    }))
    .unwrap();
    assert!(body.len() <= 1024 * 1024);
    let t = token("acme", ALL);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let (client, url, t, body) = (
                client.clone(),
                server.url("/plans/integration-file"),
                t.clone(),
                body.clone(),
            );
            tokio::spawn(async move {
                let res = client
                    .put(url)
                    .bearer_auth(t)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = res.status().as_u16();
                let text = res
                    .text()
                    .await
                    .unwrap_or_else(|e| format!("<unreadable: {e:?}>"));
                let problem: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{status}: {e}: {text:?}"));
                (
                    status,
                    problem["code"].as_str().unwrap_or_default().to_owned(),
                )
            })
        })
        .collect();
    // One tenant gets its share of the body budget (4 MiB): what does not get a turn within
    // the queue timeout is 503 busy; every other body is parsed in full, then 409.
    let mut parsed = 0;
    for task in tasks {
        let (status, code) = task.await.unwrap();
        assert!(
            [(409, "sha_mismatch"), (503, "busy")].contains(&(status, code.as_str())),
            "{status} {code}"
        );
        parsed += usize::from(status == 409);
    }
    assert!(parsed >= 3, "only {parsed} bodies were parsed");
    let peak = peak_rss_mib(server.pid());
    eprintln!("200 concurrent 1 MiB PUTs: peak RSS {before:.0} MiB before, {peak:.0} MiB after");
    // Without the bound on bodies in flight this was 450 MiB.
    assert!(peak < 300.0, "peak RSS {peak:.0} MiB");
    assert_eq!(
        common::git_in(
            &dir.path().join("data/tenants/acme.git"),
            &["rev-parse", "main"]
        ),
        head
    );
    get_ok(&client, &server).await;
}

#[tokio::test]
async fn a_body_that_never_finishes_gets_408_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), 1, 1);
    let repo = dir.path().join("data/tenants/acme.git");
    let head = common::git_in(&repo, &["rev-parse", "main"]);
    let mut stream = TcpStream::connect(host(&server)).unwrap();
    let request = format!(
        "PUT /plans/integration-file HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"content\":",
        token("acme", ALL)
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut answer = vec![0u8; 4096];
    let n = stream.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    eprintln!("stalled body: answered after {:?}", started.elapsed());
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(common::git_in(&repo, &["rev-parse", "main"]), head);
    get_ok(&reqwest::Client::new(), &server).await;
}

/// A client that asks for a large answer and then stops reading is disconnected once it has
/// accepted no bytes for `server.send_stall_secs`: the server's socket and its buffers are
/// freed instead of staying open for as long as the client likes.
#[tokio::test]
async fn a_client_that_stops_reading_an_answer_is_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_configured(dir.path(), "send_stall_secs = 1\n");
    let tok = token("acme", ALL);
    let client = reqwest::Client::new();
    // A document of about 900 KB: its GET answer (content and raw_content) is about 1.8 MB,
    // far more than the socket buffers on both sides hold.
    let entries: serde_json::Map<String, Value> = (0..900)
        .map(|i| (format!("k{i}"), Value::String("x".repeat(1000))))
        .collect();
    let res = client
        .put(format!("{}/plans/integration-file", server.addr))
        .bearer_auth(&tok)
        .json(&json!({ "content": entries }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket
        .connect(host(&server).parse().unwrap())
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(
            format!(
                "GET /plans/integration-file HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Read nothing for a while: the receive window shuts, the server's probes go unanswered.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut got = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got))
        .await
        .expect("the connection neither ended nor delivered");
    let err = end.expect_err("the whole answer arrived: the stalled connection was kept");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    assert!(got.len() < 1_800_000, "{} bytes arrived", got.len());
    // The server is fine and serves the next client.
    get_ok(&client, &server).await;
}

//! The change feed: `GET /plans/events` (SSE), tickets, and `If-None-Match` / `Prefer: wait`
//! long-polls, for writes by this server, another process and plain git.
use crate::common;

use common::{git_in, git_stdin, process, token, TestApp, ALL};
use futures_util::StreamExt;
use planfiles::config::EventsConfig;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

const INT_READ: &str = "jit.integrations.read";
const CONF_READ: &str = "jit.preferences.read";

/// One event of a stream.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) kind: String,
    pub(crate) id: String,
    pub(crate) data: Value,
}

/// A stream read event by event; comments (`: keep-alive`) and `retry:` are counted, not
/// returned.
pub(crate) struct Sse {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<actix_web::web::Bytes>>,
    buf: String,
    comments: usize,
    retry: Option<u64>,
}

impl Sse {
    fn new(res: reqwest::Response) -> Self {
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        Self {
            body: res.bytes_stream().boxed(),
            buf: String::new(),
            comments: 0,
            retry: None,
        }
    }

    pub(crate) async fn open(app: &TestApp, token: &str, query: &str, last: Option<&str>) -> Self {
        Self::new(app.events(Some(token), query, last).await)
    }

    /// The next event within `within`; `None` when none came or the stream ended.
    pub(crate) async fn next_within(&mut self, within: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                let (mut kind, mut id, mut data) = (None, None, None);
                for line in frame.lines() {
                    if line.starts_with(':') {
                        self.comments += 1;
                    } else if let Some(v) = line.strip_prefix("retry: ") {
                        self.retry = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        kind = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = Some(serde_json::from_str(v).unwrap());
                    }
                }
                if let (Some(kind), Some(id), Some(data)) = (kind, id, data) {
                    return Some(Event { kind, id, data });
                }
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.push_str(std::str::from_utf8(&chunk).unwrap()),
                _ => return None,
            }
        }
    }

    pub(crate) async fn next(&mut self) -> Event {
        self.next_within(Duration::from_secs(5))
            .await
            .expect("an event within 5 s")
    }

    /// True when the stream ends (cleanly) within `within`.
    async fn ends_within(&mut self, within: Duration) -> bool {
        matches!(
            tokio::time::timeout(within, async {
                while let Some(Ok(_)) = self.body.next().await {}
            })
            .await,
            Ok(())
        )
    }
}

/// A commit made with plain git on `main` that sets `integrations.yml` to `text`, with
/// `message`; returns its id (not yet on `main` unless `update` is true).
fn plain_git_commit(repo: &Path, parent: Option<&str>, text: &str, message: &str) -> String {
    let blob = git_stdin(repo, &["hash-object", "-w", "--stdin"], text);
    let base = parent.map_or_else(|| git_in(repo, &["rev-parse", "main"]), str::to_owned);
    let index = tempfile::NamedTempFile::new().unwrap();
    let with_index = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(repo)
            .args(args)
            .env("GIT_INDEX_FILE", index.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    with_index(&["read-tree", &base]);
    with_index(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("100644,{blob},integrations.yml"),
    ]);
    let tree = with_index(&["write-tree"]);
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message];
    if let Some(p) = parent {
        args.extend(["-p", p]);
    } else {
        args.extend(["-p", &base]);
    }
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(&args)
        .env("GIT_AUTHOR_NAME", "Plain Git")
        .env("GIT_AUTHOR_EMAIL", "plain@example.com")
        .env("GIT_COMMITTER_NAME", "Plain Git")
        .env("GIT_COMMITTER_EMAIL", "plain@example.com")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

async fn put_int(app: &TestApp, token: &str, n: usize) -> Value {
    let res = app
        .put_integration(
            token,
            &json!({"content": {"github": {"org": format!("o{n}")}}}),
        )
        .await;
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

async fn with_events(config: EventsConfig, watch_refs: bool) -> TestApp {
    TestApp::with().events(config, watch_refs).spawn().await
}

/// A client that disconnects and resumes with `Last-Event-ID` while another client keeps
/// writing gets every commit exactly once, in `main`'s order.
#[tokio::test]
async fn a_resumed_stream_misses_nothing_and_repeats_nothing_while_writes_land() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let start = app.head("acme");
    let mut sse = Sse::open(&app, &t, "", None).await;
    let head = sse.next().await;
    assert_eq!(
        (head.kind.as_str(), head.id.as_str()),
        ("head", start.as_str())
    );
    assert_eq!(head.data["commit_sha"], start);
    assert_eq!(sse.retry, Some(2000), "retry: comes first");
    let writer = {
        let (addr, t) = (app.addr.clone(), t.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            for n in 0..40 {
                let res = client
                    .put(format!("{addr}/plans/integration-file"))
                    .bearer_auth(&t)
                    .header("X-Request-Id", format!("w{n}"))
                    .json(&json!({"content": {"github": {"org": format!("o{n}")}}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 200);
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 8 {
        let e = sse.next().await;
        assert_eq!(e.kind, "integration-file");
        seen.push(e);
    }
    drop(sse);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let last = seen.last().unwrap().id.clone();
    let mut sse = Sse::open(&app, &t, &format!("?since={start}"), Some(&last)).await;
    writer.await.unwrap();
    let end = app.head("acme");
    loop {
        let e = sse.next().await;
        if e.kind == "head" {
            // After the replay: says where `main` was; live events follow.
            continue;
        }
        seen.push(e.clone());
        if e.id == end {
            break;
        }
    }
    let expected: Vec<String> = app
        .git(
            "acme",
            &[
                "rev-list",
                "--first-parent",
                "--reverse",
                &format!("{start}..main"),
            ],
        )
        .lines()
        .map(str::to_owned)
        .collect();
    let got: Vec<String> = seen.iter().map(|e| e.id.clone()).collect();
    assert_eq!(got, expected, "every commit once, in order");
    for (n, e) in seen.iter().enumerate() {
        assert_eq!(e.data["request_id"], format!("w{n}"));
        assert_eq!(e.data["commit_sha"], e.id);
        assert_eq!(e.data["file"], "integration-file");
        assert_eq!(
            e.data["file_sha"],
            app.git(
                "acme",
                &["rev-parse", &format!("{}:integrations.yml", e.id)]
            )
        );
        assert_eq!(e.data["forced"], true);
        assert_eq!(e.data["author"]["email"], "tester@example.com");
    }
    // The replay may have reached `end` before the stream said where `main` was: then the
    // `head` event (at `end`, not a change) comes last. No change comes twice.
    while let Some(e) = sse.next_within(Duration::from_millis(300)).await {
        assert_eq!(
            (e.kind.as_str(), e.id.as_str()),
            ("head", end.as_str()),
            "nothing twice: {:?}",
            e.data
        );
    }
}

/// Writes through another `planfiles serve` on the same data dir arrive on this server's
/// streams, and answer its long-polls within 200 ms; a long-poll with nothing new is a 304
/// after its wait.
#[tokio::test]
async fn another_process_writes_arrive_on_streams_and_long_polls() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let other = process::serve(
        dir.path(),
        &[("PLANFILES_DATA_DIR", app.data_dir.path().to_str().unwrap())],
    );
    let t = token("acme", ALL);
    let mut sse = Sse::open(&app, &t, "", None).await;
    sse.next().await;
    let put = other
        .put_integration("acme", json!({"github": {"org": "other"}}))
        .await;
    assert_eq!(put.status(), 200);
    let written: Value = put.json().await.unwrap();
    let e = sse.next().await;
    assert_eq!(e.kind, "integration-file");
    assert_eq!(e.id, written["commit_sha"]);
    assert_eq!(e.data["file_sha"], written["file_sha"]);

    // A long-poll on the current version is held, and answered by the other's write.
    let etag = format!("\"{}\"", written["file_sha"].as_str().unwrap());
    let poll = {
        let (client, url, t, etag) = (
            app.client.clone(),
            app.url("/plans/integration-file"),
            t.clone(),
            etag.clone(),
        );
        tokio::spawn(async move {
            let res = client
                .get(url)
                .bearer_auth(t)
                .header("If-None-Match", etag)
                .header("Prefer", "wait=10")
                .send()
                .await
                .unwrap();
            (Instant::now(), res)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "held while nothing changed");
    let put = other
        .put_integration("acme", json!({"github": {"org": "again"}}))
        .await;
    let acked = Instant::now();
    assert_eq!(put.status(), 200);
    let written: Value = put.json().await.unwrap();
    let (answered, res) = poll.await.unwrap();
    let delay = answered.saturating_duration_since(acked);
    // inotify wakes the feed at once; the margin is for a loaded machine.
    assert!(
        delay < Duration::from_millis(500),
        "answered {delay:?} after the PUT"
    );
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["preference-applied"], "wait=10");
    assert_eq!(
        res.headers()["etag"],
        format!("\"{}\"", written["file_sha"].as_str().unwrap()).as_str()
    );

    // Nothing new: 304 after the wait, with the ETag; without Prefer at once.
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    let started = Instant::now();
    let res = app
        .get_if_none_match("integration-file", &t, &etag, Some(1))
        .await;
    assert_eq!(res.status(), 304);
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(res.headers()["preference-applied"], "wait=1");
    assert_eq!(res.headers()["etag"], etag.as_str());
    let started = Instant::now();
    let res = app
        .get_if_none_match("integration-file", &t, &etag, None)
        .await;
    assert_eq!(res.status(), 304);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(res.headers().get("preference-applied").is_none());
    let res = app
        .get_if_none_match(
            "integration-file",
            &t,
            "\"0000000000000000000000000000000000000000\"",
            Some(5),
        )
        .await;
    assert_eq!(res.status(), 200, "another version answers at once");
    drop(other);
}

/// Commits made with plain git arrive (inotify and, with `watch_refs = false`, polling), and
/// `main` moved to an unrelated commit gives `reset`, live and on resume.
#[tokio::test]
async fn plain_git_commits_arrive_and_a_moved_main_resets() {
    for watch_refs in [true, false] {
        let app = with_events(
            EventsConfig {
                poll_interval_ms: 100,
                ..Default::default()
            },
            watch_refs,
        )
        .await;
        let t = token("acme", ALL);
        let repo = app.repo("acme");
        let before = app.head("acme");
        let mut sse = Sse::open(&app, &t, "", None).await;
        assert_eq!(sse.next().await.id, before);
        let commit = plain_git_commit(&repo, None, "plain: {}\n", "By hand");
        git_in(&repo, &["update-ref", "refs/heads/main", &commit]);
        let e = sse.next().await;
        assert_eq!(
            (e.kind.as_str(), e.id.as_str()),
            ("integration-file", commit.as_str()),
            "watch_refs={watch_refs}"
        );
        assert_eq!(e.data["request_id"], Value::Null);
        assert_eq!(e.data["forced"], false);
        assert_eq!(e.data["author"]["name"], "Plain Git");
        assert_eq!(e.data["message"], "By hand\n");

        // main moved to a commit that does not descend from what the stream saw.
        let tree = app.git("acme", &["rev-parse", "main^{tree}"]);
        let orphan = app.git("acme", &["commit-tree", &tree, "-m", "rewritten"]);
        git_in(&repo, &["update-ref", "refs/heads/main", &orphan]);
        let e = sse.next().await;
        assert_eq!((e.kind.as_str(), e.id.as_str()), ("reset", orphan.as_str()));
        assert_eq!(e.data["commit_sha"], orphan);
        assert_eq!(
            e.data["integration_file_sha"],
            app.git("acme", &["rev-parse", "main:integrations.yml"])
        );
        drop(sse);
        // Resuming from a commit main no longer leads to: reset, then live.
        let mut sse = Sse::open(&app, &t, "", Some(&commit)).await;
        let e = sse.next().await;
        assert_eq!((e.kind.as_str(), e.id.as_str()), ("reset", orphan.as_str()));
        assert_eq!(sse.next().await.kind, "head");
        let next = plain_git_commit(&repo, Some(&orphan), "plain: 2\n", "Again");
        git_in(&repo, &["update-ref", "refs/heads/main", &next]);
        assert_eq!(sse.next().await.id, next);
    }
}

/// A bad request: its name, token, query, `Last-Event-ID`, status and problem code.
type Case<'a> = (
    &'a str,
    Option<String>,
    &'a str,
    Option<&'a str>,
    u16,
    &'a str,
);

/// A stream carries only the files the token may read; 401 and 403 as for reads; a bad
/// resume point is 400; tickets work once, for the token's tenant and permissions.
#[tokio::test]
async fn permissions_tickets_and_bad_requests() {
    let app = TestApp::spawn().await;
    let writer = token("acme", ALL);
    let conf_only = token("acme", &[CONF_READ]);
    let mut sse = Sse::open(&app, &conf_only, "", None).await;
    let head = sse.next().await;
    assert_eq!(head.data["integration_file_sha"], Value::Null);
    assert!(head.data["configuration_file_sha"].is_string());
    put_int(&app, &writer, 1).await;
    let cur = app.get_configuration(&writer).await;
    let sha = cur.json::<Value>().await.unwrap()["sha"].clone();
    let res = app
        .put_configuration(
            &writer,
            &json!({"payload": {"folders": []}, "file_sha": sha}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let conf_commit = app.head("acme");
    let e = sse.next().await;
    assert_eq!(
        (e.kind.as_str(), e.id.as_str()),
        ("configuration-file", conf_commit.as_str()),
        "the integration commit is not shown"
    );
    assert!(sse.next_within(Duration::from_millis(300)).await.is_none());

    let cases: [Case; 8] = [
        ("no token", None, "", None, 401, "unauthorized"),
        (
            "bad token",
            Some("x.y.z".into()),
            "",
            None,
            401,
            "invalid_token",
        ),
        (
            "token in the query",
            None,
            &format!("?access_token={writer}"),
            None,
            401,
            "unauthorized",
        ),
        (
            "no read permission",
            Some(token("acme", &["planfiles.metrics.read"])),
            "",
            None,
            403,
            "insufficient_scope",
        ),
        (
            "unknown tenant",
            Some(token("nobody", ALL)),
            "",
            None,
            404,
            "tenant_not_found",
        ),
        (
            "since not hex",
            Some(writer.clone()),
            "?since=abc",
            None,
            400,
            "invalid_query",
        ),
        (
            "Last-Event-ID not hex",
            Some(writer.clone()),
            "",
            Some("zz"),
            400,
            "invalid_query",
        ),
        (
            "unknown ticket",
            None,
            "?ticket=00ff",
            None,
            401,
            "invalid_token",
        ),
    ];
    for (name, tok, query, last, status, code) in cases {
        let res = app.events(tok.as_deref(), query, last).await;
        assert_eq!(res.status(), status, "{name}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["code"], code, "{name}");
    }

    // Tickets: bound to the token's tenant and read permissions, single use.
    let res = app.event_ticket(&token("acme", &[INT_READ])).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["expires_in"], 30);
    let ticket = body["ticket"].as_str().unwrap().to_owned();
    let mut sse = Sse::new(app.events(None, &format!("?ticket={ticket}"), None).await);
    let head = sse.next().await;
    assert!(head.data["integration_file_sha"].is_string());
    assert_eq!(
        head.data["configuration_file_sha"],
        Value::Null,
        "the token's permissions"
    );
    let used = app.events(None, &format!("?ticket={ticket}"), None).await;
    assert_eq!(used.status(), 401, "a ticket works once");
    assert_eq!(
        app.event_ticket(&token("acme", &["planfiles.metrics.read"]))
            .await
            .status(),
        403
    );
    assert_eq!(
        app.client
            .post(app.url("/plans/events/tickets"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert!(!app.metrics().await.contains(&ticket), "never in metrics");
}

/// Past `events.max_streams_per_tenant` or `events.max_streams`, streams and long-polls get
/// 503 `busy` with `Retry-After`; a stream its client closed gives its slot back by the next
/// heartbeat (the write that finds the connection gone).
#[tokio::test]
async fn the_stream_limits_answer_503() {
    let app = with_events(
        EventsConfig {
            max_streams: 3,
            max_streams_per_tenant: 2,
            heartbeat_secs: 1,
            ..Default::default()
        },
        true,
    )
    .await;
    let acme = token("acme", ALL);
    let a1 = Sse::open(&app, &acme, "", None).await;
    let _a2 = Sse::open(&app, &acme, "", None).await;
    let busy = |res: reqwest::Response| async move {
        assert_eq!(res.status(), 503);
        assert!(res.headers().contains_key("retry-after"));
        assert_eq!(res.json::<Value>().await.unwrap()["code"], "busy");
    };
    busy(app.events(Some(&acme), "", None).await).await;
    let etag = app.get_integration(&acme).await.headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    busy(
        app.get_if_none_match("integration-file", &acme, &etag, Some(5))
            .await,
    )
    .await;
    let _g = Sse::open(&app, &token("globex", ALL), "", None).await;
    busy(app.events(Some(&token("initech", ALL)), "", None).await).await;
    assert!(app.metrics().await.contains("planfiles_event_streams 3"));
    let mut a1 = a1;
    assert_eq!(a1.next().await.kind, "head");
    assert!(a1.next_within(Duration::from_millis(1500)).await.is_none());
    assert!(
        a1.comments >= 1,
        "a keep-alive comment every heartbeat_secs"
    );
    drop(a1);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let res = app.events(Some(&acme), "", None).await;
        if res.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was not given back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGTERM ends open streams cleanly and the process exits 0 within its shutdown timeout.
#[tokio::test]
async fn sigterm_ends_the_streams_and_the_process_exits_0() {
    let dir = process::data_dir_with_fixture();
    let mut server = process::serve(dir.path(), &[]);
    let res = reqwest::Client::new()
        .get(server.url("/plans/events"))
        .bearer_auth(token("acme", ALL))
        .send()
        .await
        .unwrap();
    let mut sse = Sse::new(res);
    assert_eq!(sse.next().await.kind, "head");
    let started = Instant::now();
    server.signal("TERM");
    assert!(
        sse.ends_within(Duration::from_secs(5)).await,
        "the stream ended"
    );
    let status = tokio::task::spawn_blocking(move || server.stop("TERM"))
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// A client that stops reading is dropped once its buffers are full, and the server's memory
/// does not grow with what it was not sent.
#[tokio::test]
async fn a_slow_reader_is_dropped_without_growing_memory() {
    let dir = process::data_dir_with_fixture();
    let server = process::serve(dir.path(), &[]);
    let port: u16 = server.addr.rsplit(':').next().unwrap().parse().unwrap();
    let mut stalled = small_buffer_connection(port);
    write!(
        stalled,
        "GET /plans/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        token("acme", ALL)
    )
    .unwrap();
    let mut head = [0u8; 512];
    let n = stalled.read(&mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    let metrics = || async {
        reqwest::get(server.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    assert!(metrics().await.contains("planfiles_event_streams 1"));
    let rss_before = rss_kib(server.pid());
    // 300 commits with 64 KiB messages: about 20 MB of events, far more than any buffer.
    let repo = dir.path().join("data/tenants/acme.git");
    let big = "x".repeat(64 * 1024);
    let mut at = git_in(&repo, &["rev-parse", "main"]);
    for n in 0..300 {
        at = plain_git_commit(&repo, Some(&at), &format!("n: {}\n", n % 2), &big);
    }
    git_in(&repo, &["update-ref", "refs/heads/main", &at]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !metrics().await.contains("planfiles_event_streams 0") {
        assert!(
            Instant::now() < deadline,
            "the stalled stream was not dropped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let grown = rss_kib(server.pid()).saturating_sub(rss_before);
    assert!(grown < 64 * 1024, "RSS grew by {grown} KiB");
    drop(stalled);
}

/// A TCP connection whose receive buffer is as small as the kernel allows.
fn small_buffer_connection(port: u16) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor made here and handed to TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 4096;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0);
        std::net::TcpStream::from_raw_fd(fd)
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A resume point that does not exist (never made, or pruned) or is not on `main`'s
/// first-parent line gives `event: reset` and the stream goes on, never a closed stream that
/// `EventSource` would reopen every 2 s.
#[tokio::test]
async fn an_unknown_resume_point_resets_and_the_stream_goes_on() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let unknown = "0123456789abcdef0123456789abcdef01234567";
    // A commit that exists but is not on main's line: a side commit made with plain git.
    let tree = app.git("acme", &["rev-parse", "main^{tree}"]);
    let side = app.git("acme", &["commit-tree", &tree, "-m", "side"]);
    for (n, (query, last)) in [
        (format!("?since={unknown}"), None),
        (String::new(), Some(unknown)),
        (format!("?since={side}"), None),
    ]
    .into_iter()
    .enumerate()
    {
        let head = app.head("acme");
        let mut sse = Sse::open(&app, &t, &query, last).await;
        let e = sse.next().await;
        assert_eq!(
            (e.kind.as_str(), e.id.as_str()),
            ("reset", head.as_str()),
            "{query} {last:?}"
        );
        assert_eq!(sse.next().await.kind, "head");
        let written = put_int(&app, &t, 70 + n).await;
        let e = sse.next().await;
        assert_eq!(
            e.id,
            written["commit_sha"].as_str().unwrap(),
            "live after the reset"
        );
    }
}

/// A stream ends when its token stops being accepted (`exp` plus the leeway, here 30 s);
/// a ticket's stream when the token it was issued for does. A stream with a valid token
/// stays open meanwhile.
#[tokio::test]
async fn a_stream_ends_when_its_token_does() {
    let app = TestApp::spawn().await;
    let claims = |exp: u64| {
        common::sign_hs256(
            common::SECRET,
            &json!({"alg": "HS256", "typ": "JWT"}),
            &json!({"tenant_id": "acme", "permissions": ALL, "exp": exp}),
        )
    };
    // Accepted for 2 more seconds (exp 28 s ago, 30 s of leeway).
    let ending = claims(common::now() - 28);
    let lasting = token("acme", ALL);
    let mut by_token = Sse::open(&app, &ending, "", None).await;
    let ticket: Value = app.event_ticket(&ending).await.json().await.unwrap();
    let mut by_ticket = Sse::new(
        app.events(
            None,
            &format!("?ticket={}", ticket["ticket"].as_str().unwrap()),
            None,
        )
        .await,
    );
    let mut control = Sse::open(&app, &lasting, "", None).await;
    for sse in [&mut by_token, &mut by_ticket, &mut control] {
        assert_eq!(sse.next().await.kind, "head");
    }
    assert!(
        by_token.ends_within(Duration::from_secs(6)).await,
        "the token's stream ended"
    );
    assert!(
        by_ticket.ends_within(Duration::from_secs(2)).await,
        "the ticket's stream ended"
    );
    // The other stream still delivers.
    let written = put_int(&app, &lasting, 3).await;
    assert_eq!(
        control.next().await.id,
        written["commit_sha"].as_str().unwrap()
    );
    // And the ending token is refused everywhere now.
    assert_eq!(app.events(Some(&ending), "", None).await.status(), 401);
}

/// A resume from the root of a history longer than several replay steps (256 commits)
/// gets every commit once, in order, then `head`.
#[tokio::test]
async fn a_long_resume_is_read_in_steps_without_a_gap_or_a_repeat() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let repo = app.repo("acme");
    let start = app.head("acme");
    common::fast_commits(&repo, 700, "integrations.yml");
    let expected = app.git(
        "acme",
        &["rev-list", "--reverse", &format!("{start}..main")],
    );
    let mut sse = Sse::open(&app, &t, &format!("?since={start}"), None).await;
    for id in expected.lines() {
        let e = sse.next().await;
        assert_eq!((e.kind.as_str(), e.id.as_str()), ("integration-file", id));
    }
    let head = sse.next().await;
    assert_eq!(
        (head.kind.as_str(), head.id.as_str()),
        ("head", app.head("acme").as_str())
    );
}

/// Each file event says whether the file as of its commit is valid: a plain-git commit that
/// breaks the operator's schemas arrives `invalid`, the write that fixes it `valid`.
#[tokio::test]
async fn events_carry_the_status_of_the_file_at_their_commit() {
    let app = TestApp::spawn_with_schemas(&crate::common::shipped_schemas(), "allow").await;
    let t = token("globex", ALL);
    let mut sse = Sse::open(&app, &t, "", None).await;
    assert_eq!(sse.next().await.kind, "head");
    let broken = app.outside_commit(
        "globex",
        "integrations.yml",
        "aws:\n  - account_id: \"1\"\n    regions: [us-east-1]\n    type: aws\n",
    );
    let e = sse.next().await;
    assert_eq!(
        (e.kind.as_str(), e.id.as_str()),
        ("integration-file", broken.as_str())
    );
    assert_eq!(e.data["status"], "invalid", "{:?}", e.data);
    let fixed = put_int(&app, &t, 1).await;
    let e = sse.next().await;
    assert_eq!(e.data["commit_sha"], fixed["commit_sha"]);
    assert_eq!(e.data["status"], "valid", "{:?}", e.data);
}

/// A pushed commit arrives like any other, with `pushed_by` (the token's identity), which a
/// commit made by an API write or plain git does not carry.
#[tokio::test]
async fn a_pushed_commit_arrives_with_its_pusher() {
    let app = TestApp::spawn().await;
    let t = token(
        "globex",
        &[
            "planfiles.repos.read",
            "jit.integrations.write",
            "jit.preferences.write",
        ],
    );
    let mut sse = Sse::open(&app, &t, "", None).await;
    assert_eq!(sse.next().await.kind, "head");
    let work = tempfile::tempdir().unwrap();
    let git = |dir: &Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", &format!("http.extraHeader=Authorization: Bearer {t}")])
            .args([
                "-c",
                "user.name=Pushing Dev",
                "-c",
                "user.email=dev@push.example",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(
        work.path(),
        &["clone", "-q", &app.url("/git/globex.git"), "c"],
    );
    let dir = work.path().join("c");
    std::fs::write(dir.join("integrations.yml"), "github:\n  org: pushed\n").unwrap();
    git(&dir, &["commit", "-qam", "Pushed"]);
    git(&dir, &["push", "-q", "origin", "main"]);
    let e = sse.next().await;
    assert_eq!(e.kind, "integration-file");
    assert_eq!(e.data["author"]["email"], "dev@push.example");
    assert_eq!(
        e.data["pushed_by"],
        json!({"name": "Test Er", "email": "tester@example.com"})
    );
    let written = put_int(&app, &t, 1).await;
    let e = sse.next().await;
    assert_eq!(e.data["commit_sha"], written["commit_sha"]);
    assert!(e.data.get("pushed_by").is_none(), "{:?}", e.data);
}

//! The bench's clients: raw HTTP/1.1 event streams (many, cheaply) and long-polls.
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Connects and sends `GET /plans/events`; returns the reader past the response headers.
async fn connect(host: &str, token: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(host).await.unwrap();
    stream
        .write_all(
            format!("GET /plans/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "stream refused: {line}");
    loop {
        line.clear();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            return reader;
        }
    }
}

/// Reads lines until one starts with `prefix`; false at the end of the stream.
async fn until(reader: &mut BufReader<TcpStream>, prefix: &str, line: &mut String) -> bool {
    loop {
        line.clear();
        match reader.read_line(line).await {
            Ok(0) | Err(_) => return false,
            Ok(_) if line.starts_with(prefix) => return true,
            Ok(_) => {}
        }
    }
}

/// Streams that are opened, read to their head event, then left reading heartbeats.
pub struct Idle {
    tasks: JoinSet<()>,
    alive: Arc<AtomicUsize>,
}

impl Idle {
    pub fn alive(&self) -> usize {
        self.alive.load(Ordering::Relaxed)
    }
}

/// Opens `count` streams, round-robin over `tokens`, and waits for every head event.
pub async fn open_idle(host: &str, tokens: &[String], count: usize) -> Idle {
    let alive = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(tokio::sync::Semaphore::new(0));
    let connecting = Arc::new(tokio::sync::Semaphore::new(200));
    let mut tasks = JoinSet::new();
    for i in 0..count {
        let (host, token) = (host.to_owned(), tokens[i % tokens.len()].clone());
        let (alive, ready, connecting) = (alive.clone(), ready.clone(), connecting.clone());
        tasks.spawn(async move {
            let permit = connecting.acquire_owned().await.unwrap();
            let mut reader = connect(&host, &token).await;
            let mut line = String::new();
            assert!(until(&mut reader, "event: head", &mut line).await);
            drop(permit);
            alive.fetch_add(1, Ordering::Relaxed);
            ready.add_permits(1);
            while until(&mut reader, "\u{0}", &mut line).await {}
            alive.fetch_sub(1, Ordering::Relaxed);
        });
    }
    let _ = ready.acquire_many(count as u32).await.unwrap();
    Idle { tasks, alive }
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// Streams of one tenant that note when each commit's event reached them.
pub struct Fanout {
    tasks: JoinSet<()>,
    count: usize,
    seen: Arc<Mutex<HashMap<String, Vec<Instant>>>>,
}

impl Fanout {
    pub async fn open(host: &str, token: &str, count: usize) -> Self {
        let seen: Arc<Mutex<HashMap<String, Vec<Instant>>>> = Arc::default();
        let ready = Arc::new(tokio::sync::Semaphore::new(0));
        let mut tasks = JoinSet::new();
        for _ in 0..count {
            let (host, token, seen, ready) = (
                host.to_owned(),
                token.to_owned(),
                seen.clone(),
                ready.clone(),
            );
            tasks.spawn(async move {
                let mut reader = connect(&host, &token).await;
                let mut line = String::new();
                assert!(until(&mut reader, "event: head", &mut line).await);
                ready.add_permits(1);
                while until(&mut reader, "event: integration-file", &mut line).await {
                    if !until(&mut reader, "id: ", &mut line).await {
                        break;
                    }
                    let at = Instant::now();
                    let id = line.trim_end().trim_start_matches("id: ").to_owned();
                    seen.lock().unwrap().entry(id).or_default().push(at);
                }
            });
        }
        let _ = ready.acquire_many(count as u32).await.unwrap();
        Self { tasks, count, seen }
    }

    /// When `commit` reached each stream, once it reached all of them within `within`.
    pub async fn wait_for(&self, commit: &str, within: Duration) -> Option<Vec<Instant>> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(times) = self.seen.lock().unwrap().get(commit) {
                if times.len() >= self.count {
                    return Some(times.clone());
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// The value of a gauge in `/metrics`.
pub async fn gauge(host: &str, name: &str) -> Option<i64> {
    let text = reqwest::get(format!("http://{host}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `count` long-polls on the integration file, held until `write` commits; the time from
/// the write's 200 to each answer.
pub async fn long_polls<F, Fut>(host: &str, token: &str, count: usize, write: F) -> Vec<Duration>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = (String, Instant)>,
{
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(count)
        .build()
        .unwrap();
    let url = format!("http://{host}/plans/integration-file");
    let etag = client
        .get(&url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned();
    let mut tasks = JoinSet::new();
    for _ in 0..count {
        let (client, url, token, etag) =
            (client.clone(), url.clone(), token.to_owned(), etag.clone());
        tasks.spawn(async move {
            let res = client
                .get(url)
                .bearer_auth(token)
                .header("If-None-Match", etag)
                .header("Prefer", "wait=60")
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "a long-poll answered without the change");
            Instant::now()
        });
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while gauge(host, "planfiles_long_polls").await != Some(count as i64) {
        assert!(
            Instant::now() < deadline,
            "the long-polls were not all held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, acked) = write().await;
    let mut times = Vec::with_capacity(count);
    while let Some(answered) = tasks.join_next().await {
        times.push(answered.unwrap().saturating_duration_since(acked));
    }
    times
}

/// Waits until the server holds no stream (closed ones are noticed on their next write:
/// `nudge` makes one).
pub async fn wait_streams_closed<F, Fut>(host: &str, mut nudge: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let deadline = Instant::now() + Duration::from_secs(40);
    while gauge(host, "planfiles_event_streams").await != Some(0) {
        assert!(Instant::now() < deadline, "closed streams were not noticed");
        nudge().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

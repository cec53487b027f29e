//! The load generator: N connections in a loop against one URL for a while, with an HDR
//! histogram of latencies (hyper's client through reqwest, not the test client).
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

/// What one run measured.
pub struct Run {
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub hist: Histogram<u64>,
}

impl Run {
    pub fn empty() -> Self {
        Run {
            requests: 0,
            errors: 0,
            elapsed: Duration::ZERO,
            hist: Histogram::new_with_bounds(1, 60_000_000, 3).unwrap(),
        }
    }

    pub fn add(&mut self, other: &Run) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.elapsed += other.elapsed;
        self.hist.add(&other.hist).unwrap();
    }

    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// A latency percentile in milliseconds.
    pub fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn line(&self, name: &str) -> String {
        format!(
            "{name:<34} {:>9.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  ({} requests, {} errors)",
            self.rps(),
            self.ms(0.5),
            self.ms(0.99),
            self.requests,
            self.errors
        )
    }
}

/// A request to make, again and again.
#[derive(Clone)]
pub enum Req {
    Get {
        url: String,
        token: String,
    },
    /// A PUT whose body gets a counter so every write changes the file.
    Put {
        url: String,
        token: String,
    },
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .http1_only()
        .tcp_nodelay(true)
        .build()
        .unwrap()
}

/// `concurrency` loops for `duration`; each loop takes its request from `reqs` (round robin).
pub async fn run(
    client: &reqwest::Client,
    reqs: &[Req],
    concurrency: usize,
    duration: Duration,
) -> Run {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for i in 0..concurrency {
        let client = client.clone();
        let req = reqs[i % reqs.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut run = Run::empty();
            let mut n: u64 = 0;
            while Instant::now() < deadline {
                let t = Instant::now();
                let ok = send(&client, &req, i, n).await;
                run.hist.saturating_record(t.elapsed().as_micros() as u64);
                run.requests += 1;
                run.errors += u64::from(!ok);
                n += 1;
            }
            run
        }));
    }
    let mut total = Run::empty();
    for t in tasks {
        total.add(&t.await.unwrap());
    }
    total.elapsed = start.elapsed();
    total
}

/// `count` requests one after the other.
pub async fn serial(client: &reqwest::Client, req: &Req, count: usize) -> Run {
    let start = Instant::now();
    let mut run = Run::empty();
    for n in 0..count {
        let t = Instant::now();
        let ok = send(client, req, 0, n as u64).await;
        run.hist.saturating_record(t.elapsed().as_micros() as u64);
        run.requests += 1;
        run.errors += u64::from(!ok);
    }
    run.elapsed = start.elapsed();
    run
}

async fn send(client: &reqwest::Client, req: &Req, task: usize, n: u64) -> bool {
    let res = match req {
        Req::Get { url, token } => client.get(url).bearer_auth(token).send().await,
        Req::Put { url, token } => {
            let body = format!(
                r#"{{"content":{{"aws":[{{"account_id":"{task:04}{n:08}","regions":["us-east-1"],"type":"aws"}}]}}}}"#
            );
            client
                .put(url)
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
        }
    };
    match res {
        Ok(r) => {
            let ok = r.status().is_success();
            let _ = r.bytes().await;
            ok
        }
        Err(_) => false,
    }
}

/// What a `wrk` run measured (wrk reports percentiles, not a histogram).
pub struct Summary {
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// CPU time (user and system) this process spent during the run: with the load from
    /// `wrk`, in its own process, that is the server under load (the other contender and the
    /// bench's own threads are idle meanwhile).
    pub cpu: Duration,
}

impl Summary {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// CPU time per request in microseconds (see [`Summary::cpu`]).
    pub fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.requests.max(1) as f64
    }

    pub fn line(&self, name: &str) -> String {
        format!(
            "{name:<34} {:>9.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  ({} requests, {} errors)",
            self.rps(),
            self.p50_ms,
            self.p99_ms,
            self.requests,
            self.errors
        )
    }

    /// Several rounds as one: requests and time add up; of the percentiles, the median
    /// round's p50 and the worst round's p99.
    pub fn combine(rounds: &[Summary]) -> Summary {
        let mut p50: Vec<f64> = rounds.iter().map(|r| r.p50_ms).collect();
        p50.sort_by(f64::total_cmp);
        Summary {
            requests: rounds.iter().map(|r| r.requests).sum(),
            errors: rounds.iter().map(|r| r.errors).sum(),
            elapsed: rounds.iter().map(|r| r.elapsed).sum(),
            p50_ms: p50[p50.len() / 2],
            p99_ms: rounds.iter().map(|r| r.p99_ms).fold(0.0, f64::max),
            cpu: rounds.iter().map(|r| r.cpu).sum(),
        }
    }
}

impl Run {
    pub fn summary(&self) -> Summary {
        Summary {
            requests: self.requests,
            errors: self.errors,
            elapsed: self.elapsed,
            p50_ms: self.ms(0.5),
            p99_ms: self.ms(0.99),
            cpu: Duration::ZERO,
        }
    }
}

/// Whether `wrk` is installed (Debian's package `wrk`).
pub fn have_wrk() -> bool {
    std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok()
}

/// GETs `url` with `wrk` (a C load generator in its own process, lighter than the in-process
/// client) over `connections` connections for `duration`.
pub fn wrk(url: &str, token: &str, connections: usize, duration: Duration) -> Summary {
    let cpu_before = process_cpu();
    let out = std::process::Command::new("wrk")
        .args(["--latency", "-t", &connections.min(2).to_string()])
        .args(["-c", &connections.to_string()])
        .args(["-d", &format!("{}s", duration.as_secs().max(1))])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(url)
        .output()
        .expect("wrk runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wrk failed: {text}");
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(|rest| rest.trim().to_owned())
    };
    let ms = |v: String| {
        let (number, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap());
        let n: f64 = number.parse().unwrap();
        match unit {
            "us" => n / 1000.0,
            "ms" => n,
            "s" => n * 1000.0,
            other => panic!("wrk latency unit {other}"),
        }
    };
    // "123456 requests in 3.00s, 50.00MB read"
    let totals = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .expect("wrk prints its totals");
    let mut words = totals.split_whitespace();
    let requests: u64 = words.next().unwrap().parse().unwrap();
    let secs = words.nth(2).unwrap().trim_end_matches(',');
    let elapsed = Duration::from_secs_f64(ms(secs.to_owned()) / 1000.0);
    let errors = field("Non-2xx or 3xx responses:").map_or(0, |n| n.parse().unwrap());
    Summary {
        requests,
        errors,
        elapsed,
        p50_ms: ms(field("50%").expect("wrk --latency prints 50%")),
        p99_ms: ms(field("99%").expect("wrk --latency prints 99%")),
        cpu: process_cpu().saturating_sub(cpu_before),
    }
}

/// User and system CPU time of this process so far.
fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given; all-zero bytes are a valid rusage.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

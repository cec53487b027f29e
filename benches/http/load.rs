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

//! The proposals benchmark (issue 52): opening, approving and applying a proposal against a
//! PUT of the same file, by turns on one tenant (so that they share every drift of the
//! machine); then listing and reading with 10,000 open proposals, warm and in a new process;
//! and a change stream resumed over their 10,000 steps against one resumed over as many
//! commits of `main`.
//!
//!     cargo bench --bench proposals            # 10,000 proposals
//!     cargo bench --bench proposals -- --quick # 2,000 proposals, fewer turns
#[allow(dead_code)]
#[path = "http/load.rs"]
mod load;
#[path = "http/server.rs"]
mod server;

use load::Run;
use planfiles::auth::{mint_hs256, MintRequest};
use planfiles::domain::{Identity, TenantId};
use planfiles::storage::{self, Storage};
use serde_json::{json, Value};
use server::{start_planfiles, token, SECRET};
use std::time::{Duration, Instant};

fn account(n: u64) -> Value {
    json!({"aws": [{"account_id": format!("{n:012}"), "regions": ["us-east-1"], "type": "aws"}]})
}

/// A token of another person, who may approve.
fn reviewer(tenant: &str) -> String {
    mint_hs256(
        SECRET,
        &MintRequest {
            tenant: TenantId::parse(tenant).unwrap(),
            permissions: vec!["planfiles.proposals.approve".into()],
            sub: Some("reviewer".into()),
            email: Some("reviewer@example.com".into()),
            name: Some("Reviewer".into()),
            ttl_secs: 3600,
        },
    )
    .unwrap()
}

/// A token that reads both files (a change stream's).
fn reader(tenant: &str) -> String {
    mint_hs256(
        SECRET,
        &MintRequest {
            tenant: TenantId::parse(tenant).unwrap(),
            permissions: vec![
                "jit.integrations.read".into(),
                "jit.preferences.read".into(),
            ],
            sub: Some("watcher".into()),
            email: Some("watcher@example.com".into()),
            name: Some("Watcher".into()),
            ttl_secs: 3600,
        },
    )
    .unwrap()
}

/// Opens the tenant's change stream (resumed after `since` when given) and reads it up to its
/// `event: head`: how long that took, the events before it, and the head's commit.
async fn resumed(
    client: &reqwest::Client,
    addr: &str,
    token: &str,
    since: Option<&str>,
) -> (Duration, usize, String) {
    let began = Instant::now();
    let url = match since {
        Some(s) => format!("{addr}/plans/events?since={s}"),
        None => format!("{addr}/plans/events"),
    };
    let mut res = client.get(url).bearer_auth(token).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let mut text = String::new();
    loop {
        let chunk = res.chunk().await.unwrap().expect("the stream goes on");
        text.push_str(&String::from_utf8_lossy(&chunk));
        let Some(at) = text.find("event: head\nid: ") else {
            continue;
        };
        let id = &text[at + 16..];
        if id.len() >= 40 {
            let events = text.matches("event: ").count() - 1;
            return (began.elapsed(), events, id[..40].to_owned());
        }
    }
}

/// Sends one request and records its time in `run`; the answer's JSON.
async fn timed(run: &mut Run, req: reqwest::RequestBuilder, want: u16) -> Value {
    let began = Instant::now();
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    let took = began.elapsed();
    run.hist.saturating_record(took.as_micros() as u64);
    run.requests += 1;
    run.errors += u64::from(status != want);
    run.elapsed += took;
    assert_eq!(status, want, "{body}");
    body
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (turns, many) = if quick { (60, 2_000) } else { (300, 10_000) };
    let dir = tempfile::tempdir().unwrap();
    {
        storage::init_git();
        let st = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            Identity::new("planfiles", "p@localhost", "x"),
            storage::Durability::Group,
        )
        .unwrap();
        for id in ["steps", "many", "line"] {
            st.create_tenant(&TenantId::parse(id).unwrap(), false)
                .unwrap();
        }
    }
    println!(
        "# planfiles proposals benchmark ({}), data in {}",
        if quick { "quick" } else { "full" },
        dir.path().display()
    );
    let addr = start_planfiles(dir.path());
    std::thread::sleep(Duration::from_millis(200));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = load::client();
    let (author, approver) = (token("steps"), reviewer("steps"));

    println!("\n## A PUT, then a proposal of the same file opened, approved and applied, by turns");
    let [mut put, mut open, mut approve, mut apply] = std::array::from_fn(|_| Run::empty());
    rt.block_on(async {
        for n in 0..turns {
            let i = 4 * n;
            timed(
                &mut put,
                client
                    .put(format!("{addr}/plans/integration-file"))
                    .bearer_auth(&author)
                    .json(&json!({"content": account(i)})),
                200,
            )
            .await;
            let p = timed(
                &mut open,
                client
                    .post(format!("{addr}/plans/proposals"))
                    .bearer_auth(&author)
                    .json(&json!({"integration-file": {"content": account(i + 1)}, "title": format!("Turn {n}")})),
                201,
            )
            .await;
            let number = p["number"].as_u64().unwrap();
            timed(
                &mut approve,
                client
                    .post(format!("{addr}/plans/proposals/{number}/approve"))
                    .bearer_auth(&approver)
                    .json(&json!({"commit": p["commit"]})),
                200,
            )
            .await;
            timed(
                &mut apply,
                client
                    .post(format!("{addr}/plans/proposals/{number}/apply"))
                    .bearer_auth(&author),
                200,
            )
            .await;
        }
    });
    println!("{}", put.line("PUT /plans/integration-file"));
    println!("{}", open.line("POST /plans/proposals"));
    println!("{}", approve.line("POST .../approve"));
    println!("{}", apply.line("POST .../apply"));
    let mut targets: Vec<(String, String, bool)> = Vec::new();
    for (what, run) in [("open", &open), ("apply", &apply)] {
        let ratio = run.ms(0.5) / put.ms(0.5);
        targets.push((
            format!("{what} p50 <= 1.5x PUT p50"),
            format!("{ratio:.2}x ({:.2} vs {:.2} ms)", run.ms(0.5), put.ms(0.5)),
            ratio <= 1.5,
        ));
    }

    println!("\n## {many} open proposals of one tenant");
    let t = Instant::now();
    let author = token("many");
    let mut made = Run::empty();
    rt.block_on(async {
        // Four at a time: each waits its turn in the tenant's writer queue.
        let mut n = 0u64;
        while n < many {
            let mut batch = tokio::task::JoinSet::new();
            for i in n..(n + 4).min(many) {
                let req = client
                    .post(format!("{addr}/plans/proposals"))
                    .bearer_auth(&author)
                    .json(&json!({"integration-file": {"content": account(i)}, "title": format!("Proposal {i}")}));
                batch.spawn(async move { req.send().await.unwrap().status().as_u16() });
            }
            while let Some(status) = batch.join_next().await {
                assert_eq!(status.unwrap(), 201);
                made.requests += 1;
            }
            n += 4;
        }
    });
    println!(
        "opened {} in {:.1} s ({:.1} ms each, 4 clients)",
        made.requests,
        t.elapsed().as_secs_f64(),
        t.elapsed().as_secs_f64() * 1000.0 / made.requests as f64
    );
    println!("\n## A change stream resumed over {many} events");
    // The baseline: as many commits of `main` (PUTs, four clients), each one file event.
    let line = token("line");
    let (line_start, many_start) = rt.block_on(async {
        let (_, _, line_start) = resumed(&client, &addr, &reader("line"), None).await;
        let mut n = 0u64;
        while n < many {
            let mut batch = tokio::task::JoinSet::new();
            for i in n..(n + 4).min(many) {
                let req = client
                    .put(format!("{addr}/plans/integration-file"))
                    .bearer_auth(&line)
                    .json(&json!({"content": account(i)}));
                batch.spawn(async move { req.send().await.unwrap().status().as_u16() });
            }
            while let Some(status) = batch.join_next().await {
                assert_eq!(status.unwrap(), 200);
            }
            n += 4;
        }
        let (_, _, many_start) = resumed(&client, &addr, &reader("many"), None).await;
        (line_start, many_start)
    });
    let mut replays = Vec::new();
    for (label, tenant, since, want) in [
        (
            "main's commits (baseline)",
            "line",
            line_start.clone(),
            many,
        ),
        ("proposals' steps", "many", many_start.clone(), many),
    ] {
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let (took, events, _) =
                rt.block_on(resumed(&client, &addr, &reader(tenant), Some(&since)));
            assert_eq!(events as u64, want, "{label}");
            best = best.min(took);
        }
        println!(
            "resumed over {want} {label}: {:.1} ms to `head` ({:.1} µs an event; best of 3)",
            best.as_secs_f64() * 1000.0,
            best.as_secs_f64() * 1e6 / want as f64
        );
        replays.push(best);
    }
    let ratio = replays[1].as_secs_f64() / replays[0].as_secs_f64();
    targets.push((
        format!("a resume over {many} steps <= 1.5x one over {many} commits"),
        format!("{ratio:.2}x"),
        ratio <= 1.5,
    ));
    let list = |addr: &str, query: &str, label: &str| {
        let mut run = Run::empty();
        let url = format!("{addr}/plans/proposals{query}");
        rt.block_on(async {
            for _ in 0..20 {
                timed(&mut run, client.get(&url).bearer_auth(&author), 200).await;
            }
        });
        println!("{}", run.line(label));
        run
    };
    let walk_all = |addr: &str| -> (Duration, usize) {
        rt.block_on(async {
            let began = Instant::now();
            let (mut seen, mut before) = (0usize, None::<u64>);
            loop {
                let url = match before {
                    None => format!("{addr}/plans/proposals?state=open&limit=1000"),
                    Some(b) => format!("{addr}/plans/proposals?state=open&limit=1000&before={b}"),
                };
                let page: Value = client
                    .get(url)
                    .bearer_auth(&author)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                seen += page["proposals"].as_array().unwrap().len();
                match page["next"].as_u64() {
                    Some(b) => before = Some(b),
                    None => break,
                }
            }
            (began.elapsed(), seen)
        })
    };
    // A new process on the same data dir first: nothing of the records is in memory.
    let cold = start_planfiles(dir.path());
    std::thread::sleep(Duration::from_millis(200));
    let (cold_all, seen) = walk_all(&cold);
    assert_eq!(seen as u64, many);
    println!(
        "all {seen} open ones, 1,000 a page, in a new process: {:.1} ms",
        cold_all.as_secs_f64() * 1000.0
    );
    let (warm_all, _) = walk_all(&cold);
    println!(
        "all {seen} open ones, 1,000 a page, warm: {:.1} ms",
        warm_all.as_secs_f64() * 1000.0
    );
    let first = list(
        &addr,
        "?state=open",
        "GET /plans/proposals?state=open (100)",
    );
    let page = list(
        &addr,
        "?state=open&limit=1000",
        "GET ...?state=open&limit=1000",
    );
    let one = list(
        &addr,
        &format!("/{}", many / 2),
        "GET /plans/proposals/{n} (with its diffs)",
    );
    targets.push((
        format!("listing all {many} open proposals < 100 ms (ten pages, warm)"),
        format!(
            "{:.1} ms (the process's first: {:.1} ms)",
            warm_all.as_secs_f64() * 1000.0,
            cold_all.as_secs_f64() * 1000.0
        ),
        warm_all < Duration::from_millis(100),
    ));
    // The steps again, now that the tenant has `many` proposals: as fast as with none (one
    // is closed first: a tenant has at most 10,000 open).
    let (author, approver) = (token("many"), reviewer("many"));
    rt.block_on(async {
        let res = client
            .post(format!("{addr}/plans/proposals/1/close"))
            .bearer_auth(&author)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    });
    let [mut put2, mut open2, mut apply2] = std::array::from_fn(|_| Run::empty());
    rt.block_on(async {
        for n in 0..turns / 2 {
            let i = 1_000_000 + 3 * n;
            timed(
                &mut put2,
                client
                    .put(format!("{addr}/plans/integration-file"))
                    .bearer_auth(&author)
                    .json(&json!({"content": account(i)})),
                200,
            )
            .await;
            let p = timed(
                &mut open2,
                client
                    .post(format!("{addr}/plans/proposals"))
                    .bearer_auth(&author)
                    .json(
                        &json!({"integration-file": {"content": account(i + 1)}, "title": "late"}),
                    ),
                201,
            )
            .await;
            let number = p["number"].as_u64().unwrap();
            let _ = &approver;
            timed(
                &mut apply2,
                client
                    .post(format!("{addr}/plans/proposals/{number}/apply"))
                    .bearer_auth(&author),
                200,
            )
            .await;
        }
    });
    println!("\n## With {many} proposals: the same steps");
    println!("{}", put2.line("PUT /plans/integration-file"));
    println!("{}", open2.line("POST /plans/proposals"));
    println!("{}", apply2.line("POST .../apply"));
    targets.push((
        format!("open p50 with {many} proposals <= 1.5x PUT p50"),
        format!("{:.2}x", open2.ms(0.5) / put2.ms(0.5)),
        open2.ms(0.5) / put2.ms(0.5) <= 1.5,
    ));
    let _ = (first, page, one);

    println!("\n## Targets");
    println!("| measure | result | target |\n|---|---|---|");
    for (what, got, ok) in &targets {
        println!(
            "| {what} | {got} | {} |",
            if *ok { "met" } else { "NOT MET" }
        );
    }
}

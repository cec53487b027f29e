//! The versions benchmark (issue 16): `POST /plans/commits` against the single-file PUT, diff
//! and restore of a commit 1,000 deep in a long history, and what an `Idempotency-Key` adds
//! to a PUT (looked up in 1,000 recent commits). Request kinds that are compared alternate
//! one by one on one tenant.
//!
//!     cargo bench --bench versions            # 100,000-commit history
//!     cargo bench --bench versions -- --quick # 10,000 commits, fewer requests
#[allow(dead_code)]
#[path = "http/fixtures.rs"]
mod fixtures;
#[allow(dead_code)]
#[path = "http/load.rs"]
mod load;
#[path = "http/server.rs"]
mod server;

use load::Run;
use planfiles::domain::{Identity, TenantId};
use planfiles::storage::{self, Storage};
use serde_json::{json, Value};
use server::{start_planfiles, token};
use std::time::{Duration, Instant};

/// One request; `n` numbers it, so that bodies (and keys) differ.
type Make = dyn Fn(u64) -> (reqwest::Method, String, Value, Option<String>);

/// Sends requests `from..from + count` one after another.
async fn serial(client: &reqwest::Client, tenant: &str, make: &Make, from: u64, count: u64) -> Run {
    let [run] = alternating(client, tenant, make, from, count).await;
    run
}

/// Sends requests `from..from + count` one after another; request `n` is recorded in run
/// `n % N`, so that N kinds of request alternate one by one and share every drift of the
/// machine.
async fn alternating<const N: usize>(
    client: &reqwest::Client,
    tenant: &str,
    make: &Make,
    from: u64,
    count: u64,
) -> [Run; N] {
    let t = token(tenant);
    let mut runs: [Run; N] = std::array::from_fn(|_| Run::empty());
    for n in from..from + count {
        let (method, url, body, key) = make(n);
        let mut req = client.request(method, url).bearer_auth(&t).json(&body);
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        let began = Instant::now();
        let ok = match req.send().await {
            Ok(res) => {
                let ok = res.status().is_success();
                let _ = res.bytes().await;
                ok
            }
            Err(_) => false,
        };
        let took = began.elapsed();
        let run = &mut runs[(n % N as u64) as usize];
        run.hist.saturating_record(took.as_micros() as u64);
        run.requests += 1;
        run.errors += u64::from(!ok);
        run.elapsed += took;
    }
    runs
}

fn account(n: u64) -> Value {
    json!({"aws": [{"account_id": format!("{n:012}"), "regions": ["us-east-1"], "type": "aws"}]})
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (deep, count, rounds) = if quick {
        (10_000, 40, 2)
    } else {
        (100_000, 150, 4)
    };
    let dir = tempfile::tempdir().unwrap();
    let tenants = dir.path().join("tenants");
    std::fs::create_dir_all(&tenants).unwrap();
    {
        storage::init_git();
        let st = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            Identity::new("planfiles", "p@localhost", "x"),
            planfiles::storage::Durability::Group,
        )
        .unwrap();
        for id in ["v0", "idem"] {
            st.create_tenant(&TenantId::parse(id).unwrap(), false)
                .unwrap();
        }
    }
    let t = Instant::now();
    let deep_repo = tenants.join("deep.git");
    fixtures::history(&deep_repo, deep);
    println!(
        "# planfiles versions benchmark ({}); history of {deep} commits built in {:.1} s",
        if quick { "quick" } else { "full" },
        t.elapsed().as_secs_f64()
    );
    let addr = start_planfiles(dir.path());
    std::thread::sleep(Duration::from_millis(200));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = load::client();
    let mut targets: Vec<(String, String, bool)> = Vec::new();

    println!("\n## POST /plans/commits (both files) against the single-file PUT, by turns");
    // The configuration part goes back and forth between two documents, each with the
    // other's blob id as file_sha: a real two-file write with a blob precondition, like the
    // PUT's. Two rounds of priming learn both blob ids (and that they are stable).
    let folders = |name: &str| json!({"folders": [{"path": name}]});
    let v0_head = fixtures::git(&tenants.join("v0.git"), &["rev-parse", "main"]);
    let mut shas: Vec<String> = Vec::new();
    for (i, name) in ["a", "b", "a", "b"].into_iter().enumerate() {
        let file_sha = if i == 0 {
            v0_head.clone()
        } else {
            shas[i - 1].clone()
        };
        let body = json!({"configuration-file": {"payload": folders(name), "file_sha": file_sha}});
        let answer: Value = rt.block_on(async {
            let res = client
                .post(format!("{addr}/plans/commits"))
                .bearer_auth(token("v0"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "priming the configuration file");
            res.json().await.unwrap()
        });
        shas.push(
            answer["configuration-file"]["sha"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(
        (&shas[0], &shas[1]),
        (&shas[2], &shas[3]),
        "stable blob ids"
    );
    let (sha_a, sha_b) = (shas[0].clone(), shas[1].clone());
    let a = addr.clone();
    let by_turns: Box<Make> = Box::new(move |n| {
        if n % 2 == 0 {
            return (
                reqwest::Method::PUT,
                format!("{a}/plans/integration-file"),
                json!({"content": account(n)}),
                None,
            );
        }
        // POST number n / 2: "a" over "b" first, as the priming ended with "b".
        let (name, file_sha) = if (n / 2) % 2 == 0 {
            ("a", &sha_b)
        } else {
            ("b", &sha_a)
        };
        (
            reqwest::Method::POST,
            format!("{a}/plans/commits"),
            json!({
                "integration-file": {"content": account(n)},
                "configuration-file": {"payload": folders(name), "file_sha": file_sha},
            }),
            None,
        )
    });
    let [p, c] = rt.block_on(alternating(
        &client,
        "v0",
        &*by_turns,
        0,
        2 * count * rounds,
    ));
    println!("{}", p.line("PUT /plans/integration-file"));
    println!("{}", c.line("POST /plans/commits (2 files)"));
    println!("ratio commits/PUT p50: {:.2}", c.ms(0.5) / p.ms(0.5));

    println!("\n## Diff and restore of a commit 1,000 deep in {deep} commits");
    let target = fixtures::git(&deep_repo, &["rev-parse", "main~1000"]);
    let other = fixtures::git(&deep_repo, &["rev-parse", "main~1001"]);
    let a = addr.clone();
    let t2 = target.clone();
    let diff: Box<Make> = Box::new(move |_| {
        (
            reqwest::Method::GET,
            format!("{a}/plans/integration-file/diff?from={t2}"),
            Value::Null,
            None,
        )
    });
    // GET with a JSON null body is still a GET; the server ignores it.
    let d = rt.block_on(serial(&client, "deep", &*diff, 0, count));
    let a = addr.clone();
    let restore: Box<Make> = Box::new(move |n| {
        let commit = if n % 2 == 0 { &target } else { &other };
        (
            reqwest::Method::POST,
            format!("{a}/plans/integration-file/restore"),
            json!({"commit": commit}),
            None,
        )
    });
    let r = rt.block_on(serial(&client, "deep", &*restore, 0, count));
    println!("{}", d.line("GET diff from main~1000"));
    println!("{}", r.line("POST restore main~1000/1001"));
    targets.push((
        "diff at depth 1,000 p50 < 20 ms".into(),
        format!("{:.2} ms", d.ms(0.5)),
        d.ms(0.5) < 20.0,
    ));
    targets.push((
        "restore at depth 1,000 p50 < 20 ms".into(),
        format!("{:.2} ms", r.ms(0.5)),
        r.ms(0.5) < 20.0,
    ));

    println!(
        "\n## Idempotency-Key on a PUT, looked up in 1,000 recent commits (none with the key); \
         the same tenant, with and without a key by turns"
    );
    // 1,000 recent commits, so that the lookup walks its whole window.
    let a = addr.clone();
    let fill: Box<Make> = Box::new(move |n| {
        (
            reqwest::Method::PUT,
            format!("{a}/plans/integration-file"),
            json!({"content": account(n)}),
            None,
        )
    });
    rt.block_on(serial(&client, "idem", &*fill, 0, 1000));
    let a = addr.clone();
    let by_turns: Box<Make> = Box::new(move |n| {
        (
            reqwest::Method::PUT,
            format!("{a}/plans/integration-file"),
            json!({"content": account(n)}),
            (n % 2 == 1).then(|| format!("bench-{n}")),
        )
    });
    let [nk, k] = rt.block_on(alternating(
        &client,
        "idem",
        &*by_turns,
        10_000,
        2 * count * rounds,
    ));
    println!("{}", nk.line("PUT without a key"));
    println!("{}", k.line("PUT with Idempotency-Key"));
    let extra = (k.ms(0.5) / nk.ms(0.5) - 1.0) * 100.0;
    targets.push((
        "PUT with Idempotency-Key p50 <= +10%".into(),
        format!("{extra:+.0}%"),
        extra <= 10.0,
    ));

    println!("\n## Targets");
    println!("| measure | result | target |\n|---|---|---|");
    for (what, got, ok) in &targets {
        println!(
            "| {what} | {got} | {} |",
            if *ok { "met" } else { "NOT MET" }
        );
    }
}

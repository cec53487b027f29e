//! The benchmark: planfiles side by side with the HTTP ceiling (a minimal actix-web handler)
//! and with the git CLI, interleaved in one run, against the targets of the performance issue.
//!
//!     cargo bench --bench http            # full run, about 3 minutes
//!     cargo bench --bench http -- --quick # shorter runs, smaller histories
//!     cargo bench --bench http -- --splice-only [--quick]  # JSON PUTs: edited vs emitted
//!     cargo bench --bench http -- --signing-only [--quick] # PUTs with signed commits vs not
//!     cargo bench --bench http -- --validators-only [--quick] # PUTs with schemas vs without
//!     cargo bench --bench http -- --get-only [--quick]        # the cached GET vs the ceiling
mod fixtures;
mod floor;
mod load;
mod server;
mod signing;
mod splice;
mod spread;
mod validators;
mod volume;

use actix_web::{web, App, HttpResponse, HttpServer};
use load::{Req, Run};
use planfiles::domain::{Identity, TenantId};
use planfiles::storage::{self, Storage};
use server::{start_planfiles, token, SECRET};
use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, Instant};

struct Settings {
    round: Duration,
    rounds: usize,
    deep: [usize; 2],
    tenants_for_startup: usize,
}

/// The ceiling: a minimal actix-web handler that answers the same bytes.
fn start_ceiling(body: web::Bytes) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            HttpServer::new(move || {
                let body = body.clone();
                App::new().route(
                    "/plans/integration-file",
                    web::get().to(move || {
                        let body = body.clone();
                        async move {
                            HttpResponse::Ok()
                                .content_type("application/json")
                                .body(body)
                        }
                    }),
                )
            })
            .workers(2)
            .listen(listener)
            .unwrap()
            .run()
            .await
        })
    });
    addr
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "MET"
    } else {
        "MISSED"
    }
}

fn commits(repo: &Path) -> usize {
    fixtures::git(repo, &["rev-list", "--count", "main"])
        .parse()
        .unwrap()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let s = if quick {
        Settings {
            round: Duration::from_secs(1),
            rounds: 3,
            deep: [1_000, 10_000],
            tenants_for_startup: 1_000,
        }
    } else {
        Settings {
            round: Duration::from_secs(3),
            rounds: 3,
            deep: [10_000, 100_000],
            tenants_for_startup: 10_000,
        }
    };
    let mut targets: Vec<(String, String, bool)> = Vec::new();
    if std::env::args().any(|a| a == "--splice-only") {
        // Only the cost of format-preserving writes.
        storage::init_git();
        let dir = tempfile::tempdir().unwrap();
        println!("volume: {}", volume::describe(dir.path()));
        let st = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            Identity::new("planfiles", "p@localhost", "x"),
            planfiles::storage::Durability::Group,
        )
        .unwrap();
        for (what, got, ok) in splice::run(&st, quick) {
            println!("| {what} | {got} | {} |", verdict(ok));
        }
        return;
    }
    if std::env::args().any(|a| a == "--validators-only") {
        for (what, got, ok) in validators::run(quick) {
            println!("| {what} | {got} | {} |", verdict(ok));
        }
        return;
    }
    if std::env::args().any(|a| a == "--signing-only") {
        for (what, got, ok) in signing::run(quick) {
            println!("| {what} | {got} | {} |", verdict(ok));
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tenants = dir.path().join("tenants");
    std::fs::create_dir_all(&tenants).unwrap();
    println!(
        "# planfiles benchmark ({})",
        if quick { "quick" } else { "full" }
    );
    println!(
        "machine: {} CPUs; data dir on {}",
        std::thread::available_parallelism().unwrap(),
        dir.path().display()
    );
    println!("volume: {}", volume::describe(dir.path()));

    // Tenants: 64 for the write load, and long histories.
    {
        storage::init_git();
        let st = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            Identity::new("planfiles", "p@localhost", "x"),
            planfiles::storage::Durability::Group,
        )
        .unwrap();
        for i in 0..64 {
            st.create_tenant(&TenantId::parse(&format!("t{i:02}")).unwrap(), false)
                .unwrap();
        }
    }
    let get_only = std::env::args().any(|a| a == "--get-only");
    if !get_only {
        let t = Instant::now();
        for n in s.deep {
            fixtures::history(&tenants.join(format!("deep{n}.git")), n);
        }
        println!(
            "built histories of {:?} commits with git fast-import in {:.1} s",
            s.deep,
            t.elapsed().as_secs_f64()
        );
    }

    let addr = start_planfiles(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = load::client();
    let get = |tenant: &str, base: &str| Req::Get {
        url: format!("{base}/plans/integration-file"),
        token: token(tenant),
    };
    let put = |tenant: &str| Req::Put {
        url: format!("{addr}/plans/integration-file"),
        token: token(tenant),
    };

    // Give t00 a realistic file, and the ceiling the same bytes.
    let body = rt.block_on(async {
        load::serial(&client, &put("t00"), 1).await;
        client
            .get(format!("{addr}/plans/integration-file"))
            .bearer_auth(token("t00"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
    });
    let ceiling = start_ceiling(body.clone());
    std::thread::sleep(Duration::from_millis(200));
    println!("GET body: {} bytes", body.len());

    let use_wrk = load::have_wrk();
    println!(
        "\n## GET /plans/integration-file, interleaved rounds of {:?}, load from {}",
        s.round,
        if use_wrk {
            "wrk (its own process)"
        } else {
            "the in-process hyper client (install wrk for a lighter one)"
        }
    );
    for c in [1, 64] {
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        let (mut rps_ratios, mut p50_ratios) =
            (spread::Rounds::default(), spread::Rounds::default());
        for _ in 0..s.rounds {
            for (runs, base_url) in [(&mut ours, &addr), (&mut base, &ceiling)] {
                let url = format!("{base_url}/plans/integration-file");
                runs.push(if use_wrk {
                    load::wrk(&url, &token("t00"), c, s.round)
                } else {
                    rt.block_on(load::run(&client, &[get("t00", base_url)], c, s.round))
                        .summary()
                });
            }
            let (o, b) = (ours.last().unwrap(), base.last().unwrap());
            rps_ratios.push(o.rps() / b.rps());
            p50_ratios.push(o.p50_ms / b.p50_ms);
        }
        let (ours, base) = (load::Summary::combine(&ours), load::Summary::combine(&base));
        println!("{}", ours.line(&format!("planfiles      c={c}")));
        println!("{}", base.line(&format!("actix ceiling  c={c}")));
        println!(
            "ratio planfiles/ceiling at c={c}, throughput: {}; p50: {}",
            rps_ratios.describe(2, "x"),
            p50_ratios.describe(2, "x")
        );
        if use_wrk {
            // Less sensitive than throughput to how the scheduler shares the cores with wrk.
            println!(
                "server CPU per request at c={c}: planfiles {:.1} us, ceiling {:.1} us (ceiling/planfiles {:.2}x)",
                ours.cpu_us(),
                base.cpu_us(),
                base.cpu_us() / ours.cpu_us()
            );
        }
        if c == 1 {
            targets.push((
                "GET p50 at c1 <= 1.1x the ceiling's (median of rounds)".into(),
                format!(
                    "{} ({:.3} vs {:.3} ms, all rounds)",
                    p50_ratios.describe(2, "x"),
                    ours.p50_ms,
                    base.p50_ms
                ),
                p50_ratios.median() <= 1.1,
            ));
        }
        if c == 64 {
            targets.push((
                "GET throughput at c64 >= 0.9x the ceiling's (median of rounds)".into(),
                rps_ratios.describe(2, "x"),
                rps_ratios.median() >= 0.9,
            ));
            targets.push((
                "GET p99 at c64 <= 2 ms".into(),
                format!("{:.2} ms (worst round)", ours.p99_ms),
                ours.p99_ms <= 2.0,
            ));
        }
    }
    if get_only {
        print_targets(&targets);
        return;
    }

    println!("\n## Durable writes beside the file-system floor (group commit, same volume, interleaved rounds)");
    println!("floor: the file work of one commit alone (3 objects and the ref lock written, syncfs, renames, syncfs), planfiles' own group commit");
    println!("each ratio is the median of one ratio per round, with its range");
    spread::settle(Duration::from_secs(60));
    let floor = floor::Floor::new(&dir.path().join("floor"));
    let serial_n = if quick { 60 } else { 150 };
    let (mut ours_s, mut floor_s) = (Run::empty(), Run::empty());
    let (mut serial_ratios, mut floor_serial) =
        (spread::Rounds::default(), spread::Rounds::default());
    for _ in 0..s.rounds {
        let f = floor.serial(serial_n);
        let o = rt.block_on(load::serial(&client, &put("t01"), serial_n));
        serial_ratios.push(o.ms(0.5) / f.ms(0.5));
        floor_serial.push(f.ms(0.5));
        floor_s.add(&f);
        ours_s.add(&o);
    }
    println!("{}", floor_s.line("floor serial commit, one repository"));
    println!("{}", ours_s.line("planfiles serial PUT, one tenant"));
    let serial_ratio = serial_ratios.median();
    println!(
        "ratio planfiles/floor, serial p50: {}; {}",
        serial_ratios.describe(2, "x"),
        floor_serial.floor_note()
    );
    targets.push((
        "Serial durable PUT p50 <= 1.5x the floor's (median of rounds)".into(),
        format!(
            "{} ({:.2} vs {:.2} ms, all rounds)",
            serial_ratios.describe(2, "x"),
            ours_s.ms(0.5),
            floor_s.ms(0.5)
        ),
        serial_ratio <= 1.5,
    ));
    let cli_repo = dir.path().join("cli.git");
    fixtures::history(&cli_repo, 1);
    let mut cli = fixtures::git_cli_commits(&cli_repo, if quick { 20 } else { 50 });
    cli.sort();
    let cli_p50 = cli[cli.len() / 2].as_secs_f64() * 1000.0;
    println!(
        "git CLI plumbing commit (core.fsync=all), serial: p50 {cli_p50:.3} ms ({} commits); git CLI / planfiles {:.1}x",
        cli.len(),
        cli_p50 / ours_s.ms(0.5)
    );

    let puts: Vec<Req> = (0..64).map(|i| put(&format!("t{i:02}"))).collect();
    let all_commits = || -> usize {
        (0..64)
            .map(|i| commits(&tenants.join(format!("t{i:02}.git"))))
            .sum()
    };
    let (mut ours_c, mut floor_c) = (Run::empty(), Run::empty());
    let (mut c64_ratios, mut floor_rates) = (spread::Rounds::default(), spread::Rounds::default());
    let mut counted = 0;
    for _ in 0..s.rounds {
        let f = floor.concurrent(64, 64, s.round);
        let before = all_commits();
        let run = rt.block_on(load::run(&client, &puts, 64, s.round));
        let n = all_commits() - before;
        c64_ratios.push(n as f64 / run.elapsed.as_secs_f64() / f.rps());
        floor_rates.push(f.rps());
        counted += n;
        floor_c.add(&f);
        ours_c.add(&run);
    }
    let ours_rate = counted as f64 / ours_c.elapsed.as_secs_f64();
    println!("{}", floor_c.line("floor c=64 over 64 repositories"));
    println!("{}", ours_c.line("planfiles PUT c=64 over 64 tenants"));
    println!("planfiles commits counted in the repositories: {counted} = {ours_rate:.0} commits/s");
    let c64_ratio = c64_ratios.median();
    println!(
        "ratio planfiles/floor, c=64 over 64 tenants: {}; {}",
        c64_ratios.describe(2, "x"),
        floor_rates.floor_note()
    );
    targets.push((
        "Durable commits/s, c=64 over 64 tenants >= 0.6x the floor's (median of rounds)".into(),
        format!(
            "{} ({ours_rate:.0} vs {:.0}/s, all rounds)",
            c64_ratios.describe(2, "x"),
            floor_c.rps()
        ),
        c64_ratio >= 0.6,
    ));

    let hot = dir.path().join("tenants/t02.git");
    let (mut ours_h, mut floor_h) = (Run::empty(), Run::empty());
    let mut hot_commits = 0;
    for _ in 0..s.rounds {
        floor_h.add(&floor.concurrent(64, 1, s.round));
        let before = commits(&hot);
        ours_h.add(&rt.block_on(load::run(&client, &[put("t02")], 64, s.round)));
        hot_commits += commits(&hot) - before;
    }
    let hot_rate = hot_commits as f64 / ours_h.elapsed.as_secs_f64();
    println!("{}", floor_h.line("floor 64 writers, one repository"));
    println!("{}", ours_h.line("planfiles 64 writers, one tenant"));
    println!(
        "planfiles commits on the hot tenant: {hot_commits} = {hot_rate:.0} commits/s; serial rate {:.0}/s",
        ours_s.rps()
    );
    targets.push((
        "64 writers on one tenant: commits/s >= the serial rate".into(),
        format!("{hot_rate:.0} vs {:.0}/s", ours_s.rps()),
        hot_rate >= ours_s.rps(),
    ));

    println!("\n## PUT of JSON content: the stored text edited vs emitted whole (storage, serial)");
    {
        let st = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            Identity::new("planfiles", "p@localhost", "x"),
            planfiles::storage::Durability::Group,
        )
        .unwrap();
        targets.extend(splice::run(&st, quick));
    }

    println!("\n## Cost growth with history (serial, packed histories)");
    let shallow = "deep1";
    fixtures::history(&tenants.join("deep1.git"), 1);
    // Interleaved rounds, so that drift in the disk or the CPU hits every depth alike.
    let names = [
        shallow.to_owned(),
        format!("deep{}", s.deep[0]),
        format!("deep{}", s.deep[1]),
    ];
    let mut runs: Vec<(Run, Run)> = names.iter().map(|_| (Run::empty(), Run::empty())).collect();
    for _ in 0..4 {
        for (name, (g, p)) in names.iter().zip(runs.iter_mut()) {
            g.add(&rt.block_on(load::serial(&client, &get(name, &addr), 250)));
            p.add(&rt.block_on(load::serial(&client, &put(name), 50)));
        }
    }
    let mut rows = Vec::new();
    for (name, (g, p)) in names.iter().zip(&runs) {
        println!("{}", g.line(&format!("GET {name}")));
        println!("{}", p.line(&format!("PUT {name}")));
        rows.push((g.ms(0.5), p.ms(0.5)));
    }
    let (g1, p1) = rows[0];
    let (gn, pn) = rows[2];
    let worst = ((gn / g1) - 1.0).max((pn / p1) - 1.0) * 100.0;
    targets.push((
        format!("Latency at {} commits within 10% of 1 commit", s.deep[1]),
        format!(
            "GET {:+.0}%, PUT {:+.0}%",
            (gn / g1 - 1.0) * 100.0,
            (pn / p1 - 1.0) * 100.0
        ),
        worst <= 10.0,
    ));

    println!(
        "\n## Start-up and memory with {} tenants",
        s.tenants_for_startup
    );
    let (startup, rss) = many_tenants(s.tenants_for_startup);
    targets.push((
        format!(
            "{} tenants: start < 1 s, RSS < 150 MB",
            s.tenants_for_startup
        ),
        format!("{:.0} ms, {:.0} MB", startup.as_secs_f64() * 1000.0, rss),
        startup < Duration::from_secs(1) && rss < 150.0,
    ));

    print_targets(&targets);
}

fn print_targets(targets: &[(String, String, bool)]) {
    println!("\n## Targets");
    println!("| measure | result | target |\n|---|---|---|");
    for (what, got, ok) in targets {
        println!("| {what} | {got} | {} |", verdict(*ok));
    }
}

/// Starts the real binary over `n` tenants; returns the time to its first answered request and
/// its peak RSS in MB after reading from every tenant.
fn many_tenants(n: usize) -> (Duration, f64) {
    let dir = tempfile::tempdir().unwrap();
    let tenants = dir.path().join("tenants");
    std::fs::create_dir_all(&tenants).unwrap();
    let template = dir.path().join("template");
    {
        let st = Storage::open(
            &template,
            &template.join("cursor.key"),
            Identity::new("planfiles", "p@localhost", "x"),
            planfiles::storage::Durability::Group,
        )
        .unwrap();
        st.create_tenant(&TenantId::parse("template").unwrap(), false)
            .unwrap();
    }
    let t = Instant::now();
    for i in 0..n {
        fixtures::copy_tree(
            &template.join("tenants/template.git"),
            &tenants.join(format!("c{i:05}.git")),
        );
    }
    println!(
        "copied {n} tenant repositories in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_planfiles"))
        .env_remove("PLANFILES_CONFIG")
        .env("PLANFILES_DATA_DIR", dir.path())
        .env("PLANFILES_BIND", "127.0.0.1:0")
        .env("PLANFILES_JWT_SECRET", SECRET)
        .env("PLANFILES_LOG_FORMAT", "json")
        .current_dir(dir.path())
        .arg("serve")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addr = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"] == "planfiles listening" {
            addr = format!("http://{}", v["addr"].as_str().unwrap());
            break;
        }
    }
    // Keep reading the log so that the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let client = reqwest::blocking::Client::new();
    let first = loop {
        let res = client
            .get(format!("{addr}/plans/integration-file"))
            .bearer_auth(token("c00000"))
            .send();
        if res.is_ok_and(|r| r.status().is_success()) {
            break start.elapsed();
        }
    };
    for i in 0..n {
        let res = client
            .get(format!("{addr}/plans/integration-file"))
            .bearer_auth(token(&format!("c{i:05}")))
            .send()
            .unwrap();
        assert!(res.status().is_success());
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let peak_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "first answered GET {:.0} ms after spawn; peak RSS {:.1} MB after reading all {n} tenants",
        first.as_secs_f64() * 1000.0,
        peak_kb / 1024.0
    );
    (first, peak_kb / 1024.0)
}

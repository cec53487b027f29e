//! What signing every commit costs: durable PUTs to a server that signs beside one that does not (same volume, interleaved rounds, serial and c=64 over 64 tenants), the signature's and the verification's own CPU, and a history page's first and cached reads.
use crate::load::{self, Req};
use crate::server::{start_planfiles_with, token};
use crate::spread::{self, alternate};
use crate::volume;
use planfiles::domain::{Identity, TenantId};
use planfiles::signing::{Keyring, Signer};
use planfiles::storage::{self, Storage};
use std::path::Path;
use std::time::{Duration, Instant};

const TENANTS: usize = 64;

fn tenants(data_dir: &Path) {
    storage::init_git();
    let st = Storage::open(
        data_dir,
        &data_dir.join("cursor.key"),
        Identity::new("planfiles", "p@localhost", "x"),
        storage::Durability::Group,
    )
    .unwrap();
    for i in 0..TENANTS {
        st.create_tenant(&TenantId::parse(&format!("t{i:02}")).unwrap(), false)
            .unwrap();
    }
}

fn commits(data_dir: &Path) -> usize {
    (0..TENANTS)
        .map(|i| {
            let repo = data_dir.join(format!("tenants/t{i:02}.git"));
            crate::fixtures::git(&repo, &["rev-list", "--count", "main"])
                .parse::<usize>()
                .unwrap()
        })
        .sum()
}

/// The targets: (what, figure, met).
pub fn run(quick: bool) -> Vec<(String, String, bool)> {
    let (round, rounds, serial_n) = if quick {
        (Duration::from_secs(1), 3, 60)
    } else {
        (Duration::from_secs(3), 5, 150)
    };
    let root = tempfile::tempdir().unwrap();
    println!(
        "# what signing costs ({})",
        if quick { "quick" } else { "full" }
    );
    println!("volume: {}", volume::describe(root.path()));
    // Index 0 is the server that does not sign, 1 the one that does.
    let dirs = [root.path().join("unsigned"), root.path().join("signed")];
    for d in &dirs {
        tenants(d);
    }
    let bases = [false, true]
        .map(|on| start_planfiles_with(&dirs[usize::from(on)], |c| c.signing.enabled = on));
    let [unsigned, signed] = &bases;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = load::client();
    let put = |base: &str, tenant: &str| Req::Put {
        url: format!("{base}/plans/integration-file"),
        token: token(tenant),
    };
    std::thread::sleep(Duration::from_millis(200));

    println!("\n## Serial durable PUT, one tenant, interleaved rounds of {serial_n}");
    spread::settle(Duration::from_secs(60));
    let ([off_s, on_s], _, serial_ratios) = alternate(rounds, |i| {
        let run = rt.block_on(load::serial(&client, &put(&bases[i], "t01"), serial_n));
        (run, 0)
    });
    println!("{}", on_s.line("signed   serial PUT"));
    println!("{}", off_s.line("unsigned serial PUT"));
    let serial = serial_ratios.median();
    println!(
        "signed / unsigned serial p50, per round: {}",
        serial_ratios.describe(3, "")
    );

    println!("\n## Durable PUT at c=64 over {TENANTS} tenants, interleaved rounds of {round:?}");
    let puts = |base: &str| -> Vec<Req> {
        (0..TENANTS)
            .map(|i| put(base, &format!("t{i:02}")))
            .collect()
    };
    let reqs = [puts(unsigned), puts(signed)];
    let ([off_c, on_c], [off_n, on_n], c64_ratios) = alternate(rounds, |i| {
        let before = commits(&dirs[i]);
        let run = rt.block_on(load::run(&client, &reqs[i], 64, round));
        (run, commits(&dirs[i]) - before)
    });
    let on_rate = on_n as f64 / on_c.elapsed.as_secs_f64();
    let off_rate = off_n as f64 / off_c.elapsed.as_secs_f64();
    println!("{}", on_c.line("signed   PUT c=64"));
    println!("{}", off_c.line("unsigned PUT c=64"));
    println!("commits counted: signed {on_rate:.0}/s, unsigned {off_rate:.0}/s");
    let c64_p50 = c64_ratios.median();
    println!(
        "signed / unsigned c=64 p50, per round: {}",
        c64_ratios.describe(3, "")
    );

    println!("\n## The signature's and the verification's own CPU (one thread)");
    let signer = Signer::from_seed(&[7; 32], "p@localhost");
    let text = "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor Bench <bench@example.com> 1764000000 +0000\ncommitter planfiles <p@localhost> 1764000000 +0000\n\nUpdate integrations.yml\n\nRequest-Id: 0f4c2b8e-5a7d-4a51-9b1e-3d2f6c7a8b90\n";
    let n = if quick { 2_000 } else { 10_000 };
    let t = Instant::now();
    let mut last = String::new();
    for _ in 0..n {
        last = signer.sign_commit(text);
    }
    let sign_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let start = last.find("gpgsig ").unwrap();
    let end = last[start..].find("\n\n").unwrap() + start + 1;
    let sig = last[start + 7..end].replace("\n ", "\n");
    let data = format!("{}{}", &last[..start], &last[end..]);
    let ring = Keyring::new(Some(&signer), &[]).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        assert!(ring.verifies(data.as_bytes(), &sig));
    }
    let verify_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("sign one commit: {sign_us:.1} us; verify one: {verify_us:.1} us ({n} each)");

    println!(
        "\n## A history page of 500 signed commits: first read (each verified) and again (cached)"
    );
    let (first, body) = page(&rt, &client, signed);
    assert!(
        body.contains("\"verified\":true"),
        "the signed server's commits verify"
    );
    let (again, _) = page(&rt, &client, signed);
    let (unsigned_page, _) = page(&rt, &client, unsigned);
    println!("signed server: first {first:.1} ms, cached {again:.1} ms; unsigned server {unsigned_page:.1} ms");

    vec![
        (
            "Serial durable PUT p50, signed vs unsigned <= +5% (median of rounds)".into(),
            format!(
                "{} (all rounds {:.3} vs {:.3} ms)",
                serial_ratios.change(),
                on_s.ms(0.5),
                off_s.ms(0.5)
            ),
            serial <= 1.05,
        ),
        (
            "PUT c=64 p50, signed vs unsigned <= +5% (median of rounds)".into(),
            format!(
                "{} (all rounds {:.2} vs {:.2} ms; {on_rate:.0} vs {off_rate:.0} commits/s)",
                c64_ratios.change(),
                on_c.ms(0.5),
                off_c.ms(0.5)
            ),
            c64_p50 <= 1.05,
        ),
    ]
}

/// `GET` of t01's history page of 500: how long it took (ms), and the body.
fn page(rt: &tokio::runtime::Runtime, client: &reqwest::Client, base: &str) -> (f64, String) {
    let t = Instant::now();
    let body = rt.block_on(async {
        client
            .get(format!("{base}/plans/integration-file/history?limit=500"))
            .bearer_auth(token("t01"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    (t.elapsed().as_secs_f64() * 1000.0, body)
}

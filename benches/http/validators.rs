//! What validators cost: serial durable PUTs of a seed-sized file to a server with the shipped schemas beside one without (same volume, interleaved rounds), and one thread's time to validate a 1 MiB integration file.
use crate::load::{self, Req};
use crate::server::{start_planfiles_with, token};
use crate::spread::{self, alternate};
use crate::volume;
use planfiles::domain::{yaml, TenantId};
use planfiles::validation::{SchemaSet, UnknownIntegrations};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

fn tenant(data_dir: &Path) {
    planfiles::storage::init_git();
    let st = planfiles::storage::Storage::open(
        data_dir,
        &data_dir.join("cursor.key"),
        planfiles::domain::Identity::new("planfiles", "p@localhost", "x"),
        planfiles::storage::Durability::Group,
    )
    .unwrap();
    st.create_tenant(&TenantId::parse("t01").unwrap(), false)
        .unwrap();
}

/// The targets: (what, figure, met).
pub fn run(quick: bool) -> Vec<(String, String, bool)> {
    let (rounds, serial_n) = if quick { (3, 60) } else { (5, 150) };
    let root = tempfile::tempdir().unwrap();
    println!(
        "# what validators cost ({})",
        if quick { "quick" } else { "full" }
    );
    println!("volume: {}", volume::describe(root.path()));
    // Index 0 is the server without schemas, 1 the one with the shipped ones.
    let dirs = [root.path().join("without"), root.path().join("with")];
    for d in &dirs {
        tenant(d);
    }
    let bases = [false, true].map(|on| {
        start_planfiles_with(&dirs[usize::from(on)], |c| {
            c.validation.schemas_dir = if on { shipped() } else { PathBuf::new() }
        })
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = load::client();
    std::thread::sleep(Duration::from_millis(200));

    println!("\n## Serial durable PUT of a seed-sized file, interleaved rounds of {serial_n}");
    spread::settle(Duration::from_secs(60));
    let ([off, on], _, ratios) = alternate(rounds, |i| {
        let req = Req::Put {
            url: format!("{}/plans/integration-file", bases[i]),
            token: token("t01"),
        };
        (rt.block_on(load::serial(&client, &req, serial_n)), 0)
    });
    println!("{}", on.line("with schemas    serial PUT"));
    println!("{}", off.line("without schemas serial PUT"));
    println!(
        "with / without serial p50, per round: {}",
        ratios.describe(3, "")
    );

    println!("\n## One thread: a 1 MiB integration file parsed, then validated");
    let set = SchemaSet::load(Some(&shipped()), UnknownIntegrations::Allow).unwrap();
    // The largest file the service takes has 1 MiB and 100,000 nodes: 8 nodes an account,
    // padded to 1 MiB with a comment each.
    let mut text = String::from("aws:\n");
    let mut i = 0u64;
    while text.len() < 1024 * 1024 {
        text.push_str(&format!(
            "  # account {i} of the bench's organisation, kept by the platform team\n  - account_id: \"{i:012}\"\n    regions: [us-east-1]\n    type: aws\n"
        ));
        i += 1;
    }
    let t = Instant::now();
    let doc = yaml::parse_mapping(&text).unwrap();
    let parse_ms = t.elapsed().as_secs_f64() * 1e3;
    let n = if quick { 3 } else { 10 };
    let t = Instant::now();
    for _ in 0..n {
        assert!(set.check_integration(&doc).is_empty());
    }
    let valid_ms = t.elapsed().as_secs_f64() * 1e3 / n as f64;
    // The same file with every account id broken: the refusal's cost (100 listed, the rest
    // counted, each listed one located in the text).
    let broken_text = text.replace("account_id: \"0", "account_id: \"x");
    let broken = yaml::parse_mapping(&broken_text).unwrap();
    let t = Instant::now();
    let found = set.check_integration(&broken).located_in(&broken_text);
    let refuse_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "{} bytes, {i} accounts: parse {parse_ms:.1} ms; validate {valid_ms:.1} ms (valid); \
         refuse {refuse_ms:.1} ms ({} listed, {} more counted)",
        text.len(),
        found.list.len(),
        found.omitted
    );

    let bomb = alias_bomb(if quick { 200 } else { 1_000 });
    vec![
        bomb,
        (
            "Serial durable PUT p50 of a seed-sized file, with vs without validators <= +5% (median of rounds)".into(),
            format!(
                "{} (all rounds {:.3} vs {:.3} ms)",
                ratios.change(),
                on.ms(0.5),
                off.ms(0.5)
            ),
            ratios.median() <= 1.05,
        ),
        (
            "Validating a 1 MiB integration file (one thread; stated, no target)".into(),
            format!("{valid_ms:.1} ms valid, {refuse_ms:.1} ms refused (parse {parse_ms:.1} ms)"),
            true,
        ),
    ]
}

/// This thread's CPU time, in milliseconds.
fn thread_cpu_ms() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill in.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// One thread: a 400-byte YAML alias bomb refused as client text, beside a valid file of the
/// same size that uses an alias too (the baseline), `n` times each, alternating; the CPU time
/// of each parse (what a bomb costs the machine, without the scheduler's preemptions).
fn alias_bomb(n: u32) -> (String, String, bool) {
    println!("\n## One thread: a 400-byte alias bomb refused, beside a valid file of its size");
    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    for (prev, next) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        let items = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{next}: &{next} [{items}]\n"));
    }
    let mut valid = String::from("regions: &r [us-east-1, eu-west-1]\naws:\n");
    let mut i = 0;
    while valid.len() < bomb.len() {
        valid.push_str(&format!(
            "  - {{account_id: \"{i:012}\", regions: *r, type: aws}}\n"
        ));
        i += 1;
    }
    let (mut bomb_s, mut valid_s) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = thread_cpu_ms();
        assert!(yaml::parse_client_text(&bomb).is_err());
        bomb_s.push(thread_cpu_ms() - t);
        let t = thread_cpu_ms();
        assert!(yaml::parse_client_text(&valid).is_ok());
        valid_s.push(thread_cpu_ms() - t);
    }
    let p = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q) as usize]
    };
    let (b50, b99) = (p(&mut bomb_s, 0.5), p(&mut bomb_s, 0.99));
    let (v50, v99) = (p(&mut valid_s, 0.5), p(&mut valid_s, 0.99));
    println!(
        "CPU: bomb ({} bytes) p50 {b50:.3} ms p99 {b99:.3} ms; valid ({} bytes) p50 {v50:.3} ms p99 {v99:.3} ms",
        bomb.len(),
        valid.len()
    );
    (
        "A 400-byte YAML alias bomb refused within 1 ms of CPU (p99)".into(),
        format!("CPU p50 {b50:.3} ms, p99 {b99:.3} ms (a valid file of its size: p50 {v50:.3} ms)"),
        b99 <= 1.0,
    )
}

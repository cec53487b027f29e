//! Power loss at the block level: `planfiles serve` in a QEMU guest on an ext4 disk behind QEMU's `blklogwrites` driver, under read-modify-write load and `git push`es, then SIGKILL; the disk rebuilt as it stood at flushes of the log (a disk whose volatile cache lost everything not flushed), and at each: nothing acknowledged before that flush is missing, `e2fsck` finds the file system clean after journal recovery, every repository passes `git fsck --strict`, and the service starts on it and serves every tenant. A negative control (a loop that acknowledges files before any sync) loses writes on the same harness, so it can fail.
//!
//! Needs `qemu-system-x86_64`, a static busybox, e2fsprogs, `strip` and `apt-get` (the
//! guest kernel is Debian's cloud kernel, fetched once into the target folder); without them
//! each test prints why it is skipped, unless `PLANFILES_BLOCK_TESTS=require`. The guest
//! runs under TCG (`PLANFILES_GUEST_ACCEL=kvm` where KVM works). `BLOCK_CRASH_ROUNDS`
//! (default 2), `BLOCK_CRASH_POINTS` (flush points checked per round, default 12),
//! `BLOCK_CRASH_SECS` (seconds of load per round, default 12) and `BLOCK_CRASH_DURABILITY`
//! (default `auto`: group commit on ext4) make longer runs by hand.
#[path = "../common/mod.rs"]
mod common;
mod guest;
mod writelog;

use guest::{Host, Mode, Vm};
use rand::seq::IndexedRandom;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use writelog::WriteLog;

/// The guest binds a public address, where the service refuses a secret under 32 bytes.
const SECRET: &str = "block-level-power-loss-test-secret-0123456789";
const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn token(tenant: &str) -> String {
    common::sign_hs256(
        SECRET,
        &json!({"alg": "HS256", "typ": "JWT"}),
        &json!({"tenant_id": tenant, "permissions": common::ALL, "exp": common::now() + 3600,
                "sub": "tester", "email": "tester@example.com", "name": "Test Er"}),
    )
}

/// A write the service acknowledged: its tenant and commit, and the log's length when the
/// answer arrived (at least where the flush it waited for ends).
#[derive(Clone, Debug)]
struct Ack {
    tenant: &'static str,
    commit: String,
    at: u64,
    /// Acknowledged by `git push` (its report-status `ok`), not by a 200.
    pushed: bool,
}

/// Read-modify-write clients of acme's and globex's configuration file (a 409 reads again),
/// writers of acme's integration file without a precondition, so that writes queue up and
/// are committed in batches, and a `git push` client of initech: tenants share group commits.
fn load(vm: &Vm, secs: u64) -> Vec<Ack> {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for id in 0..6 {
        let (base, log) = (vm.url(""), vm.log.clone());
        let (acked, stop) = (acked.clone(), stop.clone());
        clients.push(std::thread::spawn(move || {
            let http = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap();
            let blind = id >= 4;
            // initech is the pusher's: an API writer of it would leave every push behind main.
            let tenant = if blind { "acme" } else { TENANTS[id % 2] };
            let token = token(tenant);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (url, body) = if blind {
                    (
                        format!("{base}/plans/integration-file"),
                        json!({"content": {"writer": id, "n": n}}),
                    )
                } else {
                    let url = format!("{base}/plans/configuration-file");
                    let got: Value = http
                        .get(&url)
                        .bearer_auth(&token)
                        .send()
                        .unwrap()
                        .json()
                        .unwrap();
                    let mut content = got["content"].clone();
                    let folders = content["folders"].as_array_mut().expect("folders");
                    folders.push(json!({"path": format!("c{id}-{n}")}));
                    if folders.len() > 20 {
                        folders.remove(0);
                    }
                    (url, json!({"payload": content, "file_sha": got["sha"]}))
                };
                let put = http.put(&url).bearer_auth(&token).json(&body).send();
                let put = put.unwrap();
                let status = put.status().as_u16();
                let at = std::fs::metadata(&log).unwrap().len();
                let answer: Value = put.json().unwrap();
                match status {
                    200 => acked.lock().unwrap().push(Ack {
                        tenant,
                        commit: answer["commit_sha"].as_str().unwrap().to_owned(),
                        at,
                        pushed: false,
                    }),
                    409 | 503 => {}
                    other => panic!("client {id}: unexpected {other}: {answer}"),
                }
            }
        }));
    }
    clients.push(pusher(vm, acked.clone(), stop.clone()));
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    acked
}

/// A `git push` client of initech beside the API writers (one of which writes initech's
/// configuration file): each pushed commit that git reports landed is acknowledged, as a 200
/// is; a refusal ("fetch first" when an API write came between) fetches and goes on.
fn pusher(
    vm: &Vm,
    acked: Arc<Mutex<Vec<Ack>>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (url, log) = (vm.url("/git/initech.git"), vm.log.clone());
    std::thread::spawn(move || {
        let token = common::sign_hs256(
            SECRET,
            &json!({"alg": "HS256", "typ": "JWT"}),
            &json!({"tenant_id": "initech", "exp": common::now() + 3600, "sub": "pusher",
                    "permissions": ["planfiles.repos.read", "jit.integrations.write"]}),
        );
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("c");
        let git = |args: &[&str]| {
            Command::new("git")
                .env("GIT_TERMINAL_PROMPT", "0")
                .arg("-C")
                .arg(work.path())
                .args([
                    "-c",
                    &format!("http.extraHeader=Authorization: Bearer {token}"),
                ])
                .args(["-c", "user.name=Pusher", "-c", "user.email=p@x.example"])
                .args(args)
                .output()
                .unwrap()
        };
        let cloned = git(&["clone", "-q", &url, "c"]);
        assert!(cloned.status.success(), "clone: {cloned:?}");
        let (mut n, mut refused) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            std::fs::write(
                dir.join("integrations.yml"),
                format!("pushed:\n  count: {n}\n"),
            )
            .unwrap();
            let committed = git(&["-C", "c", "commit", "-qam", &format!("push {n}")]);
            assert!(committed.status.success(), "{committed:?}");
            let head = git(&["-C", "c", "rev-parse", "HEAD"]);
            let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
            let pushed = git(&["-C", "c", "push", "-q", "origin", "main"]);
            let at = std::fs::metadata(&log).unwrap().len();
            if pushed.status.success() {
                acked.lock().unwrap().push(Ack {
                    tenant: "initech",
                    commit: head,
                    at,
                    pushed: true,
                });
            } else {
                refused += 1;
                if refused <= 3 {
                    eprintln!(
                        "push {n} refused: {}",
                        String::from_utf8_lossy(&pushed.stderr).trim()
                    );
                }
                let fetched = git(&["-C", "c", "fetch", "-q", "origin"]);
                assert!(fetched.status.success(), "fetch: {fetched:?}");
                git(&["-C", "c", "reset", "-q", "--hard", "origin/main"]);
            }
        }
    })
}

/// What the checks of one flush point found.
#[derive(Default, Debug, Clone, Copy)]
struct Found {
    points: usize,
    required: usize,
    lost: usize,
    fsck_bad: usize,
    fs_bad: usize,
    unserved: usize,
}

impl std::ops::AddAssign for Found {
    fn add_assign(&mut self, o: Found) {
        self.points += o.points;
        self.required += o.required;
        self.lost += o.lost;
        self.fsck_bad += o.fsck_bad;
        self.fs_bad += o.fs_bad;
        self.unserved += o.unserved;
    }
}

fn output(cmd: &mut Command) -> std::process::Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// Journal recovery (as a mount would do it), then a full read-only check, which must find
/// nothing to fix. `false` (with the report printed) when it does.
fn recover(image: &Path) -> bool {
    let replay = output(
        Command::new("e2fsck")
            .args(["-y", "-E", "journal_only"])
            .arg(image),
    );
    // 0: nothing to do; 1: the journal was replayed.
    if replay.status.code().is_none_or(|c| c > 1) {
        eprintln!(
            "journal recovery of {}: {}{}",
            image.display(),
            String::from_utf8_lossy(&replay.stdout),
            String::from_utf8_lossy(&replay.stderr)
        );
        return false;
    }
    let check = output(Command::new("e2fsck").args(["-f", "-n"]).arg(image));
    if !check.status.success() {
        eprintln!(
            "e2fsck -fn of {}: {}",
            image.display(),
            String::from_utf8_lossy(&check.stdout)
        );
        return false;
    }
    true
}

/// Copies `/<folder>` out of the ext4 image into `out`.
fn extract(image: &Path, folder: &str, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    let dumped = output(
        Command::new("debugfs")
            .arg("-R")
            .arg(format!("rdump /{folder} {}", out.display()))
            .arg(image),
    );
    assert!(
        out.join(folder).is_dir(),
        "debugfs rdump /{folder}: {}",
        String::from_utf8_lossy(&dumped.stderr)
    );
}

fn git(repo: &Path, args: &[&str]) -> std::process::Output {
    output(Command::new("git").arg("--git-dir").arg(repo).args(args))
}

/// Checks the disk at a flush point that ends at `end` in the log.
fn check_point(image: &Path, acked: &[Ack], end: u64) -> Found {
    let mut found = Found {
        points: 1,
        ..Found::default()
    };
    if !recover(image) {
        found.fs_bad += 1;
    }
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    extract(image, "tenants", &data);
    for tenant in TENANTS {
        let repo = data.join(format!("tenants/{tenant}.git"));
        let fsck = git(&repo, &["fsck", "--strict", "--no-progress"]);
        if !fsck.status.success() {
            eprintln!(
                "git fsck --strict of {tenant} at log offset {end}: {}",
                String::from_utf8_lossy(&fsck.stderr)
            );
            found.fsck_bad += 1;
        }
        let listed = git(&repo, &["rev-list", "main"]);
        let on_main: BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        let required: Vec<&Ack> = acked
            .iter()
            .filter(|a| a.tenant == tenant && a.at <= end)
            .collect();
        found.required += required.len();
        let lost = required
            .iter()
            .filter(|a| !on_main.contains(&a.commit))
            .count();
        if lost > 0 {
            eprintln!(
                "{tenant} at log offset {end}: {lost} of {} acknowledged commits not on main \
                 (main: {})",
                required.len(),
                String::from_utf8_lossy(&git(&repo, &["rev-parse", "main"]).stdout).trim()
            );
        }
        found.lost += lost;
    }
    if !serves_every_tenant(work.path()) {
        found.unserved += 1;
    }
    found
}

/// The service (on this host) starts on the rebuilt data dir and serves both files of every
/// tenant.
fn serves_every_tenant(dir: &Path) -> bool {
    let server = common::process::serve(dir, &[]);
    let http = reqwest::blocking::Client::new();
    let mut ok = true;
    for tenant in TENANTS {
        for file in ["integration-file", "configuration-file"] {
            let res = http
                .get(server.url(&format!("/plans/{file}")))
                .bearer_auth(common::token(tenant, common::ALL))
                .send()
                .unwrap();
            if res.status() != 200 {
                eprintln!("{tenant} {file} after the cut: {}", res.status());
                ok = false;
            }
        }
    }
    ok
}

/// The flush points of a round: the last flush and `count - 1` others picked at random.
fn pick(flushes: &[usize], count: usize) -> Vec<usize> {
    let mut rng = rand::rng();
    let (&last, others) = flushes.split_last().expect("the log has flushes");
    let mut points: Vec<usize> = others
        .choose_multiple(&mut rng, count.saturating_sub(1))
        .copied()
        .collect();
    points.push(last);
    points.sort_unstable();
    points
}

/// Replays the log onto a copy of `base` up to each point in turn (points in order), and
/// calls `check` with a copy of the disk as it stood there.
fn at_each_point(
    log: &WriteLog,
    base: &Path,
    points: &[usize],
    mut check: impl FnMut(usize, &Path),
) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("replayed.img");
    std::fs::copy(base, &work).unwrap();
    let disk = std::fs::OpenOptions::new().write(true).open(&work).unwrap();
    let mut applied = 0;
    for &point in points {
        log.apply(applied, point, &disk).unwrap();
        applied = point;
        let copy = dir.path().join(format!("at-{point}.img"));
        std::fs::copy(&work, &copy).unwrap();
        check(point, &copy);
        std::fs::remove_file(&copy).unwrap();
    }
}

#[test]
fn group_commit_on_ext4_loses_no_acknowledged_write_at_any_flush() {
    let Some(host) = Host::prepare("the block-level power-loss test") else {
        return;
    };
    let rounds = setting("BLOCK_CRASH_ROUNDS", 2);
    let per_round = setting("BLOCK_CRASH_POINTS", 12);
    let secs = setting("BLOCK_CRASH_SECS", 12) as u64;
    let durability: &'static str = match std::env::var("BLOCK_CRASH_DURABILITY").as_deref() {
        Ok("fsync") => "fsync",
        Ok("group") => "group",
        _ => "auto",
    };
    let mut base = host.fresh_disk(&common::fixture_dir().join("tenants"), "fixture");
    let mut total = Found::default();
    let (mut acknowledged, mut pushes) = (0, 0);
    eprintln!("round  acked  pushed  flushes  points  required  lost  fsck_bad  fs_bad  unserved");
    for round in 0..rounds {
        let mut vm = host.boot(&base, Mode::Serve { durability }, &format!("round-{round}"));
        vm.wait_ready();
        let console = vm.console_text();
        let expect = if durability == "fsync" {
            "fsync"
        } else {
            "group"
        };
        assert!(
            console.contains("\"filesystem\":\"ext4\"")
                && console.contains(&format!("\"durability\":\"{expect}\"")),
            "the guest's service runs {expect} on ext4:\n{console}"
        );
        let acked = load(&vm, secs);
        vm.kill();
        acknowledged += acked.len();
        let pushed = acked.iter().filter(|a| a.pushed).count();
        pushes += pushed;
        let log = WriteLog::read(&vm.log).unwrap();
        let flushes = log.flushes();
        assert!(
            flushes.len() >= per_round,
            "round {round}: only {} flushes in the log",
            flushes.len()
        );
        let points = pick(&flushes, per_round);
        let mut found = Found::default();
        let next_base = host_path(&base, round);
        at_each_point(&log, &base, &points, |point, image| {
            found += check_point(image, &acked, log.entries[point].end);
            if point == *points.last().unwrap() {
                // The next round starts where this one's power went: the last flush,
                // after its journal recovery.
                std::fs::copy(image, &next_base).unwrap();
            }
        });
        eprintln!(
            "{round:>5}  {:>5}  {pushed:>6}  {:>7}  {:>6}  {:>8}  {:>4}  {:>8}  {:>6}  {:>8}",
            acked.len(),
            flushes.len(),
            found.points,
            found.required,
            found.lost,
            found.fsck_bad,
            found.fs_bad,
            found.unserved
        );
        total += found;
        base = next_base;
    }
    assert!(acknowledged > 0, "no write was acknowledged");
    assert!(
        pushes > 0,
        "no push was acknowledged: the test did not cut a push's writes"
    );
    assert!(
        total.required > 0,
        "no flush point required an acknowledged write"
    );
    assert_eq!(
        (total.lost, total.fsck_bad, total.fs_bad, total.unserved),
        (0, 0, 0, 0),
        "acknowledged commits lost, repositories failing git fsck, file systems not clean, \
         and points where the service did not serve every tenant, over {} flush points",
        total.points
    );
}

/// Where a round leaves the disk for the next one.
fn host_path(base: &Path, round: usize) -> std::path::PathBuf {
    base.with_file_name(format!("after-round-{round}.img"))
}

#[test]
fn the_negative_control_loses_acknowledged_files() {
    let Some(host) = Host::prepare("the block-level negative control") else {
        return;
    };
    let base = host.empty_disk("control");
    let mut vm = host.boot(&base, Mode::Control, "control");
    // The guest's kernel boots under emulation first (its time varies with the host's load);
    // then long enough for ext4's journal to commit (every 5 s) while files are written.
    let booted = std::time::Instant::now() + Duration::from_secs(180);
    while vm.acks.lock().unwrap().is_empty() && std::time::Instant::now() < booted {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(10));
    vm.kill();
    let acks = vm.acks.lock().unwrap().clone();
    assert!(
        acks.len() > 100,
        "the control acknowledged only {} files:\n{}",
        acks.len(),
        vm.console_text()
    );
    let log = WriteLog::read(&vm.log).unwrap();
    let flushes = log.flushes();
    assert!(!flushes.is_empty(), "the control's disk was never flushed");
    let points = pick(&flushes, 6);
    let mut lost_total = 0;
    let mut required_total = 0;
    at_each_point(&log, &base, &points, |point, image| {
        assert!(recover(image), "the control's file system is clean");
        let out = tempfile::tempdir().unwrap();
        extract(image, "control", out.path());
        let end = log.entries[point].end;
        let mut lost = 0;
        let required: BTreeMap<u64, u64> =
            acks.iter().filter(|(_, at)| *at <= end).copied().collect();
        for n in required.keys() {
            let text = std::fs::read_to_string(out.path().join(format!("control/f{n}")));
            if text.ok().as_deref() != Some(&format!("value {n}\n")) {
                lost += 1;
            }
        }
        eprintln!(
            "control at log offset {end}: {lost} of {} acknowledged files lost",
            required.len()
        );
        lost_total += lost;
        required_total += required.len();
    });
    assert!(
        lost_total > 0,
        "the negative control lost none of {required_total} acknowledged files: the harness \
         cannot see a loss"
    );
}

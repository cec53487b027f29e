//! Operator commands racing a tenant move, over a slow link: two real shards, the target behind a relay that holds its answers back (requests pass at once), writers on both shards all along, and `tenant move`, `--abort` and `tenant import` run as their own processes at chosen moments. After each race: the tenant is writable on one shard at most, and every write either shard acknowledged is on that shard's `main` (no split brain, no lost write).
use crate::common;

use common::process::{planfiles, serve_command, Server};
use common::relay::Relay;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const TENANT: &str = "acme";
const MOVE: &[&str] = &[
    "jit.integrations.write",
    "jit.preferences.write",
    "planfiles.repos.import",
];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Shard {
    dir: PathBuf,
    url: String,
    _server: Server,
}

/// Shard A holds the tenant; shard B is reached only through the relay (its
/// `cluster.self_url` is the relay's URL, as a shard's is the URL its peers reach it at).
struct Pair {
    _root: tempfile::TempDir,
    a: Shard,
    b: Shard,
    relay: Relay,
}

impl Pair {
    fn start() -> Pair {
        Self::start_with(true, "")
    }

    /// Two shards; with `same_key` false, B signs commits with a key of its own. `a_config`
    /// is added to A's configuration.
    fn start_with(same_key: bool, a_config: &str) -> Pair {
        Self::start_full(same_key, a_config, "")
    }

    /// [`Pair::start_with`], and `both` added to both shards' configurations.
    fn start_full(same_key: bool, a_config: &str, both: &str) -> Pair {
        let root = tempfile::tempdir().unwrap();
        let (pa, pb) = (free_port(), free_port());
        let relay = Relay::start(0, &format!("127.0.0.1:{pb}"));
        let a_url = format!("http://127.0.0.1:{pa}");
        let shard = |name: &str, port: u16, self_url: &str, peer: &str| {
            let dir = root.path().join(name);
            crate::common::shared_shard_secrets(&dir.join("data"));
            std::fs::write(
                dir.join("config.toml"),
                format!(
                    "[storage]\nseed_from = \"\"\n[cluster]\nself_url = \"{self_url}\"\npeers = [\"{peer}\"]\n{both}"
                ),
            )
            .unwrap();
            (dir, port)
        };
        let (a_dir, _) = shard("a", pa, &a_url, &relay.url());
        let mut config = std::fs::read_to_string(a_dir.join("config.toml")).unwrap();
        config.push_str(a_config);
        std::fs::write(a_dir.join("config.toml"), config).unwrap();
        let (b_dir, _) = shard("b", pb, &relay.url(), &a_url);
        if !same_key {
            let other = planfiles::signing::Signer::from_seed(&[0x0b; 32], "b@localhost");
            std::fs::write(
                b_dir.join("data/signing_key"),
                other.to_openssh().as_bytes(),
            )
            .unwrap();
        }
        let created = planfiles(&a_dir)
            .args(["tenant", "create", TENANT])
            .output()
            .unwrap();
        assert!(created.status.success(), "{created:?}");
        let start = |dir: &Path, port: u16| {
            let mut cmd = planfiles(dir);
            cmd.env("PLANFILES_BIND", format!("127.0.0.1:{port}"));
            serve_command(cmd)
        };
        let a = Shard {
            _server: start(&a_dir, pa),
            dir: a_dir,
            url: a_url,
        };
        let b = Shard {
            _server: start(&b_dir, pb),
            dir: b_dir,
            url: format!("http://127.0.0.1:{pb}"),
        };
        Pair {
            _root: root,
            a,
            b,
            relay,
        }
    }

    /// `planfiles tenant move` run on shard A with `args`, its stdout lines sent as they come.
    fn command(&self, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
        let mut child = planfiles(&self.a.dir)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        (child, rx)
    }

    fn move_args(&self) -> Vec<String> {
        [
            "tenant",
            "move",
            TENANT,
            "--to",
            &self.relay.url(),
            "--no-router",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// Where the tenant is on a shard: `served`, `moving`, `aborting`, `moved`, or `absent`.
    fn placement(&self, shard: &Shard) -> String {
        let res = reqwest::blocking::Client::new()
            .get(format!("{}/admin/tenants/{TENANT}/placement", shard.url))
            .bearer_auth(common::token(TENANT, MOVE))
            .send()
            .unwrap();
        match res.status().as_u16() {
            200 => res.json::<Value>().unwrap()["placement"]
                .as_str()
                .unwrap()
                .to_owned(),
            404 => "absent".into(),
            other => panic!("placement: {other}"),
        }
    }

    /// The end checks: one shard at most takes writes, and it holds every acknowledged write.
    fn check(&self, acked: &[(usize, String)], case: &str) {
        let places = [self.placement(&self.a), self.placement(&self.b)];
        let served: Vec<usize> = (0..2).filter(|&i| places[i] == "served").collect();
        assert!(
            served.len() <= 1,
            "{case}: the tenant is writable on both shards ({places:?})"
        );
        let owner = served.first().copied().unwrap_or(1);
        let repo = [&self.a, &self.b][owner]
            .dir
            .join(format!("data/tenants/{TENANT}.git"));
        let on_main: std::collections::HashSet<String> =
            common::git_in(&repo, &["rev-list", "main"])
                .lines()
                .map(str::to_owned)
                .collect();
        let lost: Vec<&(usize, String)> =
            acked.iter().filter(|(_, c)| !on_main.contains(c)).collect();
        assert!(
            lost.is_empty(),
            "{case}: {} of {} acknowledged writes are not on shard {} ({places:?}): {:?}",
            lost.len(),
            acked.len(),
            ["a", "b"][owner],
            lost.iter().take(5).collect::<Vec<_>>()
        );
    }
}

/// The writes acknowledged, with the shard (0: a, 1: b) that gave each.
type Acked = Arc<Mutex<Vec<(usize, String)>>>;

/// Blind writers on both shards, straight to each (not through the relay), until `stop`:
/// every 200 is recorded with the shard that gave it.
fn writers(pair: &Pair, stop: Arc<AtomicBool>) -> (Vec<std::thread::JoinHandle<()>>, Acked) {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let handles = [pair.a.url.clone(), pair.b.url.clone()]
        .into_iter()
        .enumerate()
        .map(|(shard, url)| {
            let (stop, acked) = (stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                let token = common::token(TENANT, common::ALL);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let res = http
                        .put(format!("{url}/plans/integration-file"))
                        .bearer_auth(&token)
                        .json(&json!({"content": {"shard": shard, "n": n}}))
                        .send()
                        .unwrap();
                    match res.status().as_u16() {
                        200 => {
                            let body: Value = res.json().unwrap();
                            let commit = body["commit_sha"].as_str().unwrap().to_owned();
                            acked.lock().unwrap().push((shard, commit));
                        }
                        // Not there yet, moving, moved.
                        404 | 503 | 421 => std::thread::sleep(Duration::from_millis(20)),
                        other => panic!("shard {shard}: {other}: {}", res.text().unwrap()),
                    }
                }
            })
        })
        .collect();
    (handles, acked)
}

/// Waits for a line of `lines` that contains `what` (at most `within`).
fn wait_for(lines: &mpsc::Receiver<String>, what: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(what) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no line with {what:?} within {within:?}");
}

fn finish(mut child: Child) -> (bool, String) {
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status.success(), err)
}

/// The race: the target's answers held 8 s, and `--abort` 5 s into the move. The
/// abort's question reaches the target before the import does; its answer ("not here")
/// comes back after the import made the tenant writable there. An abort that acted on it
/// would make the tenant writable here again: two writable copies. The abort fences first:
/// here the tenant is not moving yet, so it is refused, and the move goes on alone.
#[test]
fn an_abort_whose_answer_comes_late_leaves_one_writable_shard() {
    let pair = Pair::start();
    let stop = Arc::new(AtomicBool::new(false));
    let (handles, acked) = writers(&pair, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    pair.relay.hold_answers(Duration::from_secs(8));
    let args = pair.move_args();
    let (moving, _lines) = pair.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_secs(5));
    let mut abort_args = args.clone();
    abort_args.push("--abort".into());
    let (abort, _) = pair.command(&abort_args.iter().map(String::as_str).collect::<Vec<_>>());
    let (aborted, abort_err) = finish(abort);
    let (_, move_err) = finish(moving);
    pair.relay.hold_answers(Duration::ZERO);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "abort: {aborted} {abort_err}\nmove: {move_err}\nacked: {}",
        acked.len()
    );
    pair.check(&acked, "abort 5 s into a move");
    assert!(!aborted, "an abort of a move that had not begun succeeded");
}

/// `--abort` the moment step 2 begins, twice at once: whichever way the import and the abort
/// interleave, one shard takes writes at most, and a rerun of the abort settles it (the
/// tenant back here, or the move to be finished). Then a move to another shard, and a
/// `tenant import` by hand on the target, are refused while the tenant is not handed over.
#[test]
fn aborts_racing_an_import_never_leave_two_writable_shards() {
    let pair = Pair::start();
    let stop = Arc::new(AtomicBool::new(false));
    let (handles, acked) = writers(&pair, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    pair.relay.hold_answers(Duration::from_secs(3));
    let args = pair.move_args();
    let (moving, lines) = pair.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
    wait_for(&lines, "step 2/4", Duration::from_secs(30));
    let mut abort_args = args.clone();
    abort_args.push("--abort".into());
    let abort_args: Vec<&str> = abort_args.iter().map(String::as_str).collect();
    let aborts = [pair.command(&abort_args).0, pair.command(&abort_args).0];
    // Meanwhile: a move to another shard is refused, and changes nothing.
    let (other, _) = pair.command(&[
        "tenant",
        "move",
        TENANT,
        "--to",
        "http://127.0.0.1:9",
        "--no-router",
    ]);
    let (other_ok, other_err) = finish(other);
    assert!(!other_ok, "a move to a third shard ran beside this one");
    assert!(
        other_err.contains("moving") || other_err.contains("abort"),
        "{other_err}"
    );
    let results: Vec<(bool, String)> = aborts.into_iter().map(finish).collect();
    let (moved_ok, move_err) = finish(moving);
    eprintln!("aborts: {results:?}\nmove: {moved_ok} {move_err}");
    pair.relay.hold_answers(Duration::ZERO);
    // Settle it as an operator would: the abort again, until it says done or "finish the move".
    let mut settled = results.iter().any(|(ok, _)| *ok);
    for _ in 0..5 {
        if settled {
            break;
        }
        let (again, _) = pair.command(&abort_args);
        let (ok, err) = finish(again);
        settled = ok || err.contains("finish the move") || err.contains("not moving");
        if !settled {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    assert!(settled, "the abort never settled");
    // A by-hand import on the target from a source that does not hand the tenant over.
    let places = [pair.placement(&pair.a), pair.placement(&pair.b)];
    if places[0] == "served" {
        let import = planfiles(&pair.b.dir)
            .args(["tenant", "import", TENANT, "--from", &pair.a.url])
            .output()
            .unwrap();
        assert!(
            !import.status.success(),
            "an import from a shard that serves the tenant ran"
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    pair.check(&acked, "aborts at step 2");
}

/// A whole move over the slow link (every answer of the target held 2 s), finished by hand
/// (`--no-router`, then `--routed`): each step waits for its answer, writes are refused from
/// step 1, and at the end the target holds every write either shard acknowledged, the
/// source answers 421.
#[test]
fn a_move_over_a_slow_link_finishes_and_loses_nothing() {
    let pair = Pair::start();
    let stop = Arc::new(AtomicBool::new(false));
    let (handles, acked) = writers(&pair, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    pair.relay.hold_answers(Duration::from_secs(2));
    let args = pair.move_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let (first, lines) = pair.command(&args);
    let (ok, err) = finish(first);
    let said: Vec<String> = lines.try_iter().collect();
    assert!(
        !ok && err.contains("--routed"),
        "the move stops for the routing: {err}"
    );
    assert!(said.iter().any(|l| l.contains("step 2/4")), "{said:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "the answers were not held"
    );
    let mut routed = args.clone();
    routed.push("--routed");
    let (second, _) = pair.command(&routed);
    let (ok, err) = finish(second);
    assert!(ok, "the move did not finish: {err}");
    pair.relay.hold_answers(Duration::ZERO);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(pair.placement(&pair.b), "served");
    let moved = reqwest::blocking::Client::new()
        .get(format!("{}/plans/integration-file", pair.a.url))
        .bearer_auth(common::token(TENANT, common::ALL))
        .send()
        .unwrap();
    assert_eq!(moved.status(), 421);
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.iter().any(|(s, _)| *s == 1),
        "shard b took no write after the move"
    );
    pair.check(&acked, "a move over a slow link");
}

/// Shards that sign with different keys: the move stops before it refuses a write (a tenant's
/// history would change signer, and its new commits would not verify with the keys its
/// readers hold), and the tenant stays writable where it was.
#[test]
fn a_move_to_a_shard_with_another_signing_key_is_refused_before_anything() {
    let pair = Pair::start_with(false, "");
    let args = pair.move_args();
    let (moving, _) = pair.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, err) = finish(moving);
    assert!(!ok, "the move ran");
    assert!(
        err.contains("signs commits with") && err.contains("signing.key_file"),
        "{err}"
    );
    assert_eq!(pair.placement(&pair.a), "served");
    assert_eq!(pair.placement(&pair.b), "absent");
}

#[test]
fn a_move_to_a_shard_that_does_not_count_a_retired_key_is_refused_before_anything() {
    // The same current key; a retired one that only the source lists.
    let retired = planfiles::signing::Signer::from_seed(&[0x0c; 32], "old@localhost");
    let pair = Pair::start_with(
        true,
        &format!(
            "[signing]\nprevious_public_keys = [\"{}\"]\n",
            retired.public_key()
        ),
    );
    let args = pair.move_args();
    let (moving, _) = pair.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, err) = finish(moving);
    assert!(!ok, "the move ran");
    assert!(
        err.contains(&retired.fingerprint()) && err.contains("previous_public_keys"),
        "{err}"
    );
    assert_eq!(pair.placement(&pair.a), "served");
    assert_eq!(pair.placement(&pair.b), "absent");
}

/// Shards with other schema sets: the move stops before it refuses a write (the tenant's
/// files would be judged by other rules there), naming the files that differ.
#[test]
fn a_move_to_a_shard_with_another_schema_set_is_refused_before_anything() {
    let schemas = crate::common::shipped_schemas();
    let pair = Pair::start_with(
        true,
        &format!(
            "[validation]\nschemas_dir = {:?}\n",
            schemas.display().to_string()
        ),
    );
    let args = pair.move_args();
    let (moving, _) = pair.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, err) = finish(moving);
    assert!(!ok, "the move ran");
    assert!(
        err.contains("another schema set")
            && err.contains("only here: common/aws-regions.json, configuration.json"),
        "{err}"
    );
    assert_eq!(pair.placement(&pair.a), "served");
    assert_eq!(pair.placement(&pair.b), "absent");
}

/// Webhooks move with the tenant: a subscription made on A, writers on both shards all along,
/// a move over the relay with every answer of B held back 2 s (the import of the bundle with
/// the cursors among them). Every commit of the tenant's history after the subscription
/// reaches the receiver (signed, in order, each event's first delivery in `main`'s order; a
/// repeat only with the same `webhook-id`), A stops, and B lists the subscription.
#[test]
fn webhooks_move_with_the_tenant_over_a_slow_link_and_skip_nothing() {
    // No CPU budget: the thousands of events the writers make meanwhile arrive in seconds.
    let hooks = "[webhooks]\nallow_http = true\nallow_private_networks = true\nretry_schedule_secs = [1, 1, 1, 1, 1, 1, 1, 1]\ncpu_share = 0\n";
    let pair = Pair::start_full(true, "", hooks);
    let rx = common::receiver::Receiver::start();
    let a_repo = pair.a.dir.join(format!("data/tenants/{TENANT}.git"));
    let start = common::git_in(&a_repo, &["rev-parse", "main"]);
    let http = reqwest::blocking::Client::new();
    let created: Value = http
        .post(format!("{}/plans/webhooks", pair.a.url))
        .bearer_auth(common::webhooks_token(TENANT))
        .json(&json!({"url": rx.url("/hook/m")}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    rx.set_secret("/hook/m", created["secret"].as_str().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (handles, acked) = writers(&pair, stop.clone());
    std::thread::sleep(Duration::from_millis(700));
    pair.relay.hold_answers(Duration::from_secs(2));
    let args = pair.move_args();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let (first, _) = pair.command(&args);
    let (ok, err) = finish(first);
    assert!(!ok && err.contains("--routed"), "{err}");
    args.push("--routed");
    let (second, _) = pair.command(&args);
    let (ok, err) = finish(second);
    assert!(ok, "the move did not finish: {err}");
    assert!(
        started.elapsed() >= Duration::from_secs(6),
        "the answers were not held"
    );
    pair.relay.hold_answers(Duration::ZERO);
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    pair.check(&acked.lock().unwrap(), "webhooks across a move");
    let b_repo = pair.b.dir.join(format!("data/tenants/{TENANT}.git"));
    let want = common::integration_event_ids(&b_repo, "acme", &start);
    assert!(
        acked.lock().unwrap().iter().any(|(s, _)| *s == 1) && want.len() > 5,
        "writes on both sides of the move"
    );
    // The writers ran through the held answers: thousands of events, in a debug build.
    let deadline = Instant::now() + Duration::from_secs(120);
    let firsts = loop {
        let got = rx.deliveries("/hook/m");
        let mut firsts: Vec<String> = Vec::new();
        for d in got.iter().filter(|d| d.answered == 200) {
            assert!(d.verified, "a delivery whose signature does not check out");
            if !firsts.contains(&d.id) {
                firsts.push(d.id.clone());
            }
        }
        if firsts.len() >= want.len() || Instant::now() > deadline {
            break firsts;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let differs = firsts.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        firsts.len() == want.len() && differs.is_none(),
        "every event once at least, in main's order: {} of {} delivered, first difference at {differs:?}",
        firsts.len(),
        want.len()
    );
    let listed = http
        .get(format!(
            "{}/plans/webhooks/{}",
            pair.b.url,
            created["id"].as_str().unwrap()
        ))
        .bearer_auth(common::webhooks_token(TENANT))
        .send()
        .unwrap();
    assert_eq!(listed.status(), 200, "the target holds the subscription");
    let gone = http
        .get(format!("{}/plans/webhooks", pair.a.url))
        .bearer_auth(common::webhooks_token(TENANT))
        .send()
        .unwrap();
    assert_eq!(gone.status(), 421, "the source answers for it no more");
    let total = rx.deliveries("/hook/m").len();
    eprintln!("{} events, {total} deliveries", want.len());
}

/// A tenant that requires approval requires it on its new shard, and its proposals (open,
/// with their approvals) go on there: a move never turns the rule off in silence. A webhook
/// whose receiver refused the steps taken before the move gets them from the new shard, then
/// the steps taken there, each once.
#[test]
fn a_move_carries_the_approval_rule_and_the_proposals() {
    let hooks = "[webhooks]\nallow_http = true\nallow_private_networks = true\nretry_schedule_secs = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\ncpu_share = 0\n";
    let pair = Pair::start_full(true, "", hooks);
    let rx = common::receiver::Receiver::start();
    rx.set_mode("/hook/p", common::receiver::Mode::Status(500));
    let http = reqwest::blocking::Client::new();
    let created: Value = http
        .post(format!("{}/plans/webhooks", pair.a.url))
        .bearer_auth(common::webhooks_token(TENANT))
        .json(&json!({"url": rx.url("/hook/p"), "events": ["proposal.opened", "proposal.approved", "proposal.applied"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    rx.set_secret("/hook/p", created["secret"].as_str().unwrap());
    let writer = &["jit.integrations.write", "jit.preferences.write"];
    let approver = &["planfiles.proposals.approve"];
    let opened = http
        .post(format!("{}/plans/proposals", pair.a.url))
        .bearer_auth(common::token_as(TENANT, "ann", writer))
        .json(&json!({"integration-file": {"content": {"aws": []}}, "title": "t"}))
        .send()
        .unwrap();
    assert_eq!(opened.status(), 201);
    let commit = opened.json::<Value>().unwrap()["commit"].clone();
    let approved = http
        .post(format!("{}/plans/proposals/1/approve", pair.a.url))
        .bearer_auth(common::token_as(TENANT, "bo", approver))
        .json(&json!({"commit": commit}))
        .send()
        .unwrap();
    assert_eq!(approved.status(), 200);
    let set = planfiles(&pair.a.dir)
        .args(["tenant", "set", TENANT, "--require-approval", "2"])
        .output()
        .unwrap();
    assert!(set.status.success(), "{set:?}");
    let mut args = pair.move_args();
    args.push("--routed".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (child, _) = pair.command(&args);
    let (ok, err) = finish(child);
    assert!(ok, "the move did not finish: {err}");
    assert_eq!(pair.placement(&pair.b), "served");
    let put = http
        .put(format!("{}/plans/integration-file", pair.b.url))
        .bearer_auth(common::token(TENANT, common::ALL))
        .json(&json!({"content": {"direct": 1}}))
        .send()
        .unwrap();
    assert_eq!(put.status(), 403, "a direct write on the new shard");
    let p: Value = http
        .get(format!("{}/plans/proposals/1", pair.b.url))
        .bearer_auth(common::token(TENANT, common::ALL))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        (p["state"].as_str(), p["approvals_required"].as_u64()),
        (Some("open"), Some(2)),
        "{p}"
    );
    assert_eq!(p["approvals"][0]["by"]["sub"], "bo", "{p}");
    assert!(
        rx.deliveries("/hook/p").iter().all(|d| d.answered == 500),
        "the steps before the move were refused"
    );
    rx.set_mode("/hook/p", common::receiver::Mode::Ok);
    let approved = http
        .post(format!("{}/plans/proposals/1/approve", pair.b.url))
        .bearer_auth(common::token_as(TENANT, "cy", approver))
        .json(&json!({"commit": commit}))
        .send()
        .unwrap();
    assert_eq!(approved.status(), 200);
    let applied = http
        .post(format!("{}/plans/proposals/1/apply", pair.b.url))
        .bearer_auth(common::token_as(TENANT, "ann", writer))
        .send()
        .unwrap();
    assert_eq!(applied.status(), 200, "{:?}", applied.text());
    let deadline = Instant::now() + Duration::from_secs(60);
    let delivered = loop {
        let got: Vec<(String, String)> = rx
            .deliveries("/hook/p")
            .iter()
            .filter(|d| d.answered == 200)
            .map(|d| {
                assert!(d.verified);
                let by = d.body["data"]["by"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                (d.kind().to_owned(), by)
            })
            .collect();
        if got.len() >= 4 || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let want: Vec<(String, String)> = [
        ("proposal.opened", "ann"),
        ("proposal.approved", "bo"),
        ("proposal.approved", "cy"),
        ("proposal.applied", "ann"),
    ]
    .iter()
    .map(|(k, b)| (k.to_string(), b.to_string()))
    .collect();
    assert_eq!(delivered, want);
    std::thread::sleep(Duration::from_secs(2));
    let twice = rx
        .deliveries("/hook/p")
        .iter()
        .filter(|d| d.answered == 200)
        .count();
    assert_eq!(twice, 4, "each step once");
}

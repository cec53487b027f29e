//! Power-loss tests: the real binary over `PowerFs` (a FUSE file system that drops what was not synced), the power cut at random moments under write load and at every step of tenant creation, seeding and repacking. After each cut: every acknowledged commit is on `main`, every file holds its last acknowledged write or a later one, every repository passes `git fsck --strict`, and the service starts again and takes writes.
//!
//! They need root and `/dev/fuse` (CI has both); without them each test prints why it is
//! skipped. `POWERCUT_ROUNDS=N` sets the rounds of each load scenario (default 5), and
//! `cargo test --test power_loss -- --nocapture` prints the table of what was acknowledged
//! and lost.
#[path = "../common/mod.rs"]
mod common;
mod fs;

use common::process::{planfiles, serve, Server};
use fs::{Image, PowerFs};
use rand::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why power-loss tests cannot run here, if they cannot.
fn fuse_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("mounting a FUSE file system needs root".into());
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => None,
        Err(e) => Some(format!("/dev/fuse cannot be opened: {e}")),
    }
}

macro_rules! needs_fuse {
    ($name:expr) => {
        if let Some(why) = fuse_missing() {
            eprintln!("SKIPPED power-loss test {}: {why}", $name);
            return;
        }
    };
}

/// A `PowerFs` mounted on a temporary folder.
struct Mounted {
    fs: PowerFs,
    session: Option<fuser::BackgroundSession>,
    dir: tempfile::TempDir,
}

impl Mounted {
    fn new(image: &Image, strict: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fs = PowerFs::new(image, strict);
        let mut config = fuser::Config::default();
        config.n_threads = Some(4);
        config.mount_options = vec![fuser::MountOption::FSName("powerfs".into())];
        let session = fuser::spawn_mount(fs.clone(), dir.path(), &config).expect("mount powerfs");
        Self {
            fs,
            session: Some(session),
            dir,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Unmounts (lazily: nothing may still use it after a kill) and ends the session.
    fn unmount(mut self) -> PowerFs {
        let c = std::ffi::CString::new(self.dir.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; MNT_DETACH only detaches the mount.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        if let Some(session) = self.session.take() {
            let _ = session.join();
        }
        self.fs.clone()
    }
}

/// How the service is set up on the volume.
#[derive(Clone, Copy, Debug)]
struct Setup {
    /// Directory entries dropped too unless their folder was synced.
    strict: bool,
    /// `storage.durability`.
    durability: &'static str,
    trust_syncfs: bool,
}

/// A working folder with a config for `setup`, the data dir on the volume at `mount`.
fn workdir(mount: &Path, setup: Setup, repack: usize) -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let config = format!(
        "[storage]\ndata_dir = {:?}\nseed_from = {:?}\ndurability = {:?}\ntrust_syncfs = {}\nrepack_loose_objects = {repack}\n",
        mount.join("data"),
        common::fixture_dir(),
        setup.durability,
        setup.trust_syncfs,
    );
    std::fs::write(work.path().join("config.toml"), config).unwrap();
    work
}

fn start(work: &Path, mount: &Path) -> Server {
    let data = mount.join("data");
    serve(work, &[("PLANFILES_DATA_DIR", data.to_str().unwrap())])
}

/// What a round's writers had acknowledged: per tenant, commit ids and the folder paths
/// those writes added.
#[derive(Default)]
struct Acked {
    commits: BTreeMap<String, Vec<String>>,
    folders: BTreeMap<String, Vec<String>>,
}

const TENANTS: [&str; 2] = ["acme", "globex"];
const CLIENTS: usize = 4;
/// Clients that replace acme's integration file without a sha, so that its writes queue up
/// and are committed in batches.
const BLIND: usize = 6;

/// One blind writer: PUTs the integration file of acme without a precondition until the cut.
fn blind_client(base: String, id: usize, acked: Arc<Mutex<Acked>>, stop: Arc<AtomicBool>) {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let token = common::token("acme", common::ALL);
    let url = format!("{base}/plans/integration-file");
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let put = http
            .put(&url)
            .bearer_auth(&token)
            .json(&json!({"content": {"writer": id, "n": n}}))
            .send();
        let Ok(put) = put else { return };
        let status = put.status().as_u16();
        let Ok(answer) = put.json::<Value>() else {
            return;
        };
        match status {
            200 => {
                let commit = answer["commit_sha"].as_str().unwrap().to_owned();
                let mut a = acked.lock().unwrap();
                a.commits.entry("acme".into()).or_default().push(commit);
            }
            503 => {}
            other => panic!("blind client {id}: unexpected {other}: {answer}"),
        }
    }
}

/// Batches of more than one write committed so far, from the server's metrics.
fn batches_of_several(base: &str) -> usize {
    let Ok(res) = reqwest::blocking::get(format!("{base}/metrics")) else {
        return 0;
    };
    let text = res.text().unwrap_or_default();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    (value("planfiles_write_batch_writes_count")
        - value("planfiles_write_batch_writes_bucket{le=\"1\"}")) as usize
}

/// One read-modify-write client: GET the configuration file, add a folder, PUT it with the
/// sha it read; a 409 reads again. Ends at the first transport error (the cut).
fn client(base: String, id: usize, acked: Arc<Mutex<Acked>>, stop: Arc<AtomicBool>) {
    let tenant = TENANTS[id % TENANTS.len()];
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let token = common::token(tenant, common::ALL);
    let url = format!("{base}/plans/configuration-file");
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(got) = http.get(&url).bearer_auth(&token).send() else {
            return;
        };
        let Ok(body) = got.json::<Value>() else {
            return;
        };
        let mut content = body["content"].clone();
        let folder = format!("c{id}-{}-{n}", rand::random::<u32>());
        n += 1;
        content["folders"]
            .as_array_mut()
            .expect("folders")
            .push(json!({"path": folder}));
        let put = http
            .put(&url)
            .bearer_auth(&token)
            .json(&json!({"payload": content, "file_sha": body["sha"]}))
            .send();
        let Ok(put) = put else { return };
        let status = put.status().as_u16();
        let Ok(answer) = put.json::<Value>() else {
            return;
        };
        match status {
            200 => {
                let mut a = acked.lock().unwrap();
                let commit = answer["commit_sha"].as_str().unwrap().to_owned();
                a.commits.entry(tenant.into()).or_default().push(commit);
                a.folders.entry(tenant.into()).or_default().push(folder);
            }
            409 | 503 => {}
            other => panic!("client {id}: unexpected {other}: {answer}"),
        }
    }
}

fn git(repo: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .output()
        .unwrap()
}

/// What one check of an image found.
#[derive(Default, Debug, Clone, Copy)]
struct Found {
    acknowledged: usize,
    lost: usize,
    files_behind: usize,
    fsck_bad: usize,
    /// Acknowledged commits on `main` without a good signature by the key on the image.
    unsigned: usize,
    /// Batches of several writes the server had committed just before the cut.
    batched: usize,
}

/// The image's signing key (written out under `out`): its public key line, and an
/// `allowed_signers` file that trusts it.
fn signing_key(out: &Path) -> Option<(String, PathBuf)> {
    let text = std::fs::read_to_string(out.join("data/signing_key")).ok()?;
    let signer = planfiles::signing::Signer::from_openssh(&text).ok()?;
    let ring = planfiles::signing::Keyring::new(Some(&signer), &[]).unwrap();
    let allowed = out.join("allowed_signers");
    std::fs::write(&allowed, ring.allowed_signers("planfiles@localhost")).unwrap();
    Some((signer.public_key(), allowed))
}

/// How many of `commits` lack a good signature by the key that `allowed` trusts.
fn unsigned(repo: &Path, allowed: Option<&Path>, commits: &[&String]) -> usize {
    let Some(allowed) = allowed.filter(|_| !commits.is_empty()) else {
        return commits.len();
    };
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .arg("-c")
        .arg(format!("gpg.ssh.allowedSignersFile={}", allowed.display()))
        .args(["log", "--no-walk=unsorted", "--format=%G?"])
        .args(commits)
        .output()
        .unwrap();
    let good = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| *l == "G")
        .count();
    commits.len() - good
}

/// Checks the image against what was acknowledged before the cut; with the image's signing
/// key, which must not change from one cut to the next.
fn check(image: &Image, acked: &Acked) -> (Found, Option<String>) {
    let out = tempfile::tempdir().unwrap();
    image.write_to(out.path());
    let tenants = out.path().join("data/tenants");
    let key = signing_key(out.path());
    let verify = !acked.commits.is_empty() && common::ssh_keygen_present();
    let mut found = Found::default();
    for tenant in TENANTS {
        let commits = acked.commits.get(tenant).cloned().unwrap_or_default();
        found.acknowledged += commits.len();
        let repo = tenants.join(format!("{tenant}.git"));
        let listed = git(&repo, &["rev-list", "--first-parent", "main"]);
        let on_main: BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        found.lost += commits.iter().filter(|c| !on_main.contains(*c)).count();
        let kept: Vec<&String> = commits.iter().filter(|c| on_main.contains(*c)).collect();
        if verify {
            found.unsigned += unsigned(&repo, key.as_ref().map(|(_, a)| a.as_path()), &kept);
        }
        if let Some(last) = acked.folders.get(tenant).and_then(|f| f.last()) {
            let file = git(&repo, &["show", "main:configuration.yml"]);
            if !String::from_utf8_lossy(&file.stdout).contains(last.as_str()) {
                found.files_behind += 1;
            }
        }
    }
    if tenants.is_dir() {
        for entry in std::fs::read_dir(&tenants).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "git") {
                let fsck = git(&path, &["fsck", "--strict", "--no-progress"]);
                if !fsck.status.success() {
                    eprintln!(
                        "fsck of {}: {}",
                        path.display(),
                        String::from_utf8_lossy(&fsck.stderr)
                    );
                    found.fsck_bad += 1;
                }
            }
        }
    }
    (found, key.map(|(public, _)| public))
}

/// The service on a volume after a cut: it starts, every fixture tenant answers both GETs,
/// and a write is taken.
fn serves_every_tenant(server: &Server) {
    let http = reqwest::blocking::Client::new();
    for tenant in ["acme", "globex", "initech"] {
        let token = common::token(tenant, common::ALL);
        for file in ["integration-file", "configuration-file"] {
            let res = http
                .get(server.url(&format!("/plans/{file}")))
                .bearer_auth(&token)
                .send()
                .unwrap();
            assert_eq!(res.status(), 200, "{tenant} {file} after a cut");
        }
    }
    let res = http
        .put(server.url("/plans/integration-file"))
        .bearer_auth(common::token("initech", common::ALL))
        .json(&json!({"content": {"restarted": rand::random::<u32>().to_string()}}))
        .send()
        .unwrap();
    assert_eq!(res.status(), 200, "a write after a cut");
}

/// One round of load on a volume from `image`, ended by a power cut at a random moment:
/// what the writers acknowledged, checked against what survived, that image and its
/// signing key.
fn load_round(image: &Image, setup: Setup, first: bool) -> (Found, Image, Option<String>) {
    let mounted = Mounted::new(image, setup.strict);
    let work = workdir(mounted.path(), setup, 30);
    let mut server = start(work.path(), mounted.path());
    if first {
        let log = server.log.lock().unwrap().join("\n");
        let expect = if setup.trust_syncfs { "group" } else { "fsync" };
        assert!(
            log.contains("\"filesystem\":\"fuse\"")
                && log.contains(&format!("\"durability\":\"{expect}\"")),
            "the choice is logged with the file system: {log}"
        );
    } else {
        serves_every_tenant(&server);
    }
    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (base, acked, stop) = (server.addr.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || client(base, id, acked, stop))
        })
        .collect();
    clients.extend((0..BLIND).map(|id| {
        let (base, acked, stop) = (server.addr.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || blind_client(base, id, acked, stop))
    }));
    // The first writes of a fresh server on FUSE can be slow on a loaded machine: the cut
    // comes at a random moment once some are acknowledged.
    let started = std::time::Instant::now();
    while acked.lock().unwrap().commits.values().all(Vec::is_empty)
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(rand::rng().random_range(200..1200)));
    let batched = batches_of_several(&server.addr);
    // The cut: the server stops where it is, what is durable now is what survives, and the
    // process dies. Answers already on the wire still count as acknowledged.
    server.signal("STOP");
    let cut = mounted.fs.cut_now();
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    let panicked = clients
        .into_iter()
        .map(|c| c.join())
        .filter(Result::is_err)
        .count();
    if panicked > 0 {
        let log = server.log.lock().unwrap();
        let errors: Vec<_> = log
            .iter()
            .filter(|l| l.contains("ERROR") || l.contains("\"level\":\"error\""))
            .collect();
        panic!("{panicked} client(s) panicked; the server's errors: {errors:#?}");
    }
    mounted.unmount();
    let (found, key) = check(&cut, &acked.lock().unwrap());
    (Found { batched, ..found }, cut, key)
}

/// Rounds of load, each ended by a power cut; starts on an empty volume, so the service
/// makes the data dir and seeds it in the first round. Each later round first checks that
/// the service starts on what the cut left, serves every tenant and takes a write.
fn load_rounds(setup: Setup, rounds: usize) -> Found {
    let mut total = Found::default();
    let mut image = Image::default();
    let mut first_key = None;
    for round in 0..rounds {
        let (found, cut, key) = load_round(&image, setup, round == 0);
        // The key made at the first start outlives every cut (else the commits before a
        // cut would no longer verify).
        assert!(key.is_some(), "round {round}: no signing key on the volume");
        assert_eq!(
            first_key.get_or_insert_with(|| key.clone()),
            &key,
            "round {round}: the signing key changed"
        );
        eprintln!("  round {round}: {found:?}");
        total.acknowledged += found.acknowledged;
        total.lost += found.lost;
        total.files_behind += found.files_behind;
        total.fsck_bad += found.fsck_bad;
        total.unsigned += found.unsigned;
        total.batched += found.batched;
        image = cut;
    }
    let mounted = Mounted::new(&image, setup.strict);
    let work = workdir(mounted.path(), setup, 30);
    let server = start(work.path(), mounted.path());
    serves_every_tenant(&server);
    drop(server);
    mounted.unmount();
    total
}

fn rounds() -> usize {
    std::env::var("POWERCUT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
}

fn row(model: &str, setup: Setup, found: &Found) {
    eprintln!(
        "| {model} | {}{} | {} | {} | {} | {} | {} | {} |",
        setup.durability,
        if setup.trust_syncfs {
            " (trust_syncfs)"
        } else {
            ""
        },
        found.acknowledged,
        found.lost,
        found.files_behind,
        found.fsck_bad,
        found.unsigned,
        found.batched
    );
}

#[test]
fn auto_durability_on_fuse_keeps_every_acknowledged_write_through_power_cuts() {
    needs_fuse!("auto_durability_on_fuse");
    for (model, strict, durability) in [
        ("file data dropped unless fsynced", false, "auto"),
        (
            "also directory entries dropped unless their folder was fsynced",
            true,
            "auto",
        ),
        ("the same", true, "fsync"),
    ] {
        let setup = Setup {
            strict,
            durability,
            trust_syncfs: false,
        };
        let found = load_rounds(setup, rounds());
        row(model, setup, &found);
        assert!(found.acknowledged > 0, "{model}: nothing was written");
        assert_eq!(
            found.lost, 0,
            "{model} {durability}: acknowledged commits lost"
        );
        assert_eq!(found.files_behind, 0, "{model} {durability}: files behind");
        assert_eq!(found.fsck_bad, 0, "{model} {durability}: fsck");
        assert_eq!(
            found.unsigned, 0,
            "{model} {durability}: acknowledged commits without a good signature"
        );
        assert!(
            found.batched > 0,
            "{model} {durability}: no batch of several writes before a cut"
        );
    }
}

/// The harness sees a loss when there is one: group commit forced onto the FUSE volume
/// (its `syncfs` never reaches the daemon) loses acknowledged writes.
#[test]
fn group_commit_forced_onto_fuse_loses_writes_and_the_check_sees_it() {
    needs_fuse!("group_commit_forced_onto_fuse");
    let setup = Setup {
        strict: false,
        durability: "group",
        trust_syncfs: true,
    };
    let (found, _, _) = load_round(&Image::default(), setup, true);
    row("file data dropped unless fsynced", setup, &found);
    assert!(found.acknowledged > 0);
    assert!(
        found.lost > 0,
        "syncfs does not reach a FUSE daemon, so acknowledged writes must be lost: {found:?}"
    );
}

#[test]
fn explicit_group_on_fuse_refuses_to_start() {
    needs_fuse!("explicit_group_on_fuse_refuses_to_start");
    let mounted = Mounted::new(&Image::default(), false);
    let setup = Setup {
        strict: false,
        durability: "group",
        trust_syncfs: false,
    };
    let work = workdir(mounted.path(), setup, 0);
    let out = planfiles(work.path())
        .env("PLANFILES_DATA_DIR", mounted.path().join("data"))
        .arg("serve")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("fuse") && stderr.contains("trust_syncfs"),
        "{stderr}"
    );
    drop(mounted.unmount());
}

/// Runs `command` on a volume from `image`, with the power cut before operation `cut` (or
/// not at all), and returns what survived.
fn cut_during(
    image: &Image,
    strict: bool,
    cut: Option<u64>,
    command: impl FnOnce(&Path),
) -> (Image, u64) {
    let mounted = Mounted::new(image, strict);
    if let Some(n) = cut {
        mounted.fs.cut_before(n);
    }
    let before = mounted.fs.ops();
    command(mounted.path());
    let ops = mounted.fs.ops() - before;
    let fs = mounted.unmount();
    (fs.taken().unwrap_or_else(|| fs.durable()), ops)
}

/// Cut points spread over `1..=ops`: every one up to 40, else 40 evenly spaced ones.
fn cut_points(ops: u64) -> Vec<u64> {
    if ops <= 40 {
        return (1..=ops).collect();
    }
    (0..40).map(|i| 1 + i * (ops - 1) / 39).collect()
}

fn strict_fsync() -> Setup {
    Setup {
        strict: true,
        durability: "auto",
        trust_syncfs: false,
    }
}

/// A seeded volume: the service started once on an empty one and was stopped.
fn seeded(setup: Setup) -> Image {
    cut_during(&Image::default(), setup.strict, None, |mount| {
        let work = workdir(mount, setup, 0);
        let mut server = start(work.path(), mount);
        server.stop("TERM");
    })
    .0
}

fn heads(tenants: &Path) -> BTreeMap<String, String> {
    let mut heads = BTreeMap::new();
    for entry in std::fs::read_dir(tenants).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(tenant) = name.strip_suffix(".git") {
            let out = git(&path, &["rev-parse", "main"]);
            heads.insert(
                tenant.to_owned(),
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            );
        }
    }
    heads
}

#[test]
fn a_seed_cut_at_any_step_is_finished_by_the_next_start() {
    needs_fuse!("a_seed_cut_at_any_step");
    let setup = strict_fsync();
    let fixture = heads(&common::fixture_dir().join("tenants"));
    let seed = |mount: &Path| {
        let work = workdir(mount, setup, 0);
        let mut server = start(work.path(), mount);
        server.stop("TERM");
    };
    let (_, ops) = cut_during(&Image::default(), true, None, seed);
    for cut in cut_points(ops) {
        let (image, _) = cut_during(&Image::default(), true, Some(cut), seed);
        // The next start finishes (or redoes) the seed: every tenant whole, as in the fixture.
        let (image, _) = cut_during(&image, true, None, seed);
        let out = tempfile::tempdir().unwrap();
        image.write_to(out.path());
        let tenants = out.path().join("data/tenants");
        assert_eq!(heads(&tenants), fixture, "cut before op {cut} of {ops}");
        let empty = Acked::default();
        assert_eq!(check(&image, &empty).0.fsck_bad, 0, "cut before op {cut}");
    }
}

#[test]
fn tenant_create_cut_at_any_step_leaves_no_tenant_or_a_whole_one() {
    needs_fuse!("tenant_create_cut_at_any_step");
    let setup = strict_fsync();
    let base = seeded(setup);
    let create = |mount: &Path| {
        let work = workdir(mount, setup, 0);
        let out = planfiles(work.path())
            .env("PLANFILES_DATA_DIR", mount.join("data"))
            .args(["tenant", "create", "newco", "--source-hosting"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (after, ops) = cut_during(&base, true, None, create);
    let whole = |image: &Image, label: &str| -> bool {
        let out = tempfile::tempdir().unwrap();
        image.write_to(out.path());
        let repo = out.path().join("data/tenants/newco.git");
        if !repo.exists() {
            return false;
        }
        let fsck = git(&repo, &["fsck", "--strict", "--no-progress"]);
        assert!(
            fsck.status.success(),
            "{label}: {}",
            String::from_utf8_lossy(&fsck.stderr)
        );
        let files = git(&repo, &["ls-tree", "--name-only", "main"]);
        assert_eq!(
            String::from_utf8_lossy(&files.stdout),
            "configuration.yml\nintegrations.yml\n",
            "{label}"
        );
        let flag = git(&repo, &["config", "planfiles.sourcehosting"]);
        assert_eq!(
            String::from_utf8_lossy(&flag.stdout),
            "true\n",
            "{label}: the flag"
        );
        true
    };
    assert!(whole(&after, "no cut"), "an acknowledged create is durable");
    for cut in cut_points(ops) {
        let label = format!("cut before op {cut} of {ops}");
        let (image, _) = cut_during(&base, true, Some(cut), create);
        let existed = whole(&image, &label);
        // Creating it again works, or says it exists; either way it is whole after.
        let (again, _) = cut_during(&image, true, None, |mount| {
            let work = workdir(mount, setup, 0);
            let out = planfiles(work.path())
                .env("PLANFILES_DATA_DIR", mount.join("data"))
                .args(["tenant", "create", "newco", "--source-hosting"])
                .output()
                .unwrap();
            assert_eq!(
                out.status.success(),
                !existed,
                "{label}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        });
        assert!(whole(&again, &label));
    }
}

#[test]
fn a_repack_cut_at_any_step_keeps_every_object() {
    needs_fuse!("a_repack_cut_at_any_step");
    let setup = strict_fsync();
    // A tenant with loose objects: 40 writes with upkeep off.
    let (base, _) = cut_during(&seeded(setup), true, None, |mount| {
        let work = workdir(mount, setup, 0);
        let mut server = start(work.path(), mount);
        let http = reqwest::blocking::Client::new();
        for i in 0..40 {
            let res = http
                .put(server.url("/plans/integration-file"))
                .bearer_auth(common::token("globex", common::ALL))
                .json(&json!({"content": {"n": i.to_string()}}))
                .send()
                .unwrap();
            assert_eq!(res.status(), 200);
        }
        server.stop("TERM");
    });
    let history = |image: &Image| -> (String, usize, bool) {
        let out = tempfile::tempdir().unwrap();
        image.write_to(out.path());
        let repo = out.path().join("data/tenants/globex.git");
        let head = String::from_utf8_lossy(&git(&repo, &["rev-parse", "main"]).stdout)
            .trim()
            .to_owned();
        let count = String::from_utf8_lossy(&git(&repo, &["rev-list", "main"]).stdout)
            .lines()
            .count();
        let fsck = git(&repo, &["fsck", "--strict", "--no-progress"]);
        if !fsck.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&fsck.stderr));
        }
        (head, count, fsck.status.success())
    };
    let expected = history(&base);
    assert!(expected.1 >= 40 && expected.2);
    // In both modes: with group commit forced (libgit2 then syncs nothing itself, and syncfs
    // does not reach this volume) the repack's own syncs are all that keeps the pack.
    for (durability, trust_syncfs) in [("auto", false), ("group", true)] {
        let mode = Setup {
            strict: true,
            durability,
            trust_syncfs,
        };
        let maintain = |mount: &Path| {
            let work = workdir(mount, mode, 0);
            let out = planfiles(work.path())
                .env("PLANFILES_DATA_DIR", mount.join("data"))
                .args(["maintain", "globex"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let (packed, ops) = cut_during(&base, true, None, maintain);
        assert_eq!(history(&packed), expected, "{durability}");
        for cut in cut_points(ops) {
            let (image, _) = cut_during(&base, true, Some(cut), maintain);
            assert_eq!(
                history(&image),
                expected,
                "{durability}: cut before op {cut} of {ops}"
            );
        }
    }
}

/// `tenant set` has reached the disk when it returns (libgit2 never fsyncs a config).
#[test]
fn a_flag_change_is_durable_once_the_command_returns() {
    needs_fuse!("a_flag_change_is_durable");
    let setup = strict_fsync();
    let (image, _) = cut_during(&seeded(setup), true, None, |mount| {
        let work = workdir(mount, setup, 0);
        let out = planfiles(work.path())
            .env("PLANFILES_DATA_DIR", mount.join("data"))
            .args(["tenant", "set", "globex", "--source-hosting", "on"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let out = tempfile::tempdir().unwrap();
    image.write_to(out.path());
    let flag = git(
        &out.path().join("data/tenants/globex.git"),
        &["config", "planfiles.sourcehosting"],
    );
    assert_eq!(String::from_utf8_lossy(&flag.stdout), "true\n");
}

/// Webhook cursors through power cuts on the strict volume: a subscription on acme, blind
/// writers, a cut at a random moment in each of three rounds, the service started again on
/// what survived each time. In the end every commit of `main`'s first-parent line after the
/// subscription has reached the receiver (signed), each event's first delivery in `main`'s
/// order; an event announced for a commit a cut took back (not yet acknowledged to its
/// writer) is followed by a `main.reset`.
#[test]
fn webhook_deliveries_resume_after_power_cuts_with_nothing_skipped() {
    needs_fuse!("webhook_deliveries_resume_after_power_cuts");
    let rx = common::receiver::Receiver::start();
    rx.set_mode(
        "/hook/p",
        common::receiver::Mode::Slow(Duration::from_millis(3)),
    );
    let setup = Setup {
        strict: true,
        durability: "auto",
        trust_syncfs: false,
    };
    let hooks = "[webhooks]\nallow_http = true\nallow_private_networks = true\nretry_schedule_secs = [1, 1, 1, 1, 1, 1, 1, 1]\n";
    let mount_and_start = |image: &Image| {
        let mounted = Mounted::new(image, setup.strict);
        let work = workdir(mounted.path(), setup, 30);
        let config = work.path().join("config.toml");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(hooks);
        std::fs::write(&config, text).unwrap();
        let server = start(work.path(), mounted.path());
        (mounted, work, server)
    };
    let (mounted, work, server) = mount_and_start(&Image::default());
    let created: Value = reqwest::blocking::Client::new()
        .post(server.url("/plans/webhooks"))
        .bearer_auth(common::webhooks_token("acme"))
        .json(&json!({"url": rx.url("/hook/p")}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    rx.set_secret("/hook/p", created["secret"].as_str().unwrap());
    let repo = |m: &Mounted| m.path().join("data/tenants/acme.git");
    let start_commit = String::from_utf8(git(&repo(&mounted), &["rev-parse", "main"]).stdout)
        .unwrap()
        .trim()
        .to_owned();
    let mut state = (mounted, work, server);
    let mut image;
    for round in 0..3 {
        let (mounted, _work, mut server) = state;
        let acked = Arc::new(Mutex::new(Acked::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|id| {
                let (base, acked, stop) = (server.addr.clone(), acked.clone(), stop.clone());
                std::thread::spawn(move || blind_client(base, id, acked, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rand::rng().random_range(300..900)));
        server.signal("STOP");
        let cut = mounted.fs.cut_now();
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            let _ = w.join();
        }
        mounted.unmount();
        eprintln!(
            "  round {round}: {} deliveries so far",
            rx.deliveries("/hook/p").len()
        );
        image = cut;
        state = mount_and_start(&image);
    }
    let (mounted, _work, server) = state;
    let want = common::integration_event_ids(&repo(&mounted), "acme", &start_commit);
    assert!(want.len() > 10, "writes landed: {}", want.len());
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let got = loop {
        let got = rx.deliveries("/hook/p");
        let delivered: BTreeSet<&str> = got.iter().map(|d| d.id.as_str()).collect();
        if want.iter().all(|w| delivered.contains(w.as_str()))
            || std::time::Instant::now() > deadline
        {
            break got;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(server);
    mounted.unmount();
    assert!(
        got.iter().all(|d| d.verified),
        "a signature did not check out"
    );
    let wanted: BTreeSet<&str> = want.iter().map(String::as_str).collect();
    let mut firsts: Vec<&str> = Vec::new();
    let mut phantoms = 0;
    for (i, d) in got.iter().enumerate() {
        if d.kind() == "main.reset" || firsts.contains(&d.id.as_str()) {
            continue;
        }
        if wanted.contains(d.id.as_str()) {
            firsts.push(&d.id);
        } else {
            phantoms += 1;
            assert!(
                got[i..].iter().any(|later| later.kind() == "main.reset"),
                "{} was announced, a cut took it back, and no main.reset followed",
                d.id
            );
        }
    }
    let differs = firsts.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        firsts.len() == want.len() && differs.is_none(),
        "{} of {} events delivered, first out of order at {differs:?}",
        firsts.len(),
        want.len()
    );
    eprintln!(
        "webhooks through 3 power cuts: {} events, {} deliveries, {phantoms} announced then taken back by a cut",
        want.len(),
        got.len()
    );
}

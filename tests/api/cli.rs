//! The `planfiles` binary: tenant admin, token minting, config errors, and `serve` itself.
use crate::common;

use common::process::{planfiles, serve};
use common::{fixture_dir, git_in};
use serde_json::Value;
use std::path::Path;

fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = planfiles(dir).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tenant_create_makes_a_bare_repo_with_one_initial_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(
        dir.path(),
        &["tenant", "create", "newco", "--source-hosting"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("created newco"));
    let repo = dir.path().join("data/tenants/newco.git");
    assert_eq!(
        git_in(&repo, &["rev-parse", "--is-bare-repository"]),
        "true"
    );
    assert_eq!(git_in(&repo, &["symbolic-ref", "HEAD"]), "refs/heads/main");
    assert_eq!(git_in(&repo, &["rev-list", "--count", "main"]), "1");
    assert_eq!(git_in(&repo, &["show", "main:integrations.yml"]), "{}");
    assert_eq!(
        git_in(&repo, &["show", "main:configuration.yml"]),
        "folders: []"
    );
    assert_eq!(
        git_in(&repo, &["config", "planfiles.sourcehosting"]),
        "true"
    );
    git_in(&repo, &["fsck", "--strict", "--no-dangling"]);

    // Creating it again fails and changes nothing.
    let head = git_in(&repo, &["rev-parse", "main"]);
    let (code, _, err) = run(dir.path(), &["tenant", "create", "newco"]);
    assert_ne!(code, 0);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(git_in(&repo, &["rev-parse", "main"]), head);
    assert_eq!(
        git_in(&repo, &["config", "planfiles.sourcehosting"]),
        "true"
    );
}

#[test]
fn invalid_tenant_ids_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        "../x",
        "a/b",
        "x.git",
        "X.GIT",
        "-a",
        "a..b",
        &"a".repeat(65),
    ] {
        let (code, _, err) = run(dir.path(), &["tenant", "create", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        let (code, _, _) = run(dir.path(), &["token", "--tenant", bad]);
        assert_eq!(code, 2, "{bad}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path().join("data/tenants"))
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}

/// Variables outside the service's own are never read, so bytes that are not UTF-8 there
/// change nothing; in one of the `PLANFILES_*` overrides they are a config error (exit 2)
/// that names the variable, never a panic.
#[test]
fn environment_variables_that_are_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(dir.path(), &["tenant", "create", "alpha"]).0, 0);
    let bytes = std::ffi::OsStr::from_bytes(b"x\xffy");
    for other in ["X", "LANG", "PLANFILES_UNKNOWN"] {
        let out = planfiles(dir.path())
            .env(other, bytes)
            .args(["tenant", "list"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{other}: {err}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("alpha"),
            "{other}"
        );
    }
    for name in [
        "PLANFILES_BIND",
        "PLANFILES_DATA_DIR",
        "PLANFILES_JWT_SECRET",
        "PLANFILES_LOG",
        "PLANFILES_LOG_FORMAT",
    ] {
        for args in [&["tenant", "list"][..], &["token", "--tenant", "alpha"]] {
            let out = planfiles(dir.path())
                .env(name, bytes)
                .args(args)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {err}");
            assert!(
                err.contains(name) && err.contains("not valid UTF-8"),
                "{name}: {err}"
            );
            assert!(!err.contains("panicked"), "{name}: {err}");
        }
    }
}

#[test]
fn tenant_set_and_list() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(dir.path(), &["tenant", "create", "alpha"]).0, 0);
    assert_eq!(
        run(
            dir.path(),
            &["tenant", "create", "beta", "--source-hosting"]
        )
        .0,
        0
    );
    assert_eq!(
        run(
            dir.path(),
            &["tenant", "set", "alpha", "--source-hosting", "on"]
        )
        .0,
        0
    );
    assert_eq!(
        run(
            dir.path(),
            &["tenant", "set", "beta", "--source-hosting", "off"]
        )
        .0,
        0
    );
    let (code, out, _) = run(dir.path(), &["tenant", "list"]);
    assert_eq!(code, 0);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    let head = git_in(
        &dir.path().join("data/tenants/alpha.git"),
        &["rev-parse", "main"],
    );
    assert_eq!(rows[0][..3], ["alpha", "on", head.as_str()]);
    // The last change is the head commit's time, in RFC 3339 and UTC.
    let when = common::git_in_utc(
        &dir.path().join("data/tenants/alpha.git"),
        &[
            "log",
            "-1",
            "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
            "--format=%cd",
            "main",
        ],
    );
    assert_eq!(rows[0][3], when);
    assert_eq!(rows[1][..2], ["beta", "off"]);
    let (code, _, _) = run(
        dir.path(),
        &["tenant", "set", "ghost", "--source-hosting", "on"],
    );
    assert_ne!(code, 0);
}

#[test]
fn token_mints_a_verifiable_hs256_token() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(
        dir.path(),
        &[
            "token",
            "--tenant",
            "acme",
            "--permission",
            "jit.preferences.read",
            "--sub",
            "ci",
            "--ttl",
            "120",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let token = out.trim();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    // Verify the signature independently.
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(common::SECRET.as_bytes()).unwrap();
    mac.update(format!("{}.{}", parts[0], parts[1]).as_bytes());
    mac.verify_slice(&B64.decode(parts[2]).unwrap())
        .expect("signature");
    let header: Value = serde_json::from_slice(&B64.decode(parts[0]).unwrap()).unwrap();
    let claims: Value = serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(header["alg"], "HS256");
    assert_eq!(claims["tenant_id"], "acme");
    assert_eq!(
        claims["permissions"],
        serde_json::json!(["jit.preferences.read"])
    );
    assert_eq!(claims["sub"], "ci");
    let exp = claims["exp"].as_u64().unwrap();
    assert!(exp > common::now() + 100 && exp <= common::now() + 121);
}

#[test]
fn a_missing_explicit_config_file_is_an_error_and_no_file_means_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let out = planfiles(dir.path())
        .args(["--config", "/nonexistent/planfiles.toml", "tenant", "list"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/planfiles.toml"));
    let out = planfiles(dir.path())
        .env("PLANFILES_CONFIG", "/nonexistent/x.toml")
        .args(["tenant", "list"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    // No config.toml in the working directory: built-in defaults.
    assert_eq!(run(dir.path(), &["tenant", "list"]).0, 0);
}

#[tokio::test]
async fn serve_seeds_an_empty_data_dir_and_sees_tenant_changes_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_dir();
    let config = dir.path().join("planfiles.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\nseed_from = {:?}\n",
            fixture.display().to_string()
        ),
    )
    .unwrap();
    let server = serve(
        dir.path(),
        &[("PLANFILES_CONFIG", config.to_str().unwrap())],
    );
    for tenant in ["acme", "globex", "initech"] {
        assert!(
            dir.path()
                .join(format!("data/tenants/{tenant}.git"))
                .is_dir(),
            "{tenant} not seeded"
        );
    }
    // A second process on the same data dir, as behind a load balancer.
    let second = serve(
        dir.path(),
        &[("PLANFILES_CONFIG", config.to_str().unwrap())],
    );
    let client = reqwest::Client::new();
    let t = common::token("globex", common::ALL);
    let put = |addr: &str, content: i32, sha: String| {
        client
            .put(format!("{addr}/plans/integration-file"))
            .bearer_auth(&t)
            .json(&serde_json::json!({"content": {"a": content}, "file_sha": sha}))
            .send()
    };
    let repo = dir.path().join("data/tenants/globex.git");
    let sha = || git_in(&repo, &["rev-parse", "main:integrations.yml"]);
    for addr in [&server.addr, &second.addr] {
        let res = put(addr, 0, sha()).await.unwrap();
        assert_eq!(res.status(), 400, "{addr}: file_sha before source hosting");
    }
    assert_eq!(
        run(
            dir.path(),
            &["tenant", "set", "globex", "--source-hosting", "on"]
        )
        .0,
        0
    );
    for (n, addr) in [&server.addr, &second.addr].into_iter().enumerate() {
        let res = put(addr, n as i32 + 1, sha()).await.unwrap();
        assert_eq!(res.status(), 200, "{addr}: file_sha with source hosting on");
    }
    // A read from one process sees a write made through the other at once, even right after
    // it read (and cached) the file itself.
    let read = |addr: String| {
        let client = client.clone();
        let t = t.clone();
        async move {
            let v: Value = client
                .get(format!("{addr}/plans/integration-file"))
                .bearer_auth(&t)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["content"].clone()
        }
    };
    for n in 10..15 {
        read(server.addr.clone()).await;
        assert_eq!(put(&second.addr, n, sha()).await.unwrap().status(), 200);
        assert_eq!(read(server.addr.clone()).await, serde_json::json!({"a": n}));
    }
    assert_eq!(
        run(
            dir.path(),
            &["tenant", "set", "globex", "--source-hosting", "off"]
        )
        .0,
        0
    );
    for addr in [&server.addr, &second.addr] {
        assert_eq!(
            put(addr, 9, sha()).await.unwrap().status(),
            400,
            "{addr}: off again"
        );
    }

    // A tenant created while the server runs is served at once.
    assert_eq!(run(dir.path(), &["tenant", "create", "late"]).0, 0);
    let res = client
        .get(format!("{}/plans/configuration-file", server.addr))
        .bearer_auth(common::token("late", &["jit.preferences.read"]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["content"], serde_json::json!({"folders": []}));
}

/// One unreadable repository is reported, and the other tenants are still listed and
/// repacked; the exit status says that something failed.
#[test]
fn list_and_maintain_go_on_past_a_broken_repository() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(dir.path(), &["tenant", "create", "alpha"]).0, 0);
    assert_eq!(run(dir.path(), &["tenant", "create", "gamma"]).0, 0);
    // A folder named like a tenant that is no git repository.
    std::fs::create_dir_all(dir.path().join("data/tenants/beta.git/objects")).unwrap();
    let (code, out, err) = run(dir.path(), &["tenant", "list"]);
    assert_eq!(code, 1);
    let tenants: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(tenants, ["alpha", "beta", "gamma"], "{out}");
    assert!(
        out.contains("(unreadable)") && err.contains("beta"),
        "{out}{err}"
    );
    let (code, out, err) = run(dir.path(), &["maintain"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("alpha: ") && out.contains("gamma: "), "{out}");
    assert!(err.contains("beta"), "{err}");
    // One tenant by name: its own answer.
    assert_eq!(run(dir.path(), &["maintain", "alpha"]).0, 0);
    assert_ne!(run(dir.path(), &["maintain", "beta"]).0, 0);
}

/// Runs `planfiles serve` with `env` and returns its exit code and stderr, or `None` if it
/// was still running (serving) after a few seconds, when it is killed.
fn serve_exit(dir: &Path, env: &[(&str, &str)]) -> Option<(i32, String)> {
    use std::io::Read;
    let mut cmd = planfiles(dir);
    cmd.env("PLANFILES_LOG_FORMAT", "json")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.arg("serve").spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    Some((code.unwrap_or(-1), err))
}

/// The lines of a JSON log that are warnings mentioning `needle`.
fn warnings_about(log: &[String], needle: &str) -> usize {
    log.iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["level"] == "WARN" && v.to_string().contains(needle))
        .count()
}

/// On an address other hosts can reach, `serve` refuses the demo secret and any HS256
/// secret shorter than 32 bytes: exit 2, naming the variable to set. Nothing listens.
#[test]
fn serve_refuses_a_weak_secret_on_a_reachable_address() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("reachable.toml");
    std::fs::write(&config, "[server]\nbind = \"0.0.0.0:0\"\n").unwrap();
    let config = config.to_str().unwrap();
    let demo = "planfiles-demo-secret-change-me";
    let short = "k".repeat(31);
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "demo secret on 0.0.0.0",
            vec![
                ("PLANFILES_BIND", "0.0.0.0:0"),
                ("PLANFILES_JWT_SECRET", demo),
            ],
        ),
        (
            "31-byte secret on 0.0.0.0",
            vec![
                ("PLANFILES_BIND", "0.0.0.0:0"),
                ("PLANFILES_JWT_SECRET", &short),
            ],
        ),
        (
            "the test suite's 28-byte secret on [::]",
            vec![("PLANFILES_BIND", "[::]:0")],
        ),
        (
            "demo secret on a LAN address",
            vec![
                ("PLANFILES_BIND", "192.0.2.1:0"),
                ("PLANFILES_JWT_SECRET", demo),
            ],
        ),
        (
            "bind from the config file",
            vec![("PLANFILES_CONFIG", config), ("PLANFILES_JWT_SECRET", demo)],
        ),
    ];
    for (name, env) in cases {
        let (code, err) = serve_exit(dir.path(), &env).unwrap_or_else(|| panic!("{name}: served"));
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains("PLANFILES_JWT_SECRET"), "{name}: {err}");
        assert!(!err.contains("planfiles listening"), "{name}: {err}");
    }
}

/// On loopback a weak secret serves, with one warning line; a 32-byte secret, or RS256
/// (which has no secret), serves on any address without that warning.
#[test]
fn serve_warns_about_a_weak_secret_on_loopback_and_accepts_strong_ones() {
    let dir = tempfile::tempdir().unwrap();
    let demo = "planfiles-demo-secret-change-me";
    for bind in ["127.0.0.1:0", "localhost:0"] {
        let server = serve(
            dir.path(),
            &[("PLANFILES_BIND", bind), ("PLANFILES_JWT_SECRET", demo)],
        );
        let log = server.log.lock().unwrap().clone();
        assert_eq!(
            warnings_about(&log, "PLANFILES_JWT_SECRET"),
            1,
            "{bind}: {log:?}"
        );
    }
    let strong = "s".repeat(32);
    let rs256 = dir.path().join("rs256.toml");
    std::fs::write(
        &rs256,
        format!(
            "[auth]\nalgorithm = \"RS256\"\npublic_key_file = {:?}\n",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/keys/rs256-public.pem")
                .display()
                .to_string()
        ),
    )
    .unwrap();
    let rs256 = rs256.to_str().unwrap();
    for (name, env) in [
        (
            "32-byte secret",
            vec![
                ("PLANFILES_BIND", "0.0.0.0:0"),
                ("PLANFILES_JWT_SECRET", &strong),
            ],
        ),
        (
            "RS256",
            vec![("PLANFILES_BIND", "0.0.0.0:0"), ("PLANFILES_CONFIG", rs256)],
        ),
    ] {
        let server = serve(dir.path(), &env);
        let log = server.log.lock().unwrap().clone();
        assert_eq!(
            warnings_about(&log, "PLANFILES_JWT_SECRET"),
            0,
            "{name}: {log:?}"
        );
    }
}

/// A config file that does not parse is reported by line and column, without the text of
/// the line that holds the secret.
#[test]
fn a_broken_config_file_does_not_print_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "Hq7wZ3nV8pT2rK6yL4mB9cX1dF5gJ0sA";
    let path = dir.path().join("broken.toml");
    for text in [
        format!("[server]\nbind = \"127.0.0.1:0\"\n[auth]\nsecret = \"{secret}\n"),
        format!("[auth]\nsecret = {secret}\n"),
        format!("[auth]\nsecret = \"{secret}\" ops\n"),
        "[auth]\nsecret = 83746592018273645\n".to_owned(),
    ] {
        std::fs::write(&path, &text).unwrap();
        let config = [("PLANFILES_CONFIG", path.to_str().unwrap())];
        let out = planfiles(dir.path())
            .envs(config)
            .args(["tenant", "list"])
            .output()
            .unwrap();
        let listed = (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        let served = serve_exit(dir.path(), &config).expect("served with a broken config");
        for (code, err) in [listed, served] {
            assert_ne!(code, 0, "{text}");
            assert!(
                err.contains("broken.toml") && err.contains("line "),
                "{err}"
            );
            for needle in [secret, "83746592018273645", "Hq7wZ3"] {
                assert!(!err.contains(needle), "{text}: {err}");
            }
        }
    }
}

/// Writes `<repo>/config.lock` as a killed `tenant set` or `git config` would leave it, with
/// the given modification time.
fn leave_config_lock(repo: &Path, modified: std::time::SystemTime) -> std::path::PathBuf {
    let lock = repo.join("config.lock");
    let file = std::fs::File::create(&lock).unwrap();
    file.set_modified(modified).unwrap();
    lock
}

/// A `config.lock` left by a killed process does not block `tenant set` for ever: an old
/// one is removed at once, a fresh one is waited on until it goes.
#[test]
fn tenant_set_gets_past_a_config_lock_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(dir.path(), &["tenant", "create", "alpha"]).0, 0);
    let repo = dir.path().join("data/tenants/alpha.git");
    let flag = || git_in(&repo, &["config", "planfiles.sourcehosting"]);
    let set = |on: &str| {
        run(
            dir.path(),
            &["tenant", "set", "alpha", "--source-hosting", on],
        )
    };

    // Abandoned (11 minutes old: no live git transaction lasts that long): removed, and the
    // set goes through without waiting.
    let abandoned = std::time::SystemTime::now() - std::time::Duration::from_secs(660);
    let lock = leave_config_lock(&repo, abandoned);
    let started = std::time::Instant::now();
    let (code, _, err) = set("on");
    assert_eq!(code, 0, "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(flag(), "true");
    assert!(!lock.exists());

    // Fresh: another process is changing the config; the set waits for it to finish.
    let lock = leave_config_lock(&repo, std::time::SystemTime::now());
    // Taken before the thread starts: the lock goes 1.5 s after this at the earliest.
    let started = std::time::Instant::now();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        std::fs::remove_file(lock).unwrap();
    });
    let (code, _, err) = set("off");
    release.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(1500));
    assert_eq!(flag(), "false");
    git_in(&repo, &["fsck", "--strict", "--no-dangling"]);
}

/// A `config.lock` that stays fresh (its holder keeps working) is not taken away: after the
/// deadline `tenant set` fails, naming the file, and the flag is unchanged.
#[test]
fn tenant_set_fails_clearly_while_config_lock_stays_fresh() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(dir.path(), &["tenant", "create", "alpha"]).0, 0);
    let repo = dir.path().join("data/tenants/alpha.git");
    let lock = leave_config_lock(&repo, std::time::SystemTime::now());
    let holding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let holder = {
        let holding = holding.clone();
        std::thread::spawn(move || {
            while holding.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::File::options()
                    .write(true)
                    .open(&lock)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        })
    };
    let started = std::time::Instant::now();
    let (code, _, err) = run(
        dir.path(),
        &["tenant", "set", "alpha", "--source-hosting", "on"],
    );
    holding.store(false, std::sync::atomic::Ordering::Relaxed);
    holder.join().unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("config.lock") && err.contains("held by another process"),
        "{err}"
    );
    assert!(started.elapsed() >= std::time::Duration::from_secs(5));
    assert_eq!(
        git_in(&repo, &["config", "planfiles.sourcehosting"]),
        "false"
    );
}

/// Tenant ids that differ only in letter case would share one repository on a
/// case-insensitive volume: creating one next to the other is refused and changes nothing.
#[test]
fn tenant_create_refuses_an_id_that_differs_only_in_case() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run(dir.path(), &["tenant", "create", "acme"]).0, 0);
    assert_eq!(run(dir.path(), &["tenant", "create", "Globex-2"]).0, 0);
    let tenants = dir.path().join("data/tenants");
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&tenants)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let head = git_in(&tenants.join("acme.git"), &["rev-parse", "main"]);
    for (id, existing) in [
        ("Acme", "acme"),
        ("ACME", "acme"),
        ("aCmE", "acme"),
        ("globex-2", "Globex-2"),
        ("GLOBEX-2", "Globex-2"),
    ] {
        let (code, out, err) = run(dir.path(), &["tenant", "create", id, "--source-hosting"]);
        assert_eq!(code, 1, "{id}: {out}{err}");
        assert!(
            err.contains(&format!("tenant {existing} exists")) && err.contains("letter case"),
            "{id}: {err}"
        );
        assert_eq!(listing(), before, "{id}");
    }
    assert_eq!(
        git_in(&tenants.join("acme.git"), &["rev-parse", "main"]),
        head
    );
    assert_eq!(
        git_in(
            &tenants.join("acme.git"),
            &["config", "planfiles.sourcehosting"]
        ),
        "false"
    );
    // Ids that differ in more than case are still fine.
    assert_eq!(run(dir.path(), &["tenant", "create", "acme2"]).0, 0);

    // Creations that race take turns: of eight case variants started at once, one wins.
    let variants = [
        "race", "Race", "rAce", "raCe", "racE", "RACE", "RAce", "raCE",
    ];
    let children: Vec<_> = variants
        .iter()
        .map(|id| {
            planfiles(dir.path())
                .args(["tenant", "create", id])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let created = children
        .into_iter()
        .map(|mut c| c.wait().unwrap().success())
        .filter(|ok| *ok)
        .count();
    let races: Vec<String> = listing()
        .into_iter()
        .filter(|n| n.to_ascii_lowercase().starts_with("race"))
        .collect();
    assert_eq!((created, races.len()), (1, 1), "{races:?}");
}

/// A config that cannot be served says what is wrong with it, naming the setting and showing
/// the value at fault, except in `[auth]`, where the secret is: a bind without a port is not a
/// weak secret, and a section is a section.
#[test]
fn config_errors_name_the_setting_and_show_the_value_but_not_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    let secret = "Zq8vK2pL9xR4tW7mN3bH6cJ1";
    let cases: &[(&str, &[&str])] = &[
        (
            "[server]\nbind = \"127.0.0.1\"\n",
            &["server.bind = \"127.0.0.1\" has no port", "host:port"],
        ),
        (
            "[server]\nbind = \"nonsense\"\n",
            &["server.bind = \"nonsense\" has no port"],
        ),
        (
            "[server]\nbind = \"::1:8080\"\n",
            &["IPv6 address goes in brackets", "[::1]:8080"],
        ),
        (
            "[server]\nbind = \"127.0.0.1:80808\"\n",
            &["the port \"80808\" is not a number from 0 to 65535"],
        ),
        (
            "[server]\nbind = \"bad host!:80\"\n",
            &["\"bad host!\" is neither an IP address nor a host name"],
        ),
        (
            "[sever]\nbind = \"127.0.0.1:8080\"\n",
            &[
                "unknown section [sever]",
                "expected one of [server], [storage]",
            ],
        ),
        (
            "[server]\nbody_limit = \"big\"\n",
            &[
                "line 2",
                "server.body_limit",
                "\"big\"",
                "expected a whole number (usize",
            ],
        ),
        (
            "[server]\nbody_limit = \"1MB\"\n",
            &["server.body_limit", "\"1MB\"", "without quotes or units"],
        ),
        (
            "[storage]\ndurability = \"fast\"\n",
            &["storage.durability", "`fast`", "`auto`"],
        ),
        (
            "[auth]\nalgorithm = \"Zq8vK2pL9xR4tW7mN3bH6cJ1\"\n",
            // The value is hidden under [auth]; the valid choices are not.
            &["auth.algorithm", "unknown variant", "`HS256`", "`RS256`"],
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&config, text).unwrap();
        let (code, _, err) = run(dir.path(), &["--config", config.to_str().unwrap(), "serve"]);
        assert_eq!(
            code, 2,
            "a config error exits 2 (docs/OPERATIONS.md): {text}: {err}"
        );
        for e in *expected {
            assert!(err.contains(e), "{text}: {err}");
        }
        assert!(!err.contains("demo HS256 secret"), "{text}: {err}");
        assert!(!err.contains(secret), "{text}: the secret was shown: {err}");
    }
    // An empty secret in the environment is named, not taken for a weak secret of the file.
    let out = planfiles(dir.path())
        .env("PLANFILES_JWT_SECRET", "")
        .args(["tenant", "list"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("PLANFILES_JWT_SECRET is set but empty"),
        "{err}"
    );
}

/// A permission `planfiles token` does not know is refused at once (exit 2, the known ones
/// listed, the near one suggested), unless it is asked for as a custom one.
#[test]
fn token_refuses_an_unknown_permission_unless_it_is_custom() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(
        dir.path(),
        &[
            "token",
            "--tenant",
            "acme",
            "--permission",
            "jit.integration.write",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("jit.integrations.write") && err.contains("planfiles.repos.read"),
        "{err}"
    );
    let (code, out, err) = run(
        dir.path(),
        &[
            "token",
            "--tenant",
            "acme",
            "--custom-permission",
            "billing.read",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let claims = out.trim().split('.').nth(1).unwrap().to_owned();
    use base64::Engine;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["permissions"], serde_json::json!(["billing.read"]));
}

/// `auth.secret_file`: `serve` makes the secret (64 hex digits, mode 0600) at its first start;
/// `planfiles token` with the same config signs with it, and the demo secret no longer works.
#[tokio::test]
async fn serve_makes_the_secret_file_and_token_signs_with_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::process::data_dir_with_fixture();
    let config = dir.path().join("shard.toml");
    std::fs::write(&config, "[auth]\nsecret_file = \"keys/jwt.secret\"\n").unwrap();
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    let with_config = || {
        let mut cmd = planfiles(dir.path());
        cmd.env_remove("PLANFILES_JWT_SECRET")
            .arg("--config")
            .arg(&config);
        cmd
    };
    // Before the first start, signing refuses and says why.
    let out = with_config()
        .args(["token", "--tenant", "acme"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("makes it at its first start"));
    let server = common::process::serve_command(with_config());
    let file = dir.path().join("keys/jwt.secret");
    let secret = std::fs::read_to_string(&file).unwrap();
    assert!(
        secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit()),
        "{secret}"
    );
    assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o600);
    let out = with_config()
        .args(["token", "--tenant", "acme"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let minted = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let client = reqwest::Client::new();
    let get = |t: String| {
        client
            .get(server.url("/plans/integration-file"))
            .bearer_auth(t)
            .send()
    };
    assert_eq!(get(minted.clone()).await.unwrap().status(), 200);
    assert_eq!(
        get(common::token("acme", common::ALL))
            .await
            .unwrap()
            .status(),
        401,
        "the test secret"
    );
    let warned = |server: &common::process::Server| {
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("can be read by other users"))
    };
    assert!(!warned(&server), "a file made 0600 is not warned about");
    drop(server);
    // The next start reads the same secret (the token holds), and says once that others can
    // read the file when they can.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let server = common::process::serve_command(with_config());
    assert!(
        warned(&server),
        "a world-readable secret file is said at start"
    );
    let res = client
        .get(server.url("/plans/integration-file"))
        .bearer_auth(minted)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the secret survives a restart");
}

/// A data dir that does not exist is made, and that is said once, with its absolute path: a
/// mistyped path does not quietly serve an empty service.
#[test]
fn a_data_dir_that_did_not_exist_is_made_and_said_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo/data");
    let mut cmd = planfiles(dir.path());
    cmd.env("PLANFILES_DATA_DIR", &missing);
    let server = common::process::serve_command(cmd);
    let log = server.log.lock().unwrap().join("\n");
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the data dir did not exist"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].contains("\"level\":\"WARN\""), "{}", said[0]);
    assert!(said[0].contains(missing.to_str().unwrap()), "{}", said[0]);
    drop(server);
    // The next start finds it: nothing more is said.
    let mut cmd = planfiles(dir.path());
    cmd.env("PLANFILES_DATA_DIR", &missing);
    let server = common::process::serve_command(cmd);
    assert!(!server
        .log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("did not exist")));
    // The command line says it too.
    let other = dir.path().join("other/data");
    let out = planfiles(dir.path())
        .env("PLANFILES_DATA_DIR", &other)
        .args(["tenant", "list"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("did not exist") && err.contains(other.to_str().unwrap()),
        "{err}"
    );
}

/// The start's log line says where the console is, for a person who just ran the service.
#[tokio::test]
async fn the_start_says_where_the_console_is() {
    let dir = crate::common::process::data_dir_with_fixture();
    let server = crate::common::process::serve(dir.path(), &[]);
    let log = server.log.lock().unwrap().join("\n");
    let want = format!("\"console\":\"{}/ui/\"", server.url(""));
    assert!(log.contains(&want), "{want} in {log}");
    let res = reqwest::get(server.url("/ui/")).await.unwrap();
    assert_eq!(res.status(), 200);
}

//! The `planfiles` binary: tenant admin, token minting, config errors, and `serve` itself.
mod common;

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
    // The last change is the head commit's time, in RFC 3339.
    let when = git_in(
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

//! Signed commits: every kind of commit the service makes verifies with stock git and the keys the service publishes; plain git's commits, another key's and altered ones read `verified: false`; retired keys keep verifying while listed; the key file is private.
use crate::common::{
    commit_outside, git_in, git_stdin, run_with_stdin, ssh_keygen_present, token, TestApp, ALL,
};
use planfiles::config::SigningConfig;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `git verify-commit` of `commit` in `repo` with `allowed` as the allowed signers file.
pub(crate) fn git_verifies(repo: &Path, allowed: &Path, commit: &str) -> (bool, String) {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .arg("-c")
        .arg(format!("gpg.ssh.allowedSignersFile={}", allowed.display()))
        .args(["verify-commit", commit])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `ssh-keygen -Y verify` of `commit`'s `gpgsig` over the commit without that header, as
/// git hands them to it: whether it is a good signature by `principal` in namespace `git`.
fn ssh_keygen_verifies(repo: &Path, allowed: &Path, principal: &str, commit: &str) -> bool {
    let raw = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["cat-file", "commit", commit])
        .output()
        .unwrap()
        .stdout;
    let raw = String::from_utf8(raw).unwrap();
    let (mut payload, mut sig, mut in_sig) = (String::new(), String::new(), false);
    for line in raw.split_inclusive('\n') {
        if let Some(first) = line.strip_prefix("gpgsig ") {
            (in_sig, sig) = (true, first.to_owned());
        } else if in_sig && line.starts_with(' ') {
            sig.push_str(&line[1..]);
        } else {
            in_sig = false;
            payload.push_str(line);
        }
    }
    assert!(!sig.is_empty(), "{commit} has no gpgsig header");
    let sig_file = allowed.with_file_name(format!("{commit}.sig"));
    std::fs::write(&sig_file, sig).unwrap();
    let mut verify = Command::new("ssh-keygen");
    verify
        .args(["-Y", "verify", "-n", "git", "-I", principal, "-f"])
        .arg(allowed)
        .arg("-s")
        .arg(&sig_file)
        .stderr(std::process::Stdio::null());
    run_with_stdin(&mut verify, payload.as_bytes())
        .status
        .success()
}

/// The allowed signers file the service publishes, written into `dir`.
pub(crate) async fn allowed_signers(app: &TestApp, dir: &Path) -> PathBuf {
    let res = app.signing_keys(Some("text/plain")).await;
    assert_eq!(res.status(), 200);
    let path = dir.join("allowed_signers");
    std::fs::write(&path, res.text().await.unwrap()).unwrap();
    path
}

/// Each history entry's commit and `verified`, newest first.
async fn verdicts(app: &TestApp, tenant: &str, file: &str) -> Vec<(String, bool)> {
    let page: Value = app
        .history(&token(tenant, ALL), file, "limit=100")
        .await
        .json()
        .await
        .unwrap();
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["commit_sha"].as_str().unwrap().to_owned(),
                e["verified"].as_bool().unwrap(),
            )
        })
        .collect()
}

async fn put_integration(app: &TestApp, tenant: &str, content: Value) -> String {
    let res = app
        .put_integration(&token(tenant, ALL), &json!({ "content": content }))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    body["commit_sha"].as_str().unwrap().to_owned()
}

#[actix_web::test]
async fn every_kind_of_service_commit_verifies_with_stock_git() {
    let app = TestApp::spawn().await;
    let scratch = tempfile::tempdir().unwrap();
    let repo = app.data_dir.path().join("tenants/globex.git");
    let t = token("globex", ALL);
    // A PUT of each file, a two-file commit, a restore, and a keyed write that changed
    // nothing (its record is a commit too).
    let put = put_integration(&app, "globex", json!({"aws": []})).await;
    let conf: Value = app.get_configuration(&t).await.json().await.unwrap();
    let res = app
        .put_configuration(
            &t,
            &json!({"payload": {"folders": [{"path": "src"}]}, "file_sha": conf["sha"]}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let conf_put = res.json::<Value>().await.unwrap()["commit_sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let conf: Value = app.get_configuration(&t).await.json().await.unwrap();
    let res = app
        .post_commits(
            &t,
            "",
            &json!({
                "integration-file": {"content": {"aws": [], "drata": {"workspace": "w"}}},
                "configuration-file": {"payload": {"folders": []}, "file_sha": conf["sha"]},
            }),
        )
        .await;
    assert_eq!(res.status(), 200);
    let both = res.json::<Value>().await.unwrap()["commit_sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let res = app
        .restore(&t, "integration-file", &json!({ "commit": put }))
        .await;
    assert_eq!(res.status(), 200);
    let restored = res.json::<Value>().await.unwrap()["commit_sha"]
        .as_str()
        .unwrap()
        .to_owned();
    let res = app
        .send(
            "PUT",
            "/plans/integration-file",
            &t,
            Some(&json!({"content": {"aws": []}})),
            &[("Idempotency-Key", "signed-no-op")],
        )
        .await;
    assert_eq!(res.status(), 200);
    let no_op = git_in(&repo, &["rev-parse", "refs/planfiles/no-ops"]);
    // A tenant made by the command line, with the service's key (the data dir's).
    let cli = Command::new(env!("CARGO_BIN_EXE_planfiles"))
        .current_dir(scratch.path())
        .env_remove("PLANFILES_CONFIG")
        .env("PLANFILES_DATA_DIR", app.data_dir.path())
        .args(["tenant", "create", "signed-tenant"])
        .output()
        .unwrap();
    assert!(cli.status.success(), "{cli:?}");
    let created_repo = app.data_dir.path().join("tenants/signed-tenant.git");
    let created = git_in(&created_repo, &["rev-parse", "main"]);

    let allowed = allowed_signers(&app, scratch.path()).await;
    // Stock git agrees (it runs ssh-keygen), and so does ssh-keygen on its own.
    if ssh_keygen_present() {
        for (what, repo, commit) in [
            ("a PUT of the integration file", &repo, &put),
            ("a PUT of the configuration file", &repo, &conf_put),
            ("a two-file commit", &repo, &both),
            ("a restore", &repo, &restored),
            ("a keyed no-op's record", &repo, &no_op),
            ("a tenant's first commit", &created_repo, &created),
        ] {
            let (ok, said) = git_verifies(repo, &allowed, commit);
            assert!(ok, "{what} ({commit}) does not verify: {said}");
            assert!(
                said.contains("Good \"git\" signature for planfiles@test"),
                "{what}: {said}"
            );
            assert!(
                ssh_keygen_verifies(repo, &allowed, "planfiles@test", commit),
                "{what} ({commit}): ssh-keygen -Y verify refuses it"
            );
        }
        let log = git_in(
            &repo,
            &[
                "-c",
                &format!("gpg.ssh.allowedSignersFile={}", allowed.display()),
                "log",
                "-1",
                "--show-signature",
            ],
        );
        assert!(log.contains("Good \"git\" signature"), "{log}");
    }
    // The history says the same.
    let history = verdicts(&app, "globex", "integration-file").await;
    for commit in [&put, &both, &restored] {
        assert!(
            history.contains(&(commit.clone(), true)),
            "{commit} is not verified in {history:?}"
        );
    }
    // The command line prints the same keys as the endpoint (for its own committer email).
    let cli = Command::new(env!("CARGO_BIN_EXE_planfiles"))
        .current_dir(scratch.path())
        .env_remove("PLANFILES_CONFIG")
        .env("PLANFILES_DATA_DIR", app.data_dir.path())
        .args(["signing", "allowed-signers"])
        .output()
        .unwrap();
    assert!(cli.status.success(), "{cli:?}");
    let cli = String::from_utf8(cli.stdout).unwrap();
    let served = std::fs::read_to_string(&allowed).unwrap();
    assert_eq!(
        cli.replace("planfiles@localhost", "planfiles@test"),
        served,
        "the command and the endpoint list the same keys"
    );
    // The key is the service's user's only.
    let mode = std::fs::metadata(app.data_dir.path().join("signing_key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[actix_web::test]
async fn plain_git_another_key_and_an_altered_commit_read_unverified() {
    let mut app = TestApp::spawn().await;
    // Below, a commit with bytes after a NUL is written by hand into main (fsck refuses it).
    app.wrote_objects_fsck_refuses();
    let repo = app.data_dir.path().join("tenants/globex.git");
    let scratch = tempfile::tempdir().unwrap();
    let signed = put_integration(&app, "globex", json!({"aws": []})).await;
    // Plain git, unsigned.
    let plain = commit_outside(&repo, "integrations.yml", "aws: []\n# plain\n");
    // Plain git, signed with a key the service does not list (ssh-keygen's, as git uses it).
    let other = planfiles::signing::Signer::from_seed(&[9; 32], "someone@else");
    let key = scratch.path().join("other_key");
    std::fs::write(&key, other.to_openssh().as_bytes()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(scratch.path().join("other_key.pub"), other.public_key()).unwrap();
    // A tree with another integration file (history lists the commits that change it).
    let blob = git_stdin(
        &repo,
        &["hash-object", "-w", "--stdin"],
        "aws: []\n# foreign\n",
    );
    let conf = git_in(&repo, &["rev-parse", "main:configuration.yml"]);
    let tree = git_stdin(
        &repo,
        &["mktree"],
        &format!("100644 blob {blob}\tintegrations.yml\n100644 blob {conf}\tconfiguration.yml\n"),
    );
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["-c", "gpg.format=ssh", "-c"])
        .arg(format!("user.signingkey={}", key.display()))
        .args([
            "-c",
            "user.name=planfiles",
            "-c",
            "user.email=planfiles@test",
            "commit-tree",
            "-S",
            &tree,
            "-p",
            "main",
            "-m",
            "Update integrations.yml",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let foreign = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(git_in(&repo, &["cat-file", "commit", &foreign]).contains("\ngpgsig "));
    git_in(&repo, &["update-ref", "refs/heads/main", &foreign]);
    // The service's own commit with another message under the same signature (a commit
    // made to look like one of the service's).
    let raw = git_in(&repo, &["cat-file", "commit", &signed]);
    let forged_text =
        raw.replacen(
            "Update integrations.yml",
            "Update integrations.yml (by hand)",
            1,
        )
        .replacen(
            &format!(
                "parent {}",
                git_in(&repo, &["rev-parse", &format!("{signed}^")])
            ),
            &format!("parent {foreign}"),
            1,
        ) + "\n";
    let forged = git_stdin(
        &repo,
        &["hash-object", "-t", "commit", "-w", "--stdin"],
        &forged_text,
    );
    git_in(&repo, &["update-ref", "refs/heads/main", &forged]);

    let history = verdicts(&app, "globex", "integration-file").await;
    let verdict = |c: &str| history.iter().find(|(h, _)| h == c).map(|(_, v)| *v);
    assert_eq!(verdict(&signed), Some(true), "{history:?}");
    assert_eq!(verdict(&plain), Some(false), "a plain git commit");
    assert_eq!(
        verdict(&foreign),
        Some(false),
        "a commit signed by another key"
    );
    assert_eq!(
        verdict(&forged),
        Some(false),
        "a service commit with another message"
    );
    let allowed = allowed_signers(&app, scratch.path()).await;
    assert!(!git_verifies(&repo, &allowed, &forged).0, "git agrees");
    assert!(!git_verifies(&repo, &allowed, &foreign).0, "git agrees");

    // The service's commit with its signature header moved into the message, and with bytes
    // after a NUL: what was signed is not what git (or the service) reads as the commit.
    let raw = raw_commit(&repo, &signed);
    let text = String::from_utf8(raw.clone()).unwrap();
    let start = text.find("\ngpgsig ").unwrap() + 1;
    let end = text[start..].find("\n\n").unwrap() + start + 1;
    let moved = format!("{}{}{}", &text[..start], &text[end..], &text[start..end]);
    let mut nul = raw;
    nul.extend_from_slice(b"\0\nhidden bytes\n");
    for (what, bytes) in [
        ("the signature moved into the message", moved.into_bytes()),
        ("bytes after a NUL", nul),
    ] {
        let id = write_commit(&repo, &bytes);
        git_in(&repo, &["update-ref", "refs/heads/main", &id]);
        let history = verdicts(&app, "globex", "integration-file").await;
        assert_eq!(history.first(), Some(&(id.clone(), false)), "{what}");
        assert!(!git_verifies(&repo, &allowed, &id).0, "git agrees: {what}");
    }
}

/// A commit object's bytes as stored (`git cat-file commit`).
fn raw_commit(repo: &Path, id: &str) -> Vec<u8> {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["cat-file", "commit", id])
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// Writes `bytes` as a commit object as they are (no checks): its id.
fn write_commit(repo: &Path, bytes: &[u8]) -> String {
    let text = std::str::from_utf8(bytes).unwrap();
    git_stdin(
        repo,
        &[
            "hash-object",
            "--literally",
            "-t",
            "commit",
            "-w",
            "--stdin",
        ],
        text,
    )
}

#[actix_web::test]
async fn a_retired_key_verifies_while_it_is_listed() {
    let data = tempfile::tempdir().unwrap();
    crate::common::copy_tree(
        &crate::common::fixture_dir().join("tenants"),
        &data.path().join("tenants"),
    );
    let keys = tempfile::tempdir().unwrap();
    let signing = |key: &str, previous: Vec<String>| SigningConfig {
        key_file: Some(keys.path().join(key)),
        previous_public_keys: previous,
        ..SigningConfig::default()
    };
    let app = TestApp::with()
        .data_dir(data)
        .signing(signing("old", vec![]))
        .spawn()
        .await;
    let old_commit = put_integration(&app, "globex", json!({"aws": []})).await;
    let old_key = app.signing_keys(None).await.json::<Value>().await.unwrap()["keys"][0]
        ["public_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let data = app.stop().await;

    // A new key, the old one listed: both commits verify, in the service and with git.
    let app = TestApp::with()
        .data_dir(data)
        .signing(signing("new", vec![old_key.clone()]))
        .spawn()
        .await;
    let new_commit = put_integration(&app, "globex", json!({"aws": [], "x": 1})).await;
    let keys_now: Value = app.signing_keys(None).await.json().await.unwrap();
    assert_eq!(keys_now["keys"].as_array().unwrap().len(), 2);
    assert_eq!(keys_now["keys"][0]["current"], true);
    assert_eq!(keys_now["keys"][1]["public_key"], old_key.as_str());
    let history = verdicts(&app, "globex", "integration-file").await;
    assert!(history.contains(&(old_commit.clone(), true)), "{history:?}");
    assert!(history.contains(&(new_commit.clone(), true)), "{history:?}");
    let scratch = tempfile::tempdir().unwrap();
    let allowed = allowed_signers(&app, scratch.path()).await;
    let repo = app.data_dir.path().join("tenants/globex.git");
    assert!(git_verifies(&repo, &allowed, &old_commit).0);
    assert!(git_verifies(&repo, &allowed, &new_commit).0);
    let data = app.stop().await;

    // The old key no longer listed: its commits read unverified, the new key's still verify.
    let app = TestApp::with()
        .data_dir(data)
        .signing(signing("new", vec![]))
        .spawn()
        .await;
    let history = verdicts(&app, "globex", "integration-file").await;
    assert!(history.contains(&(old_commit, false)), "{history:?}");
    assert!(history.contains(&(new_commit, true)), "{history:?}");
}

/// `planfiles` with `args` on the data dir `data` (no config file): whether it succeeded, and
/// what it printed on stdout and stderr.
fn cli(data: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_planfiles"))
        .current_dir(data)
        .env_remove("PLANFILES_CONFIG")
        .env("PLANFILES_DATA_DIR", data.join("data"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_lost_key_is_refused_and_commands_that_do_not_commit_make_none() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("data/signing_key");
    // Reading commands on a data dir without a key make none.
    let (ok, _, _) = cli(dir.path(), &["tenant", "list"]);
    assert!(ok);
    assert!(!key.exists(), "tenant list made a key");
    let (ok, _, err) = cli(dir.path(), &["signing", "allowed-signers"]);
    assert!(!ok && err.contains("no signing key"), "{err}");
    assert!(!key.exists());
    // The first commit makes it.
    let (ok, _, err) = cli(dir.path(), &["tenant", "create", "first"]);
    assert!(ok, "{err}");
    let (ok, allowed, _) = cli(dir.path(), &["signing", "allowed-signers"]);
    assert!(ok && allowed.contains("ssh-ed25519 "), "{allowed}");
    let public = allowed
        .split_whitespace()
        .skip(2)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    // Lost: the next command that would sign refuses, names the key, and makes no other.
    std::fs::remove_file(&key).unwrap();
    let (ok, _, err) = cli(dir.path(), &["tenant", "create", "second"]);
    assert!(!ok, "a lost key was made anew");
    assert!(err.contains("missing") && err.contains(&public), "{err}");
    assert!(!key.exists());
    assert!(!dir.path().join("data/tenants/second.git").exists());
}

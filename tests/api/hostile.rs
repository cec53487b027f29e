//! Objects from outside as hostile input: commits and trees that git accepts from `hash-object --literally` but `git fsck --strict` refuses (time zones, zero-padded dates and modes, odd modes, NULs), merges whose second parent brings commits no rule looked at, `.gitmodules` URLs, the service's trailers in other spellings: every one refused by a push, nothing kept, fsck clean. And what fsck accepts, a date past year 9999, reads everywhere (history, events, webhooks); the push's notes commit is signed.
use crate::common::receiver::Receiver;
use crate::common::*;
use crate::push::{clone, git, ok, push, WRITE_BOTH};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Writes `bytes` as an object of `kind` into the clone's store as given (`git hash-object
/// --literally`, which checks nothing); its id.
fn literally(dir: &Path, kind: &str, bytes: &[u8]) -> String {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .args(["hash-object", "--literally", "-w", "--stdin", "-t", kind]);
    let out = run_with_stdin(&mut cmd, bytes);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn rev(dir: &Path, what: &str) -> String {
    ok(git(dir, "", &["rev-parse", what])).trim().to_owned()
}

/// A tree of the two files, each entry written with the given mode text.
fn tree(dir: &Path, entries: &[(&str, &str, &str)]) -> String {
    let mut bytes = Vec::new();
    for (mode, name, blob) in entries {
        bytes.extend_from_slice(format!("{mode} {name}\0").as_bytes());
        bytes.extend_from_slice(&hex(blob));
    }
    literally(dir, "tree", &bytes)
}

fn hex(id: &str) -> Vec<u8> {
    (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap())
        .collect()
}

/// A commit object as given: `date` and `tz` exactly as written.
fn commit(dir: &Path, tree: &str, parents: &[&str], date: &str, tz: &str, msg: &[u8]) -> String {
    let mut text = format!("tree {tree}\n");
    for p in parents {
        text.push_str(&format!("parent {p}\n"));
    }
    text.push_str(&format!(
        "author A <a@x.example> {date} {tz}\ncommitter A <a@x.example> {date} {tz}\n\n"
    ));
    let mut bytes = text.into_bytes();
    bytes.extend_from_slice(msg);
    literally(dir, "commit", &bytes)
}

/// The clone's current files, and a valid new integration file's blob.
struct Base {
    head: String,
    integrations: String,
    configuration: String,
    changed: String,
}

fn base(dir: &Path, n: u32) -> Base {
    let text = format!(
        "aws:\n  - account_id: \"{:012}\"\n    regions: [us-east-1]\n    type: aws\n",
        200_000 + n
    );
    Base {
        head: rev(dir, "HEAD"),
        integrations: rev(dir, "HEAD:integrations.yml"),
        configuration: rev(dir, "HEAD:configuration.yml"),
        changed: literally(dir, "blob", text.as_bytes()),
    }
}

/// The tree of `b` with the new integration file, as git writes it.
fn good_tree(dir: &Path, b: &Base) -> String {
    tree(
        dir,
        &[
            ("100644", "configuration.yml", &b.configuration),
            ("100644", "integrations.yml", &b.changed),
        ],
    )
}

const DATE: &str = "1700000000";

/// A merge of `b`'s head with a side commit whose tree is `side`: the merge's own tree is
/// valid, what its second parent brings is not.
fn merge_with_side(dir: &Path, b: &Base, side: &[(&str, &str, &str)]) -> String {
    let side_tree = tree(dir, side);
    let side = commit(dir, &side_tree, &[&b.head], DATE, "+0000", b"side\n");
    commit(
        dir,
        &good_tree(dir, b),
        &[&b.head, &side],
        DATE,
        "+0000",
        b"merge\n",
    )
}

type Build = fn(&Path, &Base) -> String;

#[tokio::test]
async fn objects_git_fsck_refuses_and_commits_no_rule_saw_are_refused_by_a_push() {
    let app = TestApp::spawn().await;
    let t = token("acme", WRITE_BOTH);
    let cases: Vec<(&str, Build, &str)> = vec![
        (
            "a time zone that is not four digits",
            |d, b| commit(d, &good_tree(d, b), &[&b.head], DATE, "+0A00", b"tz\n"),
            "badTimezone",
        ),
        (
            "a zero-padded date",
            |d, b| {
                commit(
                    d,
                    &good_tree(d, b),
                    &[&b.head],
                    "01700000000",
                    "+0000",
                    b"date\n",
                )
            },
            "zeroPaddedDate",
        ),
        (
            "a NUL in the message",
            |d, b| {
                commit(
                    d,
                    &good_tree(d, b),
                    &[&b.head],
                    DATE,
                    "+0000",
                    b"nul\0hidden\n",
                )
            },
            "nulInCommit",
        ),
        (
            "a zero-padded file mode",
            |d, b| {
                let t = tree(
                    d,
                    &[
                        ("0100644", "configuration.yml", &b.configuration),
                        ("100644", "integrations.yml", &b.changed),
                    ],
                );
                commit(d, &t, &[&b.head], DATE, "+0000", b"mode\n")
            },
            "zeroPaddedFilemode",
        ),
        (
            "an odd file mode (libgit2 reads it as 100644)",
            |d, b| {
                let t = tree(
                    d,
                    &[
                        ("100644", "configuration.yml", &b.configuration),
                        ("100664", "integrations.yml", &b.changed),
                    ],
                );
                commit(d, &t, &[&b.head], DATE, "+0000", b"odd mode\n")
            },
            "badFilemode",
        ),
        (
            "a merge whose second parent adds a file",
            |d, b| {
                let extra = literally(d, "blob", b"hello\n");
                merge_with_side(
                    d,
                    b,
                    &[
                        ("100644", "configuration.yml", &b.configuration),
                        ("100644", "integrations.yml", &b.integrations),
                        ("100644", "notes.txt", &extra),
                    ],
                )
            },
            "comes in through a merge's second parent",
        ),
        (
            "a merge whose second parent brings broken YAML",
            |d, b| {
                let broken = literally(d, "blob", b"aws: [unclosed\n");
                merge_with_side(
                    d,
                    b,
                    &[
                        ("100644", "configuration.yml", &b.configuration),
                        ("100644", "integrations.yml", &broken),
                    ],
                )
            },
            "comes in through a merge's second parent",
        ),
        (
            "a .gitmodules URL that is an option (CVE-2018-17456)",
            |d, b| {
                let modules = literally(
                    d,
                    "blob",
                    b"[submodule \"x\"]\n\tpath = x\n\turl = --upload-pack=touch /tmp/pwned\n",
                );
                merge_with_side(
                    d,
                    b,
                    &[
                        ("100644", ".gitmodules", &modules),
                        ("100644", "configuration.yml", &b.configuration),
                        ("100644", "integrations.yml", &b.integrations),
                    ],
                )
            },
            "gitmodulesUrl",
        ),
        (
            "the Request-Id trailer in lower case",
            |d, b| {
                let m = b"Change\n\nrequest-id: forged-1\n";
                commit(d, &good_tree(d, b), &[&b.head], DATE, "+0000", m)
            },
            "the trailer Request-Id is the service's own",
        ),
        (
            "a message with terminal escapes and a right-to-left override",
            |d, b| {
                let m = "subj \u{1b}[2J\u{1b}[31mRED \u{202e}gnp.exe\n".as_bytes();
                commit(d, &good_tree(d, b), &[&b.head], DATE, "+0000", m)
            },
            "a control character that can hide",
        ),
        (
            "an author's name with a terminal escape",
            |d, b| {
                let text = format!(
                    "tree {}\nparent {}\nauthor ev\u{1b}[2Jil <a@x.example> {DATE} +0000\n\
                     committer A <a@x.example> {DATE} +0000\n\nclean message\n",
                    good_tree(d, b),
                    b.head
                );
                literally(d, "commit", text.as_bytes())
            },
            "the author's name holds U+001B",
        ),
        (
            "the Forced trailer in capitals, without a space",
            |d, b| {
                let m = b"Change\n\nFORCED:true\n";
                commit(d, &good_tree(d, b), &[&b.head], DATE, "+0000", m)
            },
            "the trailer Forced is the service's own",
        ),
    ];
    for (n, (name, build, want)) in cases.into_iter().enumerate() {
        let head = app.head("acme");
        let (_work, dir) = clone(&app, "acme", &t);
        let b = base(&dir, n as u32);
        let new = build(&dir, &b);
        ok(git(&dir, "", &["update-ref", "refs/heads/main", &new]));
        let (pushed, stderr) = push(&dir, &t, &["main"]);
        assert!(!pushed, "{name}: the push went through");
        assert!(stderr.contains(want), "{name}: git printed {stderr}");
        assert_eq!(app.head("acme"), head, "{name}: main moved");
        let repo = app.repo("acme");
        assert!(
            !git_succeeds(&repo, &["cat-file", "-e", &new]),
            "{name}: the refused commit is in the store"
        );
        git_in(&repo, &["fsck", "--strict", "--no-dangling"]);
    }
}

/// A date git accepts past year 9999 reads everywhere: the push lands, history and the
/// event stream answer, and a webhook delivers it (it stopped a tenant's deliveries for
/// good). The push's notes commit is signed by the service's key.
#[tokio::test]
async fn a_commit_dated_after_year_9999_reads_everywhere_and_the_notes_are_signed() {
    let rx = Receiver::start();
    let app = TestApp::spawn_with_webhooks(local_webhooks()).await;
    let res = app
        .create_webhook(
            &webhooks_token("acme"),
            &json!({"url": rx.url("/far"), "description": "far future"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    rx.set_secret("/far", created["secret"].as_str().unwrap());
    let t = token("acme", WRITE_BOTH);
    let (_work, dir) = clone(&app, "acme", &t);
    let b = base(&dir, 99);
    // @253402300800 is 10000-01-01T00:00:00Z: git and fsck --strict accept it.
    let far = commit(
        &dir,
        &good_tree(&dir, &b),
        &[&b.head],
        "253402300800",
        "+0000",
        b"Far\n",
    );
    ok(git(&dir, "", &["update-ref", "refs/heads/main", &far]));
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(pushed, "{stderr}");
    assert_eq!(app.head("acme"), far);
    let repo = app.repo("acme");
    git_in(&repo, &["fsck", "--strict", "--no-dangling"]);

    let all = token("acme", ALL);
    let res = app.history(&all, "integration-file", "limit=1").await;
    assert_eq!(res.status(), 200);
    let page: Value = res.json().await.unwrap();
    assert_eq!(page["entries"][0]["commit_sha"], far.as_str());
    assert_eq!(page["entries"][0]["date"], "9999-12-31T23:59:59Z");

    let got = rx.wait_for("/far", 1, Duration::from_secs(30)).await;
    assert_eq!(got[0].commit(), far, "delivered");
    assert!(got[0].verified);
    let hooks: Value = app
        .webhooks(&webhooks_token("acme"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(hooks["webhooks"][0]["state"], "active", "{hooks}");

    // The notes commit of the push: signed, verified by stock git with the published keys.
    let keys = tempfile::tempdir().unwrap();
    let allowed = crate::signing::allowed_signers(&app, keys.path()).await;
    let (verified, why) = crate::signing::git_verifies(&repo, &allowed, "refs/notes/planfiles");
    assert!(verified, "the notes commit: {why}");
    let note = git_in(&repo, &["notes", "--ref=planfiles", "show", &far]);
    assert!(note.starts_with("Pushed-By: "), "{note}");
}

/// A `refs/notes/planfiles.lock` that a git command holds (no mark of planfiles', 20 s old) is
/// never taken away: the push is told to retry and changes nothing; once git lets go, the
/// same push lands. (The lock was deleted after 15 s.)
#[tokio::test]
async fn a_live_git_commands_notes_lock_is_left_alone() {
    let app = TestApp::spawn().await;
    let t = token("acme", WRITE_BOTH);
    let repo = app.repo("acme");
    let lock = repo.join("refs/notes/planfiles.lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, format!("{}\n", "0".repeat(40))).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(20))
        .unwrap();
    let head = app.head("acme");
    let (_work, dir) = clone(&app, "acme", &t);
    std::fs::write(dir.join("integrations.yml"), "held: {by: git}\n").unwrap();
    ok(git(
        &dir,
        "",
        &["commit", "-qam", "while git holds the notes"],
    ));
    let packs = |repo: &Path| -> Vec<String> {
        std::fs::read_dir(repo.join("objects/pack"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    };
    let before = packs(&repo);
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(!pushed, "the push went through");
    assert!(
        stderr.contains("refs/notes/planfiles) are locked"),
        "{stderr}"
    );
    assert!(lock.exists(), "a live git command's lock was taken away");
    assert_eq!(app.head("acme"), head);
    // Refused after its checks passed: nothing of it is kept (its pack stayed in quarantine).
    assert_eq!(packs(&repo), before, "the refused push's pack was kept");
    let pushed_head = ok(git(&dir, "", &["rev-parse", "HEAD"]));
    assert!(
        !git_succeeds(&repo, &["cat-file", "-e", pushed_head.trim()]),
        "the refused commit is in the store"
    );
    std::fs::remove_file(&lock).unwrap();
    let (pushed, stderr) = push(&dir, &t, &["main"]);
    assert!(pushed, "{stderr}");
}

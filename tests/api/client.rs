//! The client in the same binary (`planfiles get|put|edit|commit|log|diff|restore|watch|mirror`), run as a user runs it against the real server: what it prints, what it writes (checked with git), each exit code, an edit that two people make at once, a watch through a link cut a hundred times, a mirror through restarts and kill -9.
use crate::common::relay::Relay;
use crate::common::{self, git_in, shipped_schemas, token, TestApp, ALL};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `planfiles ARGS` against `addr` with `token` (in PLANFILES_TOKEN), from an empty folder.
fn client(addr: &str, token: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_planfiles"));
    cmd.current_dir(std::env::temp_dir())
        .env_remove("PLANFILES_CONFIG")
        .env("PLANFILES_ADDR", addr)
        .env("PLANFILES_TOKEN", token)
        .args(args);
    cmd
}

fn run(addr: &str, token: &str, args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = client(addr, token, args).output().unwrap();
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A child killed and reaped when dropped, also when an assertion failed first (a leaked
/// `mirror` or `watch` would hold what the test's process held).
struct Reaped(std::process::Child);

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A file in a temporary folder with `text`.
fn file_with(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_client_reads_and_writes_and_each_refusal_has_its_exit_code() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("globex", ALL);
    let dir = tempfile::tempdir().unwrap();
    let repo = app.repo("globex");
    // get: the stored text, byte for byte.
    let (code, out, _) = run(&app.addr, &t, &["get", "integration"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim_end(),
        git_in(&repo, &["show", "main:integrations.yml"])
    );
    let blob = git_in(&repo, &["rev-parse", "main:integrations.yml"]);
    // put, guarded by the blob id read; a stale one is refused (1) and writes nothing.
    let text = "aws:\n  - account_id: \"123456789012\"\n    regions: [us-east-1]\n    type: aws\n";
    let path = file_with(dir.path(), "i.yml", text);
    let (code, out, err) = run(
        &app.addr,
        &t,
        &[
            "put",
            "integration",
            &path,
            "--if-match",
            &blob,
            "-m",
            "By the client",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("integrations.yml is"), "{out}");
    assert_eq!(
        git_in(&repo, &["show", "main:integrations.yml"]),
        text.trim_end()
    );
    assert_eq!(
        git_in(&repo, &["log", "-1", "--format=%s", "main"]),
        "By the client"
    );
    let head = app.head("globex");
    let (code, _, err) = run(
        &app.addr,
        &t,
        &["put", "integration", &path, "--if-match", &blob],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("If-Match"), "the service's detail: {err}");
    assert_eq!(app.head("globex"), head);
    // A dry run checks and writes nothing; a text that breaks a schema is 1 with the reason.
    let conf = file_with(dir.path(), "c.yml", "folders:\n  - path: src\n");
    let (code, out, err) = run(
        &app.addr,
        &t,
        &["put", "configuration", &conf, "--force", "--dry-run"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("dry run:"), "{out}");
    assert_eq!(app.head("globex"), head);
    let bad = file_with(
        dir.path(),
        "bad.yml",
        "aws:\n  - account_id: \"12\"\n    regions: [us-east-1]\n    type: aws\n",
    );
    let (code, _, err) = run(&app.addr, &t, &["put", "integration", &bad, "--force"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("schema"), "{err}");
    assert_eq!(app.head("globex"), head);
    // --force writes the configuration file with its last commit (Forced: true).
    let (code, _, err) = run(&app.addr, &t, &["put", "configuration", &conf, "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(git_in(&repo, &["log", "-1", "--format=%B", "main"]).contains("Forced: true"));
    // log, diff (the API's), get --at and restore by a short id.
    let (code, out, _) = run(&app.addr, &t, &["log", "integration", "--limit", "2"]);
    assert_eq!(code, 0);
    assert!(
        out.lines().next().unwrap().contains("By the client"),
        "{out}"
    );
    let (_, out, _) = run(
        &app.addr,
        &t,
        &["diff", "integration", &head[..7], "-o", "json"],
    );
    let api: Value = app
        .diff(&t, "integration-file", &format!("from={head}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), api);
    let first = git_in(&repo, &["rev-list", "--max-parents=0", "main"]);
    let (code, out, _) = run(&app.addr, &t, &["get", "integration", "--at", &first[..8]]);
    assert_eq!(code, 0);
    let old = git_in(&repo, &["show", &format!("{first}:integrations.yml")]);
    assert_eq!(out.trim_end(), old);
    let (code, _, err) = run(&app.addr, &t, &["restore", "integration", &first[..8]]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(git_in(&repo, &["show", "main:integrations.yml"]), old);
    // commit: both files in one commit.
    let (code, out, err) = run(
        &app.addr,
        &t,
        &[
            "commit",
            "--integration",
            &path,
            "--configuration",
            &conf,
            "--force",
            "-m",
            "Both",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("commit "), "{out}");
    assert_eq!(
        git_in(
            &repo,
            &["diff-tree", "--no-commit-id", "--name-only", "-r", "main"]
        ),
        "integrations.yml"
    );
    // Exit codes: usage 2, token and permission 3, not found 4, unreachable 5.
    let other = common::sign_hs256(
        "another-secret-0123456789abcdef",
        &json!({"alg": "HS256", "typ": "JWT"}),
        &json!({"tenant_id": "globex", "permissions": ALL, "exp": common::now() + 600}),
    );
    let (reader, nobody) = (
        token("globex", &["jit.preferences.read"]),
        token("nobody", ALL),
    );
    for (sent, args, want) in [
        ("", vec!["get", "integration"], 2),
        (t.as_str(), vec!["put", "integration", &path], 2),
        (other.as_str(), vec!["get", "integration"], 3),
        (reader.as_str(), vec!["get", "integration"], 3),
        (nobody.as_str(), vec!["get", "integration"], 4),
        (t.as_str(), vec!["get", "integration", "--at", "0000000"], 4),
    ] {
        let (code, _, err) = run(&app.addr, sent, &args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(
            !err.is_empty() && !err.contains("Error {"),
            "a sentence: {err}"
        );
    }
    let (code, _, err) = run("http://127.0.0.1:9", &t, &["get", "integration"]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("cannot reach the service"), "{err}");
    let (code, out, _) = run(&app.addr, &t, &["put", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Examples:") && out.contains("Exit codes"),
        "{out}"
    );
}

/// A scripted `$EDITOR`: its Nth run saves the buffer it was given as `seen.N` in `state`,
/// then runs `step.N` (a shell script) on the buffer.
fn editor(state: &Path, steps: &[&str]) -> String {
    for (i, step) in steps.iter().enumerate() {
        std::fs::write(state.join(format!("step.{}", i + 1)), step).unwrap();
    }
    let script = state.join("editor.sh");
    std::fs::write(
        &script,
        format!(
            "n=$(( $(cat {s}/n 2>/dev/null || echo 0) + 1 ))\necho $n > {s}/n\ncp \"$1\" {s}/seen.$n\nsh {s}/step.$n \"$1\"\n",
            s = state.display()
        ),
    )
    .unwrap();
    format!("sh {}", script.display())
}

fn seen(state: &Path, n: usize) -> String {
    std::fs::read_to_string(state.join(format!("seen.{n}"))).unwrap()
}

fn edit(app: &TestApp, t: &str, file: &str, editor: &str) -> (i32, String) {
    // In a real terminal, as a person runs it; without tmux (not in CI) without one.
    if Command::new("tmux").arg("-V").output().is_ok() {
        return edit_in_tmux(app, t, file, editor);
    }
    common::skip_unless_ci("planfiles edit in a terminal", "tmux is not installed");
    let out = client(&app.addr, t, &["edit", file])
        .env("EDITOR", editor)
        .env_remove("VISUAL")
        .env("PLANFILES_BIN", env!("CARGO_BIN_EXE_planfiles"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`edit`] in a real terminal: a tmux session of its own, the editor's exit code and
/// stderr read from files when it ends (60 s at most).
fn edit_in_tmux(app: &TestApp, t: &str, file: &str, editor: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = (dir.path().join("code"), dir.path().join("err"));
    let socket = format!(
        "planfiles-test-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    );
    let inner = format!(
        "{} edit {file} 2>{}; echo $? > {}",
        env!("CARGO_BIN_EXE_planfiles"),
        err.display(),
        code.display()
    );
    let started = Command::new("tmux")
        .args(["-L", &socket, "new-session", "-d", "-x", "120", "-y", "40"])
        .args(["-e", &format!("PLANFILES_ADDR={}", app.addr)])
        .args(["-e", &format!("PLANFILES_TOKEN={t}")])
        .args(["-e", &format!("EDITOR={editor}")])
        .args([
            "-e",
            &format!("PLANFILES_BIN={}", env!("CARGO_BIN_EXE_planfiles")),
        ])
        .arg(inner)
        .status()
        .expect("tmux (.ci/run installs it)");
    assert!(started.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let code = loop {
        if let Ok(c) = std::fs::read_to_string(&code) {
            if let Ok(c) = c.trim().parse() {
                break c;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the edit in tmux did not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = Command::new("tmux")
        .args(["-L", &socket, "kill-server"])
        .stderr(Stdio::null())
        .status();
    (code, std::fs::read_to_string(err).unwrap_or_default())
}

/// globex's configuration file set to [`BASE`].
async fn set_base(app: &TestApp, t: &str) {
    let blob = git_in(
        &app.repo("globex"),
        &["rev-parse", "main:configuration.yml"],
    );
    let body = json!({"payload": BASE, "file_sha": blob});
    assert_eq!(app.put_configuration(t, &body).await.status(), 200);
}

const BASE: &str = "# scanned folders\nfolders:\n  - path: alpha\n  - path: middle1\n  - path: middle2\n  - path: beta\n";

/// Two people edit at once: the one who saves second loses nothing. Disjoint changes merge
/// (the merged text opens for review, then lands); overlapping ones open with conflict
/// markers, and what the user resolves lands. An unchanged buffer sends nothing.
#[tokio::test]
async fn an_edit_that_loses_a_race_is_merged_and_never_lost() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let repo = app.repo("globex");
    set_base(&app, &t).await;
    for (theirs, mine, resolve, want, conflict) in [
        // Disjoint: mine changes alpha, theirs beta.
        ("s/beta/beta-theirs/", "s/alpha/alpha-mine/", "true", "alpha-mine|beta-theirs", false),
        // Overlapping: both change alpha; the user keeps a line of their own.
        ("s/alpha/alpha-theirs/", "s/alpha/alpha-mine/", "sed -i '/^<<<<<<<\\|^=======\\|^>>>>>>>\\|alpha-theirs\\|alpha-mine/d; s/folders:/folders:\\n  - path: alpha-both/' \"$1\"", "alpha-both|beta", true),
    ] {
        let state = tempfile::tempdir().unwrap();
        let s = state.path();
        std::fs::write(s.join("theirs.yml"), BASE).unwrap();
        let step1 = format!(
            "sed -i '{theirs}' {s}/theirs.yml\n\"$PLANFILES_BIN\" put configuration {s}/theirs.yml --force >/dev/null\nsed -i '{mine}' \"$1\"\n",
            s = s.display()
        );
        let ed = editor(s, &[&step1, resolve]);
        let (code, err) = edit(&app, &t, "configuration", &ed);
        assert_eq!(code, 0, "{err}");
        let second = seen(s, 2);
        assert!(second.starts_with("# planfiles: configuration.yml changed since you read it"), "{second}");
        assert_eq!(second.contains("<<<<<<< yours"), conflict, "{second}");
        if conflict {
            assert!(second.contains("alpha-mine") && second.contains("alpha-theirs") && second.contains(">>>>>>> theirs"), "{second}");
        }
        let stored = git_in(&repo, &["show", "main:configuration.yml"]);
        for part in want.split('|') {
            assert!(stored.contains(part), "{part} in {stored}");
        }
        assert!(!stored.contains("planfiles:") && !stored.contains("<<<<"), "{stored}");
        set_base(&app, &t).await;
    }
    // An unchanged buffer sends nothing.
    let state = tempfile::tempdir().unwrap();
    let head = app.head("globex");
    let (code, err) = edit(&app, &t, "configuration", &editor(state.path(), &["true"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no change"), "{err}");
    assert_eq!(app.head("globex"), head);
}

/// A text the schemas refuse reopens with each violation on top, at its line in the buffer,
/// and the text as the user left it; the fixed text lands. A failure keeps the buffer.
#[tokio::test]
async fn a_refused_edit_reopens_with_the_reasons_and_the_text_intact() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("acme", ALL);
    let state = tempfile::tempdir().unwrap();
    let s = state.path();
    let ed = editor(
        s,
        &[
            "sed -i 's/\"123456789012\"/\"1234\"/' \"$1\"",
            "sed -i 's/\"1234\"/\"123456789099\"/' \"$1\"",
        ],
    );
    let (code, err) = edit(&app, &t, "integration", &ed);
    assert_eq!(code, 0, "{err}");
    let second = seen(s, 2);
    let lines: Vec<&str> = second.lines().collect();
    assert!(lines[0].starts_with("# planfiles: refused:"), "{second}");
    let note = lines
        .iter()
        .find(|l| l.starts_with("# planfiles: line ") && l.contains("/aws/0/account_id"))
        .unwrap();
    // "line N, column C": line N of the buffer is the refused one.
    let n: usize = note
        .split("line ")
        .nth(1)
        .unwrap_or_else(|| panic!("{second}"))
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        lines[n - 1].contains("account_id: \"1234\""),
        "{note} -> {}",
        lines[n - 1]
    );
    let stored = app.git("acme", &["show", "main:integrations.yml"]);
    assert!(
        stored.contains("\"123456789099\"") && !stored.contains("planfiles:"),
        "{stored}"
    );
    // A write the service refuses for good (here the token may only read): the buffer is
    // kept, its path printed, with the text as the user left it.
    let state = tempfile::tempdir().unwrap();
    let ed = editor(state.path(), &["sed -i 's/^aws:/aws: # mine/' \"$1\""]);
    let (code, err) = edit(
        &app,
        &token("acme", &["jit.integrations.read"]),
        "integration",
        &ed,
    );
    assert_eq!(code, 3, "{err}");
    let kept = err.split("your text is kept in ").nth(1).unwrap().trim();
    let text = std::fs::read_to_string(kept).unwrap();
    assert!(text.starts_with("aws: # mine"), "{text}");
    std::fs::remove_file(kept).unwrap();
}

/// `watch` through a link cut 1,000 times at random moments while writes (of one file and of
/// both) land: every (commit, file) of `main`'s first-parent line since it started is
/// printed exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_every_event_once_in_order_through_a_link_cut_1000_times() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let relay = std::sync::Arc::new(Relay::start(0, app.addr.trim_start_matches("http://")));
    let start = app.head("globex");
    let mut watcher = Reaped(
        client(&relay.url(), &t, &["watch", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = watcher.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // It has connected once it says where it watches from; the rest of its stderr is kept.
    let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    {
        use std::io::BufRead;
        let mut stderr = std::io::BufReader::new(watcher.stderr.take().unwrap());
        let mut first = String::new();
        stderr.read_line(&mut first).unwrap();
        assert!(first.contains("watching main from"), "{first}");
        let said = said.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                said.lock().unwrap().push_str(&(line + "\n"));
            }
        });
    }
    let cutter = {
        let relay = relay.clone();
        std::thread::spawn(move || {
            let mut cuts = 0;
            for _ in 0..30_000 {
                if cuts >= 1_000 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(
                    10 + rand::random::<u64>() % 60,
                ));
                cuts += usize::from(relay.cut_all() > 0);
            }
            cuts
        })
    };
    let mut i = 0;
    while !cutter.is_finished() {
        i += 1;
        let res = if i % 3 == 0 {
            let conf = git_in(
                &app.repo("globex"),
                &["rev-parse", "main:configuration.yml"],
            );
            app.post_commits(
                &t,
                "",
                &json!({"integration-file": {"content": {"n": i}}, "configuration-file": {"payload": {"folders": [{"path": format!("p{i}")}]}, "file_sha": conf}}),
            )
            .await
        } else {
            app.put_integration(&t, &json!({"content": {"n": i}})).await
        };
        assert_eq!(res.status(), 200);
        tokio::time::sleep(std::time::Duration::from_millis(
            20 + rand::random::<u64>() % 60,
        ))
        .await;
    }
    let cuts = tokio::task::spawn_blocking(move || cutter.join().unwrap())
        .await
        .unwrap();
    assert!(cuts >= 1_000, "{cuts} cuts");
    // What main's line says, oldest first: each commit's files in the stream's order.
    let repo = app.repo("globex");
    let mut want = Vec::new();
    for c in git_in(
        &repo,
        &[
            "rev-list",
            "--first-parent",
            "--reverse",
            &format!("{start}..main"),
        ],
    )
    .lines()
    {
        let changed = git_in(
            &repo,
            &["diff-tree", "--no-commit-id", "--name-only", "-r", c],
        );
        for (name, event) in [
            ("integrations.yml", "integration-file"),
            ("configuration.yml", "configuration-file"),
        ] {
            if changed.lines().any(|l| l == name) {
                want.push((c.to_owned(), event.to_owned()));
            }
        }
    }
    assert_eq!(
        want.len(),
        i + i / 3,
        "{i} commits, a third of them of both files"
    );
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while got.len() < want.len() && std::time::Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            let v: Value = serde_json::from_str(&line).unwrap();
            got.push((
                v["commit_sha"].as_str().unwrap().to_owned(),
                v["event"].as_str().unwrap().to_owned(),
            ));
        }
    }
    // Nothing more comes (no repeat after the last).
    std::thread::sleep(std::time::Duration::from_millis(500));
    while let Ok(line) = rx.try_recv() {
        got.push(("extra".into(), line));
    }
    let alive = watcher.try_wait().unwrap().is_none();
    let _ = watcher.kill();
    assert!(alive, "the watcher ended: {}", said.lock().unwrap());
    assert_eq!(got, want, "{}", said.lock().unwrap());
}

/// The mirror's folder: its two files and the commit beside them.
fn mirrored(dir: &Path) -> (String, String, String) {
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap_or_default();
    (
        read("integrations.yml"),
        read("configuration.yml"),
        read(".planfiles-commit").trim().to_owned(),
    )
}

/// Waits until `check` holds of the mirror's folder (10 s at most).
fn until(dir: &Path, what: &str, check: impl Fn(&(String, String, String)) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !check(&mirrored(dir)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {:?}",
            mirrored(dir)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `mirror` keeps both files as `main` has them; a plain-git commit that breaks the YAML
/// rules is not applied (the last good file stays); killed with -9 mid-update and started
/// again it resumes from its commit with a whole, valid pair; while the service is down the
/// files stay and it says it is stale; it ends at main's last valid versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_keeps_the_last_good_files_through_kills_restarts_and_a_broken_commit() {
    let dir = common::process::data_dir_with_fixture();
    let mut server = common::process::serve(dir.path(), &[]);
    let addr = server.addr.clone();
    let repo = dir.path().join("data/tenants/acme.git");
    let t = token("acme", ALL);
    let out = tempfile::tempdir().unwrap();
    let m = out.path().join("plans");
    let start = |addr: &str| {
        Reaped(
            client(addr, &t, &["mirror", "--to", m.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    };
    let show = |f: &str| git_in(&repo, &["show", &format!("main:{f}")]) + "\n";
    let mut mirror = start(&addr);
    until(&m, "the first sync", |(i, c, commit)| {
        *i == show("integrations.yml")
            && *c == show("configuration.yml")
            && *commit == git_in(&repo, &["rev-parse", "main"])
    });
    for i in 0..5 {
        assert_eq!(
            server
                .put_integration("acme", json!({"n": i}))
                .await
                .status(),
            200
        );
    }
    until(&m, "five writes", |(i, _, _)| {
        *i == show("integrations.yml")
    });
    // A plain-git commit that breaks the YAML rules: not applied, the last good file stays.
    let good = show("integrations.yml");
    common::commit_outside(&repo, "integrations.yml", "- not a mapping\n");
    let broken = git_in(&repo, &["rev-parse", "main"]);
    until(&m, "the broken commit passed", |(_, _, commit)| {
        *commit == broken
    });
    assert_eq!(mirrored(&m).0, good);
    // A mirror that starts now, on the broken head, takes the newest valid version.
    let fresh = out.path().join("fresh");
    let mut second = Reaped(
        client(&addr, &t, &["mirror", "--to", fresh.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    until(
        &fresh,
        "a first start on a broken head",
        |(i, c, commit)| *i == good && *c == show("configuration.yml") && *commit == broken,
    );
    let _ = second.kill();
    let _ = second.wait();
    // kill -9 while writes land; every moment the folder holds versions main has had.
    let writes = {
        let url = server.url("/plans/integration-file");
        let t = t.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                let res = reqwest::Client::new()
                    .put(&url)
                    .bearer_auth(&t)
                    .json(&json!({"content": {"again": i}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 200);
            }
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let _ = mirror.kill();
    let _ = mirror.wait();
    let (i, c, _) = mirrored(&m);
    for (name, text) in [("integrations.yml", &i), ("configuration.yml", &c)] {
        let hashed = common::run_with_stdin(
            Command::new("git").args(["hash-object", "--stdin"]),
            text.as_bytes(),
        );
        let blob = String::from_utf8_lossy(&hashed.stdout).trim().to_owned();
        assert!(
            common::git_succeeds(&repo, &["cat-file", "-e", &blob]),
            "{name} is a version main has had, whole: {text:?}"
        );
    }
    writes.await.unwrap();
    let mut mirror = start(&addr);
    until(&m, "resumed to main", |(i, _, commit)| {
        *i == show("integrations.yml") && *commit == git_in(&repo, &["rev-parse", "main"])
    });
    // The service down: the files stay; it says it is stale; back, it catches up.
    let before = mirrored(&m);
    server.kill9();
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(mirrored(&m), before);
    let mut restarted = common::process::serve(
        dir.path(),
        &[("PLANFILES_BIND", addr.trim_start_matches("http://"))],
    );
    assert_eq!(
        restarted
            .put_integration("acme", json!({"back": true}))
            .await
            .status(),
        200
    );
    until(&m, "after the restart", |(i, _, commit)| {
        *i == show("integrations.yml") && *commit == git_in(&repo, &["rev-parse", "main"])
    });
    let _ = mirror.kill();
    let _ = mirror.wait();
    let err = {
        use std::io::Read;
        let mut s = String::new();
        mirror
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    assert!(err.contains("resumes after"), "{err}");
    assert!(err.contains("stale since"), "{err}");
    restarted.kill9();
}

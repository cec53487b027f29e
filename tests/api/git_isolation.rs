//! Clones cannot starve one another or see the service's environment: stalled clients lose
//! their turn, waits end in 503 `busy`, a tenant gets at most half the turns, and `git
//! upload-pack` runs without the service's environment or `~/.gitconfig` (the real binary).
use crate::common;

use common::process::{data_dir_with_fixture, serve, Server};
use common::{git_in, token, SECRET};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const REPOS_READ: &str = "planfiles.repos.read";

/// Commits `mib` MiB of incompressible bytes to `main` with plain git and packs the
/// repository, so that a full clone is far larger than socket and pipe buffers.
fn make_big(repo: &Path, mib: usize) {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut bytes = Vec::with_capacity(mib << 20);
    while bytes.len() < mib << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    let file = repo.join("big.bin");
    std::fs::write(&file, &bytes).unwrap();
    let blob = git_in(repo, &["hash-object", "-w", file.to_str().unwrap()]);
    std::fs::remove_file(&file).unwrap();
    let mut entries = git_in(repo, &["ls-tree", "main"]);
    entries.push_str(&format!("\n100644 blob {blob}\tbig.bin\n"));
    let tree = common::git_stdin(repo, &["mktree"], &entries);
    let commit = git_in(repo, &["commit-tree", &tree, "-p", "main", "-m", "big"]);
    git_in(repo, &["update-ref", "refs/heads/main", &commit]);
    git_in(repo, &["repack", "-adq"]);
}

/// The server over the fixture with `acme` and `globex` made big, and these clone limits.
fn server(
    stall_secs: u64,
    queue_secs: u64,
    extra_env: &[(&str, &str)],
) -> (tempfile::TempDir, Server) {
    server_with(&["acme", "globex"], stall_secs, queue_secs, extra_env)
}

fn server_with(
    big: &[&str],
    stall_secs: u64,
    queue_secs: u64,
    extra_env: &[(&str, &str)],
) -> (tempfile::TempDir, Server) {
    let dir = data_dir_with_fixture();
    for tenant in big {
        make_big(&dir.path().join(format!("data/tenants/{tenant}.git")), 16);
    }
    let config = dir.path().join("limits.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nclone_stall_secs = {stall_secs}\nqueue_timeout_secs = {queue_secs}\n\
             [storage]\nseed_from = \"\"\n"
        ),
    )
    .unwrap();
    let mut env = vec![("PLANFILES_CONFIG", config.to_str().unwrap())];
    env.extend_from_slice(extra_env);
    let server = serve(dir.path(), &env);
    (dir, server)
}

fn pkt(text: &str) -> String {
    format!("{:04x}{text}", text.len() + 4)
}

/// Sends a full-clone upload-pack request for `tenant` over a raw connection that is then
/// never read: the client of a stalled backup job.
fn stalled_clone(server: &Server, dir: &Path, tenant: &str, v2: bool) -> TcpStream {
    let head = git_in(
        &dir.join(format!("data/tenants/{tenant}.git")),
        &["rev-parse", "main"],
    );
    let (body, protocol) = if v2 {
        (
            format!(
                "{}0001{}{}0000",
                pkt("command=fetch\n"),
                pkt(&format!("want {head}\n")),
                pkt("done\n")
            ),
            "Git-Protocol: version=2\r\n",
        )
    } else {
        (
            format!(
                "{}0000{}",
                pkt(&format!("want {head} side-band-64k ofs-delta\n")),
                pkt("done\n")
            ),
            "",
        )
    };
    raw_post(server, tenant, protocol, &body)
}

fn raw_post(server: &Server, tenant: &str, headers: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr.trim_start_matches("http://")).unwrap();
    write!(
        stream,
        "POST /git/{tenant}.git/git-upload-pack HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/x-git-upload-pack-request\r\n\
         Connection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        token(tenant, &[REPOS_READ]),
        body.len()
    )
    .unwrap();
    stream
}

/// The running `git upload-pack` children of the server (not zombies).
fn upload_packs(server: &Server) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let mut rest = stat[close + 1..].split_whitespace();
        let (state, ppid) = (rest.next(), rest.next().and_then(|p| p.parse::<u32>().ok()));
        if comm == "git" && ppid == Some(server.pid()) && state != Some("Z") {
            out.push(pid);
        }
    }
    out
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `git clone` of `tenant` from the server, as a backup job runs it.
fn clone(server: &Server, tenant: &str, into: &Path) -> Output {
    Command::new("git")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args([
            "-c",
            &format!(
                "http.extraHeader=Authorization: Bearer {}",
                token(tenant, &[REPOS_READ])
            ),
            "clone",
            "-q",
            "--mirror",
            &server.url(&format!("/git/{tenant}.git")),
            into.to_str().unwrap(),
        ])
        .output()
        .unwrap()
}

fn info_refs(server: &Server, tenant: &str) -> reqwest::blocking::Response {
    reqwest::blocking::Client::new()
        .get(server.url(&format!(
            "/git/{tenant}.git/info/refs?service=git-upload-pack"
        )))
        .bearer_auth(token(tenant, &[REPOS_READ]))
        .send()
        .unwrap()
}

#[test]
fn stalled_clients_lose_their_turn_and_another_tenant_clones() {
    let (dir, server) = server(2, 15, &[]);
    // Four stalled clones of each big tenant take all eight turns.
    let stalled: Vec<TcpStream> = ["acme", "globex"]
        .iter()
        .flat_map(|t| {
            (0..4)
                .map(|_| stalled_clone(&server, dir.path(), t, false))
                .collect::<Vec<_>>()
        })
        .collect();
    wait_for("8 upload-packs", Duration::from_secs(20), || {
        upload_packs(&server).len() == 8
    });

    let work = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = clone(&server, "initech", &work.path().join("initech"));
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        git_in(&work.path().join("initech"), &["rev-parse", "main"]),
        git_in(
            &dir.path().join("data/tenants/initech.git"),
            &["rev-parse", "main"]
        )
    );
    // It waited for the stall time of the others, not for the queue timeout.
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(15),
        "{took:?}"
    );

    // Every stalled git is stopped, and each stall is logged.
    wait_for(
        "the stalled upload-packs to end",
        Duration::from_secs(10),
        || upload_packs(&server).is_empty(),
    );
    let logged = |what: &str| {
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    wait_for("8 stall lines", Duration::from_secs(5), || {
        logged("clone stalled") == 8
    });

    // A stalled client that reads again gets part of a pack and a cut connection, not a
    // complete response.
    for mut s in stalled {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        assert!(got.starts_with(b"HTTP/1.1 200"));
        assert!(
            !got.ends_with(b"\r\n0\r\n\r\n"),
            "a stalled response ended as if complete"
        );
        assert!(got.len() < 16 << 20, "{}", got.len());
    }
}

#[test]
fn a_wait_for_a_turn_ends_in_503_busy_with_retry_after() {
    let (dir, server) = server(600, 1, &[]);
    let _stalled: Vec<TcpStream> = ["acme", "globex"]
        .iter()
        .flat_map(|t| {
            (0..4)
                .map(|_| stalled_clone(&server, dir.path(), t, false))
                .collect::<Vec<_>>()
        })
        .collect();
    wait_for("8 upload-packs", Duration::from_secs(20), || {
        upload_packs(&server).len() == 8
    });

    // The ninth, of a third tenant: the ref advertisement and an upload-pack request.
    let started = Instant::now();
    let res = info_refs(&server, "initech");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    let body: serde_json::Value = res.json().unwrap();
    assert_eq!(body["code"], "busy", "{body}");

    let mut post = raw_post(
        &server,
        "initech",
        "",
        &format!(
            "{}0000",
            pkt("want 0123456789abcdef0123456789abcdef01234567\n")
        ),
    );
    let mut answer = String::new();
    post.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = post.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1\r\n"),
        "{answer}"
    );

    // The real client shows why.
    let work = tempfile::tempdir().unwrap();
    let out = clone(&server, "initech", &work.path().join("x"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no clone turn within 1s"), "{stderr}");
    // Nothing else was started or stopped.
    assert_eq!(upload_packs(&server).len(), 8);
}

#[test]
fn one_tenant_holds_at_most_half_of_the_turns() {
    let (dir, server) = server(600, 1, &[]);
    let _stalled: Vec<TcpStream> = (0..6)
        .map(|_| stalled_clone(&server, dir.path(), "acme", false))
        .collect();
    wait_for("4 upload-packs", Duration::from_secs(20), || {
        upload_packs(&server).len() == 4
    });
    // acme's fifth and sixth wait for acme's turns, not all turns, and give up.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(upload_packs(&server).len(), 4);
    assert_eq!(info_refs(&server, "acme").status(), 503);

    // Another tenant clones at once.
    let work = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = clone(&server, "globex", &work.path().join("globex"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    git_in(&work.path().join("globex"), &["fsck", "--no-dangling"]);
}

#[test]
fn upload_pack_sees_no_secret_no_git_variable_and_no_home_config() {
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().join("home");
    let hooked = scratch.path().join("hook-ran");
    std::fs::create_dir_all(&home).unwrap();
    // A ~/.gitconfig whose hook would break every clone, and leave a mark.
    let hook = scratch.path().join("hook.sh");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", hooked.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        format!("[uploadpack]\n\tpackObjectsHook = {}\n", hook.display()),
    )
    .unwrap();
    let trace = scratch.path().join("trace");
    let (dir, server) = server_with(
        &["acme"],
        600,
        10,
        &[
            ("HOME", home.to_str().unwrap()),
            ("GIT_TRACE", trace.to_str().unwrap()),
            ("GIT_TRACE_PACKET", trace.to_str().unwrap()),
        ],
    );

    let work = tempfile::tempdir().unwrap();
    let out = clone(&server, "initech", &work.path().join("initech"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    git_in(&work.path().join("initech"), &["fsck", "--no-dangling"]);
    assert!(!trace.exists(), "git upload-pack saw GIT_TRACE");
    assert!(!hooked.exists(), "git upload-pack read ~/.gitconfig");

    // The environment of a running upload-pack (a v2 fetch held open).
    let _stalled = stalled_clone(&server, dir.path(), "acme", true);
    wait_for("an upload-pack", Duration::from_secs(20), || {
        upload_packs(&server).len() == 1
    });
    let pid = upload_packs(&server)[0];
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert!(!names.iter().any(|v| v.contains(SECRET)), "{names:?}");
    names.sort();
    let keys: Vec<&str> = names.iter().map(|v| v.split('=').next().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_NOSYSTEM",
            "GIT_PROTOCOL",
            "HOME",
            "PATH"
        ],
        "{names:?}"
    );
    assert!(names.contains(&"GIT_PROTOCOL=version=2".to_owned()));
    assert!(names.contains(&"GIT_CONFIG_GLOBAL=/dev/null".to_owned()));
}

#[test]
fn what_git_echoes_of_a_request_cannot_forge_a_log_line() {
    let (_dir, server) = server_with(&[], 30, 10, &[("PLANFILES_LOG_FORMAT", "text")]);
    // Protocol v2 upload-pack dies with "unexpected line: '<the client's text>'".
    let body = format!(
        "{}0001{}0000",
        pkt("command=fetch\n"),
        pkt("bogus\nFORGED INFO planfiles: token accepted\r\n")
    );
    let mut post = raw_post(&server, "initech", "Git-Protocol: version=2\r\n", &body);
    let mut answer = String::new();
    post.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = post.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let logged = |what: &str| {
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .cloned()
            .collect::<Vec<_>>()
    };
    wait_for(
        "git's complaint in the log",
        Duration::from_secs(10),
        || !logged("unexpected line").is_empty(),
    );
    let lines = logged("FORGED");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("git upload-pack failed"), "{lines:?}");
    assert!(lines[0].contains("bogus\\nFORGED"), "{lines:?}");
    assert!(!lines[0].contains('\r'), "{lines:?}");
}

/// A git that fills its stderr pipe before it reads its request must not deadlock the
/// exchange: the request, stderr and the answer are all moved at once.
#[test]
fn a_git_that_talks_before_it_listens_does_not_deadlock() {
    let scratch = tempfile::tempdir().unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("git");
    std::fs::write(
        &fake,
        "#!/bin/sh\nhead -c 1048576 /dev/zero | tr '\\0' x >&2\nwc -c\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let (_dir, server) = server_with(&[], 30, 10, &[("PATH", path.as_str())]);

    // 1 MiB of request, far more than a pipe holds.
    let have = pkt("have 0123456789abcdef0123456789abcdef01234567\n");
    let body = format!("{}0001{}0000", pkt("command=fetch\n"), have.repeat(20_000));
    let mut post = raw_post(&server, "initech", "", &body);
    post.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = String::new();
    let _ = post.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The fake git read the whole request: it answered with its length.
    assert!(answer.contains(&format!("{}\n", body.len())), "{answer}");
}

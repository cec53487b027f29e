//! Clone and fetch over git smart HTTP with the real git client; push is refused.
use crate::common;

use common::{git_in, git_succeeds, problem, token, TestApp, ALL};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};

const REPOS_READ: &str = "planfiles.repos.read";

fn git(dir: &Path, token: &str, args: &[&str]) -> Output {
    Command::new("git")
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .args([
            "-c",
            &format!("http.extraHeader=Authorization: Bearer {token}"),
        ])
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `git log` of main as one string: hashes, authors, dates, messages.
fn log(repo: &Path) -> String {
    git_in(repo, &["log", "--format=%H %T %an <%ae> %ad%n%B", "main"])
}

#[tokio::test]
async fn a_backup_job_clones_and_fetches_with_the_real_git_client() {
    let app = TestApp::spawn().await;
    let t = token("acme", &[REPOS_READ]);
    let work = tempfile::tempdir().unwrap();
    let url = app.url("/git/acme.git");
    for (name, protocol) in [("v2", "2"), ("v0", "0")] {
        let clone = work.path().join(name);
        ok(git(
            work.path(),
            &t,
            &[
                "-c",
                &format!("protocol.version={protocol}"),
                "clone",
                "-q",
                "--mirror",
                &url,
                clone.to_str().unwrap(),
            ],
        ));
        assert_eq!(log(&clone), log(&app.repo("acme")), "protocol {protocol}");
        git_in(&clone, &["fsck", "--strict", "--no-dangling"]);
    }

    // New writes arrive with a fetch; enough history that git gzips its request.
    let writer = token("acme", ALL);
    for n in 0..40 {
        let sha = app.blob("acme", "integrations.yml");
        let res = app
            .put_integration(&writer, &json!({"content": {"n": n}, "file_sha": sha}))
            .await;
        assert_eq!(res.status(), 200);
    }
    let clone = work.path().join("v2");
    ok(git(&clone, &t, &["fetch", "-q", "origin"]));
    assert_eq!(log(&clone), log(&app.repo("acme")));
    for n in 0..3 {
        app.put_integration(
            &writer,
            &json!({"content": {"again": n}, "file_sha": app.blob("acme", "integrations.yml")}),
        )
        .await;
        ok(git(&clone, &t, &["fetch", "-q", "origin"]));
    }
    assert_eq!(log(&clone), log(&app.repo("acme")));
    git_in(&clone, &["fsck", "--strict", "--no-dangling"]);
}

/// A token that may clone but write neither file cannot push: git shows why, and nothing
/// changes.
#[tokio::test]
async fn a_push_without_a_write_permission_is_refused_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let head = app.head("acme");
    let work = tempfile::tempdir().unwrap();
    let t = token("acme", &[REPOS_READ]);
    ok(git(
        work.path(),
        &t,
        &["clone", "-q", &app.url("/git/acme.git"), "acme"],
    ));
    let clone = work.path().join("acme");
    std::fs::write(clone.join("integrations.yml"), "pushed: true\n").unwrap();
    ok(git(
        &clone,
        &t,
        &[
            "-c",
            "user.name=x",
            "-c",
            "user.email=x@x",
            "commit",
            "-qam",
            "push me",
        ],
    ));
    let out = git(&clone, &t, &["push", "origin", "main"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("remote: planfiles: the token lacks the permission jit.integrations.write"),
        "git shows the reason: {stderr}"
    );
    assert_eq!(app.head("acme"), head);
}

/// One request to a git route and what it must answer.
struct Case {
    name: &'static str,
    method: &'static str,
    path: String,
    /// The `Content-Type` of a POST (the body is always a valid upload-pack request).
    content_type: Option<&'static str>,
    token: Option<String>,
    status: u16,
    code: &'static str,
    /// The `WWW-Authenticate` header, when the answer must carry one.
    challenge: Option<String>,
}

/// The contract's order on all three git routes: route (404), token (401), tenant (403
/// `wrong_tenant`, 404 `tenant_not_found`), permission (403 `insufficient_scope`), then the
/// request itself (`service`, push refused, media type). Each row breaks several rules at once,
/// so it is answered by the first one in that order. A refused request carries no pack.
#[tokio::test]
async fn git_routes_check_route_token_tenant_permission_then_the_request() {
    let app = TestApp::spawn().await;
    let req_type = "application/x-git-upload-pack-request";
    let want = format!("want {}\n", app.head("acme"));
    let request_body = format!("{:04x}{want}00000009done\n", want.len() + 4);
    let bad_signature = common::sign_hs256(
        "another-secret-0123456789",
        &json!({"alg": "HS256"}),
        &json!({"tenant_id": "acme", "permissions": [REPOS_READ], "exp": common::now() + 600}),
    );
    let reader = token("acme", &[REPOS_READ]);
    let other_tenant = token("globex", &[REPOS_READ]);
    let no_permission = token("acme", ALL);
    let ghost = token("ghost", &[REPOS_READ]);
    let ghost_no_permission = token("ghost", ALL);
    let bare = Some("Bearer".to_string());
    let invalid = Some("Bearer error=\"invalid_token\"".to_string());
    let scope = Some(format!(
        "Bearer error=\"insufficient_scope\", scope=\"{REPOS_READ}\""
    ));

    // (method, route under /git/<repo>, content type): the request each route serves, with
    // the request-level fault it is given in the rows that must not get that far.
    let routes: [(&str, &str, Option<&str>); 3] = [
        ("GET", "info/refs?service=git-upload-pack", None),
        ("POST", "git-upload-pack", Some(req_type)),
        ("POST", "git-receive-pack", Some(req_type)),
    ];
    // A push needs a write permission (the reader lacks it); a clone, planfiles.repos.read.
    let push_scope =
        Some("Bearer error=\"insufficient_scope\", scope=\"jit.integrations.write\"".to_string());
    let mut cases = Vec::new();
    for (method, route, content_type) in routes {
        let (no_permission, scope) = if route == "git-receive-pack" {
            (&reader, &push_scope)
        } else {
            (&no_permission, &scope)
        };
        let at = |repo: &str| format!("/git/{repo}/{route}");
        // The request-level fault of this route, so that each row below also has it.
        let (faulty_path, faulty_type) = match route {
            r if r.starts_with("info/refs") => ("info/refs".to_string(), None),
            "git-upload-pack" => ("git-upload-pack".to_string(), Some("text/plain")),
            r => (r.to_string(), content_type),
        };
        let faulty = |repo: &str| format!("/git/{repo}/{faulty_path}");
        let row = |name, path: String, ct, token: Option<&String>, status, code, challenge| Case {
            name,
            method,
            path,
            content_type: ct,
            token: token.cloned(),
            status,
            code,
            challenge,
        };
        cases.extend([
            row(
                "not <tenant>.git, no token",
                at("acme"),
                content_type,
                None,
                404,
                "not_found",
                None,
            ),
            row(
                "'..' as the repo, no token",
                at("..%2Facme.git"),
                content_type,
                None,
                404,
                "not_found",
                None,
            ),
            row(
                "no token",
                at("acme.git"),
                content_type,
                None,
                401,
                "unauthorized",
                bare.clone(),
            ),
            row(
                "no token, faulty request",
                faulty("acme.git"),
                faulty_type,
                None,
                401,
                "unauthorized",
                bare.clone(),
            ),
            row(
                "bad signature",
                at("acme.git"),
                content_type,
                Some(&bad_signature),
                401,
                "invalid_token",
                invalid.clone(),
            ),
            row(
                "bad signature, faulty request",
                faulty("acme.git"),
                faulty_type,
                Some(&bad_signature),
                401,
                "invalid_token",
                invalid.clone(),
            ),
            row(
                "another tenant's token",
                at("acme.git"),
                content_type,
                Some(&other_tenant),
                403,
                "wrong_tenant",
                None,
            ),
            row(
                "another tenant's token, faulty request",
                faulty("acme.git"),
                faulty_type,
                Some(&other_tenant),
                403,
                "wrong_tenant",
                None,
            ),
            row(
                "unknown tenant",
                at("ghost.git"),
                content_type,
                Some(&ghost),
                404,
                "tenant_not_found",
                None,
            ),
            row(
                "unknown tenant, no permission, faulty request",
                faulty("ghost.git"),
                faulty_type,
                Some(&ghost_no_permission),
                404,
                "tenant_not_found",
                None,
            ),
            row(
                "no permission",
                at("acme.git"),
                content_type,
                Some(no_permission),
                403,
                "insufficient_scope",
                scope.clone(),
            ),
            row(
                "no permission, faulty request",
                faulty("acme.git"),
                faulty_type,
                Some(no_permission),
                403,
                "insufficient_scope",
                scope.clone(),
            ),
        ]);
    }
    // The request itself, once everything before it passed.
    let ok_token = Some(reader.clone());
    let request_rows = [
        (
            "info/refs without service",
            "GET",
            "/git/acme.git/info/refs",
            None,
            400,
            "invalid_query",
        ),
        (
            "info/refs for receive-pack",
            "GET",
            "/git/acme.git/info/refs?service=git-receive-pack",
            None,
            403,
            "insufficient_scope",
        ),
        (
            "receive-pack",
            "POST",
            "/git/acme.git/git-receive-pack",
            Some(req_type),
            403,
            "insufficient_scope",
        ),
        (
            "upload-pack, another media type",
            "POST",
            "/git/acme.git/git-upload-pack",
            Some("text/plain"),
            415,
            "unsupported_media_type",
        ),
    ];
    for (name, method, path, content_type, status, code) in request_rows {
        cases.push(Case {
            name,
            method,
            path: path.into(),
            content_type,
            token: ok_token.clone(),
            status,
            code,
            // The reader may clone, not push.
            challenge: (code == "insufficient_scope").then(|| push_scope.clone().unwrap()),
        });
    }

    for case in cases {
        let what = format!("{} {} ({})", case.method, case.path, case.name);
        let mut req = app
            .client
            .request(case.method.parse().unwrap(), app.url(&case.path));
        if case.method == "POST" {
            req = req.body(request_body.clone());
        }
        if let Some(ct) = case.content_type {
            req = req.header("content-type", ct);
        }
        if let Some(t) = &case.token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.unwrap();
        let challenge = res
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(challenge, case.challenge, "{what}");
        let status = res.status().as_u16();
        let bytes = res.bytes().await.unwrap();
        assert!(
            !bytes.windows(4).any(|w| w == b"PACK"),
            "{what}: a refused request carries a pack"
        );
        let body: serde_json::Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{what}: not a problem ({e}): {bytes:?}"));
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (case.status, case.code),
            "{what}"
        );
    }

    // The same token and body are served once every check passes.
    let res = app
        .client
        .post(app.url("/git/acme.git/git-upload-pack"))
        .bearer_auth(&reader)
        .header("content-type", req_type)
        .body(request_body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let bytes = res.bytes().await.unwrap();
    assert!(bytes.windows(4).any(|w| w == b"PACK"));
}

#[tokio::test]
async fn clone_needs_a_token_of_that_tenant_with_repos_read() {
    let app = TestApp::spawn().await;
    let refs = "/git/acme.git/info/refs?service=git-upload-pack";
    let res = app
        .client
        .get(app.url(refs))
        .bearer_auth(token("acme", &[REPOS_READ]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-type"],
        "application/x-git-upload-pack-advertisement"
    );
    let body = res.bytes().await.unwrap();
    assert!(body.starts_with(b"001e# service=git-upload-pack\n0000"));
    assert!(String::from_utf8_lossy(&body).contains(&app.head("acme")));

    // The real client fails to clone without a token, with another tenant's token, without
    // the permission and with an expired token, has nothing of the repository afterwards,
    // and prints why as the server's `remote:` lines.
    let work = tempfile::tempdir().unwrap();
    let url = app.url("/git/acme.git");
    let expired = common::sign_hs256(
        common::SECRET,
        &json!({"alg": "HS256", "typ": "JWT"}),
        &json!({"tenant_id": "acme", "permissions": [REPOS_READ], "exp": common::now() - 3600}),
    );
    let refused: [(&str, Option<String>, &str); 4] = [
        (
            "no token",
            None,
            "remote: planfiles: a bearer token is required",
        ),
        (
            "another tenant",
            Some(token("globex", &[REPOS_READ])),
            "remote: planfiles: ",
        ),
        (
            "no permission",
            Some(token("acme", ALL)),
            "remote: planfiles: the token lacks the permission planfiles.repos.read",
        ),
        (
            "expired",
            Some(expired.clone()),
            "remote: planfiles: the token is not valid",
        ),
    ];
    for (i, (name, t, want)) in refused.into_iter().enumerate() {
        let dir = format!("x{i}");
        let mut cmd = Command::new("git");
        cmd.current_dir(work.path())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "true");
        if let Some(t) = &t {
            cmd.args(["-c", &format!("http.extraHeader=Authorization: Bearer {t}")]);
        }
        let out = cmd.args(["clone", "-q", &url, &dir]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}");
        assert!(!work.path().join(&dir).exists(), "{name}");
        assert!(stderr.contains(want), "{name}: {stderr}");
    }
    // The documented clone keeps its token in .git/config; once it has expired, a fetch says
    // so and how to refresh it, and git never falls back to asking for a username.
    ok(git(
        work.path(),
        &token("acme", &[REPOS_READ]),
        &["clone", "-q", &url, "kept"],
    ));
    let kept = work.path().join("kept");
    let in_clone = |args: &[&str]| {
        Command::new("git")
            .current_dir(&kept)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_ASKPASS")
            .env_remove("SSH_ASKPASS")
            .args(args)
            .output()
            .unwrap()
    };
    let set = |t: &str| {
        ok(in_clone(&[
            "config",
            "http.extraHeader",
            &format!("Authorization: Bearer {t}"),
        ]))
    };
    set(&expired);
    let out = in_clone(&["fetch", "-q"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("remote: planfiles: the token is not valid"),
        "{stderr}"
    );
    assert!(stderr.contains("expired"), "{stderr}");
    assert!(
        stderr.contains("git config http.extraHeader"),
        "how to refresh: {stderr}"
    );
    assert!(
        !stderr.contains("Username"),
        "git asked for credentials: {stderr}"
    );
    set(&token("acme", &[REPOS_READ]));
    ok(in_clone(&["fetch", "-q"]));
}

#[tokio::test]
async fn gzipped_upload_pack_requests_are_read_and_bombs_refused() {
    use flate2::{write::GzEncoder, Compression};
    use std::io::Write;
    let app = TestApp::spawn().await;
    let t = token("acme", &[REPOS_READ]);
    let want = format!("want {}\n", app.head("acme"));
    let request = format!("{:04x}{want}00000009done\n", want.len() + 4);
    let gzip = |bytes: &[u8]| {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    };
    let post = |body: Vec<u8>, encoding: Option<&'static str>| {
        let mut req = app
            .client
            .post(app.url("/git/acme.git/git-upload-pack"))
            .bearer_auth(&t)
            .header("content-type", "application/x-git-upload-pack-request")
            .body(body);
        if let Some(e) = encoding {
            req = req.header("content-encoding", e);
        }
        req.send()
    };
    for (body, encoding) in [
        (request.clone().into_bytes(), None),
        (gzip(request.as_bytes()), Some("gzip")),
    ] {
        let res = post(body, encoding).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(
            res.headers()["content-type"],
            "application/x-git-upload-pack-result"
        );
        let bytes = res.bytes().await.unwrap();
        assert!(bytes.windows(4).any(|w| w == b"PACK"), "{encoding:?}");
    }
    // 9 MiB of zeros gzip to a few KiB: refused once past the limit, not inflated whole.
    let bomb = gzip(&vec![0u8; 9 * 1024 * 1024]);
    let (status, body) = problem(post(bomb, Some("gzip")).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (413, "payload_too_large")
    );
    let (status, body) = problem(post(b"not gzip".to_vec(), Some("gzip")).await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (400, "invalid_body")
    );
    let (status, _) = problem(post(request.into_bytes(), Some("br")).await.unwrap()).await;
    assert_eq!(status, 415);
}

#[tokio::test]
async fn more_concurrent_clones_than_upload_pack_turns_all_succeed() {
    let app = TestApp::spawn().await;
    let t = token("acme", &[REPOS_READ]);
    let work = tempfile::tempdir().unwrap();
    let url = app.url("/git/acme.git");
    let clones: Vec<_> = (0..12)
        .map(|i| {
            let (dir, t, url) = (work.path().to_owned(), t.clone(), url.clone());
            std::thread::spawn(move || {
                git(
                    &dir,
                    &t,
                    &["clone", "-q", "--mirror", &url, &format!("c{i}")],
                )
            })
        })
        .collect();
    for c in clones {
        ok(c.join().unwrap());
    }
    for i in 0..12 {
        assert_eq!(
            log(&work.path().join(format!("c{i}"))),
            log(&app.repo("acme"))
        );
    }
}

fn pkt(text: &str) -> String {
    format!("{:04x}{text}", text.len() + 4)
}

/// git upload-pack in protocol v2 would serve any object it holds; only ref tips and commits
/// reachable from them are served, in v0 (git's own check) and v2 alike.
#[tokio::test]
async fn a_want_that_no_ref_reaches_is_refused_in_v0_and_v2() {
    let app = TestApp::spawn().await;
    let t = token("acme", &[REPOS_READ]);
    let repo = app.repo("acme");
    let main = app.head("acme");
    let parent = app.git("acme", &["rev-parse", "main~1"]);
    let blob = app.blob("acme", "integrations.yml");
    // A commit that main does not reach, as a refused or undone write leaves one.
    let tree = app.git("acme", &["rev-parse", "main^{tree}"]);
    let hidden = git_in(&repo, &["commit-tree", &tree, "-p", "main", "-m", "secret"]);
    assert_eq!(app.head("acme"), main);
    let missing = "0123456789abcdef0123456789abcdef01234567";

    let post = |body: String, v2: bool| {
        let mut req = app
            .client
            .post(app.url("/git/acme.git/git-upload-pack"))
            .bearer_auth(&t)
            .header("content-type", "application/x-git-upload-pack-request")
            .body(body);
        if v2 {
            req = req.header("git-protocol", "version=2");
        }
        async move {
            let res = req.send().await.unwrap();
            assert_eq!(res.status(), 200);
            res.bytes().await.unwrap().to_vec()
        }
    };
    let v2 = |want: &str| {
        format!(
            "{}0001{}{}{}0000",
            pkt("command=fetch\n"),
            pkt(&format!("want {main}\n")),
            pkt(&format!("want {want}\n")),
            pkt("done\n")
        )
    };
    let v0 = |want: &str| {
        format!(
            "{}{}0000{}",
            pkt(&format!("want {main} side-band-64k\n")),
            pkt(&format!("want {want}\n")),
            pkt("done\n")
        )
    };
    let has_pack = |b: &[u8]| b.windows(4).any(|w| w == b"PACK");
    let cases: Vec<(&str, &str, bool, bool)> = vec![
        // (what, want, v2, served)
        ("unreachable commit", &hidden, true, false),
        ("unreachable commit", &hidden, false, false),
        ("blob of main", &blob, true, false),
        ("missing object", missing, true, false),
        ("missing object", missing, false, false),
        ("ancestor of main", &parent, true, true),
        ("main", &main, true, true),
        ("main", &main, false, true),
    ];
    for (what, want, is_v2, served) in cases {
        let body = post(if is_v2 { v2(want) } else { v0(want) }, is_v2).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(has_pack(&body), served, "{what} v2={is_v2}: {text}");
        if !served {
            assert!(
                text.contains(&format!("ERR upload-pack: not our ref {want}")),
                "{what} v2={is_v2}: {text}"
            );
        }
    }

    // A body that is not pkt-lines is not handed to git.
    let res = app
        .client
        .post(app.url("/git/acme.git/git-upload-pack"))
        .bearer_auth(&t)
        .header("content-type", "application/x-git-upload-pack-request")
        .body(format!("want {hidden}\n"))
        .send()
        .await
        .unwrap();
    let (status, body) = problem(res).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (400, "invalid_body")
    );

    // The real client: a normal clone and fetch work, a fetch of the hidden commit fails
    // with git's words (in v0 the client does not even ask: nothing allows unadvertised wants).
    let work = tempfile::tempdir().unwrap();
    let url = app.url("/git/acme.git");
    for protocol in ["2", "0"] {
        let dir = work.path().join(format!("v{protocol}"));
        let version = format!("protocol.version={protocol}");
        ok(git(
            work.path(),
            &t,
            &[
                "-c",
                &version,
                "clone",
                "-q",
                "--bare",
                &url,
                dir.to_str().unwrap(),
            ],
        ));
        ok(git(&dir, &t, &["-c", &version, "fetch", "-q", "origin"]));
        let out = git(
            &dir,
            &t,
            &["-c", &version, "fetch", "-q", "origin", &hidden],
        );
        assert!(!out.status.success(), "protocol {protocol}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let words = if protocol == "2" {
            format!("remote error: upload-pack: not our ref {hidden}")
        } else {
            format!("Server does not allow request for unadvertised object {hidden}")
        };
        assert!(stderr.contains(&words), "protocol {protocol}: {stderr}");
        assert!(
            !git_succeeds(&dir, &["cat-file", "-e", &hidden]),
            "protocol {protocol}"
        );
    }
}

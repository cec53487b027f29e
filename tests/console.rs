//! The console at `/ui/` (its page, assets, caching and security headers), CORS for listed origins, and the browser test of the console in headless Chromium.
mod common;

use common::{token, TestApp, ALL};
use std::collections::BTreeSet;

const CSP: &str = "default-src 'self'; frame-ancestors 'none'";

/// The headers every console answer carries (200, 304 and 308 alike).
fn assert_page_headers(res: &reqwest::Response, what: &str) {
    for (name, value) in [
        ("content-security-policy", CSP),
        ("referrer-policy", "no-referrer"),
        ("x-content-type-options", "nosniff"),
    ] {
        assert_eq!(header(res, name).as_deref(), Some(value), "{what}: {name}");
    }
}

fn header(res: &reqwest::Response, name: &str) -> Option<String> {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

/// The asset URLs the page names (`/ui/assets/<version>/<name>`), and those the modules import.
fn asset_links(text: &str, folder: &str) -> BTreeSet<String> {
    let mut links = BTreeSet::new();
    for part in text.split(folder).skip(1) {
        let name: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-' || *c == '_')
            .collect();
        links.insert(format!("{folder}{name}"));
    }
    for part in text.split("from \"./").skip(1) {
        links.insert(format!("{folder}{}", part.split('"').next().unwrap()));
    }
    links
}

/// Every console answer, the page and each asset it reaches: its security headers, caching,
/// type, 304 on a matching `If-None-Match`, and no token in any of it.
#[actix_web::test]
async fn every_console_answer_has_the_pages_headers_its_caching_and_no_token() {
    let app = TestApp::spawn().await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let moved = no_redirects.get(app.url("/ui")).send().await.unwrap();
    assert_eq!(moved.status(), 308);
    assert_eq!(header(&moved, "location").as_deref(), Some("/ui/"));
    assert_page_headers(&moved, "the 308 of /ui");

    let page = app.ui("/ui/", &[]).await;
    assert_eq!(page.status(), 200);
    assert_eq!(
        header(&page, "content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(header(&page, "cache-control").as_deref(), Some("no-cache"));
    assert_page_headers(&page, "/ui/");
    let etag = header(&page, "etag").expect("the page has an ETag");
    let html = page.text().await.unwrap();
    let folder = html
        .split("/ui/assets/")
        .nth(1)
        .map(|rest| format!("/ui/assets/{}/", rest.split('/').next().unwrap()))
        .expect("the page names its assets' folder");
    // Every script is a module loaded from a file: no inline script or style.
    for tag in html.split("<script").skip(1) {
        let (attributes, rest) = tag.split_once('>').unwrap();
        assert!(attributes.contains(" src=\""), "<script{attributes}>");
        assert!(
            rest.starts_with("</script>"),
            "an inline script: {rest:.40}"
        );
    }
    assert!(!html.contains(" style=") && !html.contains("<style"));

    let mut seen = BTreeSet::from(["/ui/".to_owned()]);
    let mut todo: Vec<String> = asset_links(&html, &folder).into_iter().collect();
    while let Some(path) = todo.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let res = app.ui(&path, &[]).await;
        assert_eq!(res.status(), 200, "{path}");
        assert_eq!(
            header(&res, "cache-control").as_deref(),
            Some("public, max-age=31536000, immutable"),
            "{path}"
        );
        let want = match path.rsplit('.').next().unwrap() {
            "js" => "text/javascript; charset=utf-8",
            "css" => "text/css; charset=utf-8",
            "svg" => "image/svg+xml",
            other => panic!("an unexpected asset kind {other}"),
        };
        assert_eq!(
            header(&res, "content-type").as_deref(),
            Some(want),
            "{path}"
        );
        let asset_etag = header(&res, "etag").unwrap();
        assert_page_headers(&res, &path);
        assert_eq!(header(&res, "vary").as_deref(), Some("accept-encoding"));
        assert!(header(&res, "content-encoding").is_none(), "{path}");
        let text = res.text().await.unwrap();
        assert!(!text.contains("eyJ"), "{path} holds something like a JWT");
        // Browsers take gzip: the same bytes compressed, under their own tag.
        let gz = app.ui(&path, &[("Accept-Encoding", "gzip, br")]).await;
        assert_eq!(
            header(&gz, "content-encoding").as_deref(),
            Some("gzip"),
            "{path}"
        );
        assert_ne!(header(&gz, "etag").unwrap(), asset_etag, "{path}");
        assert_page_headers(&gz, &format!("{path} gzipped"));
        let packed = gz.bytes().await.unwrap();
        let mut unpacked = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(&packed[..]),
            &mut unpacked,
        )
        .unwrap();
        assert_eq!(unpacked, text, "{path} gzipped is the same file");
        assert!(
            packed.len() < text.len() || text.len() < 300,
            "{path} is smaller gzipped"
        );
        todo.extend(asset_links(&text, &folder));
        let again = app.ui(&path, &[("If-None-Match", &asset_etag)]).await;
        assert_eq!(again.status(), 304, "{path}");
        assert_eq!(
            header(&again, "content-security-policy").as_deref(),
            Some(CSP)
        );
    }
    assert!(
        seen.len() >= 10,
        "the page reaches its modules, styles and icon: {seen:?}"
    );

    let again = app.ui("/ui/", &[("If-None-Match", &etag)]).await;
    assert_eq!(again.status(), 304);
    assert_eq!(
        header(&again, "content-security-policy").as_deref(),
        Some(CSP)
    );
    assert_eq!(
        header(&again, "referrer-policy").as_deref(),
        Some("no-referrer")
    );
    assert!(!html.contains("eyJ"));

    // Another build's folder, an unknown name, another method: problems, not pages.
    for (method, path, status) in [
        (
            "GET",
            "/ui/assets/0000000000000000/nothing.js".to_owned(),
            404,
        ),
        ("GET", format!("{folder}nothing.js"), 404),
        ("GET", format!("{folder}../index.html"), 404),
        ("PUT", "/ui/".to_owned(), 405),
        ("POST", format!("{folder}app.js"), 405),
    ] {
        let res = app.send(method, &path, "", None, &[]).await;
        assert_eq!(res.status(), status, "{method} {path}");
        assert_eq!(
            header(&res, "content-type").as_deref(),
            Some("application/problem+json"),
            "{method} {path}"
        );
    }
}

const LISTED: &str = "http://console.example:8081";

/// `GET /plans/integration-file` as a page on `origin` sends it.
async fn get_from(app: &TestApp, token: &str, origin: &str) -> reqwest::Response {
    app.send(
        "GET",
        "/plans/integration-file",
        token,
        None,
        &[("Origin", origin)],
    )
    .await
}

/// A listed origin's preflight is answered and cached, its requests may send the API's
/// headers and read the answers' headers; an origin not listed gets no CORS header at all.
#[actix_web::test]
async fn a_listed_origin_may_call_the_api_and_another_gets_no_cors_headers() {
    let app = TestApp::with()
        .cors_origins(vec![LISTED.into()])
        .spawn()
        .await;
    let all =
        "authorization,content-type,if-match,if-none-match,prefer,idempotency-key,x-request-id";
    let pre = app
        .preflight("/plans/integration-file", LISTED, "PUT", all)
        .await;
    assert_eq!(pre.status(), 200);
    assert_eq!(
        header(&pre, "access-control-allow-origin").as_deref(),
        Some(LISTED)
    );
    assert_eq!(
        header(&pre, "access-control-max-age").as_deref(),
        Some("3600")
    );
    let allowed = header(&pre, "access-control-allow-headers")
        .unwrap()
        .to_lowercase();
    for name in all.split(',') {
        assert!(allowed.contains(name), "{name} allowed: {allowed}");
    }
    assert!(header(&pre, "access-control-allow-credentials").is_none());

    let tok = token("acme", ALL);
    let got = get_from(&app, &tok, LISTED).await;
    assert_eq!(got.status(), 200);
    assert_eq!(
        header(&got, "access-control-allow-origin").as_deref(),
        Some(LISTED)
    );
    let exposed = header(&got, "access-control-expose-headers")
        .unwrap()
        .to_lowercase();
    for name in [
        "etag",
        "x-request-id",
        "retry-after",
        "idempotent-replayed",
        "preference-applied",
    ] {
        assert!(exposed.contains(name), "{name} exposed: {exposed}");
    }
    assert!(header(&got, "access-control-allow-credentials").is_none());
    // The stream ticket too.
    let ticket = app
        .send(
            "POST",
            "/plans/events/tickets",
            &tok,
            None,
            &[("Origin", LISTED)],
        )
        .await;
    assert!(ticket.status().is_success(), "{}", ticket.status());
    assert_eq!(
        header(&ticket, "access-control-allow-origin").as_deref(),
        Some(LISTED)
    );

    for origin in ["http://evil.example", "http://console.example:8082"] {
        let got = get_from(&app, &tok, origin).await;
        assert_eq!(got.status(), 200, "the request itself is the API's as ever");
        let cors: Vec<_> = got
            .headers()
            .keys()
            .filter(|k| k.as_str().starts_with("access-control-"))
            .collect();
        assert!(cors.is_empty(), "{origin}: {cors:?}");
        let pre = app
            .preflight("/plans/integration-file", origin, "PUT", all)
            .await;
        assert!(pre.status().is_client_error(), "{origin}: {}", pre.status());
        assert!(header(&pre, "access-control-allow-origin").is_none());
    }
}

/// With no origin listed (the default) there is no CORS at all: same-origin pages only.
#[actix_web::test]
async fn by_default_no_origin_gets_cors_headers() {
    let app = TestApp::spawn().await;
    let tok = token("acme", ALL);
    let got = get_from(&app, &tok, LISTED).await;
    assert_eq!(got.status(), 200);
    assert!(got
        .headers()
        .keys()
        .all(|k| !k.as_str().starts_with("access-control-")));
    let pre = app
        .preflight("/plans/integration-file", LISTED, "PUT", "authorization")
        .await;
    assert!(header(&pre, "access-control-allow-origin").is_none());
}

/// Whether headless Chromium and Playwright for Python are here; when they are not, the
/// browser test is skipped with a line saying so, unless `PLANFILES_BROWSER_TESTS=require`
/// (CI sets it) makes that a failure.
fn browser_available() -> bool {
    let playwright = std::process::Command::new("python3")
        .args(["-c", "import playwright.sync_api"])
        .output()
        .is_ok_and(|o| o.status.success());
    let here = playwright && std::path::Path::new("/usr/bin/chromium").exists();
    if !here {
        assert_ne!(
            std::env::var("PLANFILES_BROWSER_TESTS").as_deref(),
            Ok("require"),
            "PLANFILES_BROWSER_TESTS=require, but /usr/bin/chromium or Playwright is missing"
        );
        eprintln!("SKIPPED the browser test: needs /usr/bin/chromium and `pip install playwright`");
    }
    here
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn python(script: &str, args: &[&str], env: &[(&str, &str)]) {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("python3")
        .arg(format!("{root}/tests/browser/{script}"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .output()
        .unwrap();
    // The script's own output, its failure (traceback, the page's state, `FAIL: …`) last: a
    // panic's message and backtrace would push that reason out of a CI log's tail.
    eprintln!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        std::panic::resume_unwind(Box::new(format!("{script} failed (its output is above)")));
    }
}

/// The console in headless Chromium against the real service (`tests/browser/console_test.py`:
/// sign in, both files, history pages, compare, live updates from the API and plain git,
/// edit with dry run, the 409 path, restore, sign out, read-only tokens, keyboard, headers;
/// screenshots in `target/console-artefacts/`), then pages on a listed and an unlisted
/// origin calling the API (`tests/browser/cors_test.py`).
#[actix_web::test]
async fn the_console_and_other_origins_in_a_real_browser() {
    if !browser_available() {
        return;
    }
    let (listed, unlisted) = (free_port(), free_port());
    // A schema for a kind the test's files do not have until it adds one the schema refuses.
    let schemas = tempfile::tempdir().unwrap();
    std::fs::create_dir(schemas.path().join("integrations")).unwrap();
    std::fs::write(
        schemas.path().join("integrations/gcp.json"),
        r#"{"type": "object", "required": ["project"],
            "properties": {"project": {"type": "string", "pattern": "^[a-z][a-z0-9-]{4,28}[a-z0-9]$"}}}"#,
    )
    .unwrap();
    let app = TestApp::with()
        .cors_origins(vec![format!("http://127.0.0.1:{listed}")])
        .schemas(schemas.path(), "allow")
        .spawn()
        .await;
    let artefacts = format!("{}/target/console-artefacts", env!("CARGO_MANIFEST_DIR"));
    let data_dir = app.data_dir.path().to_str().unwrap().to_owned();
    let secret = [("PLANFILES_JWT_SECRET", common::SECRET)];
    python(
        "console_test.py",
        &[
            "--base-url",
            &app.addr,
            "--planfiles",
            env!("CARGO_BIN_EXE_planfiles"),
            "--data-dir",
            &data_dir,
            "--artefacts",
            &artefacts,
        ],
        &secret,
    );
    python(
        "cors_test.py",
        &[
            "--api",
            &app.addr,
            "--token",
            &token("acme", ALL),
            "--listed-port",
            &listed.to_string(),
            "--unlisted-port",
            &unlisted.to_string(),
        ],
        &secret,
    );
}

/// `Accept: application/yaml` answers a file's stored bytes as they are (the console shows
/// the configuration file's text so; the JSON answer has only its content), with the same
/// `ETag`, 304s, `?ref=` and permissions as the JSON answer.
#[actix_web::test]
async fn a_get_that_asks_for_yaml_gets_the_stored_text() {
    let app = TestApp::spawn().await;
    let tok = token("acme", ALL);
    let yaml = [("Accept", "application/yaml")];
    for (path, file) in [
        ("/plans/configuration-file", "configuration.yml"),
        ("/plans/integration-file", "integrations.yml"),
    ] {
        let stored = app.git("acme", &["show", &format!("main:{file}")]);
        let json = app.send("GET", path, &tok, None, &[]).await;
        assert_eq!(
            header(&json, "content-type").as_deref(),
            Some("application/json")
        );
        let etag = header(&json, "etag").unwrap();
        let got = app.send("GET", path, &tok, None, &yaml).await;
        assert_eq!(got.status(), 200);
        assert_eq!(
            header(&got, "content-type").as_deref(),
            Some("application/yaml; charset=utf-8")
        );
        assert_eq!(header(&got, "etag").as_deref(), Some(etag.as_str()));
        let text = got.text().await.unwrap();
        assert_eq!(text.trim_end(), stored, "{file}");
        assert_eq!(
            format!(
                "\"{}\"",
                common::git_stdin(&app.repo("acme"), &["hash-object", "--stdin"], &text)
            ),
            etag,
            "{file} byte for byte: its blob id is the ETag"
        );
        let again = app
            .send(
                "GET",
                path,
                &tok,
                None,
                &[yaml[0], ("If-None-Match", &etag)],
            )
            .await;
        assert_eq!(again.status(), 304, "{path}");
    }
    let first = app.git("acme", &["rev-list", "--max-parents=0", "main"]);
    let old = app
        .send(
            "GET",
            &format!("/plans/configuration-file?ref={}", first.trim()),
            &tok,
            None,
            &yaml,
        )
        .await;
    assert_eq!(old.status(), 200);
    assert_eq!(
        old.text().await.unwrap().trim_end(),
        app.git(
            "acme",
            &["show", &format!("{}:configuration.yml", first.trim())]
        )
    );
    let no_read = token("acme", &["jit.integrations.read"]);
    let refused = app
        .send("GET", "/plans/configuration-file", &no_read, None, &yaml)
        .await;
    assert_eq!(refused.status(), 403);
    let bad = app
        .send(
            "GET",
            "/plans/configuration-file?ref=nothex",
            &tok,
            None,
            &yaml,
        )
        .await;
    assert_eq!(bad.status(), 400);
}

/// Proposals in the console, in three browser tabs (`tests/browser/proposals_test.py`): on a
/// tenant that requires approval, Save is refused and Propose opens a proposal in ann's tab;
/// bo sees it arrive, reads its changes, approves and applies it in his; cy's tab shows the
/// applied change live; the commit carries the trailers.
#[actix_web::test]
async fn a_proposal_made_approved_and_applied_in_three_tabs() {
    if !browser_available() {
        return;
    }
    let app = TestApp::spawn().await;
    let artefacts = format!("{}/target/console-artefacts", env!("CARGO_MANIFEST_DIR"));
    let data_dir = app.data_dir.path().to_str().unwrap().to_owned();
    python(
        "proposals_test.py",
        &[
            "--base-url",
            &app.addr,
            "--planfiles",
            env!("CARGO_BIN_EXE_planfiles"),
            "--data-dir",
            &data_dir,
            "--artefacts",
            &artefacts,
        ],
        &[("PLANFILES_JWT_SECRET", common::SECRET)],
    );
}

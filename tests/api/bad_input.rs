//! Bad input, table-driven: each case gets its status and problem code, the tenant's
//! repository is unchanged, and the server keeps answering.
use crate::common;

use common::{problem, token, TestApp, ALL};
use serde_json::json;

const INTEGRATION: &str = "/plans/integration-file";
const CONFIGURATION: &str = "/plans/configuration-file";

struct Case {
    name: &'static str,
    path: &'static str,
    tenant: &'static str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
    /// For a 422: the JSON pointer (into the request body) that `detail` starts with.
    pointer: Option<&'static str>,
}

impl Case {
    fn at(mut self, pointer: &'static str) -> Self {
        self.pointer = Some(pointer);
        self
    }
}

fn json_case(
    name: &'static str,
    path: &'static str,
    tenant: &'static str,
    body: serde_json::Value,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        name,
        path,
        tenant,
        content_type: Some("application/json"),
        body: serde_json::to_vec(&body).unwrap(),
        status,
        code,
        pointer: None,
    }
}

fn raw_case(
    name: &'static str,
    path: &'static str,
    content_type: Option<&'static str>,
    body: &[u8],
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        name,
        path,
        tenant: "acme",
        content_type,
        body: body.to_vec(),
        status,
        code,
        pointer: None,
    }
}

fn nested(levels: usize) -> serde_json::Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "k": v });
    }
    v
}

/// YAML text whose top mapping holds `levels` nested mappings in all (the top is level 1).
fn yaml_nested(levels: usize) -> String {
    let mut text = String::new();
    for depth in 0..levels - 1 {
        text.push_str(&"  ".repeat(depth));
        text.push_str("k:\n");
    }
    text.push_str(&"  ".repeat(levels - 1));
    text.push_str("k: 1\n");
    text
}

fn cases() -> Vec<Case> {
    let sha40 = "0123456789abcdef0123456789abcdef01234567";
    let bomb = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n";
    let deep_json = format!(
        "{{\"content\": {}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let many_keys: serde_json::Map<String, serde_json::Value> =
        (0..100_000).map(|i| (i.to_string(), json!(0))).collect();
    vec![
        raw_case(
            "no content type",
            INTEGRATION,
            None,
            b"{\"content\": {}}",
            415,
            "unsupported_media_type",
        ),
        raw_case(
            "text/plain",
            INTEGRATION,
            Some("text/plain"),
            b"{\"content\": {}}",
            415,
            "unsupported_media_type",
        ),
        raw_case(
            "a JSON-based media type that is not application/json",
            INTEGRATION,
            Some("application/merge-patch+json"),
            b"{\"content\": {}}",
            415,
            "unsupported_media_type",
        ),
        raw_case(
            "form",
            CONFIGURATION,
            Some("application/x-www-form-urlencoded"),
            b"a=b",
            415,
            "unsupported_media_type",
        ),
        raw_case(
            "not json",
            INTEGRATION,
            Some("application/json"),
            b"content: {}",
            400,
            "invalid_json",
        ),
        raw_case(
            "truncated json",
            CONFIGURATION,
            Some("application/json"),
            b"{\"payload\": {",
            400,
            "invalid_json",
        ),
        raw_case(
            "not utf-8",
            INTEGRATION,
            Some("application/json"),
            b"{\"content\": \"\xff\xfe\"}",
            400,
            "invalid_json",
        ),
        raw_case(
            "empty body",
            INTEGRATION,
            Some("application/json"),
            b"",
            400,
            "invalid_json",
        ),
        raw_case(
            "body is a list",
            INTEGRATION,
            Some("application/json"),
            b"[]",
            422,
            "invalid_content",
        )
        .at(""),
        raw_case(
            "json nested 10k deep",
            INTEGRATION,
            Some("application/json"),
            deep_json.as_bytes(),
            422,
            "invalid_content",
        )
        .at(""),
        raw_case(
            "integer past 64 bits",
            INTEGRATION,
            Some("application/json"),
            b"{\"content\": {\"n\": 18446744073709551616}}",
            422,
            "invalid_content",
        )
        .at(""),
        json_case(
            "content missing",
            INTEGRATION,
            "acme",
            json!({"file_sha": null}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "content is a list",
            INTEGRATION,
            "acme",
            json!({"content": [1, 2]}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "content is a number",
            INTEGRATION,
            "acme",
            json!({"content": 5}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "content is null",
            INTEGRATION,
            "acme",
            json!({"content": null}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "content is bad yaml",
            INTEGRATION,
            "acme",
            json!({"content": "a: [1,"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "content yaml is a list",
            INTEGRATION,
            "acme",
            json!({"content": "- a\n- b\n"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml with two documents",
            INTEGRATION,
            "acme",
            json!({"content": "a: 1\n---\nb: 2\n"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml duplicate keys",
            INTEGRATION,
            "acme",
            json!({"content": "a: 1\na: 2\n"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml non-string key",
            INTEGRATION,
            "acme",
            json!({"content": "1: a\n"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml custom tag",
            INTEGRATION,
            "acme",
            json!({"content": "a: !secret x\n"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml alias bomb",
            INTEGRATION,
            "acme",
            json!({"content": bomb}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "nesting past the limit",
            INTEGRATION,
            "acme",
            json!({"content": nested(65)}),
            422,
            "invalid_content",
        )
        .at(""),
        json_case(
            "100k keys",
            INTEGRATION,
            "acme",
            json!({"content": many_keys}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml integer past 64 bits",
            INTEGRATION,
            "acme",
            json!({"content": "num: 18446744073709551616\n"}),
            422,
            "invalid_content",
        )
        .at("/content/num"),
        json_case(
            "yaml nesting past the limit",
            INTEGRATION,
            "acme",
            json!({"content": yaml_nested(65)}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml hex integer past 64 bits",
            INTEGRATION,
            "acme",
            json!({"content": "wallet: 0x52908400098527886E0F7030069857D2E4169EE7\n"}),
            422,
            "invalid_content",
        )
        .at("/content/wallet"),
        json_case(
            "yaml octal integer past 64 bits",
            INTEGRATION,
            "acme",
            json!({"content": "a:\n  - 0o2000000000000000000000\n"}),
            422,
            "invalid_content",
        )
        .at("/content/a/0"),
        json_case(
            "yaml binary integer past 64 bits",
            INTEGRATION,
            "acme",
            json!({"content": format!("bits: 0b1{}\n", "0".repeat(64))}),
            422,
            "invalid_content",
        )
        .at("/content/bits"),
        json_case(
            "yaml negative decimal integer past 64 bits",
            INTEGRATION,
            "acme",
            json!({"content": "a: {b: -9223372036854775809}\n"}),
            422,
            "invalid_content",
        )
        .at("/content/a/b"),
        json_case(
            "yaml document that is null",
            INTEGRATION,
            "acme",
            json!({"content": "null"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml document that is ~",
            INTEGRATION,
            "acme",
            json!({"content": "~\n"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml document that is empty",
            INTEGRATION,
            "acme",
            json!({"content": ""}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "yaml document of comments only",
            INTEGRATION,
            "acme",
            json!({"content": "# nothing here\n\n"}),
            422,
            "invalid_content",
        )
        .at("/content"),
        json_case(
            "payload is a list",
            CONFIGURATION,
            "acme",
            json!({"payload": [{"path": "a"}], "file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload"),
        json_case(
            "payload is a number",
            CONFIGURATION,
            "acme",
            json!({"payload": 5, "file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload"),
        json_case(
            "payload is null",
            CONFIGURATION,
            "acme",
            json!({"payload": null, "file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload"),
        json_case(
            "file_sha null on the configuration file",
            CONFIGURATION,
            "acme",
            json!({"payload": {"folders": []}, "file_sha": null}),
            428,
            "precondition_required",
        ),
        json_case(
            "payload missing",
            CONFIGURATION,
            "acme",
            json!({"file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload"),
        json_case(
            "payload is YAML text that is no mapping",
            CONFIGURATION,
            "acme",
            json!({"payload": "- folders", "file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload"),
        json_case(
            "folders not a list",
            CONFIGURATION,
            "acme",
            json!({"payload": {"folders": {}}, "file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload/folders"),
        json_case(
            "folder without path",
            CONFIGURATION,
            "acme",
            json!({"payload": {"folders": [{"exclude": []}]}, "file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload/folders/0/path"),
        json_case(
            "exclude not strings",
            CONFIGURATION,
            "acme",
            json!({"payload": {"folders": [{"path": "a", "exclude": [1]}]}, "file_sha": sha40}),
            422,
            "invalid_content",
        )
        .at("/payload/folders/0/exclude/0"),
        json_case(
            "file_sha too short",
            CONFIGURATION,
            "acme",
            json!({"payload": {}, "file_sha": "abc"}),
            400,
            "invalid_file_sha",
        ),
        json_case(
            "file_sha not hex",
            CONFIGURATION,
            "acme",
            json!({"payload": {}, "file_sha": "z".repeat(40)}),
            400,
            "invalid_file_sha",
        ),
        json_case(
            "file_sha a number",
            CONFIGURATION,
            "acme",
            json!({"payload": {}, "file_sha": 7}),
            400,
            "invalid_file_sha",
        ),
        json_case(
            "file_sha a list",
            INTEGRATION,
            "acme",
            json!({"content": {}, "file_sha": [sha40]}),
            400,
            "invalid_file_sha",
        ),
        json_case(
            "file_sha too long",
            INTEGRATION,
            "acme",
            json!({"content": {}, "file_sha": format!("{sha40}0")}),
            400,
            "invalid_file_sha",
        ),
        json_case(
            "file_sha without source hosting",
            INTEGRATION,
            "globex",
            json!({"content": {}, "file_sha": sha40}),
            400,
            "file_sha_not_allowed",
        ),
        json_case(
            "stale file_sha",
            INTEGRATION,
            "acme",
            json!({"content": {}, "file_sha": sha40}),
            409,
            "sha_mismatch",
        ),
        json_case(
            "stale configuration file_sha",
            CONFIGURATION,
            "acme",
            json!({"payload": {}, "file_sha": sha40}),
            409,
            "sha_mismatch",
        ),
        json_case(
            "no precondition",
            CONFIGURATION,
            "acme",
            json!({"payload": {}}),
            428,
            "precondition_required",
        ),
    ]
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let app = TestApp::spawn().await;
    // Every row is tried; the wrong answers are listed together.
    let mut wrong = Vec::new();
    for case in cases() {
        let t = token(case.tenant, ALL);
        let head = app.head(case.tenant);
        let mut req = app
            .client
            .put(app.url(case.path))
            .bearer_auth(&t)
            .body(case.body.clone());
        if let Some(ct) = case.content_type {
            req = req.header("content-type", ct);
        }
        let started = std::time::Instant::now();
        let res = req.send().await.unwrap();
        let elapsed = started.elapsed();
        let status = res.status().as_u16();
        let body: serde_json::Value = res.json().await.unwrap_or_default();
        let code = body["code"].as_str().unwrap_or_default();
        if (status, code) != (case.status, case.code) {
            wrong.push(format!("{}: {status} {body}", case.name));
        } else if case.status == 422 {
            let pointer = case
                .pointer
                .unwrap_or_else(|| panic!("{}: a 422 row names its pointer", case.name));
            let detail = body["detail"].as_str().unwrap_or_default();
            if !detail.starts_with(&format!("{pointer}: ")) {
                wrong.push(format!(
                    "{}: detail {detail:?} does not start with the pointer {pointer:?}",
                    case.name
                ));
            }
        }
        assert!(elapsed.as_secs() < 2, "{} took {elapsed:?}", case.name);
        if app.head(case.tenant) != head {
            wrong.push(format!("{} changed the repository", case.name));
        }
        assert_eq!(
            app.get_integration(&t).await.status(),
            200,
            "server not answering after {}",
            case.name
        );
    }
    assert!(wrong.is_empty(), "wrong answers:\n{}", wrong.join("\n"));
    app.fsck("acme");
}

/// A PUT body of exactly `len` bytes that is valid JSON with no file_sha.
fn body_of_len(len: usize) -> String {
    let frame = "{\"content\": {\"a\": \"\"}}".len();
    format!(
        "{{\"content\": {{\"a\": \"{}\"}}}}",
        "x".repeat(len - frame)
    )
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_plain_or_chunked() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    const LIMIT: usize = 1024 * 1024;
    for chunked in [false, true] {
        for (len, status, code) in [
            (LIMIT + 1, 413, Some("payload_too_large")),
            (LIMIT, 200, None),
        ] {
            let head = app.head("acme");
            let body = body_of_len(len);
            assert_eq!(body.len(), len);
            let body = if chunked {
                let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body
                    .as_bytes()
                    .chunks(64 * 1024)
                    .map(|c| Ok(c.to_vec()))
                    .collect();
                reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
            } else {
                reqwest::Body::from(body)
            };
            let res = app
                .client
                .put(app.url(INTEGRATION))
                .bearer_auth(&t)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let what = format!("{len} bytes, chunked: {chunked}");
            if status == 413 {
                let (got, problem) = problem(res).await;
                assert_eq!((got, problem["code"].as_str()), (status, code), "{what}");
                assert_eq!(app.head("acme"), head, "{what} changed the repository");
            } else {
                assert_eq!(res.status(), 200, "{what}: {}", res.text().await.unwrap());
            }
            assert_eq!(app.get_integration(&t).await.status(), 200, "after {what}");
        }
    }
}

#[tokio::test]
async fn routes_and_methods() {
    let app = TestApp::spawn().await;
    let (status, body) = problem(
        app.client
            .get(app.url("/plans/other-file"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    for method in [
        reqwest::Method::POST,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ] {
        for path in [INTEGRATION, CONFIGURATION] {
            let res = app
                .client
                .request(method.clone(), app.url(path))
                .send()
                .await
                .unwrap();
            assert_eq!(res.headers()["allow"], "GET, PUT");
            let (status, body) = problem(res).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (405, Some("method_not_allowed")),
                "{method} {path}"
            );
        }
    }
}

#[tokio::test]
async fn request_ids_are_kept_when_safe_and_replaced_otherwise() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let send = |id: &'static str| {
        app.client
            .get(app.url(INTEGRATION))
            .bearer_auth(&t)
            .header("x-request-id", id)
            .send()
    };
    let res = send("trace-abc:123").await.unwrap();
    assert_eq!(res.headers()["x-request-id"], "trace-abc:123");
    let res = send("bad id with spaces").await.unwrap();
    let id = res.headers()["x-request-id"].to_str().unwrap();
    assert_ne!(id, "bad id with spaces");
    assert!(!id.is_empty());
    let res = app.get_integration(&t).await;
    assert!(res.headers().contains_key("x-request-id"));
}

#[tokio::test]
async fn order_of_checks() {
    let app = TestApp::spawn().await;
    let bad_body = || {
        app.client
            .put(app.url(INTEGRATION))
            .header("content-type", "text/plain")
            .body("x")
    };
    // No token beats a bad body.
    let (status, _) = problem(bad_body().send().await.unwrap()).await;
    assert_eq!(status, 401);
    // A missing tenant beats a missing permission and a bad body.
    let (status, body) = problem(
        bad_body()
            .bearer_auth(token("nobody", &[]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("tenant_not_found"))
    );
    // A missing permission beats a bad body.
    let (status, _) = problem(
        bad_body()
            .bearer_auth(token("acme", &["jit.integrations.read"]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);
    // 415 beats 413.
    let big = "x".repeat(2 * 1024 * 1024);
    let (status, _) = problem(
        bad_body()
            .bearer_auth(token("acme", ALL))
            .body(big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 415);
    // 400 (file_sha) beats 422 (content).
    let res = app
        .put_integration(&token("acme", ALL), &json!({"content": 5, "file_sha": "x"}))
        .await;
    assert_eq!(problem(res).await.0, 400);
    // 422 beats 428.
    let res = app
        .put_configuration(&token("acme", ALL), &json!({"payload": []}))
        .await;
    assert_eq!(problem(res).await.0, 422);
}

#[tokio::test]
async fn unknown_fields_and_query_strings_are_ignored() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let res = app
        .client
        .put(app.url("/plans/integration-file?file_sha=abc&force=1"))
        .bearer_auth(&t)
        .json(&json!({"content": {"a": 1}, "extra": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

/// Sends raw bytes over TCP and returns the response head and body as text.
fn raw_request(addr: &str, request: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr.trim_start_matches("http://")).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn oversized_headers_get_431_and_change_nothing() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let filler = |n: usize| -> Vec<(String, String)> {
        (0..n)
            .map(|i| (format!("x-filler-{i}"), "v".repeat(90)))
            .collect()
    };
    let one_big = vec![("x-big".to_owned(), "a".repeat(9 * 1024))];
    let just_under = vec![("x-big".to_owned(), "a".repeat(6 * 1024))];
    // More than 96 headers are refused by actix's parser itself, before the service: 431
    // without a body.
    for (name, headers, status, code) in [
        ("one 9 KiB header", one_big, 431, Some("headers_too_large")),
        (
            "90 headers of 100 bytes",
            filler(90),
            431,
            Some("headers_too_large"),
        ),
        ("200 headers", filler(200), 431, None),
        ("6 KiB of headers", just_under, 200, None),
    ] {
        let head = app.head("acme");
        let sha = app.blob("acme", "integrations.yml");
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let mut req = client
            .put(app.url(INTEGRATION))
            .bearer_auth(&t)
            .json(&json!({"content": {"n": name}, "file_sha": sha}));
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let res = req.send().await.unwrap();
        if status == 200 {
            assert_eq!(res.status(), 200, "{name}");
            continue;
        }
        match code {
            Some(code) => {
                let (s, body) = problem(res).await;
                assert_eq!(
                    (s, body["code"].as_str().unwrap()),
                    (status, code),
                    "{name}"
                );
            }
            None => assert_eq!(res.status().as_u16(), status, "{name}"),
        }
        assert_eq!(app.head("acme"), head, "{name} changed the repository");
        // A new connection: the parser-level 431 closes its connection without saying so,
        // and a pooled client could race that close.
        let fresh = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let res = fresh
            .get(app.url(INTEGRATION))
            .bearer_auth(&t)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "server down after {name}");
    }
}

#[tokio::test]
async fn request_ids_with_control_characters_are_replaced_or_refused() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let addr = app.addr.clone();
    let request = |id: &[u8]| {
        let mut r = format!(
            "GET {INTEGRATION} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nConnection: close\r\nX-Request-Id: "
        )
        .into_bytes();
        r.extend_from_slice(id);
        r.extend_from_slice(b"\r\n\r\n");
        r
    };
    // Allowed in a header value by HTTP, but not in a request id: a new id is used.
    for id in [&b"ab\tcd"[..], b"ab\x80\xffcd", b"line\\r\\nbreak"] {
        let answer = raw_request(&addr, &request(id));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let sent = String::from_utf8_lossy(id).to_lowercase();
        let got = answer
            .lines()
            .find_map(|l| {
                l.to_lowercase()
                    .strip_prefix("x-request-id: ")
                    .map(str::to_owned)
            })
            .expect("a request id");
        assert!(!got.is_empty() && got != sent, "{got:?}");
        assert!(got.bytes().all(|b| b.is_ascii_graphic()), "{got:?}");
    }
    // Control characters are not HTTP: the parser refuses the request before the service.
    for id in [&b"ab\x01cd"[..], b"ab\x1b[31mcd", b"ab\x00cd", b"ab\x7fcd"] {
        let answer = raw_request(&addr, &request(id));
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "{:?}: {answer}",
            String::from_utf8_lossy(id)
        );
    }
    assert_eq!(app.head("acme"), head);
    assert_eq!(app.get_integration(&t).await.status(), 200);
}

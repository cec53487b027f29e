//! Authentication and permissions: 401 and 403 with the right `WWW-Authenticate`, and no change.
use crate::common;

use common::{now, problem, sign_hs256, token, TestApp, ALL, SECRET};
use serde_json::{json, Value};

fn claims(extra: Value) -> Value {
    let mut c = json!({"tenant_id": "acme", "permissions": ALL, "exp": now() + 600});
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn hs256(extra: Value) -> String {
    sign_hs256(
        SECRET,
        &json!({"alg": "HS256", "typ": "JWT"}),
        &claims(extra),
    )
}

fn unsigned(alg: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    format!(
        "{}.{}.",
        B64.encode(json!({"alg": alg, "typ": "JWT"}).to_string()),
        B64.encode(claims(json!({})).to_string())
    )
}

#[tokio::test]
async fn refused_tokens_get_401_and_change_nothing() {
    let app = TestApp::spawn().await;
    let head = app.head("acme");
    let cases: Vec<(&str, String)> = vec![
        ("alg none", unsigned("none")),
        ("alg None", unsigned("None")),
        ("alg NONE", unsigned("NONE")),
        (
            "wrong secret",
            sign_hs256(
                "another-secret-0123456789",
                &json!({"alg": "HS256"}),
                &claims(json!({})),
            ),
        ),
        ("HS512 instead of HS256", {
            // A token whose header names another algorithm (signature irrelevant).
            let t = hs256(json!({}));
            let mut parts: Vec<String> = t.split('.').map(String::from).collect();
            use base64::Engine;
            parts[0] = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(r#"{"alg":"HS512","typ":"JWT"}"#);
            parts.join(".")
        }),
        ("expired", hs256(json!({"exp": now() - 3600}))),
        ("no exp", hs256(json!({"exp": null}))),
        ("not yet valid", hs256(json!({"nbf": now() + 3600}))),
        ("issued in the future", hs256(json!({"iat": now() + 3600}))),
        ("no tenant", hs256(json!({"tenant_id": null}))),
        ("tenant ../x", hs256(json!({"tenant_id": "../x"}))),
        ("tenant %2e%2e", hs256(json!({"tenant_id": "%2e%2e"}))),
        ("tenant a/b", hs256(json!({"tenant_id": "a/b"}))),
        ("tenant a\\b", hs256(json!({"tenant_id": "a\\b"}))),
        ("tenant NUL", hs256(json!({"tenant_id": "acme\u{0}"}))),
        ("tenant lookalike", hs256(json!({"tenant_id": "аcme"}))),
        ("tenant .git", hs256(json!({"tenant_id": "acme.git"}))),
        (
            "tenant 65 chars",
            hs256(json!({"tenant_id": "a".repeat(65)})),
        ),
        (
            "permissions a string",
            hs256(json!({"permissions": "jit.integrations.write"})),
        ),
        ("garbage", "not.a.token".into()),
        ("tenant a..b", hs256(json!({"tenant_id": "a..b"}))),
        (
            "tenant .Git in another case",
            hs256(json!({"tenant_id": "acme.Git"})),
        ),
        ("tenant empty", hs256(json!({"tenant_id": ""}))),
        (
            "permissions a list of numbers",
            hs256(json!({"permissions": [1, 2]})),
        ),
        // The leeway is 30 s: just past it is refused.
        ("expired past the leeway", hs256(json!({"exp": now() - 45}))),
        ("nbf past the leeway", hs256(json!({"nbf": now() + 45}))),
        ("iat past the leeway", hs256(json!({"iat": now() + 45}))),
        (
            "kid naming an empty key",
            sign_hs256(
                "",
                &json!({"alg": "HS256", "kid": "/dev/null"}),
                &claims(json!({})),
            ),
        ),
        (
            "kid tries to pick a key",
            sign_hs256(
                "another-secret-0123456789",
                &json!({"alg": "HS256", "kid": "../../dev/null"}),
                &claims(json!({})),
            ),
        ),
        (
            "x5u tries to pick a key",
            sign_hs256(
                "another-secret-0123456789",
                &json!({"alg": "HS256", "x5u": "http://127.0.0.1:1/cert.pem"}),
                &claims(json!({})),
            ),
        ),
        (
            "jwk embeds its own key",
            sign_hs256(
                "another-secret-0123456789",
                &json!({"alg": "HS256", "jwk": {"kty": "oct", "k": "YW5vdGhlci1zZWNyZXQtMDEyMzQ1Njc4OQ"}}),
                &claims(json!({})),
            ),
        ),
        (
            "jku tries to pick a key",
            sign_hs256(
                "another-secret-0123456789",
                &json!({"alg": "HS256", "jku": "http://127.0.0.1:1/k"}),
                &claims(json!({})),
            ),
        ),
    ];
    for (name, token) in cases {
        let res = app.put_integration(&token, &json!({"content": {}})).await;
        assert_eq!(
            res.headers()["www-authenticate"],
            "Bearer error=\"invalid_token\"",
            "{name}"
        );
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("invalid_token")),
            "{name}"
        );
        assert!(
            !body.to_string().contains(&token),
            "{name}: the token is echoed"
        );
        assert_eq!(app.head("acme"), head, "{name} changed the repository");
        assert_eq!(
            app.get_integration(&hs256(json!({}))).await.status(),
            200,
            "server not answering after {name}"
        );
    }
}

/// Tokens inside the leeway pass, and key-picking headers on a correctly signed token are
/// ignored rather than followed.
#[tokio::test]
async fn leeway_edges_and_ignored_key_headers_are_accepted() {
    let app = TestApp::spawn().await;
    let signed_with = |header: Value| sign_hs256(SECRET, &header, &claims(json!({})));
    let cases: Vec<(&str, String)> = vec![
        (
            "expired inside the leeway",
            hs256(json!({"exp": now() - 10})),
        ),
        ("nbf inside the leeway", hs256(json!({"nbf": now() + 10}))),
        ("iat inside the leeway", hs256(json!({"iat": now() + 10}))),
        (
            "iss and aud when none are configured",
            hs256(json!({"iss": "x", "aud": "y"})),
        ),
        (
            "kid",
            signed_with(json!({"alg": "HS256", "kid": "/dev/null"})),
        ),
        (
            "jku",
            signed_with(json!({"alg": "HS256", "jku": "http://127.0.0.1:1/k"})),
        ),
        (
            "x5u",
            signed_with(json!({"alg": "HS256", "x5u": "http://127.0.0.1:1/c.pem"})),
        ),
    ];
    for (name, token) in cases {
        assert_eq!(app.get_integration(&token).await.status(), 200, "{name}");
    }
}

/// An HS256 token over a payload given as JSON text, so that number forms serde_json would
/// not print (`1.7e9`) can be sent.
fn hs256_raw(payload: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let input = format!(
        "{}.{}",
        B64.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
        B64.encode(payload)
    );
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(input.as_bytes());
    format!("{input}.{}", B64.encode(mac.finalize().into_bytes()))
}

/// RFC 7519 NumericDates may be fractional, and `"permissions": null` grants nothing: such
/// tokens are valid, and the times are still checked with the leeway.
#[tokio::test]
async fn fractional_dates_and_null_permissions_are_valid_tokens() {
    let app = TestApp::spawn().await;
    let now = now() as f64;
    let exp_in_e_notation = format!(
        r#"{{"tenant_id":"acme","permissions":["jit.integrations.write"],"exp":{:e}}}"#,
        now + 600.0
    );
    assert!(exp_in_e_notation.contains("e9"), "{exp_in_e_notation}");
    // (name, token, status of a GET of the integration file)
    let cases: Vec<(&str, String, u16)> = vec![
        ("fractional exp", hs256(json!({"exp": now + 600.5})), 200),
        ("exp in e notation", hs256_raw(&exp_in_e_notation), 200),
        (
            "fractional exp inside the leeway",
            hs256(json!({"exp": now - 10.5})),
            200,
        ),
        ("fractional iat", hs256(json!({"iat": now - 0.25})), 200),
        (
            "fractional iat inside the leeway",
            hs256(json!({"iat": now + 10.5})),
            200,
        ),
        ("fractional nbf", hs256(json!({"nbf": now - 0.75})), 200),
        (
            "all three fractional",
            hs256(json!({"iat": now - 1.5, "nbf": now - 1.5, "exp": now + 60.5})),
            200,
        ),
        (
            "null iat",
            hs256_raw(&format!(
                r#"{{"tenant_id":"acme","permissions":["jit.integrations.write"],"iat":null,"exp":{}}}"#,
                now + 600.0
            )),
            200,
        ),
        (
            "null permissions: valid, but grants nothing",
            hs256_raw(&format!(
                r#"{{"tenant_id":"acme","permissions":null,"exp":{}}}"#,
                now + 600.0
            )),
            403,
        ),
        // Still checked: past the leeway, fractional or not.
        (
            "fractional exp past the leeway",
            hs256(json!({"exp": now - 45.5})),
            401,
        ),
        (
            "fractional iat past the leeway",
            hs256(json!({"iat": now + 45.5})),
            401,
        ),
        (
            "fractional nbf past the leeway",
            hs256(json!({"nbf": now + 45.5})),
            401,
        ),
        ("negative iat", hs256(json!({"iat": -1.5})), 401),
        ("iat a string", hs256(json!({"iat": "1700000000"})), 401),
        ("exp a string", hs256(json!({"exp": "9999999999"})), 401),
        (
            "exp null",
            hs256_raw(r#"{"tenant_id":"acme","permissions":[],"exp":null}"#),
            401,
        ),
    ];
    for (name, token, expected) in cases {
        let res = app.get_integration(&token).await;
        assert_eq!(res.status().as_u16(), expected, "{name}");
    }
}

/// A token whose bytes are not UTF-8 was still sent: 401 with `error="invalid_token"`, not
/// the bare challenge of a request without a token.
#[tokio::test]
async fn a_non_utf8_token_is_an_invalid_token() {
    let app = TestApp::spawn().await;
    let head = app.head("acme");
    let valid = token("acme", ALL);
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "Latin-1 bytes",
            b"Bearer \xff\xfe".to_vec(),
            "Bearer error=\"invalid_token\"",
            "invalid_token",
        ),
        (
            "a valid token with a stray byte",
            [b"Bearer ".as_slice(), valid.as_bytes(), b"\xe9"].concat(),
            "Bearer error=\"invalid_token\"",
            "invalid_token",
        ),
        (
            "lower-case scheme",
            b"bearer caf\xe9".to_vec(),
            "Bearer error=\"invalid_token\"",
            "invalid_token",
        ),
        (
            "not the bearer scheme",
            b"B\xe9arer abc".to_vec(),
            "Bearer",
            "unauthorized",
        ),
    ];
    for (name, header, challenge, code) in cases {
        let res = app
            .client
            .put(app.url("/plans/integration-file"))
            .header(
                "authorization",
                reqwest::header::HeaderValue::from_bytes(&header).unwrap(),
            )
            .json(&json!({"content": {"x": 1}}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.headers()["www-authenticate"], challenge, "{name}");
        let (status, body) = problem(res).await;
        assert_eq!((status, body["code"].as_str()), (401, Some(code)), "{name}");
        assert_eq!(app.head("acme"), head, "{name} changed the repository");
    }
}

/// A token in the query string does not authenticate a write either.
#[tokio::test]
async fn a_token_in_the_query_string_does_not_write() {
    let app = TestApp::spawn().await;
    let head = app.head("acme");
    let res = app
        .client
        .put(app.url(&format!(
            "/plans/integration-file?access_token={}",
            token("acme", ALL)
        )))
        .json(&json!({"content": {"via": "query"}}))
        .send()
        .await
        .unwrap();
    let (status, body) = problem(res).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    assert_eq!(app.head("acme"), head);
}

#[tokio::test]
async fn a_missing_token_gets_a_bare_challenge() {
    let app = TestApp::spawn().await;
    for req in [
        app.client.get(app.url("/plans/integration-file")),
        app.client
            .get(app.url("/plans/integration-file"))
            .header("authorization", "Basic YTpi"),
        app.client.get(app.url(&format!(
            "/plans/integration-file?access_token={}",
            token("acme", ALL)
        ))),
    ] {
        let res = req.send().await.unwrap();
        assert_eq!(res.headers()["www-authenticate"], "Bearer");
        let (status, body) = problem(res).await;
        assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    }
}

#[tokio::test]
async fn permissions_per_operation() {
    let app = TestApp::spawn().await;
    let head = app.head("acme");
    let cases: &[(&[&str], &str, &str, bool)] = &[
        // (permissions, method, path, allowed)
        (
            &["jit.integrations.read"],
            "GET",
            "/plans/integration-file",
            true,
        ),
        (
            &["jit.integrations.write"],
            "GET",
            "/plans/integration-file",
            true,
        ),
        (
            &["jit.preferences.write"],
            "GET",
            "/plans/integration-file",
            false,
        ),
        (&[], "GET", "/plans/integration-file", false),
        (
            &["jit.preferences.read"],
            "GET",
            "/plans/configuration-file",
            true,
        ),
        (
            &["jit.preferences.write"],
            "GET",
            "/plans/configuration-file",
            true,
        ),
        (
            &["jit.integrations.write"],
            "GET",
            "/plans/configuration-file",
            false,
        ),
        (
            &["jit.integrations.read"],
            "PUT",
            "/plans/integration-file",
            false,
        ),
        (
            &["jit.preferences.write"],
            "PUT",
            "/plans/integration-file",
            false,
        ),
        (
            &["jit.preferences.read"],
            "PUT",
            "/plans/configuration-file",
            false,
        ),
        (
            &["jit.integrations.write"],
            "PUT",
            "/plans/configuration-file",
            false,
        ),
    ];
    for (perms, method, path, allowed) in cases {
        let t = token("acme", perms);
        let req = if *method == "GET" {
            app.client.get(app.url(path))
        } else {
            app.client
                .put(app.url(path))
                .json(&json!({"content": {}, "payload": {}}))
        };
        let res = req.bearer_auth(&t).send().await.unwrap();
        if *allowed {
            assert_eq!(res.status(), 200, "{perms:?} {method} {path}");
            continue;
        }
        let needed = match (*method, *path) {
            ("GET", "/plans/integration-file") => "jit.integrations.read",
            ("GET", _) => "jit.preferences.read",
            ("PUT", "/plans/integration-file") => "jit.integrations.write",
            _ => "jit.preferences.write",
        };
        assert_eq!(
            res.headers()["www-authenticate"].to_str().unwrap(),
            format!("Bearer error=\"insufficient_scope\", scope=\"{needed}\"")
        );
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("insufficient_scope")),
            "{perms:?} {method} {path}"
        );
    }
    assert_eq!(app.head("acme"), head);
}

#[tokio::test]
async fn a_token_for_a_missing_tenant_gets_404() {
    let app = TestApp::spawn().await;
    let (status, body) = problem(app.get_integration(&token("ghost", ALL)).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("tenant_not_found"))
    );
}

#[tokio::test]
async fn iss_and_aud_are_checked_only_when_configured() {
    // Not configured: a token that carries them is accepted.
    let app = TestApp::spawn().await;
    let t = hs256(json!({"iss": "someone", "aud": "something"}));
    assert_eq!(app.get_integration(&t).await.status(), 200);
    drop(app);

    let auth = planfiles::config::AuthConfig {
        secret: SECRET.into(),
        issuer: Some("https://auth.example".into()),
        audience: Some("planfiles".into()),
        ..Default::default()
    };
    let app = TestApp::spawn_with(auth).await;
    let good = hs256(json!({"iss": "https://auth.example", "aud": "planfiles"}));
    assert_eq!(app.get_integration(&good).await.status(), 200);
    let cases = [
        (
            "wrong iss",
            hs256(json!({"iss": "https://evil.example", "aud": "planfiles"})),
        ),
        (
            "wrong aud",
            hs256(json!({"iss": "https://auth.example", "aud": "other"})),
        ),
        (
            "aud list without ours",
            hs256(json!({"iss": "https://auth.example", "aud": ["a", "b"]})),
        ),
        ("no iss", hs256(json!({"aud": "planfiles"}))),
        ("no aud", hs256(json!({"iss": "https://auth.example"}))),
        ("neither", hs256(json!({}))),
    ];
    for (name, bad) in cases {
        let res = app.get_integration(&bad).await;
        assert_eq!(
            res.headers()["www-authenticate"],
            "Bearer error=\"invalid_token\"",
            "{name}"
        );
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("invalid_token")),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_token_of_one_tenant_only_reaches_that_tenant() {
    let app = TestApp::spawn().await;
    let acme: Value = app
        .get_integration(&token("acme", ALL))
        .await
        .json()
        .await
        .unwrap();
    let globex: Value = app
        .get_integration(&token("globex", ALL))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(acme["file_sha"], app.blob("acme", "integrations.yml"));
    assert_eq!(globex["file_sha"], app.blob("globex", "integrations.yml"));
    assert_ne!(acme["file_sha"], globex["file_sha"]);
}

/// Signs claims as an RS256 JWT with a PKCS#8 PEM private key (independently of the service).
fn sign_rs256(private_pem: &str, header: &Value, claims: &Value) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    use rsa::pkcs8::DecodePrivateKey;
    use rsa::signature::{SignatureEncoding, Signer};
    let key = rsa::RsaPrivateKey::from_pkcs8_pem(private_pem).unwrap();
    let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key);
    let input = format!(
        "{}.{}",
        B64.encode(serde_json::to_vec(header).unwrap()),
        B64.encode(serde_json::to_vec(claims).unwrap())
    );
    let signature = signer.sign(input.as_bytes()).to_bytes();
    format!("{input}.{}", B64.encode(signature))
}

/// Each token, on a write, is a 401 `invalid_token`.
async fn assert_each_refused(app: &TestApp, cases: Vec<(&str, String)>) {
    for (name, token) in cases {
        let res = app
            .put_integration(&token, &json!({"content": {"x": 1}}))
            .await;
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("invalid_token")),
            "{name}"
        );
    }
}

/// A test key's PEM text, from `tests/keys`.
fn test_key(name: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/keys")
            .join(name),
    )
    .unwrap()
}

/// A server that accepts only `algorithm`, verified with the public key `tests/keys/<public>`.
async fn app_with_public_key(algorithm: planfiles::config::Algorithm, public: &str) -> TestApp {
    TestApp::spawn_with(planfiles::config::AuthConfig {
        algorithm,
        public_key_file: Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/keys")
                .join(public),
        ),
        // The HS256 secret is configured too (unused): a token signed with it must still fail.
        secret: SECRET.into(),
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn rs256_accepts_only_tokens_signed_by_the_configured_key() {
    let public_pem = test_key("rs256-public.pem");
    let private_pem = test_key("rs256-private.pem");
    let other_pem = test_key("other-private.pem");
    let app = app_with_public_key(planfiles::config::Algorithm::RS256, "rs256-public.pem").await;
    let rs = json!({"alg": "RS256", "typ": "JWT"});
    let good = sign_rs256(&private_pem, &rs, &claims(json!({})));
    assert_eq!(app.get_integration(&good).await.status(), 200);

    let head = app.head("acme");
    let cases: Vec<(&str, String)> = vec![
        // The classic confusion: HMAC keyed with the public key the server trusts.
        (
            "HS256 signed with the RS256 public key",
            sign_hs256(&public_pem, &json!({"alg": "HS256"}), &claims(json!({}))),
        ),
        (
            "HS256 with the public key, header says RS256",
            sign_hs256(&public_pem, &rs, &claims(json!({}))),
        ),
        (
            "RS256 from another key",
            sign_rs256(&other_pem, &rs, &claims(json!({}))),
        ),
        (
            "RS256 from another key, kid",
            sign_rs256(
                &other_pem,
                &json!({"alg": "RS256", "kid": "other"}),
                &claims(json!({})),
            ),
        ),
        (
            "RS256 from another key, jku",
            sign_rs256(
                &other_pem,
                &json!({"alg": "RS256", "jku": "http://127.0.0.1:1/jwks"}),
                &claims(json!({})),
            ),
        ),
        (
            "RS256 from another key, x5u",
            sign_rs256(
                &other_pem,
                &json!({"alg": "RS256", "x5u": "http://127.0.0.1:1/c.pem"}),
                &claims(json!({})),
            ),
        ),
        (
            "PS256 header",
            sign_rs256(&private_pem, &json!({"alg": "PS256"}), &claims(json!({}))),
        ),
        ("alg none", unsigned("none")),
        (
            "expired RS256",
            sign_rs256(&private_pem, &rs, &claims(json!({"exp": now() - 3600}))),
        ),
    ];
    assert_each_refused(&app, cases).await;
    assert_eq!(app.head("acme"), head);
    assert_eq!(app.get_integration(&good).await.status(), 200);
}

/// Signs claims as an ES256 JWT with a PKCS#8 PEM P-256 key (jsonwebtoken's signer, not the
/// service's code: the service only verifies ES256).
fn sign_es256(private_pem: &str, claims: &Value) -> String {
    let key = jsonwebtoken::EncodingKey::from_ec_pem(private_pem.as_bytes()).unwrap();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
        claims,
        &key,
    )
    .unwrap()
}

#[tokio::test]
async fn es256_accepts_only_tokens_signed_by_the_configured_key() {
    let public_pem = test_key("es256-public.pem");
    let private_pem = test_key("es256-private.pem");
    let app = app_with_public_key(planfiles::config::Algorithm::ES256, "es256-public.pem").await;
    let good = sign_es256(&private_pem, &claims(json!({})));
    assert_eq!(app.get_integration(&good).await.status(), 200);
    let head = app.head("acme");
    let other = {
        // A key generated here: a valid ES256 signature from a key the server does not trust.
        let out = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .output();
        out.ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8(o.stdout).unwrap())
    };
    let mut cases: Vec<(&str, String)> = vec![
        (
            "HS256 signed with the ES256 public key",
            sign_hs256(&public_pem, &json!({"alg": "HS256"}), &claims(json!({}))),
        ),
        ("HS256 with the server's secret", hs256(json!({}))),
        (
            "ES256 expired",
            sign_es256(&private_pem, &claims(json!({"exp": now() - 3600}))),
        ),
        ("alg none", unsigned("none")),
    ];
    if let Some(other) = &other {
        cases.push((
            "ES256 from another key",
            sign_es256(other, &claims(json!({}))),
        ));
    }
    assert_each_refused(&app, cases).await;
    assert_eq!(app.head("acme"), head);
}

/// Signs claims as an HMAC JWT (`HS256`, `HS384` or `HS512`) with `key`, independently of the
/// service.
fn sign_hmac(alg: &str, key: &[u8], claims: &Value) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let input = format!(
        "{}.{}",
        B64.encode(json!({"alg": alg, "typ": "JWT"}).to_string()),
        B64.encode(claims.to_string())
    );
    let tag = match alg {
        "HS256" => {
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
            mac.update(input.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        "HS384" => {
            let mut mac = Hmac::<sha2::Sha384>::new_from_slice(key).unwrap();
            mac.update(input.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        "HS512" => {
            let mut mac = Hmac::<sha2::Sha512>::new_from_slice(key).unwrap();
            mac.update(input.as_bytes());
            mac.finalize().into_bytes().to_vec()
        }
        other => panic!("not an HMAC algorithm: {other}"),
    };
    format!("{input}.{}", B64.encode(tag))
}

/// Proves that `token` is correctly signed in `alg` with `key` (a JWT library outside the
/// service, all its other checks off), so that a refusal can only be the algorithm's.
fn assert_correctly_signed(
    name: &str,
    token: &str,
    alg: jsonwebtoken::Algorithm,
    key: &jsonwebtoken::DecodingKey,
) {
    let mut validation = jsonwebtoken::Validation::new(alg);
    validation.validate_exp = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    jsonwebtoken::decode::<Value>(token, key, &validation)
        .unwrap_or_else(|e| panic!("{name}: the test token is not correctly signed: {e}"));
}

/// Tokens with a valid signature in an algorithm other than the configured one, each signed
/// with a key the server holds (its HS secret, its public key's text, or the private half of a
/// key pair it trusts under another algorithm): 401 `invalid_token`, nothing written.
#[tokio::test]
async fn correctly_signed_tokens_in_another_algorithm_are_refused() {
    use jsonwebtoken::{Algorithm as Alg, DecodingKey};
    use planfiles::config::Algorithm;
    let c = claims(json!({}));
    let secret = DecodingKey::from_secret(SECRET.as_bytes());
    let rs_public_pem = test_key("rs256-public.pem");
    let es_public_pem = test_key("es256-public.pem");
    let rs_private_pem = test_key("rs256-private.pem");
    let rs_public = DecodingKey::from_rsa_pem(rs_public_pem.as_bytes()).unwrap();
    let rs256 = |claims: &Value| {
        sign_rs256(
            &rs_private_pem,
            &json!({"alg": "RS256", "typ": "JWT"}),
            claims,
        )
    };

    // (configured, good token, [(name, token, its algorithm, the key that verifies it)])
    type Row = (&'static str, String, Alg, DecodingKey);
    let servers: Vec<(Algorithm, Option<&str>, String, Vec<Row>)> = vec![
        (
            Algorithm::HS256,
            None,
            hs256(json!({})),
            vec![
                (
                    "HS384 with the secret",
                    sign_hmac("HS384", SECRET.as_bytes(), &c),
                    Alg::HS384,
                    secret.clone(),
                ),
                (
                    "HS512 with the secret",
                    sign_hmac("HS512", SECRET.as_bytes(), &c),
                    Alg::HS512,
                    secret.clone(),
                ),
            ],
        ),
        (
            Algorithm::RS256,
            Some("rs256-public.pem"),
            rs256(&c),
            vec![
                (
                    "HS256 with the secret, RS256 configured",
                    sign_hmac("HS256", SECRET.as_bytes(), &c),
                    Alg::HS256,
                    secret.clone(),
                ),
                (
                    "HS256 keyed with the RS256 public key's PEM text",
                    sign_hmac("HS256", rs_public_pem.as_bytes(), &c),
                    Alg::HS256,
                    DecodingKey::from_secret(rs_public_pem.as_bytes()),
                ),
                (
                    "HS512 with the secret, RS256 configured",
                    sign_hmac("HS512", SECRET.as_bytes(), &c),
                    Alg::HS512,
                    secret.clone(),
                ),
            ],
        ),
        (
            Algorithm::ES256,
            Some("es256-public.pem"),
            sign_es256(&test_key("es256-private.pem"), &c),
            vec![
                (
                    "RS256 with the test key pair, ES256 configured",
                    rs256(&c),
                    Alg::RS256,
                    rs_public.clone(),
                ),
                (
                    "HS256 with the secret, ES256 configured",
                    sign_hmac("HS256", SECRET.as_bytes(), &c),
                    Alg::HS256,
                    secret.clone(),
                ),
                (
                    "HS256 keyed with the ES256 public key's PEM text",
                    sign_hmac("HS256", es_public_pem.as_bytes(), &c),
                    Alg::HS256,
                    DecodingKey::from_secret(es_public_pem.as_bytes()),
                ),
            ],
        ),
    ];
    for (algorithm, public, good, rows) in servers {
        let app = match public {
            None => TestApp::spawn().await,
            Some(public) => app_with_public_key(algorithm, public).await,
        };
        assert_eq!(
            app.get_integration(&good).await.status(),
            200,
            "{algorithm:?}: the good token"
        );
        let head = app.head("acme");
        for (name, token, alg, key) in rows {
            assert_correctly_signed(name, &token, alg, &key);
            for res in [
                app.get_integration(&token).await,
                app.put_integration(&token, &json!({"content": {"x": 1}}))
                    .await,
            ] {
                assert_eq!(
                    res.headers()
                        .get("www-authenticate")
                        .map(|v| v.to_str().unwrap()),
                    Some("Bearer error=\"invalid_token\""),
                    "{name}"
                );
                let (status, body) = problem(res).await;
                assert_eq!(
                    (status, body["code"].as_str()),
                    (401, Some("invalid_token")),
                    "{name}"
                );
            }
        }
        assert_eq!(
            app.head("acme"),
            head,
            "{algorithm:?}: a refused token wrote"
        );
    }
}

/// The challenge is the same on every authenticated endpoint: bare `Bearer` without a token,
/// `error="invalid_token"` for a refused one, `error="insufficient_scope", scope=` for a
/// missing permission.
#[tokio::test]
async fn every_authenticated_endpoint_sends_the_bearer_challenge() {
    let app = TestApp::with().metrics_require_token().spawn().await;
    let head = app.head("acme");
    let expired = hs256(json!({"exp": now() - 3600}));
    let wrong_key = sign_hmac("HS256", b"another-secret-0123456789", &claims(json!({})));
    let other_alg = sign_hmac("HS512", SECRET.as_bytes(), &claims(json!({})));
    // (path, the permission it needs, a token that has every permission but that one)
    let endpoints: Vec<(String, &str, Vec<&str>)> = vec![
        (
            "/plans/integration-file/history".into(),
            "jit.integrations.read",
            vec![
                "jit.preferences.write",
                "planfiles.repos.read",
                "planfiles.metrics.read",
            ],
        ),
        (
            "/plans/configuration-file/history".into(),
            "jit.preferences.read",
            vec![
                "jit.integrations.write",
                "planfiles.repos.read",
                "planfiles.metrics.read",
            ],
        ),
        (
            format!("/plans/integration-file?ref={head}"),
            "jit.integrations.read",
            vec![
                "jit.preferences.write",
                "planfiles.repos.read",
                "planfiles.metrics.read",
            ],
        ),
        (
            format!("/plans/configuration-file?ref={head}"),
            "jit.preferences.read",
            vec![
                "jit.integrations.write",
                "planfiles.repos.read",
                "planfiles.metrics.read",
            ],
        ),
        (
            "/git/acme.git/info/refs?service=git-upload-pack".into(),
            "planfiles.repos.read",
            vec![
                "jit.integrations.write",
                "jit.preferences.write",
                "planfiles.metrics.read",
            ],
        ),
        (
            "/metrics".into(),
            "planfiles.metrics.read",
            vec![
                "jit.integrations.write",
                "jit.preferences.write",
                "planfiles.repos.read",
            ],
        ),
    ];
    for (path, needed, others) in endpoints {
        let lacking = common::token("acme", &others);
        let cases: Vec<(&str, Option<&str>, u16, &str, String)> = vec![
            ("no token", None, 401, "unauthorized", "Bearer".into()),
            (
                "expired",
                Some(&expired),
                401,
                "invalid_token",
                "Bearer error=\"invalid_token\"".into(),
            ),
            (
                "wrong key",
                Some(&wrong_key),
                401,
                "invalid_token",
                "Bearer error=\"invalid_token\"".into(),
            ),
            (
                "HS512",
                Some(&other_alg),
                401,
                "invalid_token",
                "Bearer error=\"invalid_token\"".into(),
            ),
            (
                "without the permission",
                Some(&lacking),
                403,
                "insufficient_scope",
                format!("Bearer error=\"insufficient_scope\", scope=\"{needed}\""),
            ),
        ];
        for (name, token, status, code, challenge) in cases {
            let mut req = app.client.get(app.url(&path));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let res = req.send().await.unwrap();
            assert_eq!(
                res.headers()
                    .get("www-authenticate")
                    .map(|v| v.to_str().unwrap()),
                Some(challenge.as_str()),
                "{path}: {name}"
            );
            let (s, body) = problem(res).await;
            assert_eq!(
                (s, body["code"].as_str()),
                (status, Some(code)),
                "{path}: {name}"
            );
        }
        // And the token with the permission passes.
        let allowed = common::token("acme", &[needed]);
        let res = app
            .client
            .get(app.url(&path))
            .bearer_auth(&allowed)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{path}");
    }
}

/// A refused token says why in words a caller can act on, never the JWT library's names:
/// another key, an expiry with its moment, not a JWT, another algorithm, a claim missing, the
/// `Bearer ` scheme missing.
#[tokio::test]
async fn a_refused_token_says_why_in_words() {
    let app = TestApp::spawn().await;
    let claims =
        |exp: u64| json!({"tenant_id": "acme", "permissions": ALL, "exp": exp, "sub": "t"});
    let hs256 = json!({"alg": "HS256", "typ": "JWT"});
    let expired_at = common::now() - 3600;
    let at = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(expired_at),
    )
    .to_string();
    let cases: Vec<(&str, String, String)> = vec![
        (
            "another key",
            format!(
                "Bearer {}",
                common::sign_hs256(
                    "another-secret-0123456789",
                    &hs256,
                    &claims(common::now() + 600)
                )
            ),
            "signed with another key".into(),
        ),
        (
            "expired",
            format!(
                "Bearer {}",
                common::sign_hs256(common::SECRET, &hs256, &claims(expired_at))
            ),
            format!("expired at {at}"),
        ),
        ("not a JWT", "Bearer not-a-token".into(), "not a JWT".into()),
        (
            "another algorithm",
            format!(
                "Bearer {}",
                common::sign_hs256(
                    common::SECRET,
                    &json!({"alg": "HS512", "typ": "JWT"}),
                    &claims(common::now() + 600)
                )
            ),
            "signed with HS512; this service accepts HS256 only".into(),
        ),
        (
            "no exp",
            format!(
                "Bearer {}",
                common::sign_hs256(
                    common::SECRET,
                    &hs256,
                    &json!({"tenant_id": "acme", "permissions": ALL})
                )
            ),
            "has no `exp` claim".into(),
        ),
        (
            "no scheme",
            token("acme", ALL),
            "the `Bearer ` is missing".into(),
        ),
    ];
    for (name, header, says) in cases {
        let res = app
            .client
            .get(app.url("/plans/integration-file"))
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        let (status, body) = problem(res).await;
        assert_eq!(status, 401, "{name}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(&says), "{name}: {detail}");
        for internal in [
            "InvalidSignature",
            "ExpiredSignature",
            "Base64",
            "InvalidToken",
            "Json(",
        ] {
            assert!(!detail.contains(internal), "{name}: {detail}");
        }
    }
}

//! The four endpoints against the real server, cross-checked with the git CLI.
use crate::common;

use common::{problem, token, TestApp, ALL};
use serde_json::{json, Value};

#[tokio::test]
async fn get_integration_file_returns_the_stored_file_and_its_blob_id() {
    let app = TestApp::spawn().await;
    let res = app
        .get_integration(&token("acme", &["jit.integrations.read"]))
        .await;
    assert_eq!(res.status(), 200);
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    assert!(res.headers().contains_key("x-request-id"));
    let body: Value = res.json().await.unwrap();
    let sha = app.blob("acme", "integrations.yml");
    assert_eq!(body["file_sha"], sha);
    assert_eq!(etag, format!("\"{sha}\""));
    assert_eq!(body["status"], "valid");
    assert_eq!(body["vendor_response"], json!({}));
    assert_eq!(
        body["raw_content"],
        app.git("acme", &["show", "main:integrations.yml"]) + "\n"
    );
    assert_eq!(body["content"]["aws"][0]["account_id"], "123456789012");
    assert_eq!(body["content"]["drata"]["workspace"], "acme-prod");
}

#[tokio::test]
async fn get_configuration_file_has_the_seed_shape() {
    let app = TestApp::spawn().await;
    let res = app
        .get_configuration(&token("acme", &["jit.preferences.read"]))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["content", "sha"]
    );
    assert_eq!(body["sha"], app.blob("acme", "configuration.yml"));
    assert_eq!(body["content"]["folders"][0]["path"], "services/payments");
    assert_eq!(
        body["content"]["folders"][1]["exclude"],
        json!(["node_modules/**"])
    );
}

#[tokio::test]
async fn configuration_flow_add_an_exclude_pattern() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let before: Value = app.get_configuration(&t).await.json().await.unwrap();
    let mut content = before["content"].clone();
    content["folders"][1]["exclude"]
        .as_array_mut()
        .unwrap()
        .push(json!("dist/**"));
    let res = app
        .put_configuration(&t, &json!({"payload": content, "file_sha": before["sha"]}))
        .await;
    assert_eq!(res.status(), 200);
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    let put: Value = res.json().await.unwrap();
    let sha = app.blob("acme", "configuration.yml");
    assert_eq!(put["sha"], sha);
    assert_eq!(etag, format!("\"{sha}\""));
    assert_eq!(put["commit_sha"], app.head("acme"));
    assert_eq!(put["content"], content);
    let after: Value = app.get_configuration(&t).await.json().await.unwrap();
    assert_eq!(after["content"], content);
    app.fsck("acme");
}

#[tokio::test]
async fn integration_flow_with_file_sha_on_a_source_hosting_tenant() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let before: Value = app.get_integration(&t).await.json().await.unwrap();
    let mut content = before["content"].clone();
    content["vanta"] = json!({"user_email": "sec@acme.example", "workspace": "acme"});
    let res = app
        .put_integration(
            &t,
            &json!({"content": content, "file_sha": before["file_sha"]}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let put: Value = res.json().await.unwrap();
    assert_eq!(put["file_sha"], app.blob("acme", "integrations.yml"));
    assert_eq!(put["commit_sha"], app.head("acme"));
    assert_eq!(put["status"], "valid");
    assert_eq!(put["content"], content);
    assert_eq!(
        put["raw_content"],
        app.git("acme", &["show", "main:integrations.yml"]) + "\n"
    );
    // Key order is the client's.
    let keys: Vec<_> = put["content"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, ["aws", "drata", "vanta"]);
    // A stale sha now fails and changes nothing.
    let head = app.head("acme");
    let (status, body) = problem(
        app.put_integration(&t, &json!({"content": {}, "file_sha": before["file_sha"]}))
            .await,
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("sha_mismatch")));
    assert_eq!(body["current_sha"], put["file_sha"]);
    assert_eq!(app.head("acme"), head);
}

#[tokio::test]
async fn integration_file_sha_is_refused_without_source_hosting_and_omitting_it_forces() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let sha = app.blob("globex", "integrations.yml");
    let head = app.head("globex");
    let (status, body) = problem(
        app.put_integration(&t, &json!({"content": {}, "file_sha": sha}))
            .await,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("file_sha_not_allowed"))
    );
    assert_eq!(app.head("globex"), head);
    let res = app
        .put_integration(&t, &json!({"content": {"aws": []}, "file_sha": null}))
        .await;
    assert_eq!(res.status(), 200);
    let msg = app.git("globex", &["log", "-1", "--format=%B"]);
    assert!(msg.contains("Forced: true"), "{msg}");
}

#[tokio::test]
async fn a_write_is_one_commit_that_changes_only_its_file_with_author_and_trailers() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let before_head = app.head("acme");
    let config_blob = app.blob("acme", "configuration.yml");
    let sha = app.blob("acme", "integrations.yml");
    let res = app
        .client
        .put(app.url("/plans/integration-file"))
        .bearer_auth(&t)
        .header("x-request-id", "walkthrough-42")
        .json(&json!({"content": {"aws": []}, "file_sha": sha}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-request-id"], "walkthrough-42");
    assert_eq!(app.git("acme", &["rev-parse", "main~1"]), before_head);
    assert_eq!(
        app.git("acme", &["diff", "--name-only", "main~1", "main"]),
        "integrations.yml"
    );
    assert_eq!(app.blob("acme", "configuration.yml"), config_blob);
    let log = app.git("acme", &["log", "-1", "--format=%an <%ae>|%cn <%ce>|%B"]);
    let (author, rest) = log.split_once('|').unwrap();
    let (committer, message) = rest.split_once('|').unwrap();
    assert_eq!(author, "Test Er <tester@example.com>");
    assert_eq!(committer, "planfiles <planfiles@test>");
    assert_eq!(
        message,
        "Update integrations.yml\n\nRequest-Id: walkthrough-42"
    );
    let trailers = app.git(
        "acme",
        &["log", "-1", "--format=%(trailers:key=Request-Id,valueonly)"],
    );
    assert_eq!(trailers, "walkthrough-42");
    app.fsck("acme");
}

#[tokio::test]
async fn a_write_without_a_request_id_records_the_one_it_answers_with() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let res = app
        .put_integration(
            &t,
            &json!({"content": {"aws": []}, "file_sha": app.blob("acme", "integrations.yml")}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let answered = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let recorded = app.git(
        "acme",
        &["log", "-1", "--format=%(trailers:key=Request-Id,valueonly)"],
    );
    assert_eq!(recorded, answered);
}

#[tokio::test]
async fn writing_the_same_bytes_makes_no_commit() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let before: Value = app.get_configuration(&t).await.json().await.unwrap();
    let head = app.head("acme");
    // The fixture file was written by hand; the first PUT re-emits it, the second is a no-op.
    let first: Value = app
        .put_configuration(
            &t,
            &json!({"payload": before["content"], "file_sha": before["sha"]}),
        )
        .await
        .json()
        .await
        .unwrap();
    let head_after_first = app.head("acme");
    let second = app
        .put_configuration(
            &t,
            &json!({"payload": before["content"], "file_sha": first["sha"]}),
        )
        .await;
    assert_eq!(second.status(), 200);
    let second: Value = second.json().await.unwrap();
    assert_eq!(second["commit_sha"], head_after_first);
    assert_eq!(app.head("acme"), head_after_first);
    let count = app.git("acme", &["rev-list", "--count", &format!("{head}..main")]);
    assert!(count == "0" || count == "1", "{count}");
}

#[tokio::test]
async fn a_commit_hash_forces_a_configuration_update() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let old_commit = app.git("acme", &["rev-parse", "main~2"]);
    let payload = json!({"folders": [{"path": "all"}]});
    let res = app
        .put_configuration(
            &t,
            &json!({"payload": payload, "file_sha": old_commit.to_uppercase()}),
        )
        .await;
    assert_eq!(res.status(), 200);
    assert!(app
        .git("acme", &["log", "-1", "--format=%B"])
        .contains("Forced: true"));
    // A commit id that is not in the tenant's history does not force.
    let foreign = app.git("globex", &["rev-parse", "main"]);
    let head = app.head("acme");
    let (status, body) = problem(
        app.put_configuration(&t, &json!({"payload": {}, "file_sha": foreign}))
            .await,
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("sha_mismatch")));
    assert_eq!(app.head("acme"), head);
    // Nor does an old blob id.
    let old_blob = app.git("acme", &["rev-parse", "main~1:configuration.yml"]);
    let (status, _) = problem(
        app.put_configuration(&t, &json!({"payload": {}, "file_sha": old_blob}))
            .await,
    )
    .await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn configuration_put_needs_a_precondition() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let (status, body) = problem(app.put_configuration(&t, &json!({"payload": {}})).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (428, Some("precondition_required"))
    );
    assert_eq!(app.head("acme"), head);
}

#[tokio::test]
async fn if_match_is_checked_on_both_files_and_satisfies_the_configuration_precondition() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let put = |file: &'static str, etag: String, body: Value| {
        app.client
            .put(app.url(file))
            .bearer_auth(&t)
            .header("if-match", etag)
            .json(&body)
            .send()
    };
    let stale = "\"0000000000000000000000000000000000000000\"".to_owned();
    for (file, body) in [
        ("/plans/integration-file", json!({"content": {}})),
        ("/plans/configuration-file", json!({"payload": {}})),
    ] {
        let head = app.head("globex");
        let (status, pb) = problem(put(file, stale.clone(), body.clone()).await.unwrap()).await;
        assert_eq!(
            (status, pb["code"].as_str()),
            (412, Some("precondition_failed")),
            "{file}"
        );
        assert!(pb["current_sha"].is_string());
        assert_eq!(app.head("globex"), head);
    }
    // If-Match alone: a matching, not forced, configuration write.
    let etag = format!("\"{}\"", app.blob("globex", "configuration.yml"));
    let res = put(
        "/plans/configuration-file",
        etag,
        json!({"payload": {"folders": []}}),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert!(!app
        .git("globex", &["log", "-1", "--format=%B"])
        .contains("Forced"));
    // A stale If-Match is 412 even when file_sha matches.
    let sha = app.blob("globex", "configuration.yml");
    let (status, _) = problem(
        put(
            "/plans/configuration-file",
            stale,
            json!({"payload": {}, "file_sha": sha}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 412);
}

#[tokio::test]
async fn yaml_text_content_is_stored_byte_for_byte() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let text = "# Managed by the platform team\naws:\n  - account_id: '000011112222' # sandbox\n    regions: [us-east-1]\n    type: aws\n";
    let res = app.put_integration(&t, &json!({"content": text})).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["raw_content"], text);
    assert_eq!(
        app.git("globex", &["cat-file", "blob", "main:integrations.yml"]) + "\n",
        text
    );
    let got: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(got["raw_content"], text);
    assert_eq!(
        got["content"],
        json!({"aws": [{"account_id": "000011112222", "regions": ["us-east-1"], "type": "aws"}]})
    );
}

#[tokio::test]
async fn outside_commits_are_served_and_broken_files_read_as_invalid() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    app.outside_commit("globex", "integrations.yml", "- not\n- a mapping\n");
    let res = app.get_integration(&t).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], "invalid");
    assert_eq!(body["content"], json!({}));
    assert_eq!(body["raw_content"], "- not\n- a mapping\n");
    assert_eq!(body["file_sha"], app.blob("globex", "integrations.yml"));
    assert!(body["validation_errors"]
        .as_array()
        .is_some_and(|e| !e.is_empty()));

    app.outside_commit("globex", "configuration.yml", "folders:\n  - path: 7\n");
    let body: Value = app.get_configuration(&t).await.json().await.unwrap();
    assert_eq!(body["status"], "invalid");
    assert_eq!(body["content"], json!({"folders": [{"path": 7}]}));
    assert!(body["validation_errors"][0]
        .as_str()
        .unwrap()
        .contains("/folders/0/path"));

    // A PUT fixes it.
    let sha = body["sha"].clone();
    let res = app
        .put_configuration(&t, &json!({"payload": {"folders": []}, "file_sha": sha}))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = app.get_configuration(&t).await.json().await.unwrap();
    assert_eq!(
        body,
        json!({"content": {"folders": []}, "sha": app.blob("globex", "configuration.yml")})
    );
}

#[tokio::test]
async fn an_empty_integration_file_reads_as_an_empty_mapping() {
    let app = TestApp::spawn().await;
    app.outside_commit("initech", "integrations.yml", "");
    let body: Value = app
        .get_integration(&token("initech", ALL))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["content"], json!({}));
    assert_eq!(body["status"], "valid");
    assert_eq!(body["file_sha"], "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
}

#[tokio::test]
async fn writes_to_one_tenant_never_touch_another() {
    let app = TestApp::spawn().await;
    let globex_head = app.head("globex");
    let res = app
        .put_integration(&token("acme", ALL), &json!({"content": {"x": 1}}))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.head("globex"), globex_head);
}

#[tokio::test]
async fn reads_never_serve_a_stale_file_after_outside_commits_or_packed_refs() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    for round in 0..3 {
        // Read twice (the second read may come from the response cache), then change the file
        // behind the service's back.
        for _ in 0..2 {
            let body: Value = app.get_integration(&t).await.json().await.unwrap();
            assert_eq!(
                body["file_sha"],
                app.blob("globex", "integrations.yml"),
                "round {round}"
            );
        }
        if round == 1 {
            app.git("globex", &["pack-refs", "--all"]);
            assert!(!app.repo("globex").join("refs/heads/main").exists());
        }
        app.outside_commit("globex", "integrations.yml", &format!("round: {round}\n"));
        let body: Value = app.get_integration(&t).await.json().await.unwrap();
        assert_eq!(body["content"], json!({"round": round}));
        assert_eq!(body["file_sha"], app.blob("globex", "integrations.yml"));
    }
}

/// Every combination of `file_sha` and `If-Match`: the blob-id `file_sha` is checked first
/// (409), then `If-Match` (412); a commit hash forces past `file_sha` but not past a stale
/// `If-Match`; `If-Match: *` satisfies the configuration file's precondition but is a forced
/// write. Each refusal carries `current_sha` and changes nothing.
#[tokio::test]
async fn file_sha_and_if_match_together() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let stale = "0000000000000000000000000000000000000000";
    let put = |file: &'static str, if_match: Option<String>, body: Value| {
        let mut req = app.client.put(app.url(file)).bearer_auth(&t).json(&body);
        if let Some(tag) = if_match {
            req = req.header("if-match", tag);
        }
        req.send()
    };
    let quoted = |id: &str| format!("\"{id}\"");
    let int = app.blob("acme", "integrations.yml");
    let conf = app.blob("acme", "configuration.yml");
    let commit = app.git("acme", &["rev-parse", "main~1"]);
    let cases = [
        (
            "both stale",
            "/plans/integration-file",
            Some(quoted(stale)),
            json!({"content": {"x": 1}, "file_sha": stale}),
            409,
            &int,
        ),
        (
            "stale file_sha, current If-Match",
            "/plans/integration-file",
            Some(quoted(&int)),
            json!({"content": {"x": 1}, "file_sha": stale}),
            409,
            &int,
        ),
        (
            "current file_sha, stale If-Match",
            "/plans/integration-file",
            Some(quoted(stale)),
            json!({"content": {"x": 1}, "file_sha": int}),
            412,
            &int,
        ),
        (
            "configuration: stale file_sha",
            "/plans/configuration-file",
            None,
            json!({"payload": {}, "file_sha": stale}),
            409,
            &conf,
        ),
        (
            "configuration: commit hash, stale If-Match",
            "/plans/configuration-file",
            Some(quoted(stale)),
            json!({"payload": {}, "file_sha": commit}),
            412,
            &conf,
        ),
    ];
    for (name, file, if_match, body, status, current) in cases {
        let head = app.head("acme");
        let (got, pb) = problem(put(file, if_match, body).await.unwrap()).await;
        let code = if status == 409 {
            "sha_mismatch"
        } else {
            "precondition_failed"
        };
        assert_eq!(
            (got, pb["code"].as_str()),
            (status, Some(code)),
            "{name}: {pb}"
        );
        assert_eq!(pb["current_sha"].as_str(), Some(current.as_str()), "{name}");
        assert_eq!(app.head("acme"), head, "{name} changed the repository");
    }
    // If-Match: * with no file_sha: the configuration write goes ahead, marked forced.
    let res = put(
        "/plans/configuration-file",
        Some("*".into()),
        json!({"payload": {"folders": [{"path": "star"}]}}),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert!(app
        .git("acme", &["log", "-1", "--format=%B"])
        .contains("Forced: true"));
}

/// The author comes from the token, cleaned of what would break a commit header; a token
/// with no name, email or sub still writes, as `unknown`.
#[tokio::test]
async fn commit_authors_are_cleaned_and_default_to_unknown() {
    let app = TestApp::spawn().await;
    let sign = |claims: Value| {
        common::sign_hs256(
            common::SECRET,
            &json!({"alg": "HS256", "typ": "JWT"}),
            &claims,
        )
    };
    let exp = common::now() + 600;
    let cases = [
        (
            json!({"tenant_id": "globex", "permissions": ALL, "exp": exp,
                   "name": "Eve <evil@x>\nCommitter: forged", "email": "eve>@ex\u{7}ample.com"}),
            "Eve evil@xCommitter: forged <eve@example.com>",
        ),
        (
            json!({"tenant_id": "globex", "permissions": ALL, "exp": exp}),
            "unknown <unknown@globex>",
        ),
        (
            json!({"tenant_id": "globex", "permissions": ALL, "exp": exp, "sub": "svc-42"}),
            "svc-42 <svc-42@globex>",
        ),
    ];
    for (i, (claims, author)) in cases.into_iter().enumerate() {
        let res = app
            .put_integration(&sign(claims), &json!({"content": {"n": i}}))
            .await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            app.git("globex", &["log", "-1", "--format=%an <%ae>"]),
            author
        );
    }
    app.fsck("globex");
}

/// ETag is the blob id on every GET and PUT of both files.
#[tokio::test]
async fn etag_is_the_blob_id_on_every_get_and_put() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let etag = |res: &reqwest::Response| res.headers()["etag"].to_str().unwrap().to_owned();
    let quoted = |file: &str| format!("\"{}\"", app.blob("globex", file));
    let res = app.get_integration(&t).await;
    assert_eq!(etag(&res), quoted("integrations.yml"));
    let res = app.get_configuration(&t).await;
    assert_eq!(etag(&res), quoted("configuration.yml"));
    let res = app.put_integration(&t, &json!({"content": {"e": 1}})).await;
    assert_eq!(res.status(), 200);
    assert_eq!(etag(&res), quoted("integrations.yml"));
    let sha = app.blob("globex", "configuration.yml");
    let res = app
        .put_configuration(&t, &json!({"payload": {"folders": []}, "file_sha": sha}))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(etag(&res), quoted("configuration.yml"));
}

/// YAML text nested exactly as deep as the documented limit is stored.
#[tokio::test]
async fn yaml_text_at_the_nesting_limit_is_accepted() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let mut text = String::new();
    for depth in 0..63 {
        text.push_str(&format!("{}k:\n", "  ".repeat(depth)));
    }
    text.push_str(&format!("{}k: 1\n", "  ".repeat(63)));
    let res = app.put_integration(&t, &json!({"content": text})).await;
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    assert_eq!(
        app.git("globex", &["cat-file", "blob", "main:integrations.yml"]) + "\n",
        text
    );
}

/// A PUT of the bytes already stored makes no commit and answers 200 with `commit_sha` = the
/// head and the stored blob as `file_sha` and `ETag`, forced or not. Its preconditions are
/// still checked first: a stale `file_sha` is 409 and a stale `If-Match` 412, on both files,
/// although nothing would change.
#[tokio::test]
async fn a_no_op_put_answers_the_current_state_after_checking_its_preconditions() {
    let app = TestApp::spawn().await;
    let etag = |res: &reqwest::Response| res.headers()["etag"].to_str().unwrap().to_owned();
    // globex has no source hosting: both PUTs are forced, the second one a no-op.
    let t = token("globex", ALL);
    let content = json!({"same": "bytes", "n": 1});
    let res = app.put_integration(&t, &json!({"content": content})).await;
    assert_eq!(res.status(), 200);
    let (head, blob) = (app.head("globex"), app.blob("globex", "integrations.yml"));
    let res = app.put_integration(&t, &json!({"content": content})).await;
    assert_eq!(res.status(), 200);
    assert_eq!(etag(&res), format!("\"{blob}\""));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["commit_sha"], head.as_str());
    assert_eq!(body["file_sha"], blob.as_str());
    assert_eq!(body["content"], content);
    assert_eq!(app.head("globex"), head, "a forced no-op made a commit");

    // acme has source hosting. Store both files as the service emits them, then send the
    // same bytes again with stale preconditions.
    let t = token("acme", ALL);
    let old_int = app.blob("acme", "integrations.yml");
    let old_conf = app.blob("acme", "configuration.yml");
    let payload = json!({"folders": [{"path": "src", "exclude": ["*.tmp"]}]});
    let res = app
        .put_integration(&t, &json!({"content": content, "file_sha": old_int}))
        .await;
    assert_eq!(res.status(), 200);
    let res = app
        .put_configuration(&t, &json!({"payload": payload, "file_sha": old_conf}))
        .await;
    assert_eq!(res.status(), 200);
    let head = app.head("acme");
    let int = app.blob("acme", "integrations.yml");
    let conf = app.blob("acme", "configuration.yml");
    let stale_tag = "\"0000000000000000000000000000000000000000\"";
    let cases = [
        (
            "integration: stale file_sha",
            "/plans/integration-file",
            json!({"content": content, "file_sha": old_int}),
            None,
            409,
            &int,
        ),
        (
            "integration: stale If-Match",
            "/plans/integration-file",
            json!({"content": content, "file_sha": int}),
            Some(stale_tag),
            412,
            &int,
        ),
        (
            "integration: forced, stale If-Match",
            "/plans/integration-file",
            json!({"content": content}),
            Some(stale_tag),
            412,
            &int,
        ),
        (
            "configuration: stale file_sha",
            "/plans/configuration-file",
            json!({"payload": payload, "file_sha": old_conf}),
            None,
            409,
            &conf,
        ),
        (
            "configuration: stale If-Match",
            "/plans/configuration-file",
            json!({"payload": payload, "file_sha": conf}),
            Some(stale_tag),
            412,
            &conf,
        ),
    ];
    for (name, path, body, if_match, status, current) in cases {
        let mut req = app.client.put(app.url(path)).bearer_auth(&t).json(&body);
        if let Some(tag) = if_match {
            req = req.header("if-match", tag);
        }
        let (got, pb) = problem(req.send().await.unwrap()).await;
        let code = if status == 409 {
            "sha_mismatch"
        } else {
            "precondition_failed"
        };
        assert_eq!((got, pb["code"].as_str()), (status, Some(code)), "{name}");
        assert_eq!(pb["current_sha"].as_str(), Some(current.as_str()), "{name}");
        assert_eq!(app.head("acme"), head, "{name}");
    }
    // The same bytes with matching preconditions: 200, no commit, the ETag of the blob.
    for (path, body, file) in [
        (
            "/plans/integration-file",
            json!({"content": content, "file_sha": int}),
            &int,
        ),
        (
            "/plans/configuration-file",
            json!({"payload": payload, "file_sha": conf}),
            &conf,
        ),
    ] {
        let res = app
            .client
            .put(app.url(path))
            .bearer_auth(&t)
            .header("if-match", format!("\"{file}\""))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{path}");
        assert_eq!(etag(&res), format!("\"{file}\""), "{path}");
        let answer: Value = res.json().await.unwrap();
        assert_eq!(answer["commit_sha"], head.as_str(), "{path}");
    }
    assert_eq!(app.head("acme"), head);
}

/// The configuration file's `payload` may be YAML text, as the integration file's `content`
/// may: stored byte for byte (its comments kept), checked against the same shape, and the same
/// in `POST /plans/commits`.
#[tokio::test]
async fn a_configuration_payload_of_yaml_text_is_stored_byte_for_byte() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let current: Value = app.get_configuration(&t).await.json().await.unwrap();
    let text = "# scanned nightly\nfolders:\n  - path: services   # the monorepo\n    exclude: ['**/testdata/**']\n";
    let res = app
        .put_configuration(&t, &json!({"payload": text, "file_sha": current["sha"]}))
        .await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        body["content"],
        json!({"folders": [{"path": "services", "exclude": ["**/testdata/**"]}]})
    );
    assert_eq!(
        app.git("acme", &["show", "main:configuration.yml"]) + "\n",
        text
    );
    // The shape is checked as for JSON: the pointer is into the request.
    let bad = app
        .put_configuration(
            &t,
            &json!({"payload": "folders:\n  - exclude: [x]\n", "file_sha": body["sha"]}),
        )
        .await;
    let (status, problem) = common::problem(bad).await;
    assert_eq!(status, 422, "{problem}");
    assert!(
        problem.to_string().contains("/payload/folders/0"),
        "{problem}"
    );
    let ambiguous = app
        .put_configuration(
            &t,
            &json!({"payload": "folders:\n  - path: on\n", "file_sha": body["sha"]}),
        )
        .await;
    assert_eq!(ambiguous.status(), 422);
    // And as a part of one commit.
    let text2 = "folders: []  # nothing to scan\n";
    let res = app
        .post_commits(
            &t,
            "",
            &json!({"configuration-file": {"payload": text2, "file_sha": body["sha"]}}),
        )
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        app.git("acme", &["show", "main:configuration.yml"]) + "\n",
        text2
    );
    app.fsck("acme");
}

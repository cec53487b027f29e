//! Validators: writes that break the operator's schemas are refused with every violation located (and nothing written), stored files that break them read as invalid, the combined schemas, SIGHUP reloads, broken and remote schemas at start, and the offline `planfiles validate`.
use crate::common::process::{data_dir_with_fixture, planfiles, serve, serve_command};
use crate::common::{
    copy_tree, git_in, problem, python_check, python_has, shipped_schemas, token, TestApp, ALL,
};
use serde_json::{json, Value};
use std::path::Path;

const BAD_TEXT: &str =
    "# our accounts\naws:\n  - account_id: \"123456789012\"\n    regions: [us-east-1]\n    type: aws\n  - account_id: \"12345\"\n    regions:\n      - us-east-9\n    type: aws\n";

fn pointers(body: &Value) -> Vec<String> {
    let mut found: Vec<String> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap().to_owned())
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn every_write_path_refuses_what_breaks_a_schema_and_writes_nothing() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("acme", ALL);
    let head = app.head("acme");
    let sha = app.blob("acme", "configuration.yml");
    let bad_config =
        json!({"folders": [{"path": "ok"}, {"path": "../etc", "exclude": ["a", "a"]}]});
    // Each case: the request, the pointers it must name.
    let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
        (
            "PUT",
            "/plans/integration-file",
            json!({"content": BAD_TEXT}),
            vec!["/content/aws/1/account_id", "/content/aws/1/regions/0"],
        ),
        (
            "PUT",
            "/plans/integration-file",
            json!({"content": {"aws": [{"account_id": 12, "regions": [], "type": "gcp"}], "drata": {"workspace": ""}}}),
            vec![
                "/content/aws/0/account_id",
                "/content/aws/0/regions",
                "/content/aws/0/type",
                "/content/drata",
                "/content/drata/workspace",
            ],
        ),
        (
            "PUT",
            "/plans/configuration-file",
            json!({"payload": bad_config, "file_sha": sha}),
            vec!["/payload/folders/1/exclude", "/payload/folders/1/path"],
        ),
        (
            "POST",
            "/plans/commits",
            json!({
            "integration-file": {"content": {"drata": {"user_email": "a@b.co", "workspace": "w"}}},
            "configuration-file": {"payload": bad_config, "file_sha": sha}}),
            vec![
                "/configuration-file/payload/folders/1/exclude",
                "/configuration-file/payload/folders/1/path",
            ],
        ),
        (
            "POST",
            "/plans/commits",
            json!({
            "integration-file": {"content": BAD_TEXT},
            "configuration-file": {"payload": bad_config, "file_sha": sha}}),
            vec![
                "/configuration-file/payload/folders/1/exclude",
                "/configuration-file/payload/folders/1/path",
                "/integration-file/content/aws/1/account_id",
                "/integration-file/content/aws/1/regions/0",
            ],
        ),
    ];
    for (method, path, body, want) in cases {
        for query in ["?dry_run=true", ""] {
            let res = app
                .send(method, &format!("{path}{query}"), &t, Some(&body), &[])
                .await;
            let (status, problem) = problem(res).await;
            assert_eq!(
                (status, problem["code"].as_str()),
                (422, Some("schema_violation")),
                "{path}{query}: {problem}"
            );
            assert_eq!(pointers(&problem), want, "{path}{query}: {problem}");
            // Both parts refused: the detail names both files, each pointer its part.
            if want.iter().any(|p| p.starts_with("/integration-file")) {
                let detail = problem["detail"].as_str().unwrap();
                assert!(
                    detail.starts_with("integrations.yml and configuration.yml break 4 rules"),
                    "{detail}"
                );
            }
            for e in problem["errors"].as_array().unwrap() {
                for member in ["keyword", "message", "schema"] {
                    assert!(e[member].as_str().is_some_and(|s| !s.is_empty()), "{e}");
                }
            }
        }
    }
    assert_eq!(app.head("acme"), head, "nothing was written");
    // YAML text: each violation with its line and column in that text.
    let res = app.put_integration(&t, &json!({"content": BAD_TEXT})).await;
    let (_, body) = problem(res).await;
    let at: Vec<(String, u64, u64)> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["pointer"].as_str().unwrap().to_owned(),
                e["line"].as_u64().unwrap(),
                e["column"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        at.contains(&("/content/aws/1/account_id".into(), 6, 17)),
        "{at:?}"
    );
    assert!(
        at.contains(&("/content/aws/1/regions/0".into(), 8, 9)),
        "{at:?}"
    );
    assert_eq!(
        body["errors"][0]["schema"]
            .as_str()
            .unwrap()
            .split('#')
            .next(),
        Some("integrations/aws.json")
    );
    // A valid document still writes.
    let res = app.put_integration(&t, &json!({"content": {"aws": [{"account_id": "000000000001", "regions": ["eu-west-1"], "type": "aws"}]}})).await;
    assert_eq!(res.status(), 200);
    let metrics = app.metrics().await;
    for (file, refused) in [("integration", 7), ("configuration", 6)] {
        let line = format!("planfiles_schema_refusals_total{{file=\"{file}\"}} {refused}");
        assert!(metrics.contains(&line), "{metrics}");
    }
}

#[tokio::test]
async fn a_restore_of_a_version_that_breaks_todays_schemas_is_refused() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("acme", ALL);
    let broken = app.outside_commit(
        "acme",
        "integrations.yml",
        "drata:\n  user_email: nobody\n  workspace: w\n",
    );
    let res = app.put_integration(&t, &json!({"content": {}})).await;
    assert_eq!(res.status(), 200);
    let head = app.head("acme");
    for query in ["?dry_run=true", ""] {
        let res = app
            .send(
                "POST",
                &format!("/plans/integration-file/restore{query}"),
                &t,
                Some(&json!({"commit": broken})),
                &[],
            )
            .await;
        let (status, body) = problem(res).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("schema_violation")),
            "{body}"
        );
        assert_eq!(body["errors"][0]["pointer"], "/drata/user_email");
        assert_eq!(
            (
                body["errors"][0]["line"].as_u64(),
                body["errors"][0]["column"].as_u64()
            ),
            (Some(2), Some(15))
        );
    }
    assert_eq!(app.head("acme"), head);
}

#[tokio::test]
async fn a_stored_file_that_breaks_a_schema_reads_invalid_with_lines_and_history_says_so() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("globex", ALL);
    let before: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(before["status"], "valid");
    assert!(before.get("validation_errors").is_none());
    let text =
        "aws:\n  - account_id: \"555566667777\"\n    regions:\n      - mars-1\n    type: aws\n";
    let commit = app.outside_commit("globex", "integrations.yml", text);
    let body: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(body["status"], "invalid");
    assert_eq!(
        body["content"]["aws"][0]["regions"][0], "mars-1",
        "content as parsed"
    );
    assert_eq!(body["raw_content"], text);
    let e = &body["validation_errors"][0];
    assert_eq!(
        (e["pointer"].as_str(), e["keyword"].as_str()),
        (Some("/aws/0/regions/0"), Some("enum"))
    );
    assert_eq!(
        (e["line"].as_u64(), e["column"].as_u64()),
        (Some(4), Some(9))
    );
    // The same at that commit, and in the history: the new version invalid, the old valid.
    let at: Value = app
        .get_at(&t, "integration-file", &commit)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(at["status"], "invalid");
    let page: Value = app
        .history(&t, "integration-file", "limit=2")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["entries"][0]["commit_sha"], commit.as_str());
    assert_eq!(page["entries"][0]["status"], "invalid");
    assert_eq!(page["entries"][1]["status"], "valid");
    // The configuration file answers its seed shape when valid, and status when not.
    let conf: Value = app.get_configuration(&t).await.json().await.unwrap();
    assert!(conf.get("status").is_none(), "{conf}");
    app.outside_commit("globex", "configuration.yml", "folders:\n  - path: /abs\n");
    let conf: Value = app.get_configuration(&t).await.json().await.unwrap();
    assert_eq!(conf["status"], "invalid", "{conf}");
    assert_eq!(conf["content"]["folders"][0]["path"], "/abs");
    assert_eq!(conf["validation_errors"][0]["pointer"], "/folders/0/path");
    assert_eq!(conf["validation_errors"][0]["line"], 2);
}

#[tokio::test]
async fn unknown_integrations_are_refused_when_the_setting_says_so() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "refuse").await;
    let t = token("acme", ALL);
    let res = app
        .put_integration(&t, &json!({"content": {"gcp": {"project": "p"}}}))
        .await;
    let (status, body) = problem(res).await;
    assert_eq!(status, 422);
    assert_eq!(body["errors"][0]["pointer"], "/content/gcp");
    assert_eq!(body["errors"][0]["keyword"], "unknown_integration");
}

#[tokio::test]
async fn the_combined_schemas_are_served_with_etags() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("acme", &["jit.integrations.read"]);
    let res = app.schema(&t, "integration-file", None).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/schema+json");
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    let schema: Value = res.json().await.unwrap();
    assert_eq!(
        schema["properties"]["aws"]["$ref"],
        "https://planfiles.invalid/schemas/integrations/aws.json"
    );
    let res = app.schema(&t, "integration-file", Some(&etag)).await;
    assert_eq!(res.status(), 304);
    let conf = app.schema(&t, "configuration-file", None).await;
    assert_ne!(conf.headers()["etag"].to_str().unwrap(), etag);
    let res = app
        .schema(&token("nobody", ALL), "integration-file", None)
        .await;
    assert_eq!(problem(res).await.0, 404);
    // An independent validator reads them and agrees with the service on the seed's files.
    if python_has(&["jsonschema"]) {
        let conf: Value = conf.json().await.unwrap();
        let script = r#"
import json, sys, jsonschema
d = json.load(sys.stdin)
bad = []
for (schema, doc, valid) in d:
    v = jsonschema.Draft202012Validator(schema)
    if v.is_valid(doc) != valid:
        bad.append(doc)
print(json.dumps(bad)); sys.exit(1 if bad else 0)
"#;
        let good = json!({"aws": [{"account_id": "123456789012", "regions": ["us-east-1"], "type": "aws"}]});
        let bad = json!({"aws": [{"account_id": "1", "regions": ["us-east-1"], "type": "aws"}]});
        let cases = json!([[schema, good, true], [schema, bad, false],
            [conf, {"folders": [{"path": "a"}]}, true], [conf, {"folders": [{"path": "/a"}]}, false],
            [conf, {"folders": [{"exclude": []}]}, false]]);
        let (ok, out) = python_check(script, &cases);
        assert!(ok, "python's jsonschema disagrees on {out}");
    }
}

/// A schemas folder in a temporary directory, from the shipped one.
fn schemas_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&shipped_schemas(), dir.path());
    dir
}

fn server_with_schemas(dir: &Path, schemas: &Path) -> crate::common::process::Server {
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[validation]\nschemas_dir = {:?}\n",
            schemas.display().to_string()
        ),
    )
    .unwrap();
    serve(dir, &[])
}

#[tokio::test]
async fn sighup_reads_the_schemas_again_and_a_broken_set_keeps_the_last_good_one() {
    let dir = data_dir_with_fixture();
    let schemas = schemas_copy();
    let server = server_with_schemas(dir.path(), schemas.path());
    let client = reqwest::Client::new();
    let t = token("acme", ALL);
    let read = || async {
        let v: Value = client
            .get(server.url("/plans/integration-file"))
            .bearer_auth(&t)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v
    };
    assert_eq!(read().await["status"], "valid");
    // A rule the stored file breaks: after SIGHUP, the same blob reads invalid.
    let aws = schemas.path().join("integrations/aws.json");
    let text = std::fs::read_to_string(&aws)
        .unwrap()
        .replace("\"minItems\": 1", "\"minItems\": 5");
    std::fs::write(&aws, text).unwrap();
    server.signal("HUP");
    let mut status = Value::Null;
    for _ in 0..100 {
        status = read().await["status"].clone();
        if status == "invalid" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(status, "invalid", "the new set is in use without a restart");
    // A set that does not compile: logged, counted, and the last good one stays.
    std::fs::write(schemas.path().join("configuration.json"), "{\"type\": 12}").unwrap();
    server.signal("HUP");
    let metrics = || async {
        client
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let mut m = String::new();
    for _ in 0..100 {
        m = metrics().await;
        if m.contains("planfiles_schema_reloads_total{result=\"failed\"} 1") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        m.contains("planfiles_schema_reloads_total{result=\"failed\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("planfiles_schema_reloads_total{result=\"changed\"} 1"),
        "{m}"
    );
    assert_eq!(
        read().await["status"],
        "invalid",
        "the last good set is still in use"
    );
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains("configuration.json#/type"),
        "the log names the file and pointer: {log}"
    );
}

#[test]
fn a_broken_or_remote_schema_stops_the_start() {
    for (file, text, want) in [
        (
            "configuration.json",
            "{\"properties\": {\"folders\": {\"type\": \"lists\"}}}",
            "configuration.json#/properties/folders/type",
        ),
        (
            "integrations/aws.json",
            "{\"$ref\": \"https://example.com/aws.json\"}",
            "integrations/aws.json#",
        ),
        (
            "integrations/aws.json",
            "{\"$ref\": \"../../outside.json\"}",
            "inside the schemas folder",
        ),
        (
            "integrations/aws.json",
            "{not json",
            "integrations/aws.json: not JSON",
        ),
    ] {
        let dir = data_dir_with_fixture();
        let schemas = schemas_copy();
        std::fs::write(schemas.path().join(file), text).unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            format!(
                "[validation]\nschemas_dir = {:?}\n",
                schemas.path().display().to_string()
            ),
        )
        .unwrap();
        let out = planfiles(dir.path())
            .env("PLANFILES_BIND", "127.0.0.1:0")
            .arg("serve")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains(want), "{file}: {stderr}");
    }
}

/// A schemas folder never turns off in silence: one the config file names that is not there
/// stops the start (exit 2, naming the path it looked at); the default's absence is said at
/// start, on `/readyz` and in `planfiles_schemas_loaded`; relative paths in a config file
/// kept elsewhere are found beside that file.
#[tokio::test]
async fn a_missing_schemas_folder_stops_the_start_or_is_said_everywhere() {
    let dir = data_dir_with_fixture();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = elsewhere.path().join("planfiles.toml");
    std::fs::write(&config, "[validation]\nschemas_dir = \"shemas\"\n").unwrap();
    let out = planfiles(dir.path())
        .env("PLANFILES_BIND", "127.0.0.1:0")
        .env("PLANFILES_CONFIG", &config)
        .arg("serve")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let looked = elsewhere.path().join("shemas");
    assert!(
        stderr.contains(&format!(
            "validation.schemas_dir {}: no such folder",
            looked.display()
        )),
        "{stderr}"
    );
    // The default folder, absent beside a config kept elsewhere: a warning, not silence.
    std::fs::write(&config, "[server]\nbody_limit = 1048576\n").unwrap();
    let server = serve(
        dir.path(),
        &[("PLANFILES_CONFIG", config.to_str().unwrap())],
    );
    let ready: Value = reqwest::get(server.url("/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["schemas"], 0);
    let warning = ready["warning"].as_str().unwrap();
    assert!(
        warning.contains(&format!(
            "{} does not exist",
            elsewhere.path().join("schemas").display()
        )),
        "{warning}"
    );
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("planfiles_schemas_loaded 0"), "{metrics}");
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains("WARN") && log.contains("no schemas loaded"),
        "{log}"
    );
    drop(server);
    // Beside the config file, the folder is found; so are the other relative paths it names.
    copy_tree(&shipped_schemas(), &elsewhere.path().join("schemas"));
    std::fs::write(&config, "[storage]\ndata_dir = \"data\"\n").unwrap();
    copy_tree(&dir.path().join("data"), &elsewhere.path().join("data"));
    let mut cmd = planfiles(dir.path());
    cmd.env_remove("PLANFILES_DATA_DIR")
        .env("PLANFILES_CONFIG", &config);
    let server = serve_command(cmd);
    let ready: Value = reqwest::get(server.url("/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["schemas"], 3, "{ready}");
    assert!(ready.get("warning").is_none(), "{ready}");
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("planfiles_schemas_loaded 3"), "{metrics}");
    let res = reqwest::Client::new()
        .put(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .json(&json!({"content": {"aws": [{"account_id": "1234", "regions": ["mars-1"], "type": "aws"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 422, "validated");
    let beside = elsewhere.path().join("data/tenants/acme.git");
    let served = git_in(&beside, &["rev-list", "--count", "main"]);
    let untouched = git_in(
        &dir.path().join("data/tenants/acme.git"),
        &["rev-list", "--count", "main"],
    );
    assert_eq!(served, untouched, "the 422 wrote nothing");
    let res = reqwest::Client::new()
        .put(server.url("/plans/integration-file"))
        .bearer_auth(token("acme", ALL))
        .json(&json!({"content": {"github": {"org": "beside"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        git_in(&beside, &["log", "-1", "--format=%s", "main"]),
        "Update integrations.yml",
        "the data dir beside the config file is the one served"
    );
}

#[test]
fn planfiles_validate_checks_a_file_offline_as_the_service_does() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("integrations.yml");
    std::fs::write(&bad, BAD_TEXT).unwrap();
    let good = dir.path().join("good.yml");
    std::fs::write(
        &good,
        "aws:\n  - account_id: \"123456789012\"\n    regions: [us-east-1]\n    type: aws\n",
    )
    .unwrap();
    let schemas = shipped_schemas();
    let run = |args: &[&str]| {
        let out = planfiles(dir.path())
            .arg("validate")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let s = schemas.to_str().unwrap();
    let (code, stdout, _) = run(&["--integration", good.to_str().unwrap(), "--schemas", s]);
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(
        stdout,
        format!(
            "{}: valid (checked against 3 schemas in {})\n",
            good.display(),
            schemas.display()
        )
    );
    // Run where no schemas folder is (no config file, no --schemas): it says it checked the
    // YAML rules only, never a bare silence that reads as "valid against the schemas".
    let (code, stdout, _) = run(&["--integration", bad.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "valid (no schemas found: {} does not exist; checked the YAML rules only)",
            dir.path().join("schemas").display()
        )),
        "{stdout}"
    );
    // The shipped configuration schema takes folders and nothing else: an integration file
    // checked as a configuration file is refused.
    let (code, stdout, _) = run(&["--configuration", good.to_str().unwrap(), "--schemas", s]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains(": /: "), "the missing folders: {stdout}");
    assert!(stdout.contains("aws"), "the unknown key: {stdout}");
    let (code, stdout, _) = run(&["--integration", bad.to_str().unwrap(), "--schemas", s]);
    assert_eq!(code, Some(1));
    let name = bad.display();
    assert!(
        stdout.contains(&format!(
            "{name}:6:17: /aws/1/account_id: \"12345\" does not match"
        )),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(&format!(
            "{name}: 2 violations (checked against 3 schemas in {})\n",
            schemas.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{name}:8:9: /aws/1/regions/0: ")),
        "{stdout}"
    );
    let (code, stdout, _) = run(&[
        "--integration",
        bad.to_str().unwrap(),
        "--schemas",
        s,
        "--json",
    ]);
    assert_eq!(code, Some(1));
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["schemas"]["count"], 3);
    assert_eq!(doc["errors"].as_array().unwrap().len(), 2);
    // The rules of a write of the text: a scalar YAML 1.1 and 1.2 read differently is refused.
    std::fs::write(&bad, "aws:\n  - account_id: 0777\n").unwrap();
    let (code, stdout, _) = run(&["--integration", bad.to_str().unwrap(), "--schemas", s]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("/aws/0/account_id"), "{stdout}");
    // A file that is not YAML of its kind, usage errors and a missing schemas folder.
    std::fs::write(&bad, "- a list\n").unwrap();
    assert_eq!(
        run(&["--integration", bad.to_str().unwrap(), "--schemas", s]).0,
        Some(1)
    );
    assert_eq!(run(&["--schemas", s]).0, Some(2));
    assert_eq!(
        run(&[
            "--integration",
            good.to_str().unwrap(),
            "--schemas",
            "/no/such/folder"
        ])
        .0,
        Some(2)
    );
}

/// Documents for the shipped schemas: a valid one, then one rule broken at a time.
fn generated_documents() -> Vec<(&'static str, Value)> {
    let account = || json!({"account_id": "123456789012", "regions": ["us-east-1", "eu-west-1"], "type": "aws"});
    let drata = || json!({"user_email": "a@b.example", "workspace": "w"});
    let with_account = |change: &dyn Fn(&mut Value)| {
        let mut a = account();
        change(&mut a);
        json!({"aws": [account(), a], "drata": drata()})
    };
    let with_drata = |change: &dyn Fn(&mut Value)| {
        let mut d = drata();
        change(&mut d);
        json!({"aws": [account()], "drata": d})
    };
    let folders = |f: Value| json!({"folders": [{"path": "src", "exclude": ["a/**"]}, f]});
    vec![
        (
            "integration-file",
            json!({"aws": [account()], "drata": drata()}),
        ),
        ("integration-file", json!({})),
        ("integration-file", json!({"other": [1, 2]})),
        (
            "integration-file",
            with_account(&|a| a["account_id"] = json!("12345")),
        ),
        (
            "integration-file",
            with_account(&|a| a["account_id"] = json!("1234567890123")),
        ),
        (
            "integration-file",
            with_account(&|a| a["account_id"] = json!(123456789012u64)),
        ),
        (
            "integration-file",
            with_account(&|a| {
                a.as_object_mut().unwrap().remove("regions");
            }),
        ),
        (
            "integration-file",
            with_account(&|a| a["regions"] = json!([])),
        ),
        (
            "integration-file",
            with_account(&|a| a["regions"] = json!(["us-east-1", "us-east-1"])),
        ),
        (
            "integration-file",
            with_account(&|a| a["regions"] = json!(["us-east-9"])),
        ),
        (
            "integration-file",
            with_account(&|a| a["regions"] = json!("us-east-1")),
        ),
        (
            "integration-file",
            with_account(&|a| a["type"] = json!("azure")),
        ),
        (
            "integration-file",
            with_account(&|a| {
                a.as_object_mut().unwrap().remove("type");
            }),
        ),
        (
            "integration-file",
            with_account(&|a| *a = json!("not an object")),
        ),
        (
            "integration-file",
            json!({"aws": {"account_id": "123456789012"}}),
        ),
        (
            "integration-file",
            with_drata(&|d| {
                d.as_object_mut().unwrap().remove("user_email");
            }),
        ),
        (
            "integration-file",
            with_drata(&|d| d["user_email"] = json!("nobody")),
        ),
        (
            "integration-file",
            with_drata(&|d| d["user_email"] = json!("a b@c.d")),
        ),
        (
            "integration-file",
            with_drata(&|d| d["workspace"] = json!("")),
        ),
        (
            "integration-file",
            with_drata(&|d| d["workspace"] = json!(7)),
        ),
        ("integration-file", json!({"drata": ["a@b.example"]})),
        ("configuration-file", folders(json!({"path": "web"}))),
        ("configuration-file", folders(json!({"path": "/etc"}))),
        ("configuration-file", folders(json!({"path": "a/../../b"}))),
        ("configuration-file", folders(json!({"path": ".."}))),
        ("configuration-file", folders(json!({"path": "a..b"}))),
        (
            "configuration-file",
            folders(json!({"path": "web", "exclude": ["x", "x"]})),
        ),
        (
            "configuration-file",
            folders(json!({"path": "web", "exclude": [""]})),
        ),
    ]
}

#[tokio::test]
async fn verdicts_and_pointers_agree_with_an_independent_validator() {
    if !python_has(&["jsonschema"]) {
        return;
    }
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "allow").await;
    let t = token("acme", ALL);
    let sha = app.blob("acme", "configuration.yml");
    let mut schemas = serde_json::Map::new();
    for file in ["integration-file", "configuration-file"] {
        let s: Value = app.schema(&t, file, None).await.json().await.unwrap();
        schemas.insert(file.into(), s);
    }
    let mut cases = Vec::new();
    for (file, doc) in generated_documents() {
        let (path, body, at) = match file {
            "integration-file" => (
                "/plans/integration-file?dry_run=true",
                json!({"content": doc}),
                "/content",
            ),
            _ => (
                "/plans/configuration-file?dry_run=true",
                json!({"payload": doc, "file_sha": sha}),
                "/payload",
            ),
        };
        let res = app.send("PUT", path, &t, Some(&body), &[]).await;
        let status = res.status().as_u16();
        let answer: Value = res.json().await.unwrap();
        let mut found: Vec<String> = match status {
            200 => Vec::new(),
            422 => answer["errors"]
                .as_array()
                .unwrap_or_else(|| panic!("{answer}"))
                .iter()
                .map(|e| {
                    e["pointer"]
                        .as_str()
                        .unwrap()
                        .strip_prefix(at)
                        .unwrap()
                        .to_owned()
                })
                .collect(),
            other => panic!("{other}: {answer}"),
        };
        found.sort();
        found.dedup();
        cases.push(json!({"file": file, "doc": doc, "service": found}));
    }
    let script = r#"
import json, sys, jsonschema
d = json.load(sys.stdin)
bad = []
for case in d["cases"]:
    v = jsonschema.Draft202012Validator(d["schemas"][case["file"]])
    found = sorted({"".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in e.absolute_path)
                    for e in v.iter_errors(case["doc"])})
    if found != case["service"]:
        bad.append({"doc": case["doc"], "python": found, "service": case["service"]})
print(json.dumps(bad)); sys.exit(1 if bad else 0)
"#;
    let (ok, out) = python_check(script, &json!({"schemas": schemas, "cases": cases}));
    assert!(ok, "the service and python's jsonschema disagree: {out}");
    // The cases do break rules: all but the valid ones were refused.
    let refused = cases
        .iter()
        .filter(|c| !c["service"].as_array().unwrap().is_empty())
        .count();
    assert_eq!(refused, cases.len() - 5, "{cases:?}");
}

/// The same bytes can be a valid configuration file and an invalid integration file: each
/// file's history says what its own version is.
#[tokio::test]
async fn a_verdict_belongs_to_its_file_not_only_to_its_bytes() {
    let app = TestApp::spawn_with_schemas(&shipped_schemas(), "refuse").await;
    let t = token("initech", ALL);
    let conf: Value = app
        .history(&t, "configuration-file", "limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(conf["entries"][0]["status"], "valid", "{conf}");
    let same = app.git("initech", &["show", "main:configuration.yml"]);
    app.outside_commit("initech", "integrations.yml", &format!("{same}\n"));
    let int: Value = app
        .history(&t, "integration-file", "limit=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        int["entries"][0]["file_sha"], conf["entries"][0]["file_sha"],
        "the same blob"
    );
    assert_eq!(int["entries"][0]["status"], "invalid", "{int}");
}

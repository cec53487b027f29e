//! JSON writes edit the stored text: `git show` of a write shows what changed and nothing
//! else, comments and styles survive, and an edit that does not read back is emitted whole
//! and counted.
use crate::common;

use common::{token, TestApp, ALL};
use serde_json::{json, Value};

/// The walkthrough's step 3: read acme's integration file, add a cloud account, PUT it back
/// with the sha. The commit adds the account's four lines and changes nothing else.
#[tokio::test]
async fn the_walkthrough_commit_adds_only_the_new_account() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let cur: Value = app.get_integration(&t).await.json().await.unwrap();
    let mut content = cur["content"].clone();
    content["aws"]
        .as_array_mut()
        .unwrap()
        .push(json!({"account_id": "999988887777", "regions": ["eu-central-1"], "type": "aws"}));
    let res = app
        .put_integration(
            &t,
            &json!({"content": content, "file_sha": cur["file_sha"]}),
        )
        .await;
    assert_eq!(res.status(), 200);
    let put: Value = res.json().await.unwrap();
    assert_eq!(
        app.git("acme", &["show", "--stat", "--format=", "main"]),
        "integrations.yml | 4 ++++\n 1 file changed, 4 insertions(+)"
    );
    let diff = app.git("acme", &["show", "--format=", "-U0", "main"]);
    let added: Vec<&str> = diff.lines().filter(|l| l.starts_with("+ ")).collect();
    assert_eq!(
        added,
        [
            "+  - account_id: \"999988887777\"",
            "+    regions:",
            "+      - eu-central-1",
            "+    type: aws"
        ]
    );
    // The response shows the stored text.
    assert_eq!(
        put["raw_content"],
        app.git("acme", &["show", "main:integrations.yml"]) + "\n"
    );
    assert_eq!(put["content"], content);
    assert!(app
        .metrics()
        .await
        .contains("planfiles_yaml_writes_total{file=\"integration\",made=\"edited\"} 1"));
}

const COMMENTED: &str = "\
# Cloud accounts of acme. Ask #platform before removing one.
aws:
  # production
  - account_id: '123456789012'   # billing owner: finance
    regions: [us-east-1, eu-west-1]
    type: aws

  # staging
  - account_id: \"210987654321\"
    regions:
    - us-west-2          # the only region
    type: aws
drata:
  user_email: compliance@acme.example  # shared inbox
  workspace: acme-prod
";

/// A seed-shaped file committed with plain git, with comments and mixed styles, through ten
/// JSON PUTs that each change something else: every comment is still there at the end, and
/// each commit's diff holds only the lines of what changed.
#[tokio::test]
async fn comments_survive_ten_json_puts() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    app.outside_commit("acme", "integrations.yml", COMMENTED);
    type Edit = fn(&mut Value);
    let edits: [(Edit, usize, usize); 10] = [
        (|c| c["drata"]["workspace"] = json!("acme-eu"), 1, 1),
        (
            |c| {
                c["aws"][0]["regions"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("ap-south-1"))
            },
            1,
            1,
        ),
        (|c| c["aws"][1]["type"] = json!("aws-gov"), 1, 1),
        (
            |c| {
                c["aws"].as_array_mut().unwrap().push(
                    json!({"account_id": "333344445555", "regions": ["sa-east-1"], "type": "aws"}),
                )
            },
            4,
            0,
        ),
        (|c| c["drata"]["enabled"] = json!(true), 1, 0),
        (
            |c| {
                c["aws"][1]["regions"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("us-east-2"))
            },
            1,
            0,
        ),
        (|c| c["aws"][2]["account_id"] = json!("333344445556"), 1, 1),
        (
            |c| {
                c["aws"].as_array_mut().unwrap().pop();
            },
            0,
            4,
        ),
        (|c| c["drata"]["enabled"] = json!(false), 1, 1),
        (
            |c| {
                c["drata"].as_object_mut().unwrap().remove("enabled");
            },
            0,
            1,
        ),
    ];
    for (i, (edit, plus, minus)) in edits.into_iter().enumerate() {
        let cur: Value = app.get_integration(&t).await.json().await.unwrap();
        let mut content = cur["content"].clone();
        edit(&mut content);
        let res = app
            .put_integration(
                &t,
                &json!({"content": content, "file_sha": cur["file_sha"]}),
            )
            .await;
        assert_eq!(res.status(), 200, "PUT {i}");
        let diff = app.git("acme", &["show", "--format=", "-U0", "main"]);
        let count = |sign: &str| {
            diff.lines()
                .filter(|l| l.starts_with(sign) && !l.starts_with(&sign.repeat(3)))
                .count()
        };
        assert_eq!((count("+"), count("-")), (plus, minus), "PUT {i}:\n{diff}");
        let got: Value = app.get_integration(&t).await.json().await.unwrap();
        assert_eq!(got["content"], content, "PUT {i}");
    }
    let text = app.git("acme", &["show", "main:integrations.yml"]);
    let comments = |t: &str| -> Vec<String> {
        t.lines()
            .filter_map(|l| l.find('#').map(|at| l[at..].to_owned()))
            .collect()
    };
    assert_eq!(comments(&text), comments(COMMENTED), "{text}");
    assert!(text.contains("account_id: '123456789012'"), "{text}");
    assert!(
        text.contains("regions: [us-east-1, eu-west-1, ap-south-1]"),
        "{text}"
    );
    assert!(app
        .metrics()
        .await
        .contains("planfiles_yaml_writes_total{file=\"integration\",made=\"edited\"} 10"));
    app.fsck("acme");
}

/// The configuration file's payload edits its text the same way.
#[tokio::test]
async fn a_configuration_put_keeps_the_comments() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let text = "# scanned folders\nfolders:\n  - path: services/payments  # team pay\n    exclude:\n      - \"**/*_test.go\"\n";
    app.outside_commit("acme", "configuration.yml", text);
    let sha = app.blob("acme", "configuration.yml");
    let payload = json!({"folders": [{"path": "services/payments", "exclude": ["**/*_test.go", "vendor/**"]}]});
    let res = app
        .put_configuration(&t, &json!({"payload": payload, "file_sha": sha}))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        app.git("acme", &["show", "main:configuration.yml"]) + "\n",
        format!("{text}      - vendor/**\n")
    );
    // The same payload again is a no-op: no commit.
    let head = app.head("acme");
    let sha = app.blob("acme", "configuration.yml");
    let res = app
        .put_configuration(&t, &json!({"payload": payload, "file_sha": sha}))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.head("acme"), head);
}

/// A stored file whose kept text would read differently elsewhere (`on`, a YAML 1.1 boolean
/// written plain) cannot be edited: the content is emitted whole, and the fallback counted.
#[tokio::test]
async fn an_edit_that_does_not_read_back_is_emitted_whole_and_counted() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    app.outside_commit("globex", "integrations.yml", "# legacy\nlegacy: on\nx: 1\n");
    let content = json!({"legacy": "on", "x": 2});
    let res = app.put_integration(&t, &json!({"content": content})).await;
    assert_eq!(res.status(), 200);
    let put: Value = res.json().await.unwrap();
    assert_eq!(put["raw_content"], "legacy: \"on\"\nx: 2\n");
    assert_eq!(put["content"], content);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("planfiles_yaml_writes_total{file=\"integration\",made=\"fallback\"} 1"),
        "{metrics}"
    );
    // YAML text is still stored byte for byte.
    let text = "# mine\nx: 3   # kept\n";
    let res = app.put_integration(&t, &json!({"content": text})).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        app.git("globex", &["show", "main:integrations.yml"]) + "\n",
        text
    );
}

/// The demo repositories, `tenant create` and whole emission share one style: each fixture
/// file is exactly what emission makes of its content.
#[tokio::test]
async fn fixture_files_are_in_the_emitted_style() {
    let app = TestApp::spawn().await;
    for tenant in ["acme", "globex", "initech"] {
        for file in ["integrations.yml", "configuration.yml"] {
            let text = app.git(tenant, &["show", &format!("main:{file}")]) + "\n";
            let content = planfiles::domain::yaml::parse_mapping(&text).unwrap();
            assert_eq!(
                planfiles::domain::yaml::emit(&content).unwrap(),
                text,
                "{tenant} {file}"
            );
        }
    }
}

/// `POST /plans/commits` edits each JSON part into its stored text as the PUTs do: both files'
/// comments survive, and a dry run answers the text a real call would store.
#[tokio::test]
async fn a_commit_of_both_files_edits_both_texts() {
    let app = TestApp::spawn().await;
    let t = token("acme", ALL);
    let config = "# scanned folders\nfolders:\n  - path: web  # the site\n";
    app.outside_commit("acme", "configuration.yml", config);
    let cur: Value = app.get_integration(&t).await.json().await.unwrap();
    let integration = format!(
        "# owned by the platform team\n{}",
        cur["raw_content"].as_str().unwrap()
    );
    app.outside_commit("acme", "integrations.yml", &integration);
    let mut content = cur["content"].clone();
    content["aws"][0]["regions"]
        .as_array_mut()
        .unwrap()
        .push(json!("ap-south-1"));
    let body = json!({
        "integration-file": {"content": content},
        "configuration-file": {
            "payload": {"folders": [{"path": "web"}, {"path": "api"}]},
            "file_sha": app.blob("acme", "configuration.yml"),
        },
    });
    let dry: Value = app
        .post_commits(&t, "?dry_run=true", &body)
        .await
        .json()
        .await
        .unwrap();
    let res = app.post_commits(&t, "", &body).await;
    assert_eq!(res.status(), 200);
    let real: Value = res.json().await.unwrap();
    let stored = app.git("acme", &["show", "main:integrations.yml"]) + "\n";
    assert!(
        stored.starts_with("# owned by the platform team\n"),
        "{stored}"
    );
    assert!(stored.contains("ap-south-1"), "{stored}");
    assert_eq!(
        real["integration-file"]["raw_content"],
        json!(stored),
        "{real}"
    );
    assert_eq!(
        dry["integration-file"]["raw_content"],
        json!(stored),
        "{dry}"
    );
    assert_eq!(
        app.git("acme", &["show", "main:configuration.yml"]) + "\n",
        format!("{config}  - path: api\n")
    );
    // One line added to each file, nothing else rewritten.
    assert_eq!(
        app.git("acme", &["show", "--numstat", "--format=", "main"]),
        "1\t0\tconfiguration.yml\n1\t0\tintegrations.yml"
    );
}

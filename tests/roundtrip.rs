//! Round trips: any JSON object PUT as content comes back unchanged from GET, and its stored
//! YAML reads as the same data in PyYAML (a YAML 1.1 reader).
mod common;

use common::{token, TestApp, ALL};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const TRICKY: &[&str] = &[
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "Yes",
    "ON",
    "true",
    "False",
    "null",
    "Null",
    "~",
    "",
    "0x1F",
    "0o17",
    "017",
    "0b101",
    "1e3",
    "1E3",
    "1_000",
    "1.5",
    ".5",
    "-.inf",
    ".NaN",
    "+1",
    "2001-12-14",
    "2001-12-14T21:59:43.10-05:00",
    "12:30:00",
    "1:20",
    "<<",
    "=",
    "- a",
    "? x",
    "a: b",
    "#c",
    "&a",
    "*a",
    "!tag",
    "%x",
    "@x",
    "`x",
    "|",
    ">",
    "'",
    "\"",
    " lead",
    "trail ",
    "multi\nline",
    "tab\there",
    "\u{1}ctl",
    "é",
    "💥",
    "---",
    "...",
    "[a]",
    "{a: 1}",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(TRICKY).prop_map(|s| json!(s)),
        any::<String>().prop_map(Value::String),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(TRICKY).prop_map(String::from),
        "[a-z_]{1,8}",
        any::<String>()
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn document() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((key(), value()), 0..6).prop_map(|kv| kv.into_iter().collect())
}

#[test]
fn put_then_get_returns_the_same_content() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let app = rt.block_on(TestApp::spawn());
    let t = token("globex", ALL);
    let stored = std::cell::RefCell::new(Vec::new());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    });
    runner
        .run(&document(), |doc| {
            let content = Value::Object(doc);
            let (put, got) = rt.block_on(async {
                let put: Value = app
                    .put_integration(&t, &json!({"content": content}))
                    .await
                    .json()
                    .await
                    .unwrap();
                let got: Value = app.get_integration(&t).await.json().await.unwrap();
                (put, got)
            });
            prop_assert_eq!(&put["content"], &content);
            prop_assert_eq!(&got["content"], &content);
            prop_assert_eq!(&got["raw_content"], &put["raw_content"]);
            stored
                .borrow_mut()
                .push(json!({"raw": got["raw_content"], "content": content}));
            Ok(())
        })
        .unwrap();
    app.fsck("globex");
    pyyaml_reads_the_same(&stored.into_inner());
}

/// Every stored text, read by PyYAML's safe_load, equals the content that was sent.
fn pyyaml_reads_the_same(cases: &[Value]) {
    let script = r#"
import json, sys, math
import yaml
cases = json.load(sys.stdin)
bad = 0
for c in cases:
    got = yaml.safe_load(c["raw"])
    if got is None:
        got = {}
    if got != c["content"]:
        bad += 1
        print("MISMATCH", json.dumps(c["content"])[:300], "->", repr(got)[:300])
print("checked", len(cases), "bad", bad)
sys.exit(1 if bad else 0)
"#;
    let has_pyyaml = std::process::Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_pyyaml {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have PyYAML (pip install pyyaml)"
        );
        eprintln!("skipping the PyYAML cross-check: python3 with PyYAML is not installed");
        return;
    }
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(cases).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "PyYAML reads the stored YAML differently:\n{report}"
    );
}

#[tokio::test]
async fn integers_at_the_64_bit_edges_are_kept_exactly() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let content = json!({"max_u64": u64::MAX, "min_i64": i64::MIN, "max_i64": i64::MAX, "zero": 0, "neg": -1});
    let res = app.put_integration(&t, &json!({"content": content})).await;
    assert_eq!(res.status(), 200);
    let got: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(got["content"], content);
    assert_eq!(got["content"]["max_u64"].as_u64(), Some(u64::MAX));
}

#[tokio::test]
async fn sixty_four_levels_of_nesting_are_accepted() {
    let app = TestApp::spawn().await;
    let mut v = json!("leaf");
    for _ in 0..63 {
        v = json!({ "k": v });
    }
    let content = json!({ "top": v });
    let res = app
        .put_integration(&token("globex", ALL), &json!({"content": content}))
        .await;
    assert_eq!(res.status(), 200);
    let got: Value = app
        .get_integration(&token("globex", ALL))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["content"], content);
}

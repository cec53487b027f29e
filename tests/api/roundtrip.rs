//! Round trips: any JSON object PUT as content comes back unchanged from GET, and its stored
//! YAML reads as the same data in PyYAML (a YAML 1.1 reader). The strings include long ones
//! (past PyYAML's 128-character simple-key and 1,024-character implicit-key limits), multi-line
//! ones with leading spaces and trailing newlines, and the characters YAML treats specially:
//! U+0085 (NEL), U+2028 and U+2029 (line and paragraph separators) and U+FEFF (the BOM).
use crate::common;

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
    "\u{85}",
    "a\u{85}b",
    "\u{2028}",
    "a\u{2028}b\u{2029}c",
    "\u{feff}",
    "\u{feff}a: b",
    "a\u{feff}",
    "  lead\n  and more\n",
    "x\n\n\n",
    "\n",
    "\n lead after a newline",
];

/// The characters strings are built from, beyond `any::<String>()`: YAML's special line
/// breaks, the BOM, spaces, newlines and indicators.
const PIECES: &[&str] = &[
    "a", "word", " ", "  ", "\n", "\t", "\u{85}", "\u{2028}", "\u{2029}", "\u{feff}", "#", ": ",
    "- ", "'", "\"", "\\", "é",
];

/// Strings of `len` pieces (see `PIECES`).
fn pieced(len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), len).prop_map(|p| p.concat())
}

/// Multi-line text: lines with leading spaces, then trailing newlines.
fn multi_line() -> impl Strategy<Value = String> {
    (
        prop::collection::vec((0usize..5, "[a-z :#-]{0,12}"), 1..6),
        0usize..4,
    )
        .prop_map(|(lines, trailing)| {
            let body: Vec<String> = lines
                .into_iter()
                .map(|(indent, text)| format!("{}{text}", " ".repeat(indent)))
                .collect();
            format!("{}{}", body.join("\n"), "\n".repeat(trailing))
        })
}

/// Strings longer than 120 characters: plain letters, pieces, or any characters.
fn long_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{121,400}",
        pieced(121..300),
        prop::collection::vec(any::<char>(), 121..300).prop_map(String::from_iter),
    ]
}

/// Keys longer than 1,024 characters (YAML's limit for an implicit key).
fn long_key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1025,1300}",
        pieced(1025..1100),
        prop::collection::vec(any::<char>(), 1025..1100).prop_map(String::from_iter),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(TRICKY).prop_map(|s| json!(s)),
        any::<String>().prop_map(Value::String),
        pieced(0..12).prop_map(Value::String),
        multi_line().prop_map(Value::String),
        long_string().prop_map(Value::String),
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
        any::<String>(),
        pieced(1..12),
        multi_line(),
        long_string(),
        long_key(),
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
    let stored = stored.into_inner();
    covers_the_hard_strings(&stored);
    pyyaml_reads_the_same(&stored);
}

/// The run held each kind of string the generators are there for, as a key or a value.
fn covers_the_hard_strings(cases: &[Value]) {
    let mut strings = Vec::new();
    let mut stack: Vec<&Value> = cases.iter().map(|c| &c["content"]).collect();
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => strings.push(s.as_str()),
            Value::Array(a) => stack.extend(a),
            Value::Object(m) => {
                strings.extend(m.keys().map(String::as_str));
                stack.extend(m.values());
            }
            _ => {}
        }
    }
    type Has = fn(&str) -> bool;
    let kinds: [(&str, Has); 7] = [
        ("longer than 120", |s| s.chars().count() > 120),
        ("longer than 1,024", |s| s.chars().count() > 1024),
        ("leading spaces and a trailing newline", |s| {
            s.contains("\n ") && s.ends_with('\n')
        }),
        ("U+0085", |s| s.contains('\u{85}')),
        ("U+2028", |s| s.contains('\u{2028}')),
        ("U+2029", |s| s.contains('\u{2029}')),
        ("U+FEFF", |s| s.contains('\u{feff}')),
    ];
    for (what, has) in kinds {
        assert!(strings.iter().any(|s| has(s)), "no string {what} was sent");
    }
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
    if !common::python_has(&["yaml"]) {
        return;
    }
    let (ok, report) = common::python_check(script, cases);
    assert!(ok, "PyYAML reads the stored YAML differently:\n{report}");
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

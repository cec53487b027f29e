//! YAML text whose plain scalars YAML 1.1 and 1.2 readers read differently is refused (422 with
//! the pointer and the quoted form); text that every reader reads alike is stored byte for byte.
//! The readers are real: PyYAML (YAML 1.1), ruamel.yaml in YAML 1.1 and 1.2 mode, the YAML 1.2
//! core schema's table (spec §10.3.2) over ruamel.yaml's parser, and the service itself, reading
//! the same text committed with plain git.
use crate::common;

use common::{problem, token, TestApp, ALL};
use serde_json::{json, Value};

/// Scalars written plain as `k: <scalar>`.
const SCALARS: &[&str] = &[
    // Booleans.
    "yes",
    "Yes",
    "YES",
    "no",
    "No",
    "NO",
    "on",
    "On",
    "ON",
    "off",
    "Off",
    "OFF",
    "y",
    "Y",
    "n",
    "N",
    "true",
    "True",
    "TRUE",
    "false",
    "False",
    "FALSE",
    "yEs",
    "tRUE",
    // Null spellings.
    "null",
    "Null",
    "NULL",
    "~",
    "",
    "nULL",
    // Integers: decimal, leading zeros, hex, octal, binary, underscores, 64-bit edges.
    "0",
    "1",
    "+1",
    "-12",
    "00",
    "07",
    "012",
    "017",
    "08",
    "09",
    "0x1F",
    "0X1F",
    "-0x1F",
    "0x_1F",
    "0o17",
    "0O17",
    "-0o17",
    "0o_7",
    "0b101",
    "-0b1",
    "1_000",
    "+_1",
    "1__0",
    "_1",
    "18446744073709551615",
    "-9223372036854775808",
    "18446744073709551616",
    "0xFFFFFFFFFFFFFFFFFF",
    // Base 60.
    "12:30:00",
    "1:30",
    "-1:30.5",
    "190:20:30",
    // Floats.
    "1.5",
    ".5",
    "1.",
    "-0.0",
    "1.5e+3",
    "1.0E-3",
    "1e3",
    "1E3",
    "1e+3",
    "1.5e3",
    "0e0",
    "-1e-3",
    "+.5",
    "-.5",
    "._5",
    "1_0.5",
    ".inf",
    "-.Inf",
    ".NaN",
    "+.nan",
    ".nAn",
    "inf",
    // Dates and timestamps.
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "2001-12-14 21:59:43.10 -5",
    "2001-1-1",
    // Merge and value keys, and plain words.
    "<<",
    "=",
    "<",
    "hello",
    "1.2.3",
    "0x",
    "1e",
    "é",
];

/// Asks the Python readers what each text gives, and whether they agree with the service.
const READERS: &str = r#"
import json, math, re, sys, warnings
import yaml
from ruamel.yaml import YAML

warnings.simplefilter("ignore")  # ruamel.yaml warns about YAML 1.1 floats without a dot

def reading(load):
    try:
        v = load()
    except Exception as e:
        return ["error", type(e).__name__]
    return [type(v).__name__, repr(v)]

def ruamel(version):
    y = YAML(typ="safe", pure=True)
    if version:
        y.version = version
    return y

r11, r12 = ruamel((1, 1)), ruamel(None)

# YAML 1.2.2 core schema, §10.3.2 "Tag Resolution", in its order.
CORE = [
    (r"null|Null|NULL|~|", lambda s: None),
    (r"true|True|TRUE", lambda s: True),
    (r"false|False|FALSE", lambda s: False),
    (r"[-+]?[0-9]+", lambda s: int(s, 10)),
    (r"0o[0-7]+", lambda s: int(s[2:], 8)),
    (r"0x[0-9a-fA-F]+", lambda s: int(s[2:], 16)),
    (r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", float),
    (r"[-+]?(\.inf|\.Inf|\.INF)", lambda s: -math.inf if s[0] == "-" else math.inf),
    (r"\.nan|\.NaN|\.NAN", lambda s: math.nan),
]

def core(text):
    node = r12.compose(text).value[0][1]
    if node.style is not None:
        return node.value
    for pattern, construct in CORE:
        if re.fullmatch(pattern, node.value):
            return construct(node.value)
    return node.value

out = []
for case in json.load(sys.stdin):
    text = case["text"]
    readers = {
        "PyYAML": reading(lambda: yaml.safe_load(text)["k"]),
        "ruamel.yaml 1.1": reading(lambda: r11.load(text)["k"]),
        "ruamel.yaml 1.2": reading(lambda: r12.load(text)["k"]),
        "YAML 1.2 core": reading(lambda: core(text)),
        "service": reading(lambda: case["service"]) if case["readable"] else ["unreadable", ""],
    }
    values = list(readers.values())
    out.append({"readers": readers, "agree": all(v == values[0] for v in values)})
json.dump(out, sys.stdout)
"#;

fn run_python(script: &str, input: &Value) -> Value {
    let (ok, out) = common::python_check(script, input);
    assert!(ok, "the Python readers failed");
    serde_json::from_str(&out).unwrap()
}

#[tokio::test]
async fn a_scalar_is_refused_exactly_when_the_readers_disagree() {
    if !common::python_has(&["yaml", "ruamel.yaml"]) {
        return;
    }
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);

    // The service's own reading: the text committed with plain git, then read by GET.
    let mut cases = Vec::new();
    for scalar in SCALARS {
        let text = format!("k: {scalar}\n");
        app.outside_commit("globex", "integrations.yml", &text);
        let got: Value = app.get_integration(&t).await.json().await.unwrap();
        let readable = got["status"] == "valid";
        cases.push(json!({"text": text, "service": got["content"]["k"], "readable": readable}));
    }
    let verdicts = run_python(READERS, &Value::Array(cases.clone()));

    let (mut accepted, mut refused) = (0, 0);
    for ((scalar, case), verdict) in SCALARS.iter().zip(&cases).zip(verdicts.as_array().unwrap()) {
        let text = case["text"].as_str().unwrap();
        let before = app.head("globex");
        let res = app.put_integration(&t, &json!({"content": text})).await;
        let status = res.status().as_u16();
        let why = format!("k: {scalar:?}, readers {}", verdict["readers"]);
        if verdict["agree"] == true {
            accepted += 1;
            assert_eq!(status, 200, "{why}");
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["raw_content"], text, "{why}");
            assert_eq!(body["content"]["k"], case["service"], "{why}");
            let blob = app.git("globex", &["cat-file", "blob", "main:integrations.yml"]);
            assert_eq!(blob, text.trim_end(), "{why}");
        } else {
            refused += 1;
            let (status, body) = problem(res).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (422, Some("invalid_content")),
                "{why}"
            );
            let detail = body["detail"].as_str().unwrap();
            if case["readable"] == true {
                // An ambiguity: the pointer first, then the quoted form to use.
                let quoted = serde_json::to_string(scalar).unwrap();
                assert!(detail.starts_with("/content/k: "), "{why}: {detail}");
                assert!(
                    detail.ends_with(&format!("quote it: {quoted}")),
                    "{why}: {detail}"
                );
            }
            assert_eq!(app.head("globex"), before, "a refused PUT wrote: {why}");
        }
    }
    assert!(
        accepted >= 20 && refused >= 40,
        "{accepted} accepted, {refused} refused"
    );
    app.fsck("globex");
}

#[tokio::test]
async fn the_issue_example_is_refused_at_its_first_ambiguous_scalar() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let before = app.head("globex");
    let text = "enabled: yes\nwhen: 2001-12-14\nn: 1e3\nt: 12:30:00\n";
    let (status, body) = problem(app.put_integration(&t, &json!({"content": text})).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("invalid_content"))
    );
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.starts_with("/content/enabled: "), "{detail}");
    assert!(
        detail.contains("YAML 1.1") && detail.contains("YAML 1.2"),
        "{detail}"
    );
    assert!(detail.ends_with("quote it: \"yes\""), "{detail}");
    assert_eq!(app.head("globex"), before);

    // Each scalar in turn, once the ones before it are quoted.
    let steps = [
        (
            "enabled: \"yes\"\nwhen: 2001-12-14\nn: 1e3\n",
            "/content/when",
            "\"2001-12-14\"",
        ),
        (
            "enabled: \"yes\"\nwhen: \"2001-12-14\"\nn: 1e3\n",
            "/content/n",
            "\"n\"",
        ),
        ("enabled: \"yes\"\n\"n\": 1e3\n", "/content/n", "\"1e3\""),
        (
            "\"n\": \"1e3\"\nt: 12:30:00\n",
            "/content/t",
            "\"12:30:00\"",
        ),
        ("a:\n  - b: {on: 1}\n", "/content/a/0/b/on", "\"on\""),
        ("<<: {a: 1}\n", "/content/<<", "\"<<\""),
    ];
    for (text, pointer, quoted) in steps {
        let (status, body) =
            problem(app.put_integration(&t, &json!({"content": text})).await).await;
        let detail = body["detail"].as_str().unwrap();
        assert_eq!(status, 422, "{text:?}");
        assert!(
            detail.starts_with(&format!("{pointer}: ")),
            "{text:?}: {detail}"
        );
        assert!(
            detail.ends_with(&format!("quote it: {quoted}")),
            "{text:?}: {detail}"
        );
    }
    assert_eq!(app.head("globex"), before);
}

#[tokio::test]
async fn unambiguous_text_and_its_comments_are_stored_byte_for_byte() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let text = "# accounts, reviewed 2001-12-14: yes\n\
                enabled: \"yes\"   # quoted, so a string everywhere\n\
                when: '2001-12-14'\n\
                n_value: 1.0e+3\n\
                t: \"12:30:00\"\n\
                flags: [true, false, null, ~, 1, -12, 1.5, 0x1F, hello]\n\
                note: |\n  on\n  off\n\
                folded: >\n  yes\n\
                tagged: !!str 0b101\n\
                \"<<\": merge-looking key, quoted\n\
                \n\
                # trailing comment: 1e3\n";
    let res = app.put_integration(&t, &json!({"content": text})).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["raw_content"], text);
    assert_eq!(body["content"]["enabled"], "yes");
    assert_eq!(body["content"]["n_value"], 1000.0);
    assert_eq!(body["content"]["tagged"], "0b101");
    // The blob in git is the text, byte for byte.
    let blob = app.git("globex", &["rev-parse", "main:integrations.yml"]);
    let stored = common::git_stdin(&app.repo("globex"), &["hash-object", "--stdin"], text);
    assert_eq!(blob, stored);
}

#[tokio::test]
async fn stored_files_are_read_whatever_they_hold() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let text = "enabled: yes\nwhen: 2001-12-14\n";
    app.outside_commit("globex", "integrations.yml", text);
    let body: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(body["status"], "valid");
    assert_eq!(body["raw_content"], text);
    assert_eq!(
        body["content"],
        json!({"enabled": "yes", "when": "2001-12-14"})
    );
}

#[tokio::test]
async fn emitted_content_passes_the_same_check_and_reads_the_same_everywhere() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let mut content = serde_json::Map::new();
    for (i, s) in SCALARS.iter().enumerate() {
        content.insert(format!("v{i}"), json!(s));
        content.insert((*s).to_owned(), json!(i));
    }
    let content = Value::Object(content);
    let res = app.put_integration(&t, &json!({"content": content})).await;
    assert_eq!(res.status(), 200);
    let raw = res.json::<Value>().await.unwrap()["raw_content"].clone();
    // The emitted text, sent back as text, is accepted as it is.
    let res = app.put_integration(&t, &json!({"content": raw})).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["raw_content"], raw);
    assert_eq!(body["content"], content);
    if !common::python_has(&["yaml", "ruamel.yaml"]) {
        return;
    }
    let script = r#"
import json, sys, warnings
import yaml
from ruamel.yaml import YAML
warnings.simplefilter("ignore")
case = json.load(sys.stdin)
y11 = YAML(typ="safe", pure=True)
y11.version = (1, 1)
readers = [yaml.safe_load, YAML(typ="safe", pure=True).load, y11.load]
json.dump([r(case["raw"]) == case["content"] for r in readers], sys.stdout)
"#;
    let same = run_python(script, &json!({"raw": raw, "content": content}));
    assert_eq!(
        same,
        json!([true, true, true]),
        "PyYAML, ruamel 1.2, ruamel 1.1"
    );
}

/// Integers beyond 64 bits are judged on the parsed plain scalars, in any notation: refused
/// with the scalar's pointer (and make a stored file invalid), never read as a float or a
/// string.
#[tokio::test]
async fn integers_beyond_64_bits_are_refused_in_every_notation_and_only_there() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let before = app.head("globex");
    let wide = [
        (
            "wallet: 0x52908400098527886E0F7030069857D2E4169EE7\n",
            "/wallet",
        ),
        ("w: 0x10000000000000000\n", "/w"),
        ("list: [1, 0o2000000000000000000000]\n", "/list/1"),
        (&*format!("bits: 0b1{}\n", "0".repeat(64)), "/bits"),
        ("deep: {num: 18446744073709551616}\n", "/deep/num"),
    ];
    for (text, pointer) in wide {
        let (status, body) =
            problem(app.put_integration(&t, &json!({"content": text})).await).await;
        let detail = body["detail"].as_str().unwrap_or_default();
        assert_eq!(status, 422, "{text:?}: {body}");
        assert!(
            detail.starts_with(&format!("/content{pointer}: ")),
            "{text:?}: {detail}"
        );
        assert!(
            detail.contains("does not fit in 64 bits"),
            "{text:?}: {detail}"
        );
        assert_eq!(app.head("globex"), before, "{text:?} wrote");
    }
    // A stored file holding one (committed with plain git) is invalid, not a string or a float.
    for (text, _) in wide {
        app.outside_commit("globex", "integrations.yml", text);
        let got: Value = app.get_integration(&t).await.json().await.unwrap();
        assert_eq!(got["status"], "invalid", "{text:?}: {got}");
        assert_eq!(got["content"], json!({}), "{text:?}");
        let errors = got["validation_errors"].to_string();
        assert!(errors.contains("does not fit in 64 bits"), "{errors}");
    }
    app.fsck("globex");
}

/// `.inf`, `.nan` and floats that overflow are refused with the value's pointer (JSON has
/// no such numbers), the line and column still in the detail.
#[tokio::test]
async fn non_finite_numbers_are_refused_with_their_pointer() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let before = app.head("globex");
    for (text, pointer) in [
        ("flag: .inf\n", "/flag"),
        ("a:\n  b: [1, -.Inf]\n", "/a/b/1"),
        ("n: .NaN\n", "/n"),
        ("big: 1e999\n", "/big"),
    ] {
        let (status, body) =
            problem(app.put_integration(&t, &json!({"content": text})).await).await;
        let detail = body["detail"].as_str().unwrap_or_default();
        assert_eq!(status, 422, "{text:?}: {body}");
        assert!(
            detail.starts_with(&format!("/content{pointer}: ")),
            "{text:?}: {detail}"
        );
        assert!(detail.contains("line "), "{text:?}: {detail}");
    }
    assert_eq!(app.head("globex"), before);
}

/// A long digit run inside a string, key, comment or block scalar is not an integer, even
/// beside a whole float >= 2^64.
#[tokio::test]
async fn long_digit_runs_outside_plain_scalars_are_kept_beside_a_wide_float() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    // The issue's example: a long digit run inside a string, beside a whole float >= 2^64.
    let content = json!({"note": "ref 123456789012345678901", "big": 1e20});
    let res = app.put_integration(&t, &json!({"content": content})).await;
    assert_eq!(res.status(), 200);
    let got: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(got["content"], content);
    // As YAML text, with the digits in a key, a comment and a block scalar too.
    let text = "# order 123456789012345678901\n\
                note: \"ref 123456789012345678901\"\n\
                \"123456789012345678901\": key\n\
                block: |\n  123456789012345678901\n\
                hex: '0x10000000000000000'\n\
                big: 1.0e+20\n";
    let res = app.put_integration(&t, &json!({"content": text})).await;
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["raw_content"], text);
    assert_eq!(body["content"]["big"], 1e20);
    assert_eq!(body["content"]["hex"], "0x10000000000000000");
    app.fsck("globex");
}

/// Client text whose top level is `null`, `~`, empty or only comments is not a mapping: 422.
/// A stored empty file still reads as `{}`.
#[tokio::test]
async fn a_document_without_a_mapping_is_refused() {
    let app = TestApp::spawn().await;
    let t = token("globex", ALL);
    let before = app.head("globex");
    for (text, found) in [
        ("null", "found null"),
        ("~\n", "found null"),
        ("--- null\n", "found null"),
        ("", "found an empty document"),
        ("# only a comment\n", "found an empty document"),
    ] {
        let (status, body) =
            problem(app.put_integration(&t, &json!({"content": text})).await).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("invalid_content")),
            "{text:?}"
        );
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.starts_with("/content: "), "{text:?}: {detail}");
        assert!(detail.ends_with(found), "{text:?}: {detail}");
        assert_eq!(app.head("globex"), before, "{text:?} wrote");
    }
    // `{}` is an empty mapping, so it is stored.
    let res = app.put_integration(&t, &json!({"content": "{}\n"})).await;
    assert_eq!(res.status(), 200);
    app.outside_commit("globex", "integrations.yml", "");
    let got: Value = app.get_integration(&t).await.json().await.unwrap();
    assert_eq!(
        (&got["status"], &got["content"]),
        (&json!("valid"), &json!({}))
    );
}

//! The splice under random edits: documents with comments, blank lines and mixed styles
//! (block and flow, indented and compact sequences, plain, single- and double-quoted
//! scalars) are edited (add, remove, change, reorder, nest); the new text must parse to the
//! new content strictly, every old line outside the edited nodes must be kept, and PyYAML
//! and ruamel.yaml (YAML 1.2) must read the content too.
use crate::common;
use planfiles::domain::yaml::splice::{rewrite, Rewrite};
use planfiles::domain::yaml::{parse_mapping, strict_eq, Mapping};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::HashMap;

const KEYS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta",
];
/// Strings and how they may be written: plain, or quoted only.
const STRINGS: &[(&str, bool)] = &[
    ("web", true),
    ("us-east-1", true),
    ("a b c", true),
    ("compliance@acme.example", true),
    ("yes", false),
    ("0x1F", false),
    ("a: b", false),
    ("it's", false),
    ("12", false),
    ("", false),
    ("# not a comment", false),
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(STRINGS).prop_map(|(s, _)| json!(s)),
        (-5i64..100_000).prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ]
}

fn map_of(
    inner: impl Strategy<Value = Value>,
    n: std::ops::Range<usize>,
) -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(KEYS), inner), n)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            map_of(inner, 0..4),
        ]
    })
}

fn document() -> impl Strategy<Value = Value> {
    map_of(value(), 1..7)
}

/// Deterministic choices from a seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A document written by hand, and where each node's lines are (from its comment above to
/// its last line), by JSON pointer; and which collections are flow or compact.
#[derive(Default)]
struct Written {
    text: String,
    lines: HashMap<String, (usize, usize)>,
    flow: Vec<String>,
    compact: Vec<String>,
}

impl Written {
    fn line(&self) -> usize {
        self.text.matches('\n').count()
    }
}

fn is_leafy(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter().all(|x| !x.is_array() && !x.is_object()),
        Value::Object(m) => m.values().all(|x| !x.is_array() && !x.is_object()),
        _ => true,
    }
}

fn scalar_text(v: &Value, dice: &mut Dice) -> String {
    match v {
        Value::String(s) => {
            let plain = STRINGS.iter().any(|(t, p)| t == s && *p);
            match dice.roll(if plain { 3 } else { 2 }) {
                0 => format!("'{}'", s.replace('\'', "''")),
                1 => serde_json::to_string(s).unwrap(),
                _ => s.clone(),
            }
        }
        Value::Null => ["null", "~"][dice.roll(2) as usize].to_owned(),
        other => other.to_string(),
    }
}

fn flow_text(v: &Value, dice: &mut Dice) -> String {
    match v {
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(|x| flow_text(x, dice)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, x)| format!("{k}: {}", flow_text(x, dice)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::String(s) if !STRINGS.iter().any(|(t, p)| t == s && *p) || s.contains(' ') => {
            serde_json::to_string(s).unwrap()
        }
        other => scalar_text(other, dice),
    }
}

/// Writes the value of an entry or item after its `key:` or `-` (the line so far is in
/// `w.text`), at nesting column `col`.
fn write_value(w: &mut Written, v: &Value, col: usize, at: &str, dice: &mut Dice, item: bool) {
    let empty = matches!(v, Value::Array(a) if a.is_empty())
        || matches!(v, Value::Object(m) if m.is_empty());
    let collection = v.is_array() || v.is_object();
    if collection && (empty || (is_leafy(v) && dice.roll(3) == 0) || (item && v.is_array())) {
        w.flow.push(at.to_owned());
        w.text.push(' ');
        w.text.push_str(&flow_text(v, dice));
        comment_after(w, dice);
        return;
    }
    match v {
        Value::Object(m) if item => {
            // `- key: value` with the other keys under the first.
            w.compact.push(at.to_owned());
            w.text.push(' ');
            write_entries(w, m, col + 2, at, dice, true);
        }
        Value::Object(m) => {
            comment_after(w, dice);
            write_entries(w, m, col + 2, at, dice, false);
        }
        Value::Array(a) => {
            comment_after(w, dice);
            let indent = if dice.roll(2) == 0 { col } else { col + 2 };
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                let first = above(w, indent, dice);
                w.text.push_str(&" ".repeat(indent));
                w.text.push('-');
                write_value(w, x, indent, &p, dice, true);
                w.lines.insert(p, (first, w.line() - 1));
            }
        }
        other => {
            w.text.push(' ');
            w.text.push_str(&scalar_text(other, dice));
            comment_after(w, dice);
        }
    }
}

/// Maybe a blank line and maybe an own-line comment; returns the entry's first line.
fn above(w: &mut Written, col: usize, dice: &mut Dice) -> usize {
    if dice.roll(5) == 0 {
        w.text.push('\n');
    }
    let first = w.line();
    if dice.roll(3) == 0 {
        w.text
            .push_str(&format!("{}# note {}\n", " ".repeat(col), dice.roll(1000)));
    }
    first
}

fn comment_after(w: &mut Written, dice: &mut Dice) {
    if dice.roll(4) == 0 {
        w.text
            .push_str(&format!("  # trailing {}", dice.roll(1000)));
    }
    w.text.push('\n');
}

fn write_entries(
    w: &mut Written,
    m: &Mapping,
    col: usize,
    at: &str,
    dice: &mut Dice,
    compact: bool,
) {
    for (i, (k, v)) in m.iter().enumerate() {
        let p = format!("{at}/{k}");
        let first = if compact && i == 0 {
            w.line()
        } else {
            let first = above(w, col, dice);
            w.text.push_str(&" ".repeat(col));
            first
        };
        w.text.push_str(k);
        w.text.push(':');
        write_value(w, v, col, &p, dice, false);
        w.lines.insert(p, (first, w.line() - 1));
    }
}

fn write(doc: &Mapping, seed: u64) -> Written {
    let mut w = Written::default();
    let mut dice = Dice(seed);
    if dice.roll(2) == 0 {
        w.text.push_str("# a file kept by hand\n\n");
    }
    write_entries(&mut w, doc, 0, "", &mut dice, false);
    if dice.roll(2) == 0 {
        w.text.push_str("# the end\n");
    }
    w
}

/// Every pointer of a value's nodes below the top.
fn pointers(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{k}");
                out.push(p.clone());
                pointers(x, &p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(x, &p, out);
            }
        }
        _ => {}
    }
}

fn parent(p: &str) -> &str {
    p.rfind('/').map_or("", |i| &p[..i])
}

fn last(p: &str) -> &str {
    &p[p.rfind('/').unwrap() + 1..]
}

/// Applies edit `kind` at a node chosen by `pick`; returns the pointers whose old lines may
/// change.
fn apply(doc: &mut Value, kind: u8, pick: usize, new: &Value) -> Vec<String> {
    let mut all = Vec::new();
    pointers(doc, "", &mut all);
    if all.is_empty() {
        return all;
    }
    let at = all[pick % all.len()].clone();
    let up = parent(&at).to_owned();
    let mut edited = vec![at.clone()];
    match kind {
        // Change (a scalar, or whatever is there) / nest a value one level deeper.
        0 => *doc.pointer_mut(&at).unwrap() = new.clone(),
        1 => {
            let old = doc.pointer(&at).unwrap().clone();
            *doc.pointer_mut(&at).unwrap() = if pick.is_multiple_of(2) {
                json!({"eta": old})
            } else {
                json!([old])
            };
        }
        // Remove (a collection left empty is written `{}` or `[]` on its key's line).
        2 => match doc.pointer_mut(&up).unwrap() {
            Value::Object(m) => {
                m.shift_remove(last(&at));
                if m.is_empty() {
                    edited.push(up.clone());
                }
            }
            Value::Array(a) => {
                let i = last(&at).parse::<usize>().unwrap();
                let gone = a.remove(i);
                // Which of a run of equal items goes is the splice's choice.
                let same = |k: &usize| a.get(*k).is_some_and(|x| strict_eq(x, &gone));
                let start = (0..i).rev().take_while(|k| same(k)).last().unwrap_or(i);
                let end = (i..a.len())
                    .take_while(|k| same(k))
                    .last()
                    .map_or(i, |k| k + 1);
                edited.extend((start..=end).map(|k| format!("{up}/{k}")));
                if a.is_empty() {
                    edited.push(up.clone());
                }
            }
            _ => unreachable!(),
        },
        // Add a key or an item before this one.
        3 => {
            edited.clear();
            match doc.pointer_mut(&up).unwrap() {
                Value::Object(m) => {
                    let Some(key) = KEYS.iter().find(|k| !m.contains_key(**k)) else {
                        return edited;
                    };
                    let i = m.keys().position(|k| k == last(&at)).unwrap();
                    m.shift_insert(i, (*key).to_owned(), new.clone());
                    // A flow mapping is written again; a compact one moves its `- `.
                    edited.push(format!("{up}/{key}"));
                    if i == 0 {
                        edited.push(at.clone());
                    }
                }
                Value::Array(a) => {
                    a.insert(last(&at).parse::<usize>().unwrap(), new.clone());
                    // Only a flow sequence is written again.
                    edited.push(format!("{up}/+"));
                }
                _ => unreachable!(),
            }
        }
        // Move an entry one place up (reorder).
        _ => {
            if let Value::Object(m) = doc.pointer_mut(&up).unwrap() {
                let i = m.keys().position(|k| k == last(&at)).unwrap();
                if i > 0 {
                    let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
                    entries.swap(i - 1, i);
                    edited.push(format!("{up}/{}", entries[i].0));
                    *m = entries.into_iter().collect();
                }
            }
        }
    }
    edited
}

/// Which old lines a common subsequence with the new lines keeps: the one that keeps the
/// most lines outside `allowed` (those that may change), then the most lines.
fn kept_lines(old: &[&str], new: &[&str], allowed: &[bool]) -> Vec<bool> {
    let w = new.len() + 1;
    let heavy = old.len() as u32 + 1;
    let mut t = vec![0u32; (old.len() + 1) * w];
    for i in (0..old.len()).rev() {
        let weight = if allowed[i] { 1 } else { heavy };
        for j in (0..new.len()).rev() {
            t[i * w + j] = if old[i] == new[j] {
                (t[(i + 1) * w + j + 1] + weight)
                    .max(t[(i + 1) * w + j])
                    .max(t[i * w + j + 1])
            } else {
                t[(i + 1) * w + j].max(t[i * w + j + 1])
            };
        }
    }
    let mut kept = vec![false; old.len()];
    let (mut i, mut j) = (0, 0);
    while i < old.len() && j < new.len() {
        let weight = if allowed[i] { 1 } else { heavy };
        if old[i] == new[j] && t[i * w + j] == t[(i + 1) * w + j + 1] + weight {
            kept[i] = true;
            i += 1;
            j += 1;
        } else if t[(i + 1) * w + j] >= t[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    kept
}

#[test]
fn random_edits_keep_every_other_line() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 400,
        ..ProptestConfig::default()
    });
    let cases = std::cell::RefCell::new(Vec::new());
    let strategy = (
        document(),
        any::<u64>(),
        prop::collection::vec((0u8..5, any::<usize>(), value()), 1..4),
    );
    runner
        .run(&strategy, |(doc, seed, edits)| {
            let doc = doc.as_object().unwrap().clone();
            let w = write(&doc, seed);
            let old = parse_mapping(&w.text).map_err(|e| {
                TestCaseError::fail(format!(
                    "the written document does not parse: {e}\n{}",
                    w.text
                ))
            })?;
            prop_assert!(
                strict_eq(&Value::Object(old.clone()), &Value::Object(doc.clone())),
                "{}",
                w.text
            );
            let mut new = Value::Object(doc);
            let mut edited = Vec::new();
            // A sequence that gains or loses an item shifts its indexes: with other edits in
            // it, which old item an edit's index names is unclear, so the whole sequence
            // counts as edited then.
            let mut shifted: Vec<String> = Vec::new();
            let mut touched: Vec<String> = Vec::new();
            for (kind, pick, v) in &edits {
                for p in apply(&mut new, *kind, *pick, v) {
                    if matches!(kind, 2 | 3) && new.pointer(parent(&p)).is_some_and(Value::is_array)
                    {
                        shifted.push(parent(&p).to_owned());
                    }
                    touched.push(p);
                }
            }
            for p in touched {
                let under: Vec<&String> = shifted
                    .iter()
                    .filter(|s| p.starts_with(&format!("{s}/")))
                    .collect();
                let others = edits.len() > 1 && !under.is_empty();
                edited.push(if others { under[0].clone() } else { p });
            }
            let new = new.as_object().unwrap().clone();
            let text = match rewrite(&w.text, &new) {
                Rewrite::Edited(t) => t,
                // An empty mapping is `{}`, emitted.
                Rewrite::Fresh if new.is_empty() => return Ok(()),
                other => {
                    return Err(TestCaseError::fail(format!(
                        "{other:?}\n{}\n=> {}",
                        w.text,
                        Value::Object(new)
                    )))
                }
            };
            let back = parse_mapping(&text).unwrap();
            prop_assert!(
                strict_eq(&Value::Object(back), &Value::Object(new.clone())),
                "{text}"
            );
            // Old lines that are gone must be lines of edited nodes (of their outermost flow
            // collection, for one inside a flow collection; of a compact mapping's first two
            // entries, when one of them is edited, as the `- ` moves; and when the old entries
            // before the new first one are gone, the first line of that one, which moves onto
            // the `- ` line).
            let mut allowed = vec![false; w.line() + 1];
            let mark_range = |p: &str, allowed: &mut Vec<bool>| {
                if let Some(&(a, b)) = w.lines.get(p) {
                    allowed[a..=b].iter_mut().for_each(|x| *x = true);
                }
            };
            for p in &edited {
                let mut p = p.as_str();
                while let Some(f) = w.flow.iter().find(|f| p.starts_with(&format!("{f}/"))) {
                    p = f;
                }
                mark_range(p, &mut allowed);
                let up = parent(p);
                if w.compact.iter().any(|c| c == up) {
                    for k in old_entries(&old, up).iter().take(2) {
                        mark_range(&format!("{up}/{k}"), &mut allowed);
                    }
                    let first = Value::Object(new.clone())
                        .pointer(up)
                        .and_then(|m| m.as_object()?.keys().next().cloned());
                    if let Some(&(a, _)) = first.and_then(|k| w.lines.get(&format!("{up}/{k}"))) {
                        allowed[a] = true;
                    }
                }
            }
            // A blank line after a removed or moved entry may go with it.
            let old_lines: Vec<&str> = w.text.lines().collect();
            for i in 1..old_lines.len() {
                if old_lines[i].is_empty() && allowed[i - 1] {
                    allowed[i] = true;
                }
            }
            let new_lines: Vec<&str> = text.lines().collect();
            for (i, kept) in kept_lines(&old_lines, &new_lines, &allowed)
                .into_iter()
                .enumerate()
            {
                prop_assert!(
                    kept || allowed[i],
                    "line {i} {:?} changed, edits {edited:?}\n{}\n=> {text}",
                    old_lines[i],
                    w.text
                );
            }
            cases
                .borrow_mut()
                .push(json!({"raw": text, "content": new}));
            Ok(())
        })
        .unwrap();
    readers_agree(&cases.into_inner());
}

/// The keys of the mapping at `at` in the old content, in order.
fn old_entries(old: &Mapping, at: &str) -> Vec<String> {
    let root = Value::Object(old.clone());
    match root.pointer(at) {
        Some(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// PyYAML and ruamel.yaml (YAML 1.2) read every edited text as its content, in key order.
fn readers_agree(cases: &[Value]) {
    let script = r#"
import json, sys, warnings
import yaml
from ruamel.yaml import YAML
warnings.simplefilter("ignore")
r12 = YAML(typ="safe", pure=True)
bad = 0
for c in json.load(sys.stdin):
    for name, load in (("PyYAML", yaml.safe_load), ("ruamel.yaml 1.2", r12.load)):
        got = load(c["raw"])
        if json.dumps(got) != json.dumps(c["content"]):
            bad += 1
            print(name, "MISMATCH", json.dumps(c["content"])[:300], "->", repr(got)[:300])
sys.exit(1 if bad else 0)
"#;
    if !common::python_has(&["yaml", "ruamel.yaml"]) {
        return;
    }
    let (ok, report) = common::python_check(script, cases);
    assert!(ok, "a reader reads an edited text differently:\n{report}");
}

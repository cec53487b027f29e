//! The YAML boundary: strict parsing into JSON-shaped values and lossless emission (serde-saphyr).
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

pub mod ambiguity;
pub mod readers;
pub use ambiguity::Ambiguity;

/// Deepest nesting of mappings and sequences a document may have (the top mapping is level 1).
pub const MAX_DEPTH: usize = 64;
/// Most nodes (mappings, sequences and scalars, keys included) a document may have.
pub const MAX_NODES: usize = 100_000;

/// A JSON-shaped mapping with the key order kept.
pub type Mapping = Map<String, Value>;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum YamlError {
    #[error("not valid YAML: {0}")]
    Syntax(String),
    #[error("the top level must be a mapping, found {0}")]
    NotAMapping(&'static str),
    #[error("nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("more than {MAX_NODES} nodes")]
    TooManyNodes,
    #[error("the value cannot be stored as YAML without changing it")]
    NotRepresentable,
    #[error("an integer does not fit in 64 bits")]
    IntegerTooLarge,
    /// A plain scalar that YAML 1.1 and YAML 1.2 readers read as different data.
    #[error("{}: {}", .0.pointer, .0)]
    Ambiguous(Box<Ambiguity>),
}

fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    // The parser stops a little past our own limits; `check_limits` gives the precise answer.
    budget.max_depth = MAX_DEPTH + 2;
    budget.max_nodes = 2 * MAX_NODES + 2;
    budget.max_documents = 1;
    let mut opts = serde_saphyr::Options::default();
    opts.budget = Some(budget);
    opts.alias_limits.max_total_replayed_events = 2 * MAX_NODES;
    // YAML 1.2 core booleans only: `yes`/`on` are strings, as they are in JSON.
    opts.strict_booleans = true;
    opts.reject_unsupported_tags = true;
    // `<<` is a plain key: merging would change the data a client sent.
    opts.merge_keys = serde_saphyr::MergeKeyPolicy::AsOrdinary;
    opts
}

/// Parses YAML text that must be one document whose top level is a mapping with string keys.
/// An empty document (or one with only comments) is an empty mapping.
pub fn parse_mapping(text: &str) -> Result<Mapping, YamlError> {
    let StrictValue(value) = serde_saphyr::from_str_with_options(text, options())
        .map_err(|e| YamlError::Syntax(first_line(&e.to_string())))?;
    let map = match value {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => return Err(YamlError::NotAMapping(kind(&other))),
    };
    check_limits(&map)?;
    // The parser reads an integer past 64 bits as a float: content would then differ from the
    // stored text. Such a float is whole and beyond 64 bits; refuse when the text has a literal.
    if has_wide_whole_float(&map) && has_wide_integer_literal(text) {
        return Err(YamlError::IntegerTooLarge);
    }
    Ok(map)
}

/// Parses YAML text sent by a client, as `parse_mapping`, and refuses any plain scalar that
/// YAML 1.1 and YAML 1.2 readers read differently (so `raw_content` reads the same everywhere).
/// Files already stored are read with `parse_mapping`, whatever they hold.
pub fn parse_client_text(text: &str) -> Result<Mapping, YamlError> {
    let map = parse_mapping(text)?;
    match ambiguity::find(text, &map) {
        Some(found) => Err(YamlError::Ambiguous(Box::new(found))),
        None => Ok(map),
    }
}

/// Whether a value holds a whole float outside the 64-bit integer range.
fn has_wide_whole_float(map: &Mapping) -> bool {
    let mut stack: Vec<&Value> = map.values().collect();
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_none() => {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && (f <= i64::MIN as f64 || f >= u64::MAX as f64) {
                    return true;
                }
            }
            Value::Object(m) => stack.extend(m.values()),
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    false
}

/// Whether the text has a run of digits, not part of a float or a word, that no 64-bit
/// integer holds.
fn has_wide_integer_literal(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let before = start.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i).copied();
        let in_word = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'.');
        if in_word(before) || in_word(after) {
            continue;
        }
        let negative = before == Some(b'-');
        let digits = &text[start..i];
        let fits = if negative {
            format!("-{digits}").parse::<i64>().is_ok()
        } else {
            digits.parse::<u64>().is_ok()
        };
        if !fits {
            return true;
        }
    }
    false
}

/// Emits a mapping as YAML that every YAML 1.1 or 1.2 reader reads back as the same data.
/// The result is verified by parsing it again, with the same check as text from a client.
pub fn emit(map: &Mapping) -> Result<String, YamlError> {
    check_limits(map)?;
    if map.is_empty() {
        return Ok("{}\n".to_owned());
    }
    let text = serde_saphyr::to_string(map).map_err(|_| YamlError::NotRepresentable)?;
    match parse_client_text(&text) {
        Ok(back) if &back == map => Ok(text),
        _ => Err(YamlError::NotRepresentable),
    }
}

/// Checks the depth and node limits of a mapping.
pub fn check_limits(map: &Mapping) -> Result<(), YamlError> {
    let mut nodes = 0usize;
    // Iterative walk: (value, depth) pairs.
    let mut stack: Vec<(&Value, usize)> = Vec::new();
    nodes += 1;
    for v in map.values() {
        nodes += 1; // the key
        stack.push((v, 2));
    }
    while let Some((v, depth)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_NODES {
            return Err(YamlError::TooManyNodes);
        }
        match v {
            Value::Object(m) => {
                if depth > MAX_DEPTH {
                    return Err(YamlError::TooDeep);
                }
                for c in m.values() {
                    nodes += 1;
                    stack.push((c, depth + 1));
                }
            }
            Value::Array(a) => {
                if depth > MAX_DEPTH {
                    return Err(YamlError::TooDeep);
                }
                stack.extend(a.iter().map(|c| (c, depth + 1)));
            }
            _ => {}
        }
    }
    if nodes > MAX_NODES {
        return Err(YamlError::TooManyNodes);
    }
    Ok(())
}

/// A short name for a JSON value's kind, for error messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or(s)
        .trim_start_matches("error: ")
        .to_owned()
}

/// A YAML value that refuses what JSON cannot hold: non-string keys and non-finite floats.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite numbers are not allowed"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(d).map(|s| s.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(StringKey(k)) = access.next_key()? {
            let StrictValue(v) = access.next_value()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key that YAML resolves to a string (so `1:`, `true:` and `~:` are refused).
struct StringKey(String);

impl<'de> Deserialize<'de> for StringKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = StringKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string mapping key (quote keys such as 1, true or null)")
            }
            fn visit_str<E>(self, v: &str) -> Result<StringKey, E> {
                Ok(StringKey(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<StringKey, E> {
                Ok(StringKey(v))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Mapping {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn ambiguous_strings_survive_a_round_trip() {
        let original = map(json!({
            "a": "yes", "b": "on", "c": "0x1F", "d": "1e3", "e": "~", "f": "2001-12-14",
            "g": "12:30:00", "h": "1_000", "<<": "merge", "n": "n", "null": "null",
            "i": 1.0, "j": 1e300, "k": u64::MAX, "l": i64::MIN, "m": null, "t": true,
            "multi": "line one\nline two\n", "empty": "", "list": [], "obj": {},
        }));
        let text = emit(&original).unwrap();
        assert_eq!(parse_mapping(&text).unwrap(), original);
        assert!(text.contains("a: \"yes\""), "{text}");
    }

    #[test]
    fn keeps_key_order() {
        let original = map(json!({"zeta": 1, "alpha": 2, "mid": 3}));
        let text = emit(&original).unwrap();
        assert_eq!(text, "zeta: 1\nalpha: 2\nmid: 3\n");
    }

    #[test]
    fn empty_mapping_and_empty_text() {
        assert_eq!(emit(&Map::new()).unwrap(), "{}\n");
        assert!(parse_mapping("").unwrap().is_empty());
        assert!(parse_mapping("# only a comment\n").unwrap().is_empty());
    }

    #[test]
    fn yaml_1_1_booleans_are_strings_when_read() {
        let m = parse_mapping("a: yes\nb: on\nc: true\n").unwrap();
        assert_eq!(Value::Object(m), json!({"a": "yes", "b": "on", "c": true}));
    }

    #[test]
    fn merge_key_is_an_ordinary_key() {
        let m = parse_mapping("<<: {a: 1}\n").unwrap();
        assert_eq!(Value::Object(m), json!({"<<": {"a": 1}}));
    }

    #[test]
    fn refuses_what_is_not_a_string_keyed_mapping() {
        let cases = [
            ("- a\n- b\n", "not a mapping"),
            ("just text\n", "not a mapping"),
            ("1: x\n", "non-string key"),
            ("true: x\n", "non-string key"),
            ("~: x\n", "null key"),
            ("a: 1\na: 2\n", "duplicate"),
            ("a: 1\n---\nb: 2\n", "several documents"),
            ("a: !custom x\n", "custom tag"),
            ("a: [unclosed\n", "syntax"),
            ("a: .nan\n", "non-finite"),
        ];
        for (text, why) in cases {
            assert!(parse_mapping(text).is_err(), "{why}: {text:?}");
        }
    }

    #[test]
    fn refuses_alias_bombs_quickly() {
        let mut text = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for w in names.windows(2) {
            let (prev, next) = (w[0], w[1]);
            let items = vec![format!("*{prev}"); 9].join(",");
            text.push_str(&format!("{next}: &{next} [{items}]\n"));
        }
        let start = std::time::Instant::now();
        assert!(parse_mapping(&text).is_err());
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn depth_limit_is_exact() {
        let nested = |levels: usize| {
            let mut v = json!(1);
            for _ in 0..levels {
                v = json!({ "k": v });
            }
            map(v)
        };
        assert!(check_limits(&nested(MAX_DEPTH)).is_ok());
        assert_eq!(
            check_limits(&nested(MAX_DEPTH + 1)),
            Err(YamlError::TooDeep)
        );
        // The same holds for text: the emitted form of the deepest allowed document parses.
        let text = emit(&nested(MAX_DEPTH)).unwrap();
        assert!(parse_mapping(&text).is_ok());
    }

    #[test]
    fn integers_past_64_bits_are_refused_not_turned_into_floats() {
        for text in [
            "n: 18446744073709551616\n",
            "n: -9223372036854775809\n",
            "a: {b: [1, 123456789012345678901234567890]}\n",
        ] {
            assert_eq!(
                parse_mapping(text),
                Err(YamlError::IntegerTooLarge),
                "{text}"
            );
        }
        // The edges of the 64-bit range, and large floats, are kept exactly.
        let m = parse_mapping(
            "a: 18446744073709551615\nb: -9223372036854775808\nc: 1e300\nd: 2.0e19\n",
        )
        .unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"a": u64::MAX, "b": i64::MIN, "c": 1e300, "d": 2.0e19})
        );
        // A long number in a string is not an integer.
        assert!(parse_mapping("a: \"18446744073709551616\"\n").is_ok());
    }

    #[test]
    fn node_limit() {
        let many: Mapping = (0..MAX_NODES)
            .map(|i| (format!("k{i}"), json!(i)))
            .collect();
        assert_eq!(check_limits(&many), Err(YamlError::TooManyNodes));
        let some: Mapping = (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
        assert!(check_limits(&some).is_ok());
    }
}

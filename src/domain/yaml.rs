//! The YAML boundary: strict parsing into JSON-shaped values and lossless emission (serde-saphyr).
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

pub mod ambiguity;
pub mod integers;
pub mod readers;
pub mod splice;
mod walk;
pub use ambiguity::Ambiguity;
pub use integers::WideInteger;
pub use walk::Role;

/// Deepest nesting of mappings and sequences a document may have (the top mapping is level 1).
pub const MAX_DEPTH: usize = 64;
/// Most nodes (mappings, sequences and scalars, keys included) a document may have.
pub const MAX_NODES: usize = 100_000;

/// Most events aliases may replay in text a client sends (a push's files included), counted
/// as they expand: an alias bomb of a few hundred bytes is refused after this many, within
/// about a millisecond of CPU (about 1 us an event; 2,048 took 2.0 ms), while a plan file that
/// reuses an anchored list in each of its accounts stays below it (the parser refuses more
/// than 100 aliases of one anchor anyway).
pub const MAX_CLIENT_REPLAYS: usize = 1_000;
/// The same for a file already stored (written by plain git, or under the older, larger
/// bound): it must still read, and it is parsed once per blob.
const MAX_STORED_REPLAYS: usize = 2 * MAX_NODES;

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
    /// A plain scalar that a reader reads as an integer beyond 64 bits.
    #[error("{}: {}", .0.pointer, .0)]
    IntegerTooLarge(Box<WideInteger>),
    /// A plain scalar that YAML 1.1 and YAML 1.2 readers read as different data.
    #[error("{}: {}", .0.pointer, .0)]
    Ambiguous(Box<Ambiguity>),
    /// `.inf`, `.nan` and the like: JSON has no such numbers.
    #[error("{pointer}: {message}")]
    NonFinite { pointer: String, message: String },
}

fn options(max_replays: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    // The parser stops a little past our own limits; `check_limits` gives the precise answer.
    budget.max_depth = MAX_DEPTH + 2;
    budget.max_nodes = 2 * MAX_NODES + 2;
    budget.max_documents = 1;
    let mut opts = serde_saphyr::Options::default();
    opts.budget = Some(budget);
    opts.alias_limits.max_total_replayed_events = max_replays;
    // YAML 1.2 core booleans only: `yes`/`on` are strings, as they are in JSON.
    opts.strict_booleans = true;
    opts.reject_unsupported_tags = true;
    // `<<` is a plain key: merging would change the data a client sent.
    opts.merge_keys = serde_saphyr::MergeKeyPolicy::AsOrdinary;
    // Non-finite numbers reach `StrictVisitor`, which refuses them with their pointer.
    opts.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    opts
}

/// Parses YAML text into a value within the limits (any top level), aliases replaying at
/// most `max_replays` events.
fn parse_value(text: &str, max_replays: usize) -> Result<Value, YamlError> {
    WALK.with(|w| {
        w.at.borrow_mut().clear();
        w.non_finite.borrow_mut().take();
    });
    let StrictValue(value) = serde_saphyr::from_str_with_options(text, options(max_replays))
        .map_err(|e| {
            let message = first_line(&e.to_string());
            match WALK.with(|w| w.non_finite.take()) {
                Some(pointer) => YamlError::NonFinite { pointer, message },
                None => YamlError::Syntax(message),
            }
        })?;
    if let Value::Object(map) = &value {
        check_limits(map)?;
    }
    Ok(value)
}

/// Parses a stored file: one document whose top level is a mapping with string keys. An empty
/// document (or one with only comments, or `null`) reads as an empty mapping.
pub fn parse_mapping(text: &str) -> Result<Mapping, YamlError> {
    let map = match parse_value(text, MAX_STORED_REPLAYS)? {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => return Err(YamlError::NotAMapping(kind(&other))),
    };
    // The parser reads a wide decimal integer as a float and a wide hex one as a string: the
    // content would differ from the text. Refuse them (the walk runs only when one may be there).
    if integers::may_hold_one(&map) {
        if let Some(found) = integers::find(text, &map) {
            return Err(YamlError::IntegerTooLarge(Box::new(found)));
        }
    }
    Ok(map)
}

/// Parses YAML text sent by a client: one document whose top level is a mapping (not empty,
/// not `null`), with no integer beyond 64 bits and no plain scalar that YAML 1.1 and YAML 1.2
/// readers read differently (so `raw_content` reads the same everywhere), both found in one
/// walk.
/// Files already stored are read with `parse_mapping`, whatever they hold.
pub fn parse_client_text(text: &str) -> Result<Mapping, YamlError> {
    client_text(text, |_, _| {})
}

/// [`parse_client_text`] that also builds the text's tree for the splice, from the same
/// parse (`None`: the walk's parser did not get to the end).
pub(crate) fn parse_client_text_spanned(
    text: &str,
) -> Result<(Mapping, Option<splice::Spans>), YamlError> {
    let mut tree = splice::SpansBuilder::new(text);
    let map = client_text(text, |event, span| tree.event(event, span))?;
    Ok((map, tree.finish()))
}

fn client_text(
    text: &str,
    observe: impl FnMut(&granit_parser::Event<'_>, &granit_parser::Span),
) -> Result<Mapping, YamlError> {
    let map = match parse_value(text, MAX_CLIENT_REPLAYS)? {
        Value::Object(map) => map,
        Value::Null if is_blank(text) => return Err(YamlError::NotAMapping("an empty document")),
        other => return Err(YamlError::NotAMapping(kind(&other))),
    };
    let found = walk::first_observed(
        text,
        &map,
        |p| {
            let found = match readers::wide_integer(p.text) {
                Some(reading) => Found::Wide(reading),
                None => Found::Ambiguous(readers::conflict(p.text, p.service)?),
            };
            Some((p.text.to_owned(), p.role, found))
        },
        observe,
    );
    let Some((pointer, (text, role, found))) = found else {
        return Ok(map);
    };
    Err(match found {
        Found::Wide(reading) => YamlError::IntegerTooLarge(Box::new(WideInteger {
            pointer,
            text,
            role,
            reading,
        })),
        Found::Ambiguous(readings) => YamlError::Ambiguous(Box::new(Ambiguity {
            pointer,
            text,
            role,
            readings,
        })),
    })
}

/// What the walk of client text finds at a plain scalar.
enum Found {
    Wide((&'static str, readers::Reading)),
    Ambiguous([(&'static str, readers::Reading); 2]),
}

impl YamlError {
    /// The JSON pointer (within the document) of the scalar an error is about, when it is about
    /// one, and the message without it.
    pub fn located(&self) -> Option<(&str, String)> {
        match self {
            YamlError::IntegerTooLarge(w) => Some((&w.pointer, w.to_string())),
            YamlError::Ambiguous(a) => Some((&a.pointer, a.to_string())),
            YamlError::NonFinite { pointer, message } => Some((pointer, message.clone())),
            _ => None,
        }
    }
}

/// Whether YAML text holds nothing but whitespace and comments.
fn is_blank(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#')
    })
}

/// Emits a mapping as YAML that every YAML 1.1 or 1.2 reader reads back as the same data.
/// The result is verified by parsing it again, with the same check as text from a client.
pub fn emit(map: &Mapping) -> Result<String, YamlError> {
    let text = emit_unverified(map)?;
    if reads_back_as(&text, map) {
        Ok(text)
    } else {
        Err(YamlError::NotRepresentable)
    }
}

/// [`emit`] without the verification, which costs a whole parse (as much as the emission
/// and more: 145 of 150 ms for 1 MiB): for a write's content, which storage either edits
/// into the stored text (a text it verifies) or stores as this emission, verified then with
/// [`reads_back_as`]. Never store its result unverified.
pub fn emit_unverified(map: &Mapping) -> Result<String, YamlError> {
    check_limits(map)?;
    if map.is_empty() {
        return Ok("{}\n".to_owned());
    }
    serde_saphyr::to_string_with_options(map, splice::emitter_options())
        .map_err(|_| YamlError::NotRepresentable)
}

/// Whether `text` reads back, under the rules for a client's text, as exactly `map` (key
/// order and number kinds included).
pub fn reads_back_as(text: &str, map: &Mapping) -> bool {
    matches!(parse_client_text(text), Ok(back) if strict_eq_map(&back, map))
}

/// Equality that JSON readers see: mappings equal in key order too, numbers equal in kind
/// (`1` is not `1.0`).
pub fn strict_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => strict_eq_map(a, b),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| strict_eq(x, y))
        }
        _ => a == b,
    }
}

/// [`strict_eq`] of two mappings.
pub fn strict_eq_map(a: &Mapping, b: &Mapping) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, va), (kb, vb))| ka == kb && strict_eq(va, vb))
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

/// Where the walk of a document is (a JSON pointer), and where it met a non-finite number.
#[derive(Default)]
struct Walk {
    at: std::cell::RefCell<String>,
    non_finite: std::cell::RefCell<Option<String>>,
}

impl Walk {
    /// Runs `f` with `/token` (escaped) appended to the pointer.
    fn within<T>(&self, token: &str, f: impl FnOnce() -> T) -> T {
        let len = {
            let mut at = self.at.borrow_mut();
            let len = at.len();
            at.push('/');
            for c in token.chars() {
                match c {
                    '~' => at.push_str("~0"),
                    '/' => at.push_str("~1"),
                    c => at.push(c),
                }
            }
            len
        };
        let out = f();
        self.at.borrow_mut().truncate(len);
        out
    }

    /// Runs `f` with `/index` appended to the pointer.
    fn at_index<T>(&self, index: usize, f: impl FnOnce() -> T) -> T {
        let len = {
            use std::fmt::Write;
            let mut at = self.at.borrow_mut();
            let len = at.len();
            let _ = write!(at, "/{index}");
            len
        };
        let out = f();
        self.at.borrow_mut().truncate(len);
        out
    }
}

thread_local! {
    /// The walk of the document being parsed on this thread (serde-saphyr takes no seed).
    static WALK: Walk = Walk::default();
}

/// A YAML value that refuses what JSON cannot hold: non-string keys and non-finite floats.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        WALK.with(|w| d.deserialize_any(StrictVisitor(w)).map(StrictValue))
    }
}

struct StrictVisitor<'w>(&'w Walk);

impl<'de> Visitor<'de> for StrictVisitor<'_> {
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
            .ok_or_else(|| {
                self.0
                    .non_finite
                    .borrow_mut()
                    .get_or_insert_with(|| self.0.at.borrow().clone());
                E::custom("non-finite numbers are not allowed")
            })
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
        loop {
            match self
                .0
                .at_index(out.len(), || seq.next_element::<StrictValue>())?
            {
                Some(StrictValue(v)) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(StringKey(k)) = access.next_key()? {
            let StrictValue(v) = self.0.within(&k, || access.next_value())?;
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
    fn a_non_finite_number_is_refused_with_its_pointer() {
        for (text, pointer) in [
            ("flag: .inf\n", "/flag"),
            ("a:\n  b: [1, -.Inf]\n", "/a/b/1"),
            ("x/y~z:\n- ok: 1\n- n: .nan\n", "/x~1y~0z/1/n"),
        ] {
            let err = parse_client_text(text).unwrap_err();
            let (at, message) = err.located().unwrap_or_else(|| panic!("{err:?}"));
            assert_eq!(at, pointer, "{text:?}");
            assert!(message.contains("non-finite"), "{message}");
        }
        // The walk starts afresh for every document.
        assert!(parse_client_text("a: 1\n").is_ok());
        let err = parse_client_text("b: .nan\n").unwrap_err();
        assert_eq!(err.located().unwrap().0, "/b");
    }

    #[test]
    fn an_alias_bomb_is_refused_by_its_replay_budget_and_a_stored_file_reads_with_more() {
        let mut text = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for w in names.windows(2) {
            let (prev, next) = (w[0], w[1]);
            let items = vec![format!("*{prev}"); 9].join(",");
            text.push_str(&format!("{next}: &{next} [{items}]\n"));
        }
        for refused in [parse_client_text(&text), parse_mapping(&text)] {
            let err = refused.unwrap_err().to_string();
            assert!(err.contains("alias replay limit"), "{err}");
        }
        // An anchored list reused by every account: what real files do, far inside the budget.
        let mut reuse = String::from("regions: &r [us-east-1, eu-west-1, ap-south-1]\naws:\n");
        for i in 0..90 {
            reuse.push_str(&format!(
                "  - {{account_id: \"{i:012}\", regions: *r, type: aws}}\n"
            ));
        }
        assert!(parse_client_text(&reuse).is_ok());
        // Past the client's budget, below the stored one: a client may not send it, a file
        // already in git still reads.
        // (Fewer than 100 aliases: the parser's own alias-to-anchor ratio is not what is tried.)
        let items: Vec<String> = (0..100).map(|i| format!("i{i}")).collect();
        let mut wide = format!("r: &r [{}]\nuses:\n", items.join(", "));
        let uses = MAX_CLIENT_REPLAYS / 102 + 1;
        for _ in 0..uses {
            wide.push_str("  - *r\n");
        }
        let err = parse_client_text(&wide).unwrap_err().to_string();
        assert!(err.contains("alias replay limit"), "{err}");
        assert_eq!(
            parse_mapping(&wide).unwrap()["uses"]
                .as_array()
                .unwrap()
                .len(),
            uses
        );
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

    /// The pointer and the text of the wide integer a parse refuses.
    fn wide(result: Result<Mapping, YamlError>) -> Option<(String, String)> {
        match result {
            Err(YamlError::IntegerTooLarge(w)) => Some((w.pointer, w.text)),
            _ => None,
        }
    }

    #[test]
    fn integers_past_64_bits_are_refused_not_turned_into_floats_or_strings() {
        let cases = [
            (
                "num: 18446744073709551616\n",
                "/num",
                "18446744073709551616",
            ),
            (
                "num: -9223372036854775809\n",
                "/num",
                "-9223372036854775809",
            ),
            (
                "a: {b: [1, 123456789012345678901234567890]}\n",
                "/a/b/1",
                "123456789012345678901234567890",
            ),
            ("w: 0x10000000000000000\n", "/w", "0x10000000000000000"),
            (
                "wallet: 0x52908400098527886E0F7030069857D2E4169EE7\n",
                "/wallet",
                "0x52908400098527886E0F7030069857D2E4169EE7",
            ),
            (
                "o: 0o2000000000000000000000\n",
                "/o",
                "0o2000000000000000000000",
            ),
            (
                "b: [0b1_0000000000000000000000000000000000000000000000000000000000000000]\n",
                "/b/0",
                "0b1_0000000000000000000000000000000000000000000000000000000000000000",
            ),
            (
                "0x10000000000000000: key\n",
                "/0x10000000000000000",
                "0x10000000000000000",
            ),
        ];
        for (text, pointer, scalar) in cases {
            let expected = Some((pointer.to_owned(), scalar.to_owned()));
            assert_eq!(wide(parse_client_text(text)), expected, "client: {text}");
            // A stored file holding one is invalid too.
            assert_eq!(wide(parse_mapping(text)), expected, "stored: {text}");
        }
        let message = parse_client_text("w: 0x10000000000000000\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "/w: the value 0x10000000000000000 is read as the integer 18446744073709551616 by \
             the YAML 1.2 core schema, which does not fit in 64 bits; integers from -2^63 to \
             2^64-1 are kept, for a string quote it: \"0x10000000000000000\""
        );
        // The edges of the 64-bit range, in every notation, and large floats are kept exactly.
        let text = "a: 18446744073709551615\nb: -9223372036854775808\nc: 1e300\nd: 2.0e19\n\
                    e: 0xFFFFFFFFFFFFFFFF\nf: 0o1777777777777777777777\n";
        let m = parse_mapping(text).unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"a": u64::MAX, "b": i64::MIN, "c": 1e300, "d": 2.0e19,
                   "e": u64::MAX, "f": u64::MAX})
        );
    }

    #[test]
    fn long_digit_runs_outside_plain_scalars_are_not_integers() {
        // A whole float past 64 bits beside long digit runs in strings, keys, comments and
        // block scalars: nothing there is an integer.
        let text = "note: \"ref 123456789012345678901\"\nbig: 1.0e+20\n\
                    \"123456789012345678901\": x\n# 123456789012345678901\n\
                    block: |\n  123456789012345678901\nq: '0x10000000000000000'\n";
        let m = parse_client_text(text).unwrap();
        assert_eq!(m["big"], json!(1e20));
        assert_eq!(m["q"], json!("0x10000000000000000"));
        assert!(parse_mapping(text).is_ok());
        // The JSON of the issue, emitted and read back.
        let content = map(json!({"note": "ref 123456789012345678901", "big": 1e20}));
        let emitted = emit(&content).unwrap();
        assert_eq!(parse_client_text(&emitted).unwrap(), content);
    }

    #[test]
    fn client_text_must_hold_a_mapping() {
        for (text, found) in [
            ("null", "null"),
            ("~\n", "null"),
            ("--- ~\n", "null"),
            ("", "an empty document"),
            ("\n  \n", "an empty document"),
            ("# only a comment\n", "an empty document"),
        ] {
            assert_eq!(
                parse_client_text(text),
                Err(YamlError::NotAMapping(found)),
                "{text:?}"
            );
            // A stored file like that still reads as an empty mapping.
            assert_eq!(parse_mapping(text), Ok(Map::new()), "{text:?}");
        }
        assert_eq!(parse_client_text("{}\n"), Ok(Map::new()));
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

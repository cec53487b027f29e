//! The readers of plain YAML scalars: PyYAML (YAML 1.1), ruamel.yaml in YAML 1.1 and 1.2 mode,
//! and the YAML 1.2.2 core schema, each as its implicit-resolver table copied from its source
//! (`yaml/resolver.py`; `ruamel/yaml/resolver.py`, `implicit_resolvers`; spec §10.3.2), and
//! the predicate: a scalar is ambiguous unless they, and the service, read the same data.
use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;

/// The data a reader gets from a plain scalar.
#[derive(Debug, Clone, Copy)]
pub enum Reading {
    Null,
    Bool(bool),
    /// An integer; `None` when the reader fails on it (such a reading equals no other, so the
    /// scalar is refused).
    Int(Option<i128>),
    /// An integer beyond 128 bits (equal to no other reading).
    WideInt,
    Float(f64),
    /// A string equal to the scalar's text.
    Str,
    /// A date or a date and time (`tag:yaml.org,2002:timestamp`).
    Timestamp,
    /// The `<<` merge key (`tag:yaml.org,2002:merge`).
    Merge,
    /// The `=` value key (`tag:yaml.org,2002:value`).
    ValueKey,
}

impl PartialEq for Reading {
    fn eq(&self, other: &Self) -> bool {
        use Reading::*;
        match (self, other) {
            (Null, Null) | (Str, Str) | (Timestamp, Timestamp) => true,
            (Merge, Merge) | (ValueKey, ValueKey) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(Some(a)), Int(Some(b))) => a == b,
            (Float(a), Float(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            _ => false,
        }
    }
}

impl Reading {
    /// Whether this is an integer that no 64-bit integer holds (outside `i64::MIN..=u64::MAX`).
    pub fn is_wide_integer(&self) -> bool {
        match self {
            Reading::WideInt => true,
            Reading::Int(Some(n)) => *n < i128::from(i64::MIN) || *n > i128::from(u64::MAX),
            _ => false,
        }
    }

    /// The service's reading of a parsed value (a plain scalar's, so never a collection).
    pub fn of_value(v: &Value) -> Reading {
        match v {
            Value::Null => Reading::Null,
            Value::Bool(b) => Reading::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Reading::Int(Some(i.into())),
                (_, Some(u)) => Reading::Int(Some(u.into())),
                _ => Reading::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(_) | Value::Array(_) | Value::Object(_) => Reading::Str,
        }
    }

    /// How a message names this reading of `text`.
    pub fn describe(&self, text: &str) -> String {
        match self {
            Reading::Null => "null".into(),
            Reading::Bool(b) => format!("the boolean {b}"),
            Reading::Int(Some(n)) => format!("the integer {n}"),
            Reading::Int(None) => "an integer".into(),
            Reading::WideInt => "an integer beyond 128 bits".into(),
            Reading::Float(f) if f.is_nan() => "the number NaN".into(),
            Reading::Float(f) => format!("the number {f:?}"),
            Reading::Str => format!("the string {}", quoted(text)),
            Reading::Timestamp => "a date".into(),
            Reading::Merge => "a merge key".into(),
            Reading::ValueKey => "a value key".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    Merge,
    Timestamp,
    ValueKey,
}

/// One implicit resolver: a kind, its regular expression and, for PyYAML-style readers, the
/// first characters it is tried for (`""` for the empty scalar).
struct Rule {
    kind: Kind,
    re: Regex,
    first: &'static [&'static str],
}

/// Which YAML version a reader follows, for integer and float construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// Leading `0` is octal, `a:b` is base 60, `y`/`n`/`yes`/`on`... are booleans.
    V1_1,
    V1_2,
}

/// A reader: its name as shown in messages, version and resolver table (tried in order).
pub struct Reader {
    pub name: &'static str,
    version: Version,
    /// Whether rules are chosen by the first character (PyYAML and ruamel.yaml do this).
    by_first_char: bool,
    rules: Vec<Rule>,
}

const BOOL_1_1: &str =
    "^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$";
const BOOL_1_1_TYPES: &str =
    "^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$";
const BOOL_1_2: &str = "^(?:true|True|TRUE|false|False|FALSE)$";
const MERGE: &str = "^(?:<<)$";
const NULL: &str = "^(?:~|null|Null|NULL|)$";
const TIMESTAMP: &str = concat!(
    "^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]",
    "|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?",
    "(?:[Tt]|[ \t]+)[0-9][0-9]?",
    ":[0-9][0-9]:[0-9][0-9](?:\\.[0-9]*)?",
    "(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$"
);
const VALUE: &str = "^(?:=)$";

const BOOL_FIRST: &[&str] = &["y", "Y", "n", "N", "t", "T", "f", "F", "o", "O"];
const NUM_FIRST: &[&str] = &[
    "-", "+", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ".",
];
const INT_FIRST: &[&str] = &["-", "+", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
const DIGITS: &[&str] = &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
const NULL_FIRST: &[&str] = &["~", "n", "N", ""];

fn rule(kind: Kind, re: &str, first: &'static [&'static str]) -> Rule {
    Rule {
        kind,
        re: Regex::new(re).expect("a resolver regex compiles"),
        first,
    }
}

/// The shared tail of the PyYAML and ruamel.yaml tables.
fn common_rules() -> [Rule; 4] {
    [
        rule(Kind::Merge, MERGE, &["<"]),
        rule(Kind::Null, NULL, NULL_FIRST),
        rule(Kind::Timestamp, TIMESTAMP, DIGITS),
        rule(Kind::ValueKey, VALUE, &["="]),
    ]
}

/// PyYAML 6 (`yaml/resolver.py`, `Resolver.add_implicit_resolver`), YAML 1.1.
fn pyyaml() -> Reader {
    let mut rules = vec![
        rule(Kind::Bool, BOOL_1_1, BOOL_FIRST),
        rule(
            Kind::Float,
            concat!(
                "^(?:[-+]?(?:[0-9][0-9_]*)\\.[0-9_]*(?:[eE][-+][0-9]+)?",
                "|\\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?",
                "|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\\.[0-9_]*",
                "|[-+]?\\.(?:inf|Inf|INF)",
                "|\\.(?:nan|NaN|NAN))$"
            ),
            NUM_FIRST,
        ),
        rule(
            Kind::Int,
            concat!(
                "^(?:[-+]?0b[0-1_]+",
                "|[-+]?0[0-7_]+",
                "|[-+]?(?:0|[1-9][0-9_]*)",
                "|[-+]?0x[0-9a-fA-F_]+",
                "|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$"
            ),
            INT_FIRST,
        ),
    ];
    rules.extend(common_rules());
    Reader {
        name: "YAML 1.1 (PyYAML)",
        version: Version::V1_1,
        by_first_char: true,
        rules,
    }
}

/// ruamel.yaml 0.18/0.19 in YAML 1.1 mode: the YAML 1.1 type repository (yaml.org/type), which
/// adds `y`, `Y`, `n` and `N` as booleans, `1e3` as a float and `0`-led octals with any digits.
fn ruamel_1_1() -> Reader {
    let mut rules = vec![
        rule(Kind::Bool, BOOL_1_1_TYPES, BOOL_FIRST),
        rule(
            Kind::Float,
            concat!(
                "^(?:[-+]?(?:[0-9][0-9_]*)\\.[0-9_]*(?:[eE][-+]?[0-9]+)?",
                "|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)",
                "|\\.[0-9_]+(?:[eE][-+][0-9]+)?",
                "|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\\.[0-9_]*",
                "|[-+]?\\.(?:inf|Inf|INF)",
                "|\\.(?:nan|NaN|NAN))$"
            ),
            NUM_FIRST,
        ),
        rule(
            Kind::Int,
            concat!(
                "^(?:[-+]?0b[0-1_]+",
                "|[-+]?0?[0-7_]+",
                "|[-+]?(?:0|[1-9][0-9_]*)",
                "|[-+]?0x[0-9a-fA-F_]+",
                "|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$"
            ),
            INT_FIRST,
        ),
    ];
    rules.extend(common_rules());
    Reader {
        name: "YAML 1.1 (the yaml.org types, as ruamel.yaml reads them)",
        version: Version::V1_1,
        by_first_char: true,
        rules,
    }
}

/// ruamel.yaml 0.18/0.19 in its default YAML 1.2 mode, which is wider than the core schema
/// (underscores, `0b`, dates, `<<`).
fn ruamel_1_2() -> Reader {
    let mut rules = vec![
        rule(Kind::Bool, BOOL_1_2, &["t", "T", "f", "F"]),
        rule(
            Kind::Float,
            concat!(
                "^(?:[-+]?(?:[0-9][0-9_]*)\\.[0-9_]*(?:[eE][-+]?[0-9]+)?",
                "|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)",
                "|[-+]?\\.[0-9_]+(?:[eE][-+][0-9]+)?",
                "|[-+]?\\.(?:inf|Inf|INF)",
                "|\\.(?:nan|NaN|NAN))$"
            ),
            NUM_FIRST,
        ),
        rule(
            Kind::Int,
            concat!(
                "^(?:[-+]?0b[0-1_]+",
                "|[-+]?0o?[0-7_]+",
                "|[-+]?[0-9_]+",
                "|[-+]?0x[0-9a-fA-F_]+)$"
            ),
            INT_FIRST,
        ),
    ];
    rules.extend(common_rules());
    Reader {
        name: "YAML 1.2 (ruamel.yaml)",
        version: Version::V1_2,
        by_first_char: true,
        rules,
    }
}

/// The YAML 1.2.2 core schema (spec §10.3.2), which this service follows.
fn core_1_2() -> Reader {
    let any: &[&str] = &[];
    Reader {
        name: "the YAML 1.2 core schema",
        version: Version::V1_2,
        by_first_char: false,
        rules: vec![
            rule(Kind::Null, "^(?:null|Null|NULL|~|)$", any),
            rule(Kind::Bool, BOOL_1_2, any),
            rule(Kind::Int, "^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", any),
            rule(
                Kind::Float,
                concat!(
                    "^(?:[-+]?(?:\\.[0-9]+|[0-9]+(?:\\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?",
                    "|[-+]?(?:\\.inf|\\.Inf|\\.INF)",
                    "|\\.nan|\\.NaN|\\.NAN)$"
                ),
                any,
            ),
        ],
    }
}

/// The readers, YAML 1.1 first; the last one is the core schema.
static READERS: LazyLock<[Reader; 4]> =
    LazyLock::new(|| [pyyaml(), ruamel_1_1(), ruamel_1_2(), core_1_2()]);

/// The first characters for which any reader resolves a scalar to something other than a
/// string; a scalar starting with any other character is a string to every reader.
const SPECIAL_FIRST: &str = "yYnNtTfFoO-+0123456789.~<=";

impl Reader {
    /// What this reader gets from a plain scalar with this text.
    pub fn read(&self, text: &str) -> Reading {
        let first = text.get(..text.chars().next().map_or(0, char::len_utf8));
        for r in &self.rules {
            if self.by_first_char && !first.is_some_and(|c| r.first.contains(&c)) {
                continue;
            }
            if r.re.is_match(text) {
                return self.construct(r.kind, text);
            }
        }
        Reading::Str
    }

    fn construct(&self, kind: Kind, text: &str) -> Reading {
        match kind {
            Kind::Null => Reading::Null,
            Kind::Bool => Reading::Bool(matches!(
                text.to_ascii_lowercase().as_str(),
                "yes" | "y" | "true" | "on"
            )),
            Kind::Int => match self.int(text) {
                Ok(n) => Reading::Int(Some(n)),
                Err(NotInt::Wide) => Reading::WideInt,
                Err(NotInt::Digits) => Reading::Int(None),
            },
            Kind::Float => Reading::Float(self.float(text)),
            Kind::Merge => Reading::Merge,
            Kind::Timestamp => Reading::Timestamp,
            Kind::ValueKey => Reading::ValueKey,
        }
    }

    /// `construct_yaml_int` of PyYAML and ruamel.yaml (the core schema's forms are a subset).
    fn int(&self, text: &str) -> Result<i128, NotInt> {
        let s = text.replace('_', "");
        let (negative, s) = split_sign(&s);
        let magnitude = if s == "0" {
            Ok(0)
        } else if let Some(b) = s.strip_prefix("0b") {
            radix(b, 2)
        } else if let Some(h) = s.strip_prefix("0x") {
            radix(h, 16)
        } else if let Some(o) = s.strip_prefix("0o") {
            radix(o, 8)
        } else if self.version == Version::V1_1 && s.starts_with('0') {
            radix(s, 8)
        } else if self.version == Version::V1_1 && s.contains(':') {
            s.split(':').try_fold(0i128, |acc, part| {
                let digit = radix(part, 10)?;
                acc.checked_mul(60)
                    .and_then(|a| a.checked_add(digit))
                    .ok_or(NotInt::Wide)
            })
        } else {
            radix(s, 10)
        };
        magnitude.map(|m| if negative { -m } else { m })
    }

    /// `construct_yaml_float` of PyYAML and ruamel.yaml.
    fn float(&self, text: &str) -> f64 {
        let s = text.replace('_', "").to_ascii_lowercase();
        let (negative, s) = split_sign(&s);
        let sign = if negative { -1.0 } else { 1.0 };
        if s == ".inf" {
            sign * f64::INFINITY
        } else if s == ".nan" {
            f64::NAN
        } else if self.version == Version::V1_1 && s.contains(':') {
            let mut value = 0.0;
            let mut base = 1.0;
            for part in s.rsplit(':') {
                value += part.parse::<f64>().unwrap_or(f64::NAN) * base;
                base *= 60.0;
            }
            sign * value
        } else {
            sign * s.parse::<f64>().unwrap_or(f64::NAN)
        }
    }
}

fn split_sign(s: &str) -> (bool, &str) {
    match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    }
}

/// Why an integer's text gives no `i128`.
enum NotInt {
    /// Not digits of the radix (Python's `int` fails).
    Digits,
    /// Beyond 128 bits.
    Wide,
}

/// Digits in a radix, as Python's `int(s, radix)` reads them after signs are taken off.
fn radix(digits: &str, radix: u32) -> Result<i128, NotInt> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(NotInt::Digits);
    }
    // The digits are valid, so the only failure left is overflow.
    i128::from_str_radix(digits, radix).map_err(|_| NotInt::Wide)
}

/// The shortest plain scalar any reader reads as an integer outside the 64-bit range has 19
/// characters: `0x10000000000000000` (2^64) and `-0x8000000000000001`; decimal needs 20 and
/// octal, binary and base 60 (at most 60 per two characters) more.
const SHORTEST_WIDE_INTEGER: usize = 19;

/// Whether some reader reads this plain scalar as an integer that does not fit in 64 bits;
/// the reader (the core schema's first) and its reading.
pub fn wide_integer(text: &str) -> Option<(&'static str, Reading)> {
    if text.len() < SHORTEST_WIDE_INTEGER || !text.starts_with(|c: char| "-+0123456789".contains(c))
    {
        return None;
    }
    READERS.iter().rev().find_map(|reader| {
        let reading = reader.read(text);
        reading.is_wide_integer().then_some((reader.name, reading))
    })
}

/// The reading of the commonest forms that every reader reads alike (a shortcut past the
/// tables, which give the same answer): the YAML 1.2 spellings of booleans and null, decimal
/// integers without a leading zero, and decimal fractions without an exponent.
fn common_form(text: &str) -> Option<Reading> {
    match text {
        "true" | "True" | "TRUE" => return Some(Reading::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Reading::Bool(false)),
        "null" | "Null" | "NULL" | "~" | "" => return Some(Reading::Null),
        _ => {}
    }
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (unsigned, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (whole.len() > 1 && whole.starts_with('0')) || whole.len() > 30 {
        return None;
    }
    match fraction {
        None => text.parse().ok().map(|n| Reading::Int(Some(n))),
        Some(f) if digits(f) => text.parse().ok().map(Reading::Float),
        Some(_) => None,
    }
}

/// The double-quoted YAML form of a string (JSON's escapes are YAML escapes).
pub fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| format!("{text:?}"))
}

/// Checks one plain scalar: every reader, and the service (its `service` reading, when known),
/// must read the same data. `None` when they do; else two readers that differ.
pub fn conflict(text: &str, service: Option<Reading>) -> Option<[(&'static str, Reading); 2]> {
    const SERVICE: &str = "this service";
    let core = &READERS[3];
    let starts_special = text
        .chars()
        .next()
        .is_none_or(|c| SPECIAL_FIRST.contains(c));
    if !starts_special {
        let service = service.filter(|s| *s != Reading::Str)?;
        return Some([(core.name, Reading::Str), (SERVICE, service)]);
    }
    if let Some(all) = common_form(text) {
        let service = service.filter(|s| *s != all)?;
        return Some([(core.name, all), (SERVICE, service)]);
    }
    let core_reading = core.read(text);
    for reader in &READERS[..3] {
        let r = reader.read(text);
        if r != core_reading {
            return Some([(reader.name, r), (core.name, core_reading)]);
        }
    }
    let service = service.filter(|s| *s != core_reading)?;
    Some([(core.name, core_reading), (SERVICE, service)])
}

#[cfg(test)]
mod tests {
    use super::Reading::*;
    use super::*;

    fn pyyaml_reads(text: &str) -> Reading {
        READERS[0].read(text)
    }
    fn core_reads(text: &str) -> Reading {
        READERS[3].read(text)
    }

    /// (scalar, PyYAML's reading, the core schema's reading, refused). PyYAML's readings are
    /// those `yaml.safe_load` gives (checked against PyYAML itself in tests/yaml_ambiguity.rs).
    const TABLE: &[(&str, Reading, Reading, bool)] = &[
        // Booleans: YAML 1.1 words, in their three spellings; y/n from the 1.1 types.
        ("yes", Bool(true), Str, true),
        ("Yes", Bool(true), Str, true),
        ("YES", Bool(true), Str, true),
        ("no", Bool(false), Str, true),
        ("NO", Bool(false), Str, true),
        ("on", Bool(true), Str, true),
        ("On", Bool(true), Str, true),
        ("off", Bool(false), Str, true),
        ("OFF", Bool(false), Str, true),
        ("y", Str, Str, true),
        ("N", Str, Str, true),
        ("true", Bool(true), Bool(true), false),
        ("True", Bool(true), Bool(true), false),
        ("FALSE", Bool(false), Bool(false), false),
        ("yEs", Str, Str, false),
        ("tRUE", Str, Str, false),
        // Null spellings: the same in both.
        ("null", Null, Null, false),
        ("Null", Null, Null, false),
        ("NULL", Null, Null, false),
        ("~", Null, Null, false),
        ("", Null, Null, false),
        ("nULL", Str, Str, false),
        // Integers.
        ("0", Int(Some(0)), Int(Some(0)), false),
        ("1", Int(Some(1)), Int(Some(1)), false),
        ("+1", Int(Some(1)), Int(Some(1)), false),
        ("-12", Int(Some(-12)), Int(Some(-12)), false),
        ("0x1F", Int(Some(31)), Int(Some(31)), false),
        ("-0x1F", Int(Some(-31)), Str, true),
        ("0x_1F", Int(Some(31)), Str, true),
        ("0o17", Str, Int(Some(15)), true),
        ("012", Int(Some(10)), Int(Some(12)), true),
        ("09", Str, Int(Some(9)), true),
        ("0b101", Int(Some(5)), Str, true),
        ("1_000", Int(Some(1000)), Str, true),
        // Base 60.
        ("1:30", Int(Some(90)), Str, true),
        ("12:30:00", Int(Some(45000)), Str, true),
        ("-1:30.5", Float(-90.5), Str, true),
        ("190:20:30", Int(Some(685_230)), Str, true),
        // Floats.
        ("1.5", Float(1.5), Float(1.5), false),
        (".5", Float(0.5), Float(0.5), false),
        ("1.", Float(1.0), Float(1.0), false),
        ("-0.0", Float(-0.0), Float(-0.0), false),
        ("1.5e+3", Float(1500.0), Float(1500.0), false),
        ("1.0E-3", Float(0.001), Float(0.001), false),
        ("1e3", Str, Float(1000.0), true),
        ("1.5e3", Str, Float(1500.0), true),
        ("+.5", Str, Float(0.5), true),
        ("1_0.5", Float(10.5), Str, true),
        (".inf", Float(f64::INFINITY), Float(f64::INFINITY), false),
        (
            "-.Inf",
            Float(f64::NEG_INFINITY),
            Float(f64::NEG_INFINITY),
            false,
        ),
        (".NaN", Float(f64::NAN), Float(f64::NAN), false),
        (".nAn", Str, Str, false),
        // Dates and timestamps.
        ("2001-12-14", Timestamp, Str, true),
        ("2001-12-14t21:59:43.10-05:00", Timestamp, Str, true),
        ("2001-12-14 21:59:43.10 -5", Timestamp, Str, true),
        ("2001-1-1", Str, Str, false),
        // Merge and value keys.
        ("<<", Merge, Str, true),
        ("=", ValueKey, Str, true),
        ("<", Str, Str, false),
        // Plain words.
        ("hello", Str, Str, false),
        ("1.2.3", Str, Str, false),
        ("0x", Str, Str, false),
        ("é", Str, Str, false),
    ];

    #[test]
    fn readings_and_refusals_follow_the_resolver_tables() {
        for &(text, py, core, refused) in TABLE {
            assert_eq!(pyyaml_reads(text), py, "PyYAML reading of {text:?}");
            assert_eq!(core_reads(text), core, "core schema reading of {text:?}");
            // The service reads as the core schema does here; its own deviations are below.
            let found = conflict(text, Some(core));
            assert_eq!(found.is_some(), refused, "{text:?}: {found:?}");
        }
    }

    #[test]
    fn the_shortcut_gives_what_every_table_gives() {
        let mut texts: Vec<String> = TABLE.iter().map(|(t, ..)| t.to_string()).collect();
        for stem in [
            "0",
            "1",
            "7",
            "10",
            "01",
            "123456789012345678901234567890",
            "",
        ] {
            for sign in ["", "-", "+"] {
                for tail in [
                    "", ".", ".0", ".5", ".50", "e3", ".5e3", ".5e+3", "_0", ":30",
                ] {
                    texts.push(format!("{sign}{stem}{tail}"));
                }
            }
        }
        for text in &texts {
            let Some(shortcut) = common_form(text) else {
                continue;
            };
            for reader in READERS.iter() {
                assert_eq!(reader.read(text), shortcut, "{} on {text:?}", reader.name);
            }
        }
        assert_eq!(common_form("12"), Some(Int(Some(12))));
        assert_eq!(common_form("-0.50"), Some(Float(-0.5)));
        assert_eq!(common_form("012"), None);
    }

    #[test]
    fn wide_integers_in_every_notation_and_the_64_bit_edges() {
        let two_64 = format!("0b1{}", "0".repeat(64));
        let wide = [
            "18446744073709551616",
            "-9223372036854775809",
            "0x10000000000000000",
            "-0x8000000000000001",
            "0o2000000000000000000000",
            "02000000000000000000000",
            "307445734561825860:16",
            "1_8446_7440_7370_9551_616",
            two_64.as_str(),
            // Beyond 128 bits.
            "0x52908400098527886E0F7030069857D2E4169EE7",
        ];
        for text in wide {
            assert!(wide_integer(text).is_some(), "{text}");
        }
        assert!(matches!(
            wide_integer("0x52908400098527886E0F7030069857D2E4169EE7"),
            Some(("the YAML 1.2 core schema", WideInt))
        ));
        for text in [
            "18446744073709551615",
            "-9223372036854775808",
            "0xFFFFFFFFFFFFFFFF",
            "-0x8000000000000000",
            "0o1777777777777777777777",
            "1.8446744073709552e19",
            "100000000000000000000.0",
            "2001-12-14 21:59:43.10",
            "12345678901234567890 apples",
        ] {
            assert_eq!(wide_integer(text), None, "{text}");
        }
    }

    #[test]
    fn the_service_must_read_as_the_core_schema() {
        // `07` reads as 7 in YAML 1.1 and 1.2; a service reading 7.0 would change the data.
        assert_eq!(conflict("07", Some(Int(Some(7)))), None);
        let [_, (who, r)] = conflict("07", Some(Float(7.0))).unwrap();
        assert_eq!((who, r), ("this service", Float(7.0)));
        // A word every reader reads as a string, which the service read as something else.
        assert!(conflict("hello", Some(Bool(true))).is_some());
        // Unknown service reading: only the readers are compared.
        assert_eq!(conflict("hello", None), None);
    }
}

//! Text for new or changed nodes: scalars in a given quoting style, flow collections, and block
//! entries and items in the house style (the same emitter as whole documents).
use super::super::readers::{conflict, Reading};
use granit_parser::ScalarStyle;
use serde_json::{Map, Value};

/// The serializer settings of every emission: sequences indented under their key.
pub fn options() -> serde_saphyr::SerializerOptions {
    let mut opts = serde_saphyr::SerializerOptions::default();
    opts.compact_list_indent = false;
    opts
}

/// A value emitted as block YAML in the house style.
fn emitted<T: serde::Serialize>(value: &T) -> Option<String> {
    serde_saphyr::to_string_with_options(value, options()).ok()
}

/// Prefixes each non-empty line of `block` with `col` spaces.
fn indented(block: &str, col: usize) -> String {
    let pad = " ".repeat(col);
    let mut out = String::with_capacity(block.len() + 8 * col);
    for line in block.split_inclusive('\n') {
        if line != "\n" {
            out.push_str(&pad);
        }
        out.push_str(line);
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// `key: value` as block lines at column `col`, ending in a line break.
pub fn entry(key: &str, value: &Value, col: usize) -> Option<String> {
    let mut one = Map::new();
    one.insert(key.to_owned(), value.clone());
    emitted(&one).map(|t| indented(&t, col))
}

/// `- value` as block lines at column `col`, ending in a line break.
pub fn item(value: &Value, col: usize) -> Option<String> {
    emitted(&std::slice::from_ref(value)).map(|t| indented(&t, col))
}

/// A scalar on one line as the emitter writes it, when it does.
fn scalar_line(value: &Value) -> Option<String> {
    let text = emitted(value)?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    (!text.contains('\n')).then(|| text.to_owned())
}

/// Whether `s` may be written as a plain scalar that every reader reads as this string.
fn plain_ok(s: &str) -> bool {
    scalar_line(&Value::String(s.to_owned())).is_some_and(|t| t == s)
        && conflict(s, Some(Reading::Str)).is_none()
}

/// Characters a quoted scalar must not hold as they are.
fn needs_escape(c: char) -> bool {
    (c < ' ' && c != '\t')
        || ('\u{7f}'..='\u{9f}').contains(&c)
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

/// `s` as a double-quoted scalar.
pub fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A changed scalar in block context, keeping `style` where it can hold the new value.
pub fn scalar(style: ScalarStyle, value: &Value) -> Option<String> {
    let Value::String(s) = value else {
        return match value {
            Value::Array(_) | Value::Object(_) => None,
            other => scalar_line(other),
        };
    };
    match style {
        ScalarStyle::Plain if plain_ok(s) => Some(s.clone()),
        ScalarStyle::Plain => scalar_line(value),
        ScalarStyle::SingleQuoted if !s.contains('\n') && !s.chars().any(needs_escape) => {
            Some(format!("'{}'", s.replace('\'', "''")))
        }
        ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => Some(double_quoted(s)),
        _ => None,
    }
}

/// A value as flow YAML on one line.
pub fn flow(value: &Value) -> Option<String> {
    let mut out = String::new();
    write_flow(value, &mut out)?;
    Some(out)
}

fn write_flow(value: &Value, out: &mut String) -> Option<()> {
    match value {
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&flow_string(k));
                out.push_str(": ");
                write_flow(v, out)?;
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_flow(v, out)?;
            }
            out.push(']');
        }
        Value::String(s) => out.push_str(&flow_string(s)),
        other => out.push_str(&scalar_line(other)?),
    }
    Some(())
}

/// A string in flow context: plain when that is safe there, else double-quoted.
fn flow_string(s: &str) -> String {
    const FLOW: &[char] = &[
        ',', '[', ']', '{', '}', '#', ':', '"', '\'', '&', '*', '!', '?',
    ];
    if !s.contains(FLOW) && plain_ok(s) {
        s.to_owned()
    } else {
        double_quoted(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scalars_keep_their_quoting_when_they_can() {
        use ScalarStyle::*;
        let cases = [
            (Plain, json!("eu-west-1"), "eu-west-1"),
            (Plain, json!("yes"), "\"yes\""),
            (Plain, json!("0x1F"), "\"0x1F\""),
            (Plain, json!(12), "12"),
            (Plain, json!(true), "true"),
            (Plain, json!(null), "null"),
            (SingleQuoted, json!("it's"), "'it''s'"),
            (SingleQuoted, json!("a\nb"), "\"a\\nb\""),
            (DoubleQuoted, json!("plain"), "\"plain\""),
            (
                DoubleQuoted,
                json!("tab\there \u{1}"),
                "\"tab\\there \\u0001\"",
            ),
            (DoubleQuoted, json!(1.5), "1.5"),
        ];
        for (style, value, text) in cases {
            assert_eq!(scalar(style, &value).as_deref(), Some(text), "{value}");
        }
    }

    #[test]
    fn flow_and_block_fragments() {
        let v = json!({"a": [1, "x, y", "on"], "b": {}});
        assert_eq!(flow(&v).unwrap(), "{a: [1, \"x, y\", \"on\"], b: {}}");
        assert_eq!(
            item(&json!({"id": "1", "r": ["x"]}), 2).unwrap(),
            "  - id: \"1\"\n    r:\n      - x\n"
        );
        assert_eq!(entry("k", &json!("v"), 4).unwrap(), "    k: v\n");
    }
}

//! Plain scalars that a YAML 1.1 or 1.2 reader reads as an integer beyond 64 bits (decimal,
//! hex, octal, binary or base 60), which the service cannot keep exactly, found by the walk.
use super::readers::{quoted, wide_integer, Reading};
use super::walk::{self, Role};
use super::Mapping;
use serde_json::Value;
use std::fmt;

/// A plain scalar read as an integer that does not fit in 64 bits.
#[derive(Debug, Clone, PartialEq)]
pub struct WideInteger {
    /// The JSON pointer of the scalar (of the key's entry, for a key) in the document.
    pub pointer: String,
    /// The scalar's text.
    pub text: String,
    pub role: Role,
    /// A reader that reads it as such an integer, and its reading.
    pub reading: (&'static str, Reading),
}

impl fmt::Display for WideInteger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.role {
            Role::Key => "the key",
            Role::Value => "the value",
        };
        let (reader, reading) = &self.reading;
        write!(
            f,
            "{what} {} is read as {} by {reader}, which does not fit in 64 bits; integers \
             from -2^63 to 2^64-1 are kept, for a string quote it: {}",
            self.text,
            reading.describe(&self.text),
            quoted(&self.text)
        )
    }
}

/// Finds the first plain scalar of a document (parsed by the service into `map`) that a reader
/// reads as an integer beyond 64 bits.
pub fn find(text: &str, map: &Mapping) -> Option<WideInteger> {
    walk::first(text, map, |p| {
        wide_integer(p.text).map(|reading| (p.text.to_owned(), p.role, reading))
    })
    .map(|(pointer, (text, role, reading))| WideInteger {
        pointer,
        text,
        role,
        reading,
    })
}

/// Whether `map` may hold such a scalar, judged on the parsed values alone (so that the walk,
/// a second parse, runs only then): the service reads a wide decimal integer as a whole float
/// beyond 64 bits, and wide hex, octal, binary or base-60 ones as strings (or keys) that look
/// like one.
pub fn may_hold_one(map: &Mapping) -> bool {
    let mut stack: Vec<&Value> = Vec::new();
    for (k, v) in map {
        if wide_integer(k).is_some() {
            return true;
        }
        stack.push(v);
    }
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_none() => {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && (f <= i64::MIN as f64 || f >= u64::MAX as f64) {
                    return true;
                }
            }
            Value::String(s) if wide_integer(s).is_some() => return true,
            Value::Object(m) => {
                for (k, v) in m {
                    if wide_integer(k).is_some() {
                        return true;
                    }
                    stack.push(v);
                }
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    false
}

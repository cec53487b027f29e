//! Plain scalars that YAML 1.1 and YAML 1.2 readers (or this service) read as different data:
//! a walk over the parser's events that finds them and names them by JSON pointer. Quoted,
//! block and tagged scalars are never resolved implicitly, so only plain untagged ones count.
use super::readers::{conflict, quoted, Reading};
use super::Mapping;
use granit_parser::{Event, Parser, ScalarStyle};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// Where a plain scalar is: a mapping key or a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Key,
    Value,
}

/// A plain scalar that readers read differently, with what two of them read.
#[derive(Debug, Clone, PartialEq)]
pub struct Ambiguity {
    /// The JSON pointer of the scalar (of the key's entry, for a key) in the document.
    pub pointer: String,
    /// The scalar's text.
    pub text: String,
    pub role: Role,
    /// One reader and its reading, and another reader that reads differently.
    pub readings: [(&'static str, Reading); 2],
}

impl fmt::Display for Ambiguity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.role {
            Role::Key => "the key",
            Role::Value => "the value",
        };
        let [(a, ra), (b, rb)] = &self.readings;
        write!(
            f,
            "{what} {} is read as {} by {a} and as {} by {b}; quote it: {}",
            self.text,
            ra.describe(&self.text),
            rb.describe(&self.text),
            quoted(&self.text)
        )
    }
}

/// Finds the first ambiguous plain scalar of a document that the service parsed into `map`.
pub fn find(text: &str, map: &Mapping) -> Option<Ambiguity> {
    let mut walk = Walk {
        root: map,
        stack: Vec::new(),
        anchors: HashMap::new(),
    };
    for event in Parser::new_from_str(text) {
        // The service's parser accepted the text; a parser that disagrees has nothing to add.
        let (event, _span) = event.ok()?;
        if let Some(found) = walk.event(event) {
            return Some(found);
        }
    }
    None
}

/// A collection being walked, with the service's value for it and where the walk is in it.
enum Frame<'v, 't> {
    Map {
        value: Option<&'v Mapping>,
        /// The last key read: the node being walked is this key or its value.
        key: Option<Cow<'t, str>>,
        /// Whether the next node is a value (of `key`).
        value_next: bool,
    },
    Seq {
        value: Option<&'v Vec<Value>>,
        /// How many items have started; the node being walked is item `started - 1`.
        started: usize,
    },
}

/// Where the next node goes.
enum Place<'v> {
    /// The top of the document; the service read a scalar there as an empty mapping.
    Root,
    Key,
    Value(Option<&'v Value>),
}

struct Walk<'v, 't> {
    root: &'v Mapping,
    stack: Vec<Frame<'v, 't>>,
    /// Anchored scalars' texts, for aliases used as keys.
    anchors: HashMap<usize, Cow<'t, str>>,
}

impl<'v, 't> Walk<'v, 't> {
    fn event(&mut self, event: Event<'t>) -> Option<Ambiguity> {
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 {
                    self.anchors.insert(anchor, text.clone());
                }
                let plain = style == ScalarStyle::Plain && tag.is_none();
                let (role, service) = match self.place() {
                    Place::Root => (Role::Value, Some(Reading::Null)),
                    Place::Key => {
                        self.set_key(text.clone());
                        (Role::Key, Some(Reading::Str))
                    }
                    Place::Value(service) => (Role::Value, service.map(Reading::of_value)),
                };
                if !plain {
                    return None;
                }
                conflict(&text, service).map(|readings| Ambiguity {
                    pointer: self.pointer(),
                    text: text.into_owned(),
                    role,
                    readings,
                })
            }
            Event::Alias(id) => {
                if let Place::Key = self.place() {
                    let key = self.anchors.get(&id).cloned().unwrap_or_default();
                    self.set_key(key);
                }
                None
            }
            Event::MappingStart(..) => {
                let value = match self.place() {
                    Place::Root => Some(self.root),
                    Place::Value(v) => v.and_then(Value::as_object),
                    // A collection as a key: the service refuses such documents before this walk.
                    Place::Key => {
                        self.set_key(Cow::Borrowed(""));
                        None
                    }
                };
                self.stack.push(Frame::Map {
                    value,
                    key: None,
                    value_next: false,
                });
                None
            }
            Event::SequenceStart(..) => {
                let value = match self.place() {
                    Place::Root => None,
                    Place::Value(v) => v.and_then(Value::as_array),
                    Place::Key => {
                        self.set_key(Cow::Borrowed(""));
                        None
                    }
                };
                self.stack.push(Frame::Seq { value, started: 0 });
                None
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                None
            }
            _ => None,
        }
    }

    /// The place of the next node; moves the walk onto it.
    fn place(&mut self) -> Place<'v> {
        match self.stack.last_mut() {
            None => Place::Root,
            Some(Frame::Map {
                value,
                key,
                value_next,
            }) => {
                if std::mem::take(value_next) {
                    let k = key.as_deref().unwrap_or_default();
                    Place::Value(value.and_then(|m| m.get(k)))
                } else {
                    Place::Key
                }
            }
            Some(Frame::Seq { value, started }) => {
                *started += 1;
                Place::Value(value.and_then(|a| a.get(*started - 1)))
            }
        }
    }

    /// Records the key just read; its value comes next.
    fn set_key(&mut self, k: Cow<'t, str>) {
        if let Some(Frame::Map {
            key, value_next, ..
        }) = self.stack.last_mut()
        {
            *key = Some(k);
            *value_next = true;
        }
    }

    /// The JSON pointer of the node being walked (of its entry, for a key).
    fn pointer(&self) -> String {
        let mut out = String::new();
        for frame in &self.stack {
            out.push('/');
            match frame {
                Frame::Map { key, .. } => out.push_str(&escape(key.as_deref().unwrap_or_default())),
                Frame::Seq { started, .. } => out.push_str(&started.saturating_sub(1).to_string()),
            }
        }
        out
    }
}

/// Escapes a key for a JSON pointer (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Option<Ambiguity> {
        let map = crate::domain::yaml::parse_mapping(text).unwrap();
        find(text, &map)
    }

    #[test]
    fn pointers_name_the_scalar_and_the_message_the_quoted_form() {
        let cases = [
            ("enabled: yes\n", "/enabled", Role::Value, "yes"),
            (
                "a:\n  - b: [1, {c: x, e: [x, 1e3]}]\n",
                "/a/0/b/1/e/1",
                Role::Value,
                "1e3",
            ),
            ("a/b:\n  m~n: 12:30\n", "/a~1b/m~0n", Role::Value, "12:30"),
            ("a:\n  on: 1\n", "/a/on", Role::Key, "on"),
            ("<<: {a: 1}\n", "/<<", Role::Key, "<<"),
            (
                "x: &v ok\n*v : 2001-12-14\n",
                "/ok",
                Role::Value,
                "2001-12-14",
            ),
            ("k: plain\n  folded 0b1\nm: 0b1\n", "/m", Role::Value, "0b1"),
            (
                "k: 2001-12-14\n  21:59:43Z\n",
                "/k",
                Role::Value,
                "2001-12-14 21:59:43Z",
            ),
        ];
        for (text, pointer, role, scalar) in cases {
            let f = found(text).unwrap_or_else(|| panic!("{text:?} was not refused"));
            assert_eq!(
                (f.pointer.as_str(), f.role, f.text.as_str()),
                (pointer, role, scalar)
            );
            let message = f.to_string();
            assert!(
                message.ends_with(&format!("quote it: {}", quoted(scalar))),
                "{message}"
            );
        }
        let f = found("t: 12:30:00\n").unwrap();
        assert_eq!(
            f.to_string(),
            "the value 12:30:00 is read as the integer 45000 by YAML 1.1 (PyYAML) and as the \
             string \"12:30:00\" by the YAML 1.2 core schema; quote it: \"12:30:00\""
        );
    }

    #[test]
    fn quoted_tagged_and_block_scalars_are_not_resolved() {
        for text in [
            "a: 'yes'\nb: \"1e3\"\nc: !!str 0b1\nd: |\n  on\ne: >\n  2001-12-14\n",
            "'on': 1\n\"<<\": 2\n",
            "# yes: 1e3\nk: v # on\n",
            "",
            "a: [true, 1, 1.5, null, ~, hello, 0x1F, -12, 1.5e+3]\n",
        ] {
            assert_eq!(found(text), None, "{text:?}");
        }
    }
}

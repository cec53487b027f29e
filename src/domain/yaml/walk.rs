//! The walk over a document's parser events that meets each plain untagged scalar with the
//! service's reading of it and names it by JSON pointer (quoted, block and tagged scalars are
//! never resolved implicitly, so only plain ones are met).
use super::readers::Reading;
use super::Mapping;
use granit_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;

/// Where a plain scalar is: a mapping key or a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Key,
    Value,
}

/// A plain untagged scalar met by the walk.
pub struct Plain<'a> {
    pub text: &'a str,
    pub role: Role,
    /// What the service read there, when known (a key is always a string).
    pub service: Option<Reading>,
}

/// Walks the plain scalars of `text`, which the service parsed into `map`, in document order;
/// the first for which `check` finds something, with the JSON pointer of the scalar (of the
/// key's entry, for a key).
pub fn first<T>(
    text: &str,
    map: &Mapping,
    check: impl FnMut(&Plain<'_>) -> Option<T>,
) -> Option<(String, T)> {
    first_observed(text, map, check, |_, _| {})
}

/// [`first`], showing `observe` each parser event with its span before the walk takes it
/// (the splice builds an edited text's tree from them).
pub fn first_observed<T>(
    text: &str,
    map: &Mapping,
    mut check: impl FnMut(&Plain<'_>) -> Option<T>,
    mut observe: impl FnMut(&Event<'_>, &Span),
) -> Option<(String, T)> {
    let mut walk = Walk {
        root: map,
        stack: Vec::new(),
        anchors: HashMap::new(),
    };
    for event in Parser::new_from_str(text) {
        // The service's parser accepted the text; a parser that disagrees has nothing to add.
        let (event, span) = event.ok()?;
        observe(&event, &span);
        if let Some(found) = walk.event(event, &mut check) {
            return Some((walk.pointer(), found));
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
    fn event<T>(
        &mut self,
        event: Event<'t>,
        check: &mut impl FnMut(&Plain<'_>) -> Option<T>,
    ) -> Option<T> {
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
                check(&Plain {
                    text: &text,
                    role,
                    service,
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

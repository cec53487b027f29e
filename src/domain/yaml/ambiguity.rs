//! Plain scalars that YAML 1.1 and YAML 1.2 readers (or this service) read as different data,
//! found by the plain-scalar walk and named by JSON pointer.
use super::readers::{conflict, quoted, Reading};
use super::walk::{self, Role};
use super::Mapping;
use std::fmt;

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
    walk::first(text, map, |p| {
        conflict(p.text, p.service).map(|readings| (p.text.to_owned(), p.role, readings))
    })
    .map(|(pointer, (text, role, readings))| Ambiguity {
        pointer,
        text,
        role,
        readings,
    })
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

//! `CommitMessage`: a caller's `"message"`, cleaned to one line of 1-200 characters (a line break becomes a space), used as the commit subject.
use super::ContentError;
use serde_json::Value;

/// The most characters a message keeps.
pub const MAX_CHARS: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitMessage(String);

impl CommitMessage {
    /// The optional `message` field of a write's body (`null` is absent). Each run of line
    /// breaks and tabs (the Unicode line and paragraph separators too) becomes one space,
    /// other control characters and the bidirectional controls are removed, and the ends
    /// trimmed; then it must hold 1-200 characters (422, at `pointer`).
    pub fn from_field(value: Option<&Value>, pointer: &str) -> Result<Option<Self>, ContentError> {
        let text = match value {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => s,
            Some(_) => return Err(ContentError::new(pointer, "must be a string")),
        };
        // The lines, each without the spaces beside its breaks, joined by one space.
        let cleaned = text
            .split(is_break)
            .map(|line| line.trim_matches(' '))
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let cleaned: String = cleaned.chars().filter(|c| !is_removed(*c)).collect();
        let cleaned = cleaned.trim();
        let count = cleaned.chars().count();
        if count == 0 {
            return Err(ContentError::new(
                pointer,
                "is empty once control characters are removed",
            ));
        }
        if count > MAX_CHARS {
            return Err(ContentError::new(
                pointer,
                format!("has {count} characters; at most {MAX_CHARS} are allowed"),
            ));
        }
        Ok(Some(Self(cleaned.to_owned())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// Line breaks and tabs: they separate words, so they become a space.
fn is_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\t' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// The first character of a commit message written elsewhere (a push) that an API write
/// would have removed: a control character other than a line break or tab, or a
/// bidirectional control. A pushed message may not carry one: history, events and the
/// console would show it as sent.
pub fn hidden(message: &str) -> Option<char> {
    message
        .chars()
        .find(|c| !matches!(c, '\n' | '\r' | '\t') && is_removed(*c))
}

pub(super) fn is_removed(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_cleaned_then_bounded() {
        let ok = |v: Value| {
            CommitMessage::from_field(Some(&v), "/message")
                .unwrap()
                .map(|m| m.into_string())
        };
        let bad = |v: Value| CommitMessage::from_field(Some(&v), "/message").unwrap_err();
        assert_eq!(ok(json!(null)), None);
        assert_eq!(
            ok(json!("Add the prod account")).as_deref(),
            Some("Add the prod account")
        );
        assert_eq!(ok(json!("a\nb\r\tc\u{7}")).as_deref(), Some("a b c"));
        assert_eq!(ok(json!("two\nlines")).as_deref(), Some("two lines"));
        assert_eq!(
            ok(json!("crlf\r\nend\u{2028}x")).as_deref(),
            Some("crlf end x")
        );
        assert_eq!(
            ok(json!("\nlead and trail\n")).as_deref(),
            Some("lead and trail")
        );
        assert_eq!(ok(json!(" \u{202e}x ")).as_deref(), Some("x"));
        assert_eq!(
            ok(json!("é".repeat(200))).map(|s| s.chars().count()),
            Some(200)
        );
        assert_eq!(bad(json!("é".repeat(201))).pointer, "/message");
        assert_eq!(bad(json!("\n\u{1}")).pointer, "/message");
        assert_eq!(bad(json!("   ")).pointer, "/message");
        assert_eq!(bad(json!(3)).pointer, "/message");
    }

    #[test]
    fn a_pushed_message_may_not_hide_what_it_says() {
        assert_eq!(hidden("Subject\r\n\n\tbody\n"), None);
        assert_eq!(hidden("naïve — ok ✓\n"), None);
        assert_eq!(hidden("subj \u{1b}[2J"), Some('\u{1b}'));
        assert_eq!(hidden("gnp.exe \u{202e}"), Some('\u{202e}'));
        assert_eq!(hidden("a\u{0}b"), Some('\u{0}'));
        assert_eq!(hidden("\u{feff}bom"), Some('\u{feff}'));
    }
}

//! `IntegrationDoc`: an integration file that is a YAML mapping, with its exact stored text.
use super::yaml::{self, Mapping};
use super::{ContentError, Stored};
use serde_json::Value;

/// A valid integration file: the parsed mapping and the YAML text that is stored. For
/// content sent as JSON the text is its emission, which storage verifies before it stores it
/// (or edits the stored text instead).
#[derive(Debug, Clone, PartialEq)]
pub struct IntegrationDoc {
    content: Mapping,
    raw: String,
}

impl IntegrationDoc {
    /// From the `content` field of a PUT: a JSON object (emitted as YAML, key order kept) or
    /// a string of YAML text whose top level is a mapping (stored byte for byte).
    pub fn from_request(content: Value) -> Result<Self, ContentError> {
        const AT: &str = "/content";
        match content {
            Value::Object(map) => {
                // Verified by storage before it is stored (`Change::content`): a write whose text
                // is edited never stores this emission, and its check would cost a parse.
                let raw = yaml::emit_unverified(&map)
                    .map_err(|e| ContentError::new(AT, e.to_string()))?;
                Ok(Self { content: map, raw })
            }
            Value::String(text) => {
                let content = yaml::parse_client_text(&text).map_err(|e| match e.located() {
                    // The pointer of the scalar within `content`, then what to write instead.
                    Some((pointer, message)) => {
                        ContentError::new(format!("{AT}{pointer}"), message)
                    }
                    None => ContentError::new(AT, e.to_string()),
                })?;
                Ok(Self { content, raw: text })
            }
            other => Err(ContentError::new(
                AT,
                format!(
                    "must be a mapping (JSON object) or YAML text, found {}",
                    yaml::kind(&other)
                ),
            )),
        }
    }

    /// From the bytes stored in the repository.
    pub fn from_stored(bytes: &[u8]) -> Stored<Self> {
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(_) => return invalid("the file is not UTF-8 text".into()),
        };
        match yaml::parse_mapping(text) {
            Ok(content) => Stored::Valid(Self {
                content,
                raw: text.to_owned(),
            }),
            Err(e) => invalid(e.to_string()),
        }
    }

    /// This content with the text storage holds for it: a JSON `content` edits the stored
    /// text, which storage checked to read back as exactly this content. Bytes that are not
    /// such text (never the case) leave the emitted text.
    pub fn stored_as(mut self, bytes: &[u8]) -> Self {
        if let Ok(text) = std::str::from_utf8(bytes) {
            if text != self.raw {
                self.raw = text.to_owned();
            }
        }
        self
    }

    pub fn content(&self) -> &Mapping {
        &self.content
    }

    pub fn raw(&self) -> &str {
        &self.raw
    }

    pub fn into_parts(self) -> (Mapping, String) {
        (self.content, self.raw)
    }
}

fn invalid(error: String) -> Stored<IntegrationDoc> {
    Stored::Invalid {
        content: Mapping::new(),
        errors: vec![error],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn object_content_is_stored_as_yaml_in_key_order() {
        let doc = IntegrationDoc::from_request(json!({"aws": [{"account_id": "0123", "regions": ["us-east-1"], "type": "aws"}], "drata": {"user_email": "a@b.c", "workspace": "w"}})).unwrap();
        assert!(doc.raw().starts_with("aws:\n"));
        assert!(doc.raw().contains("account_id: \"0123\""), "{}", doc.raw());
        assert_eq!(yaml::parse_mapping(doc.raw()).unwrap(), *doc.content());
    }

    #[test]
    fn yaml_text_is_kept_byte_for_byte() {
        let text = "# our accounts\naws:\n  - account_id: '1'   # prod\n";
        let doc = IntegrationDoc::from_request(json!(text)).unwrap();
        assert_eq!(doc.raw(), text);
        assert_eq!(
            Value::Object(doc.content().clone()),
            json!({"aws": [{"account_id": "1"}]})
        );
    }

    #[test]
    fn refuses_content_that_is_not_a_mapping() {
        for bad in [
            json!([1]),
            json!(3),
            json!(null),
            json!(true),
            json!("- a\n"),
            json!("a: ["),
        ] {
            let err = IntegrationDoc::from_request(bad.clone()).unwrap_err();
            assert_eq!(err.pointer, "/content", "{bad}");
        }
    }

    #[test]
    fn stored_files() {
        assert!(
            matches!(IntegrationDoc::from_stored(b""), Stored::Valid(d) if d.content().is_empty())
        );
        assert!(matches!(
            IntegrationDoc::from_stored(b"a: 1\n"),
            Stored::Valid(_)
        ));
        for broken in [&b"- a\n"[..], b"a: [", b"\xff\xfe"] {
            match IntegrationDoc::from_stored(broken) {
                Stored::Invalid { content, errors } => {
                    assert!(content.is_empty());
                    assert_eq!(errors.len(), 1);
                }
                Stored::Valid(_) => panic!("{broken:?} read as valid"),
            }
        }
    }
}

//! `ConfigurationDoc`: a configuration file whose `folders` has the documented shape.
use super::yaml::{self, Mapping};
use super::{ContentError, Stored};
use serde_json::Value;

/// A valid configuration file: `folders`, where present, is a list of
/// `{path: non-empty string, exclude?: [string]}`; other keys are kept as they are. For a
/// payload sent as JSON the text is its emission, which storage verifies before it stores it
/// (or edits the stored text instead).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigurationDoc {
    content: Mapping,
    raw: String,
}

impl ConfigurationDoc {
    /// From the `payload` field of a PUT: a mapping (JSON object), emitted as YAML, or YAML
    /// text, stored byte for byte (its comments too). Errors point into the request body.
    pub fn from_request(payload: Value) -> Result<Self, ContentError> {
        const AT: &str = "/payload";
        let (map, raw) = match payload {
            Value::Object(map) => {
                check_shape(&map, AT)?;
                // Verified by storage before it is stored (`Change::content`): a write whose text
                // is edited never stores this emission, and its check would cost a parse.
                let raw = yaml::emit_unverified(&map)
                    .map_err(|e| ContentError::new(AT, e.to_string()))?;
                (map, raw)
            }
            Value::String(text) => {
                let map = yaml::parse_client_text(&text).map_err(|e| match e.located() {
                    Some((pointer, message)) => {
                        ContentError::new(format!("{AT}{pointer}"), message)
                    }
                    None => ContentError::new(AT, e.to_string()),
                })?;
                check_shape(&map, AT)?;
                (map, text)
            }
            other => {
                return Err(ContentError::new(
                    AT,
                    format!(
                        "must be a mapping (JSON object) or YAML text, found {}",
                        yaml::kind(&other)
                    ),
                ))
            }
        };
        Ok(Self { content: map, raw })
    }

    /// From the bytes stored in the repository.
    pub fn from_stored(bytes: &[u8]) -> Stored<Self> {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Stored::Invalid {
                content: Mapping::new(),
                errors: vec!["the file is not UTF-8 text".into()],
            };
        };
        let map = match yaml::parse_mapping(text) {
            Ok(map) => map,
            Err(e) => {
                return Stored::Invalid {
                    content: Mapping::new(),
                    errors: vec![e.to_string()],
                }
            }
        };
        match check_shape(&map, "") {
            Ok(()) => Stored::Valid(Self {
                content: map,
                raw: text.to_owned(),
            }),
            Err(e) => Stored::Invalid {
                content: map,
                errors: vec![e.to_string()],
            },
        }
    }

    pub fn content(&self) -> &Mapping {
        &self.content
    }

    pub fn raw(&self) -> &str {
        &self.raw
    }

    pub fn into_content(self) -> Mapping {
        self.content
    }
}

fn check_shape(map: &Mapping, at: &str) -> Result<(), ContentError> {
    let Some(folders) = map.get("folders") else {
        return Ok(());
    };
    let at = format!("{at}/folders");
    let Value::Array(folders) = folders else {
        return Err(ContentError::new(
            at,
            format!("must be a list, found {}", yaml::kind(folders)),
        ));
    };
    for (i, folder) in folders.iter().enumerate() {
        let at = format!("{at}/{i}");
        let Value::Object(folder) = folder else {
            return Err(ContentError::new(
                at,
                format!("must be a mapping, found {}", yaml::kind(folder)),
            ));
        };
        match folder.get("path") {
            Some(Value::String(p)) if !p.is_empty() => {}
            Some(Value::String(_)) => {
                return Err(ContentError::new(format!("{at}/path"), "must not be empty"))
            }
            Some(other) => {
                return Err(ContentError::new(
                    format!("{at}/path"),
                    format!("must be a string, found {}", yaml::kind(other)),
                ))
            }
            None => return Err(ContentError::new(format!("{at}/path"), "is required")),
        }
        match folder.get("exclude") {
            None => {}
            Some(Value::Array(patterns)) => {
                if let Some((j, p)) = patterns.iter().enumerate().find(|(_, p)| !p.is_string()) {
                    return Err(ContentError::new(
                        format!("{at}/exclude/{j}"),
                        format!("must be a string, found {}", yaml::kind(p)),
                    ));
                }
            }
            Some(other) => {
                return Err(ContentError::new(
                    format!("{at}/exclude"),
                    format!("must be a list, found {}", yaml::kind(other)),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_the_documented_shape_and_keeps_other_keys() {
        let payload =
            json!({"folders": [{"path": "src", "exclude": ["*.md"]}, {"path": "lib"}], "depth": 3});
        let doc = ConfigurationDoc::from_request(payload.clone()).unwrap();
        assert_eq!(Value::Object(doc.content().clone()), payload);
        assert_eq!(yaml::parse_mapping(doc.raw()).unwrap(), *doc.content());
        assert!(ConfigurationDoc::from_request(json!({})).is_ok());
    }

    #[test]
    fn points_at_the_first_bad_element() {
        let cases = [
            (json!([]), "/payload"),
            (json!("- a list, not a mapping"), "/payload"),
            (json!({"folders": {}}), "/payload/folders"),
            (json!({"folders": ["src"]}), "/payload/folders/0"),
            (
                json!({"folders": [{"path": "a"}, {"exclude": []}]}),
                "/payload/folders/1/path",
            ),
            (
                json!({"folders": [{"path": ""}]}),
                "/payload/folders/0/path",
            ),
            (json!({"folders": [{"path": 7}]}), "/payload/folders/0/path"),
            (
                json!({"folders": [{"path": "a", "exclude": "x"}]}),
                "/payload/folders/0/exclude",
            ),
            (
                json!({"folders": [{"path": "a", "exclude": ["x", 1]}]}),
                "/payload/folders/0/exclude/1",
            ),
        ];
        for (payload, pointer) in cases {
            let err = ConfigurationDoc::from_request(payload.clone()).unwrap_err();
            assert_eq!(err.pointer, pointer, "{payload}");
        }
    }

    #[test]
    fn stored_files() {
        assert!(matches!(
            ConfigurationDoc::from_stored(b"folders: []\n"),
            Stored::Valid(_)
        ));
        match ConfigurationDoc::from_stored(b"- a\n") {
            Stored::Invalid { content, .. } => assert!(content.is_empty()),
            _ => panic!("a list read as valid"),
        }
        match ConfigurationDoc::from_stored(b"folders: 3\nx: 1\n") {
            Stored::Invalid { content, errors } => {
                assert_eq!(Value::Object(content), json!({"folders": 3, "x": 1}));
                assert!(errors[0].starts_with("/folders"), "{errors:?}");
            }
            _ => panic!("bad folders read as valid"),
        }
    }
}

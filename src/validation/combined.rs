//! The combined schema of each file, for clients that validate before they send: the built-in shape and every schema of the folder in one 2020-12 document (the files embedded under `$defs` with their `$id`s).
use super::folder::Files;
use super::{UnknownIntegrations, BASE_URI};
use serde_json::{json, Map, Value};

/// Both documents, rendered once per schema set.
#[derive(Debug, Clone)]
pub struct Combined {
    integration: Vec<u8>,
    configuration: Vec<u8>,
}

impl Combined {
    pub fn new(files: &Files, id: &str, unknown: UnknownIntegrations) -> Self {
        let mut defs = Map::new();
        let mut kinds = Map::new();
        let mut configuration = None;
        for (file, schema) in files.iter() {
            let (uri, embedded) = embedded(file, schema);
            if let Some(kind) = file
                .strip_prefix("integrations/")
                .and_then(|f| f.strip_suffix(".json"))
                .filter(|k| !k.contains('/'))
            {
                kinds.insert(kind.to_owned(), json!({ "$ref": uri }));
            } else if file == "configuration.json" {
                configuration = Some(json!({ "$ref": uri }));
            }
            defs.insert(file.to_owned(), embedded);
        }
        let integration = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": format!("{BASE_URI}combined/integration-file.json"),
            "title": "planfiles integration file",
            "description": format!("Keys are integration kinds; each kind's value follows its schema. Schema set {id}."),
            "type": "object",
            "properties": kinds,
            "additionalProperties": unknown == UnknownIntegrations::Allow,
            "$defs": defs.clone(),
        });
        let shape = json!({
            "type": "object",
            "properties": {
                "folders": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["path"],
                        "properties": {
                            "path": {"type": "string", "minLength": 1},
                            "exclude": {"type": "array", "items": {"type": "string"}}
                        }
                    }
                }
            }
        });
        let mut all = vec![shape];
        all.extend(configuration);
        let configuration = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": format!("{BASE_URI}combined/configuration-file.json"),
            "title": "planfiles configuration file",
            "description": format!("The built-in shape of folders, and configuration.json. Schema set {id}."),
            "allOf": all,
            "$defs": defs,
        });
        Self {
            integration: serde_json::to_vec_pretty(&integration).expect("JSON values serialize"),
            configuration: serde_json::to_vec_pretty(&configuration)
                .expect("JSON values serialize"),
        }
    }

    pub fn integration(&self) -> &[u8] {
        &self.integration
    }

    pub fn configuration(&self) -> &[u8] {
        &self.configuration
    }
}

/// A file's schema as a resource of the combined document: with the `$id` it has where the
/// service compiles it (its own, resolved against its place in the folder, or its place), so
/// that its `$ref`s resolve to the same files.
fn embedded(file: &str, schema: &Value) -> (String, Value) {
    let place = format!("{BASE_URI}{file}");
    let mut schema = schema.clone();
    let Value::Object(map) = &mut schema else {
        // A boolean schema: referenced through a wrapper that carries the id.
        return (place.clone(), json!({ "$id": place, "allOf": [schema] }));
    };
    let uri = match map.get("$id").and_then(Value::as_str) {
        Some(own) if own.contains(':') => own.to_owned(),
        Some(own) => {
            let dir = place.rsplit_once('/').map_or("", |(d, _)| d);
            format!("{dir}/{}", own.trim_start_matches("./"))
        }
        None => place,
    };
    map.insert("$id".into(), Value::String(uri.clone()));
    (uri, schema)
}

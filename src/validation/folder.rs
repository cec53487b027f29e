//! The schemas folder read once: every `*.json` file under it (hidden entries skipped, links followed only inside it), and the `$ref` retriever that serves those files and nothing else.
use super::{SchemaError, UnknownIntegrations, BASE_URI};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// At most this many schema files, each at most [`MAX_FILE`] bytes.
const MAX_FILES: usize = 1000;
const MAX_FILE: u64 = 1024 * 1024;
/// Folders deeper than this are not read.
const MAX_DEPTH: usize = 8;

/// The folder's schema files, by path relative to it (`/`-separated), with their bytes.
#[derive(Debug, Clone, Default)]
pub struct Files {
    files: Arc<BTreeMap<String, (Vec<u8>, Value)>>,
}

impl Files {
    /// Every `*.json` file under `dir`; a folder that does not exist holds none.
    pub fn read(dir: &Path) -> Result<Self, SchemaError> {
        let read_err = |path: &Path, source| SchemaError::Read {
            path: path.to_owned(),
            source,
        };
        let root = match std::fs::canonicalize(dir) {
            Ok(root) => root,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(read_err(dir, e)),
        };
        let mut files = BTreeMap::new();
        let mut pending = vec![(root.clone(), String::new(), 0usize)];
        while let Some((folder, prefix, depth)) = pending.pop() {
            let entries = std::fs::read_dir(&folder).map_err(|e| read_err(&folder, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| read_err(&folder, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                // Hidden entries are skipped: Kubernetes mounts a ConfigMap as links into
                // `..data`, which would otherwise be read twice.
                if name.starts_with('.') {
                    continue;
                }
                let path = entry.path();
                let rel = format!("{prefix}{name}");
                // Links are followed, but only to what is inside the folder.
                let real = std::fs::canonicalize(&path).map_err(|e| read_err(&path, e))?;
                if !real.starts_with(&root) {
                    return Err(SchemaError::File {
                        file: rel,
                        message: "links outside the schemas folder".into(),
                    });
                }
                let meta = std::fs::metadata(&real).map_err(|e| read_err(&path, e))?;
                if meta.is_dir() {
                    if depth < MAX_DEPTH {
                        pending.push((real, format!("{rel}/"), depth + 1));
                    }
                    continue;
                }
                if !name.ends_with(".json") || !meta.is_file() {
                    continue;
                }
                if files.len() == MAX_FILES {
                    return Err(SchemaError::File {
                        file: rel,
                        message: format!("more than {MAX_FILES} schema files in the folder"),
                    });
                }
                if meta.len() > MAX_FILE {
                    return Err(SchemaError::File {
                        file: rel,
                        message: format!("larger than {MAX_FILE} bytes"),
                    });
                }
                let bytes = std::fs::read(&real).map_err(|e| read_err(&path, e))?;
                let value: Value =
                    serde_json::from_slice(&bytes).map_err(|e| SchemaError::File {
                        file: rel.clone(),
                        message: format!("not JSON: {e}"),
                    })?;
                files.insert(rel, (bytes, value));
            }
        }
        Ok(Self {
            files: Arc::new(files),
        })
    }

    #[cfg(test)]
    pub fn from_values(values: &[(&str, Value)]) -> Self {
        let files = values
            .iter()
            .map(|(name, v)| ((*name).to_owned(), (v.to_string().into_bytes(), v.clone())))
            .collect();
        Self {
            files: Arc::new(files),
        }
    }

    /// Each file's relative path and parsed schema, in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.files.iter().map(|(k, (_, v))| (k.as_str(), v))
    }

    /// The set's identity: SHA-256 over each path and its bytes, and the unknown setting.
    pub fn id(&self, unknown: UnknownIntegrations) -> String {
        let mut hash = Sha256::new();
        for (path, (bytes, _)) in self.files.iter() {
            hash.update((path.len() as u64).to_be_bytes());
            hash.update(path.as_bytes());
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        }
        hash.update(match unknown {
            UnknownIntegrations::Allow => b"allow".as_slice(),
            UnknownIntegrations::Refuse => b"refuse".as_slice(),
        });
        hash.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Each file's path and a short hash of its bytes, and the unknown setting: what two
    /// shards compare, so that a move can name the files that differ.
    pub fn digests(
        &self,
        unknown: UnknownIntegrations,
    ) -> std::collections::BTreeMap<String, String> {
        let mut out: std::collections::BTreeMap<String, String> = self
            .files
            .iter()
            .map(|(path, (bytes, _))| {
                let hash = Sha256::digest(bytes);
                (
                    path.clone(),
                    hash[..8].iter().map(|b| format!("{b:02x}")).collect(),
                )
            })
            .collect();
        out.insert(
            "validation.unknown_integrations".into(),
            match unknown {
                UnknownIntegrations::Allow => "allow".into(),
                UnknownIntegrations::Refuse => "refuse".into(),
            },
        );
        out
    }

    pub fn retriever(&self) -> Retriever {
        Retriever {
            files: self.files.clone(),
        }
    }
}

/// Serves `$ref`s to the folder's files (under [`BASE_URI`]) and refuses every other URI:
/// no network, no file outside the folder.
pub struct Retriever {
    files: Arc<BTreeMap<String, (Vec<u8>, Value)>>,
}

impl jsonschema::Retrieve for Retriever {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let text = uri.as_str();
        let text = text.split('#').next().unwrap_or(text);
        match text
            .strip_prefix(BASE_URI)
            .and_then(|rel| self.files.get(rel))
        {
            Some((_, value)) => Ok(value.clone()),
            None if text.starts_with(BASE_URI) => {
                Err(format!("{text}: no such file in the schemas folder").into())
            }
            None => Err(format!(
                "{text}: a $ref may only name a file inside the schemas folder (no URL, no path \
                 outside it)"
            )
            .into()),
        }
    }
}

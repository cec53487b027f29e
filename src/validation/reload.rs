//! `Validators`: the schema set in use, swapped whole when the folder is read again (SIGHUP); a set that does not compile leaves the last good one in place.
use super::{SchemaError, SchemaSet, UnknownIntegrations};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The schema set every request uses, and where it comes from. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Validators {
    current: Arc<RwLock<Arc<SchemaSet>>>,
    /// Counts the sets put in use: what a cached body was judged by, read without a lock.
    generation: Arc<AtomicU64>,
    dir: Option<PathBuf>,
    unknown: UnknownIntegrations,
    verdicts: super::verdicts::Verdicts,
}

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The folder's files are those already in use.
    Same,
    /// A new set is in use; its id.
    Changed(String),
}

impl Validators {
    /// The set in `dir` (none when `None`), compiled: an error stops the start.
    pub fn load(dir: Option<PathBuf>, unknown: UnknownIntegrations) -> Result<Self, SchemaError> {
        let set = SchemaSet::load(dir.as_deref(), unknown)?;
        Ok(Self {
            current: Arc::new(RwLock::new(Arc::new(set))),
            generation: Arc::default(),
            dir,
            unknown,
            verdicts: Default::default(),
        })
    }

    /// No schemas at all.
    pub fn none() -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(SchemaSet::empty()))),
            generation: Arc::default(),
            dir: None,
            unknown: UnknownIntegrations::Allow,
            verdicts: Default::default(),
        }
    }

    /// Why no schema is in use, when none is: the folder read (or none configured), for
    /// the start's warning and `/readyz`.
    pub fn none_loaded(&self) -> Option<String> {
        if self.current().count() > 0 {
            return None;
        }
        Some(match &self.dir {
            Some(dir) if !dir.is_dir() => format!(
                "no schemas loaded: {} does not exist; writes are checked against the YAML rules only",
                std::path::absolute(dir).unwrap_or_else(|_| dir.clone()).display()
            ),
            Some(dir) => format!(
                "no schemas loaded: {} has none; writes are checked against the YAML rules only",
                std::path::absolute(dir).unwrap_or_else(|_| dir.clone()).display()
            ),
            None => "no schemas configured (validation.schemas_dir is empty); writes are checked against the YAML rules only".into(),
        })
    }

    /// The set in use now; a request keeps the one it started with.
    pub fn current(&self) -> Arc<SchemaSet> {
        self.current.read().expect("not poisoned").clone()
    }

    /// The set in use now and its generation (which changes with each new set).
    pub fn current_with_generation(&self) -> (Arc<SchemaSet>, u64) {
        let set = self.current.read().expect("not poisoned");
        (set.clone(), self.generation.load(Ordering::Acquire))
    }

    /// The generation of the set in use: a body rendered under another is judged again.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the stored blob `blob` passes the set in use as `file`: `judge` runs once per
    /// file, blob and set, and its verdict (`Some`) is remembered; `None` (the blob could not
    /// be read) is not.
    pub fn passes(
        &self,
        file: crate::domain::PlanFile,
        blob: crate::domain::BlobId,
        judge: impl FnOnce(&SchemaSet) -> Option<bool>,
    ) -> Option<bool> {
        let (set, generation) = self.current_with_generation();
        if let Some(known) = self.verdicts.get(generation, file, blob) {
            return Some(known);
        }
        let valid = judge(&set)?;
        self.verdicts.put(generation, file, blob, valid);
        Some(valid)
    }

    /// The remembered verdict on `blob` as `file` by the set in use, if it was judged.
    pub fn known(
        &self,
        file: crate::domain::PlanFile,
        blob: crate::domain::BlobId,
    ) -> Option<bool> {
        self.verdicts.get(self.generation(), file, blob)
    }

    /// Reads and compiles the folder again (file I/O: not on an async worker). On an error
    /// the set in use stays, and the error is returned for the log and the metric.
    pub fn reload(&self) -> Result<Reloaded, SchemaError> {
        // A folder that is gone (deleted to be copied again, say) is an error here, not "no
        // schemas": every check would stop without a word.
        if let Some(dir) = self.dir.as_deref().filter(|d| !d.is_dir()) {
            return Err(SchemaError::Read {
                path: dir.to_owned(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the schemas folder is not there: the last good set stays in use",
                ),
            });
        }
        let set = SchemaSet::load(self.dir.as_deref(), self.unknown)?;
        let mut current = self.current.write().expect("not poisoned");
        if current.id() == set.id() {
            return Ok(Reloaded::Same);
        }
        let id = set.id().to_owned();
        *current = Arc::new(set);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(Reloaded::Changed(id))
    }
}

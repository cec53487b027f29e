//! `Verdicts`: whether a stored blob passes the schema set in use as one of the two files, remembered per (file, blob id, set generation) so that history pages judge each version once.
use crate::domain::{BlobId, PlanFile};
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// At most this many verdicts are kept; past it the map starts again.
const MAX_VERDICTS: usize = 100_000;

/// Shared by every worker; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Verdicts {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    generation: u64,
    /// Blob ids come from the repositories, not from clients.
    valid: HashMap<(PlanFile, BlobId), bool, RandomState>,
}

impl Verdicts {
    /// The verdict on `blob` as `file` under the set of `generation`, if known (the same
    /// bytes may be a valid configuration file and an invalid integration file).
    pub fn get(&self, generation: u64, file: PlanFile, blob: BlobId) -> Option<bool> {
        let inner = self.inner.lock().expect("not poisoned");
        (inner.generation == generation)
            .then(|| inner.valid.get(&(file, blob)).copied())
            .flatten()
    }

    pub fn put(&self, generation: u64, file: PlanFile, blob: BlobId, valid: bool) {
        let mut inner = self.inner.lock().expect("not poisoned");
        if generation < inner.generation {
            return; // judged by a set already replaced
        }
        if inner.generation != generation || inner.valid.len() >= MAX_VERDICTS {
            inner.valid.clear();
            inner.generation = generation;
        }
        inner.valid.insert((file, blob), valid);
    }
}

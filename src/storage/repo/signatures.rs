//! Signed commits in the store: who commits and with which key (`Committer`), and whether a commit's signature is one of the keys that count (`Signing`, cached per commit id).
use super::TenantRepo;
use crate::domain::Identity;
use crate::signing::{Keyring, Signer};
use crate::storage::HistoryEntry;
use git2::Oid;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The service's commits: their committer, and the key that signs them (none: unsigned).
#[derive(Debug, Clone)]
pub(in crate::storage) struct Committer {
    pub identity: Identity,
    pub signer: Option<Arc<Signer>>,
}

impl Committer {
    /// A commit object's text, signed when there is a key.
    pub(super) fn finish(&self, text: String) -> String {
        match &self.signer {
            Some(signer) => signer.sign_commit(&text),
            None => text,
        }
    }
}

/// The unit tests' committer: planfiles, signing with a fixed key.
#[cfg(test)]
pub(super) fn test_committer() -> Committer {
    Committer {
        identity: Identity::new("planfiles", "p@localhost", "localhost"),
        signer: Some(Arc::new(Signer::from_seed(&[1; 32], "p@localhost"))),
    }
}

/// The keys whose signatures count, and what was found for each commit read.
#[derive(Debug, Default)]
pub(in crate::storage) struct Signing {
    pub keyring: Keyring,
    verdicts: Verdicts,
}

impl Signing {
    pub(in crate::storage) fn new(keyring: Keyring) -> Self {
        Self {
            keyring,
            verdicts: Verdicts::default(),
        }
    }
}

/// Commits per generation of the verdict cache: two generations are kept (the older one is
/// dropped when the newer fills up), so at most 2 x this many verdicts (about 3 MiB).
const GENERATION: usize = 50_000;

/// A verdict per commit id. A commit's bytes never change, and the keys are fixed for the
/// process's life, so a verdict never goes stale.
#[derive(Debug, Default)]
struct Verdicts(Mutex<[HashMap<Oid, bool>; 2]>);

impl Verdicts {
    fn get(&self, id: Oid) -> Option<bool> {
        let maps = self.0.lock().unwrap_or_else(|p| p.into_inner());
        maps[0].get(&id).or_else(|| maps[1].get(&id)).copied()
    }

    fn put(&self, id: Oid, verdict: bool) {
        let mut maps = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if maps[0].len() >= GENERATION {
            maps[1] = std::mem::take(&mut maps[0]);
        }
        maps[0].insert(id, verdict);
    }
}

impl TenantRepo {
    /// Sets each entry's `verified` (see [`TenantRepo::verified`]).
    pub(in crate::storage) fn mark_verified(
        &self,
        entries: &mut [HistoryEntry],
        signing: &Signing,
    ) {
        for entry in entries {
            entry.verified = self.verified(super::to_oid(&entry.commit.0), signing);
        }
    }

    /// Whether `commit` carries a signature (`gpgsig`) by one of `signing`'s keys over its
    /// own bytes. A commit without one (plain git's), with another key's, or whose bytes
    /// changed after signing is `false`.
    pub(in crate::storage) fn verified(&self, commit: Oid, signing: &Signing) -> bool {
        if let Some(v) = signing.verdicts.get(commit) {
            return v;
        }
        // The object's bytes, split here as git splits them: libgit2's extract_signature
        // also takes a `gpgsig` line of the message, and stops at a NUL byte.
        let read = self.repo.odb().and_then(|odb| {
            let object = odb.read(commit)?;
            Ok((object.kind() == git2::ObjectType::Commit)
                .then(|| signing.keyring.verifies_object(object.data())))
        });
        let verdict = match read {
            Ok(verdict) => verdict.unwrap_or(false),
            // A read that failed is no verdict: not cached.
            Err(_) => return false,
        };
        signing.verdicts.put(commit, verdict);
        verdict
    }
}

//! `DirKey`: the data dir's secret, made once and shared by every process: it signs history cursors and keys idempotency fingerprints.
use crate::domain::{CommitId, Cursor, TenantId};
use crate::storage::StorageError;
use hmac::{Hmac, Mac};
use std::path::Path;

/// Read at start from `storage.cursor_key_file` (default `<data_dir>/cursor.key`), which the
/// first process to need it creates (all or nothing: written aside, synced, then linked into
/// place).
pub(in crate::storage) struct DirKey {
    key: [u8; 32],
}

impl std::fmt::Debug for DirKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirKey(..)")
    }
}

impl DirKey {
    pub(in crate::storage) fn load(file: &Path) -> Result<Self, StorageError> {
        let (text, _) = super::secret_text(file)?;
        let key = parse(text.as_bytes())
            .ok_or_else(|| StorageError::io("read the cursor key", file, bad_key()))?;
        Ok(Self { key })
    }

    /// The cursor that resumes `tenant`'s history at `commit`.
    pub(in crate::storage) fn mint(&self, tenant: &TenantId, commit: CommitId) -> Cursor {
        Cursor {
            commit,
            tag: tag(&self.key, tenant, commit),
        }
    }

    /// The cursor's commit when this data dir made the cursor for `tenant`.
    pub(in crate::storage) fn open(&self, tenant: &TenantId, cursor: &Cursor) -> Option<CommitId> {
        let expected = tag(&self.key, tenant, cursor.commit);
        // Compared in constant time: the tag is a MAC.
        let same = expected
            .iter()
            .zip(cursor.tag.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
        same.then_some(cursor.commit)
    }

    /// The fingerprint of a request (see [`crate::domain::idempotency::fingerprint`]).
    pub(in crate::storage) fn fingerprint(&self, target: &str, body: &[u8]) -> String {
        crate::domain::idempotency::fingerprint(&self.key, target, body)
    }
}

fn tag(key: &[u8; 32], tenant: &TenantId, commit: CommitId) -> [u8; 16] {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(tenant.as_str().as_bytes());
    mac.update(b"\0");
    mac.update(commit.to_string().as_bytes());
    let full = mac.finalize().into_bytes();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

fn bad_key() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "not 64 hex digits; remove it to make a new one (open history cursors stop working)",
    )
}

fn parse(bytes: &[u8]) -> Option<[u8; 32]> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    if text.len() != 64 {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_open_only_for_their_tenant_and_commit_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (acme, globex) = (
            TenantId::parse("acme").unwrap(),
            TenantId::parse("globex").unwrap(),
        );
        let commit = |c: &str| CommitId(crate::domain::ObjectId::parse(&c.repeat(40)).unwrap());
        let keys = DirKey::load(&dir.path().join("cursor.key")).unwrap();
        let cursor = keys.mint(&acme, commit("a"));
        assert_eq!(keys.open(&acme, &cursor), Some(commit("a")));
        assert_eq!(keys.open(&globex, &cursor), None, "another tenant");
        let forged = Cursor {
            commit: commit("b"),
            ..cursor.clone()
        };
        assert_eq!(keys.open(&acme, &forged), None, "another commit");
        // Another process on the same data dir reads the same key.
        let again = DirKey::load(&dir.path().join("cursor.key")).unwrap();
        assert_eq!(again.open(&acme, &cursor), Some(commit("a")));
        assert_eq!(
            again.fingerprint("PUT /x", b"{}"),
            keys.fingerprint("PUT /x", b"{}")
        );
    }
}

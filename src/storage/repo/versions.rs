//! Diffs between two versions of a file, and the lookup of idempotency keys in recent history.
use super::{git_err, to_id, TenantRepo, MAIN};
use crate::domain::{CommitId, PlanFile};
use crate::storage::versions::{FileDiff, IdempotentHit, IDEMPOTENCY_COMMITS, IDEMPOTENCY_WINDOW};
use crate::storage::StorageError;
use git2::{DiffOptions, Patch};

pub(in crate::storage) const KEY_TRAILER: &str = "Idempotency-Key: ";
pub(in crate::storage) const FINGERPRINT_TRAILER: &str = "Idempotency-Fingerprint: ";

impl TenantRepo<'_> {
    /// See [`crate::storage::Storage::diff`].
    pub(in crate::storage) fn diff(
        &self,
        file: PlanFile,
        from: CommitId,
        to: Option<CommitId>,
    ) -> Result<FileDiff, StorageError> {
        let path = file.path();
        let err = |op| git_err(self.tenant, op, path);
        let to = match to {
            Some(to) => to,
            None => CommitId(to_id(
                self.repo.refname_to_id(MAIN).map_err(err("resolve main"))?,
            )),
        };
        let from = self.read_at(file, from)?;
        let to = self.read_at(file, to)?;
        let text = if from.blob == to.blob {
            String::new()
        } else {
            let mut opts = DiffOptions::new();
            opts.context_lines(3);
            let name = std::path::Path::new(path);
            let mut patch = Patch::from_buffers(
                &from.bytes,
                Some(name),
                &to.bytes,
                Some(name),
                Some(&mut opts),
            )
            .map_err(err("diff"))?;
            let buf = patch.to_buf().map_err(err("print diff"))?;
            String::from_utf8_lossy(&buf).into_owned()
        };
        Ok(FileDiff { from, to, text })
    }

    /// See [`crate::storage::Storage::find_idempotent`]: walks `main`'s first-parent line
    /// from the head, at most [`IDEMPOTENCY_COMMITS`] commits and none committed more than
    /// [`IDEMPOTENCY_WINDOW`] ago.
    pub(in crate::storage) fn find_idempotent(
        &self,
        key: &str,
    ) -> Result<Option<IdempotentHit>, StorageError> {
        let err = |op| git_err(self.tenant, op, "");
        let head = self.repo.refname_to_id(MAIN).map_err(err("resolve main"))?;
        let oldest = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|now| now.saturating_sub(IDEMPOTENCY_WINDOW).as_secs() as i64)
            .unwrap_or(0);
        let mut at = head;
        for _ in 0..IDEMPOTENCY_COMMITS {
            let commit = self.repo.find_commit(at).map_err(err("read commit"))?;
            if commit.committer().when().seconds() < oldest {
                break;
            }
            if let Some(fingerprint) = recorded(commit.message_bytes(), key) {
                return Ok(Some(IdempotentHit {
                    commit: CommitId(to_id(at)),
                    fingerprint,
                }));
            }
            match commit.parent_id(0) {
                Ok(parent) => at = parent,
                Err(_) => break,
            }
        }
        Ok(None)
    }
}

/// The fingerprint recorded with `key` in the trailer block of a commit message, if that
/// message records `key`.
fn recorded(message: &[u8], key: &str) -> Option<String> {
    let text = std::str::from_utf8(message).ok()?;
    let trailers = text.trim_end().rsplit("\n\n").next()?;
    let mut lines = trailers.lines();
    lines.find(|l| l.strip_prefix(KEY_TRAILER) == Some(key))?;
    trailers
        .lines()
        .find_map(|l| l.strip_prefix(FINGERPRINT_TRAILER))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::recorded;

    #[test]
    fn a_key_is_read_from_the_trailer_block_only() {
        let msg = b"Idempotency-Key: k\n\nRequest-Id: r\nIdempotency-Key: k2\nIdempotency-Fingerprint: f\n";
        assert_eq!(recorded(msg, "k2").as_deref(), Some("f"));
        assert_eq!(recorded(msg, "k"), None, "the subject is not a trailer");
        assert_eq!(recorded(msg, "k2 "), None);
    }
}

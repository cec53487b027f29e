//! Diffs between two versions of a file, and the lookup of idempotency keys in recent history.
use super::{git_err, to_id, to_oid, TenantRepo, MAIN};
use crate::domain::{CommitId, PlanFile};
use crate::storage::recent_keys::{key_hash, RecentKeys, Scan, Seen};
use crate::storage::versions::{FileDiff, IdempotentHit, IDEMPOTENCY_COMMITS, IDEMPOTENCY_WINDOW};
use crate::storage::StorageError;
use git2::{DiffOptions, Patch};
use std::collections::VecDeque;

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

    /// See [`crate::storage::Storage::find_idempotent`]: the commits of `main`'s
    /// first-parent line from the head, at most [`IDEMPOTENCY_COMMITS`] and none committed
    /// more than [`IDEMPOTENCY_WINDOW`] ago. Only the commits added since the last lookup of
    /// this tenant (in `recent`) are read.
    pub(in crate::storage) fn find_idempotent(
        &self,
        key: &str,
        recent: &RecentKeys,
    ) -> Result<Option<IdempotentHit>, StorageError> {
        let err = |op| git_err(self.tenant, op, "");
        let head = self.repo.refname_to_id(MAIN).map_err(err("resolve main"))?;
        let oldest = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|now| now.saturating_sub(IDEMPOTENCY_WINDOW).as_secs() as i64)
            .unwrap_or(0);
        let mut prior = recent.take(self.tenant);
        let mut fresh = VecDeque::new();
        let mut joined = None;
        let mut at = head;
        while fresh.len() < IDEMPOTENCY_COMMITS {
            if prior.as_ref().is_some_and(|p| to_oid(&p.head) == at) {
                joined = prior.take().map(|p| p.commits);
                break;
            }
            let commit = self.repo.find_commit(at).map_err(err("read commit"))?;
            let time = commit.committer().when().seconds();
            fresh.push_back(Seen {
                commit: to_id(at),
                time,
                key: recorded_key(commit.message_bytes()).map(key_hash),
            });
            if time < oldest {
                break;
            }
            match commit.parent_id(0) {
                Ok(parent) => at = parent,
                Err(_) => break,
            }
        }
        if let Some(mut older) = joined {
            // The new commits go in front of the scan kept from the last lookup.
            while let Some(seen) = fresh.pop_back() {
                older.push_front(seen);
            }
            older.truncate(IDEMPOTENCY_COMMITS);
            fresh = older;
        }
        let wanted = key_hash(key);
        let mut hit = None;
        for seen in fresh.iter().take_while(|s| s.time >= oldest) {
            if seen.key != Some(wanted) {
                continue;
            }
            let commit = self
                .repo
                .find_commit(to_oid(&seen.commit))
                .map_err(err("read commit"))?;
            if let Some(fingerprint) = recorded(commit.message_bytes(), key) {
                hit = Some(IdempotentHit {
                    commit: CommitId(seen.commit),
                    fingerprint,
                });
                break;
            }
        }
        recent.put(
            self.tenant,
            Scan {
                head: to_id(head),
                commits: fresh,
            },
        );
        Ok(hit)
    }
}

/// The trailer block of a commit message: its last paragraph.
fn trailer_block(message: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(message).ok()?;
    text.trim_end().rsplit("\n\n").next()
}

/// The idempotency key a commit message records, if any.
fn recorded_key(message: &[u8]) -> Option<&str> {
    trailer_block(message)?
        .lines()
        .find_map(|l| l.strip_prefix(KEY_TRAILER))
}

/// The fingerprint recorded with `key` in the trailer block of a commit message, if that
/// message records `key`.
fn recorded(message: &[u8], key: &str) -> Option<String> {
    let trailers = trailer_block(message)?;
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

//! Idempotency keys: their lookup in the last commits of `main` and of the no-op records, and the durable record of a keyed write that changed nothing.
use super::objects::commit_text;
use super::refs::{RefLock, RefMove};
use super::signatures::Committer;
use super::staged::Staged;
use super::{git_err, signature, to_id, to_oid, TenantRepo, MAIN, NO_OPS};
use crate::domain::trailers::{self, Reserved};
use crate::domain::{CommitId, ObjectId};
use crate::storage::repo::recent_keys::{key_hash, Line, RecentKeys, Scan, Seen};
use crate::storage::{IdempotencyRecord, IdempotentHit, StorageError, IDEMPOTENCY_COMMITS};
use git2::{ErrorCode, ObjectType, Oid};
use std::collections::VecDeque;

impl TenantRepo {
    /// An earlier write with `key`: on `main`'s first-parent line (a write that made a
    /// commit), else among the records of writes that changed nothing. Each line is looked
    /// at for its last [`IDEMPOTENCY_COMMITS`] commits, whatever their dates; only the
    /// commits added since the last lookup of this tenant (kept in `recent`) are read.
    pub(in crate::storage) fn find_idempotent(
        &self,
        key: &str,
        recent: &RecentKeys,
    ) -> Result<Option<IdempotentHit>, StorageError> {
        if let Some(hit) = self.find_on_line(Line::Main, key, recent)? {
            return Ok(Some(hit));
        }
        self.find_on_line(Line::NoOps, key, recent)
    }

    fn find_on_line(
        &self,
        line: Line,
        key: &str,
        recent: &RecentKeys,
    ) -> Result<Option<IdempotentHit>, StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        let reference = match line {
            Line::Main => MAIN,
            Line::NoOps => NO_OPS,
        };
        let head = match self.repo.refname_to_id(reference) {
            Ok(head) => head,
            Err(e) if e.code() == ErrorCode::NotFound && line == Line::NoOps => return Ok(None),
            Err(e) => return Err(err("resolve a ref")(e)),
        };
        let mut prior = recent.take(&self.tenant, line);
        let mut fresh = VecDeque::new();
        let mut joined = None;
        let mut at = head;
        while fresh.len() < IDEMPOTENCY_COMMITS {
            if prior.as_ref().is_some_and(|p| to_oid(&p.head) == at) {
                joined = prior.take().map(|p| p.commits);
                break;
            }
            let commit = self.repo.find_commit(at).map_err(err("read commit"))?;
            fresh.push_back(Seen {
                commit: to_id(at),
                key: recorded_key(commit.message_bytes()).map(key_hash),
            });
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
        for seen in fresh.iter().filter(|s| s.key == Some(wanted)) {
            let commit = self
                .repo
                .find_commit(to_oid(&seen.commit))
                .map_err(err("read commit"))?;
            let Some(fingerprint) = recorded(commit.message_bytes(), key) else {
                continue;
            };
            let answered = match line {
                Line::Main => Some(CommitId(seen.commit)),
                Line::NoOps => replays(commit.message_bytes()),
            };
            if let Some(commit) = answered {
                hit = Some(IdempotentHit {
                    commit,
                    fingerprint,
                });
                break;
            }
        }
        recent.put(
            &self.tenant,
            line,
            Scan {
                head: to_id(head),
                commits: fresh,
            },
        );
        Ok(hit)
    }
}

/// The records of a batch's keyed writes that changed nothing: commits (of the empty tree)
/// chained on `refs/planfiles/no-ops`, each with the key, the fingerprint and `Replays:
/// <the head it answered>`. Their objects are staged with the batch's and made durable by
/// the same sync; the ref moves right after `main` (a record may name `main`'s new head, so
/// it is published only by the attempt whose move of `main` succeeded), and is synced with
/// it, before any 200.
pub(super) struct NoOps {
    /// The ref's value on disk, and the newest record made here.
    pub(super) on_disk: Option<Oid>,
    pub(super) tip: Option<Oid>,
}

impl NoOps {
    pub(super) fn new(repo: &TenantRepo) -> Result<Self, StorageError> {
        let on_disk = super::refs::read_ref_checked(&repo.path, NO_OPS)
            .map_err(|e| StorageError::io("read the no-op records", &repo.path.join(NO_OPS), e))?;
        Ok(Self {
            on_disk,
            tip: on_disk,
        })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.tip == self.on_disk
    }

    /// Stages the record of `record` for a write that changed nothing and answered `head`.
    pub(super) fn record(
        &mut self,
        repo: &TenantRepo,
        staged: &mut Staged,
        record: &IdempotencyRecord,
        head: Oid,
        committer: &Committer,
    ) -> Result<(), StorageError> {
        let err = |op| git_err(&repo.tenant, op, "");
        // The empty tree: an object git knows without storing it, written all the same so
        // that every reader finds it.
        let tree = repo.stage_object(staged, ObjectType::Tree, b"")?;
        let who = signature(&committer.identity).map_err(err("committer signature"))?;
        let message = format!(
            "Idempotent write that changed nothing\n\n{}{}{}",
            Reserved::IdempotencyKey.line(record.key.as_str()),
            Reserved::IdempotencyFingerprint.line(&record.fingerprint),
            Reserved::Replays.line(head),
        );
        let parents: Vec<Oid> = self.tip.into_iter().collect();
        let text = committer.finish(commit_text(tree, &parents, &who, &who, &message));
        let id = repo.stage_object(staged, ObjectType::Commit, text.as_bytes())?;
        self.tip = Some(id);
        Ok(())
    }

    /// Takes the ref's lock with the newest record written into it, when there are records
    /// to publish. Only planfiles writers take this lock, under the tenant's write lock, which
    /// the caller holds: a lock found there was left by a writer that died, and is removed.
    pub(super) fn lock(
        &self,
        repo: &TenantRepo,
        fsync: bool,
    ) -> Result<Option<RefLock>, StorageError> {
        let Some(tip) = self.tip.filter(|_| !self.is_empty()) else {
            return Ok(None);
        };
        let mut removed = false;
        loop {
            match repo.lock_ref(NO_OPS, self.on_disk, tip, fsync) {
                Ok(lock) => return Ok(Some(lock)),
                Err(RefMove::Failed(e)) => return Err(e),
                Err(RefMove::Locked) if !removed => {
                    let lock = repo.path.join(format!("{NO_OPS}.lock"));
                    tracing::warn!(tenant = %repo.tenant, "removed a refs/planfiles/no-ops.lock left by a writer that died");
                    let _ = std::fs::remove_file(lock);
                    removed = true;
                }
                Err(RefMove::Moved | RefMove::Locked) => {
                    return Err(StorageError::io(
                        "move the no-op records",
                        &repo.path.join(NO_OPS),
                        std::io::Error::other("the ref moved or is locked"),
                    ))
                }
            }
        }
    }
}

/// The idempotency key a commit message records, if any.
fn recorded_key(message: &[u8]) -> Option<&str> {
    trailers::value(std::str::from_utf8(message).ok()?, Reserved::IdempotencyKey)
}

/// The head a no-op record names.
fn replays(message: &[u8]) -> Option<CommitId> {
    let hex = trailers::value(std::str::from_utf8(message).ok()?, Reserved::Replays)?;
    ObjectId::parse(hex).ok().map(CommitId)
}

/// The fingerprint recorded with `key` in the trailer block of a commit message, if that
/// message records `key`.
fn recorded(message: &[u8], key: &str) -> Option<String> {
    let text = std::str::from_utf8(message).ok()?;
    trailers::values(text, Reserved::IdempotencyKey).find(|k| *k == key)?;
    trailers::value(text, Reserved::IdempotencyFingerprint).map(str::to_owned)
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

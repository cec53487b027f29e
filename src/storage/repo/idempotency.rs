//! Idempotency keys: their lookup in the last commits of `main` and of the no-op records, and the durable record of a keyed write that changed nothing.
use super::{git_err, signature, to_id, to_oid, TenantRepo, MAIN};
use crate::domain::{CommitId, Identity, ObjectId};
use crate::storage::disk;
use crate::storage::durable::SyncGroup;
use crate::storage::recent_keys::{key_hash, Line, RecentKeys, Scan, Seen};
use crate::storage::{IdempotencyRecord, IdempotentHit, StorageError, IDEMPOTENCY_COMMITS};
use git2::{ErrorCode, ObjectType, Oid};
use std::collections::VecDeque;

pub(in crate::storage) const KEY_TRAILER: &str = "Idempotency-Key: ";
pub(in crate::storage) const FINGERPRINT_TRAILER: &str = "Idempotency-Fingerprint: ";
/// On a no-op record: the head the write found, and answered with.
const REPLAYS_TRAILER: &str = "Replays: ";
/// The records of idempotent writes that changed nothing, one commit each.
pub(in crate::storage) const NO_OPS: &str = "refs/planfiles/no-ops";

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

    /// Records `record` for a write that changed nothing and answered with `head`: a commit
    /// (of the empty tree) on the ref of such records, `refs/planfiles/no-ops`, made durable
    /// before the write answers, so that its retry replays that answer whatever is written
    /// in between. Called under the tenant's write lock.
    pub(in crate::storage) fn record_no_op(
        &self,
        record: &IdempotencyRecord,
        head: Oid,
        committer: &Identity,
        sync: Option<&SyncGroup>,
    ) -> Result<(), StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        let previous = match self.repo.refname_to_id(NO_OPS) {
            Ok(id) => Some(
                self.repo
                    .find_commit(id)
                    .map_err(err("read a no-op record"))?,
            ),
            Err(e) if e.code() == ErrorCode::NotFound => None,
            Err(e) => return Err(err("resolve a ref")(e)),
        };
        let objects_mark = sync.map(SyncGroup::mark);
        let tree = self
            .repo
            .treebuilder(None)
            .and_then(|b| b.write())
            .and_then(|id| self.repo.find_tree(id))
            .map_err(err("write the empty tree"))?;
        let who = signature(committer).map_err(err("committer signature"))?;
        let message = format!(
            "Idempotent write that changed nothing\n\n{KEY_TRAILER}{}\n{FINGERPRINT_TRAILER}{}\n{REPLAYS_TRAILER}{head}\n",
            record.key.as_str(),
            record.fingerprint,
        );
        let parents: Vec<&git2::Commit<'_>> = previous.iter().collect();
        let buffer = self
            .repo
            .commit_create_buffer(&who, &who, &message, &tree, &parents)
            .map_err(err("write a no-op record"))?;
        let id = self
            .repo
            .odb()
            .and_then(|odb| odb.write(ObjectType::Commit, &buffer))
            .map_err(err("write a no-op record"))?;
        // Durable in the order of any write: the objects, then the ref. libgit2 fsyncs what
        // it writes in fsync mode, but not an object that was there already (the empty tree
        // usually is), nor the folder `refs/planfiles` it would create.
        match sync {
            Some(_) => self.group_sync_since(sync, objects_mark, "")?,
            None => self.sync_objects(&[tree.id(), id], "")?,
        }
        disk::create_dir_all_synced(&self.path.join("refs/planfiles"))?;
        let ref_mark = sync.map(SyncGroup::mark);
        let log = "planfiles: record an idempotent write that changed nothing";
        match &previous {
            Some(p) => self.repo.reference_matching(NO_OPS, id, true, p.id(), log),
            None => self.repo.reference(NO_OPS, id, false, log),
        }
        .map_err(err("move the no-op records"))?;
        self.group_sync_since(sync, ref_mark, "")
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

/// The head a no-op record names.
fn replays(message: &[u8]) -> Option<CommitId> {
    trailer_block(message)?
        .lines()
        .find_map(|l| l.strip_prefix(REPLAYS_TRAILER))
        .and_then(|hex| ObjectId::parse(hex).ok())
        .map(CommitId)
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

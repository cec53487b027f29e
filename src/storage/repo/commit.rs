//! The write path: one commit of one or both files, its preconditions checked against the head, the compare-and-swap of `main` in the durability order, and dry runs.
use super::objects::{paths, Checked, NewCommit};
use super::{backoff, git_err, to_id, to_oid, TenantRepo, MAIN, WRITE_DEADLINE};
use crate::domain::{BlobId, CommitId, Identity};
use crate::storage::durable::SyncGroup;
use crate::storage::{
    Change, CommitOutcome, CommitRequest, FileOutcome, IfMatch, ShaCheck, StorageError,
};
use git2::{ErrorCode, ObjectType, Oid};
use std::time::Instant;

impl TenantRepo {
    /// See [`crate::storage::Storage::commit`]. `sync` is the group to share `syncfs` with;
    /// `None` when libgit2 fsyncs by itself.
    pub(in crate::storage) fn commit(
        &self,
        req: &CommitRequest,
        committer: &Identity,
        sync: Option<&SyncGroup>,
    ) -> Result<CommitOutcome, StorageError> {
        let path = req.changes.first().map_or("", |c| c.file.path());
        if req.dry_run {
            // No lock: a dry run writes nothing, so it needs no turn on the repository.
            let head = self.head_commit(path)?;
            let checked = self.check_all(&head, req)?;
            return self.dry_outcome(&head, req, &checked);
        }
        let deadline = Instant::now() + WRITE_DEADLINE;
        // Held until this function returns: planfiles writers of a tenant, in any process,
        // take turns. The OS drops the lock when its holder dies.
        let _write_lock = self.lock_for_write(deadline, path)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let head = self.head_commit(path)?;
            let checked = self.check_all(&head, req)?;
            let outcome = |commit: Oid| CommitOutcome {
                commit: Some(CommitId(to_id(commit))),
                files: req
                    .changes
                    .iter()
                    .zip(&checked)
                    .map(|(c, k)| FileOutcome {
                        file: c.file,
                        blob: BlobId(to_id(k.new_blob)),
                        changed: !k.unchanged(),
                        forced: k.forced,
                        before: None,
                        bytes: k.bytes.clone(),
                        made: k.made,
                    })
                    .collect(),
            };
            if checked.iter().all(Checked::unchanged) {
                // Nothing to commit; a key is still recorded (durably), so that its retry
                // answers this, whatever is written in between.
                if let Some(record) = &req.idempotency {
                    self.record_no_op(record, head.id(), committer, sync)?;
                }
                return Ok(outcome(head.id()));
            }
            // A syncfs round that runs while the objects are written may flush them and fail:
            // the syncs below count every round from here on.
            let objects_mark = sync.map(SyncGroup::mark);
            let NewCommit { id: commit, found } = self
                .commit_changes(&head, req, &checked, committer, sync.is_none())
                .map_err(|e| self.explain_write_failure(e, path))?;
            // The objects are on disk before main points at them.
            match sync {
                Some(_) => self.group_sync_since(sync, objects_mark, path)?,
                None => self.sync_objects(&found, path)?,
            }
            let ref_mark = sync.map(SyncGroup::mark);
            if let Some(hook) = &self.before_ref_update {
                (hook.0)(&self.tenant, &self.path);
            }
            match self.repo.reference_matching(
                MAIN,
                commit,
                true,
                head.id(),
                &format!("planfiles: update {}", paths(req)),
            ) {
                Ok(_) => {
                    // And the ref is on disk before the 200. A write that fails changes
                    // nothing: when that sync fails, main goes back, unless it moved again.
                    if let Err(e) = self.group_sync_since(sync, ref_mark, path) {
                        self.undo_unsynced(head.id(), commit, sync, path, &e);
                        return Err(e);
                    }
                    return Ok(outcome(commit));
                }
                // Someone outside planfiles moved main or holds its lock (planfiles writers
                // take turns on the write lock): rebase onto the new head and check our own
                // preconditions again. A commit that changed neither file passes them again.
                Err(e)
                    if matches!(
                        e.code(),
                        ErrorCode::Modified | ErrorCode::Locked | ErrorCode::NotFound
                    ) =>
                {
                    if e.code() == ErrorCode::Locked {
                        self.remove_stale_ref_lock();
                    }
                    if Instant::now() >= deadline {
                        return Err(StorageError::Contended {
                            tenant: self.tenant.clone(),
                            file: path,
                            attempts: attempt,
                        });
                    }
                    backoff(attempt);
                }
                Err(e) => {
                    return Err(self
                        .explain_write_failure(git_err(&self.tenant, "move main", path)(e), path))
                }
            }
        }
    }

    fn head_commit(&self, path: &'static str) -> Result<git2::Commit<'_>, StorageError> {
        let oid =
            self.repo
                .refname_to_id(MAIN)
                .map_err(git_err(&self.tenant, "resolve main", path))?;
        self.repo
            .find_commit(oid)
            .map_err(git_err(&self.tenant, "read head commit", path))
    }

    /// Checks every change's preconditions against `head`; the first that fails names its file.
    fn check_all(
        &self,
        head: &git2::Commit<'_>,
        req: &CommitRequest,
    ) -> Result<Vec<Checked>, StorageError> {
        let tree = head
            .tree()
            .map_err(git_err(&self.tenant, "read head tree", ""))?;
        req.changes
            .iter()
            .map(|change| {
                let entry = tree
                    .get_name(change.file.path())
                    .filter(|e| e.kind() == Some(ObjectType::Blob));
                let (current, present) = match entry {
                    Some(e) => (e.id(), true),
                    None => (super::empty_blob_oid(), false),
                };
                let forced = !self.check(head.id(), change, current)?;
                let (bytes, made) = self.new_bytes(change, current, present)?;
                let new_blob = Oid::hash_object(ObjectType::Blob, &bytes).map_err(git_err(
                    &self.tenant,
                    "hash blob",
                    change.file.path(),
                ))?;
                Ok(Checked {
                    bytes: bytes.into_owned(),
                    made,
                    new_blob,
                    current,
                    present,
                    forced,
                })
            })
            .collect()
    }

    /// Whether a blob-id precondition of `change` names the current blob (`current`);
    /// `ShaMismatch` / `PreconditionFailed` when a precondition fails.
    fn check(&self, head: Oid, change: &Change, current: Oid) -> Result<bool, StorageError> {
        let current_id = BlobId(to_id(current));
        let mut blob_matched = false;
        match change.preconditions.file_sha {
            None => {}
            Some(ShaCheck::Blob(id)) | Some(ShaCheck::BlobOrCommit(id))
                if to_oid(&id) == current =>
            {
                blob_matched = true;
            }
            Some(ShaCheck::BlobOrCommit(id))
                if self.in_history_since(head, to_oid(&id), change.preconditions.ancestry) => {}
            Some(_) => {
                return Err(StorageError::ShaMismatch {
                    tenant: self.tenant.clone(),
                    file: change.file,
                    current: current_id,
                })
            }
        }
        match &change.preconditions.if_match {
            None | Some(IfMatch::Any) => {}
            Some(IfMatch::Tags(tags)) if tags.iter().any(|t| t == current_id.as_str()) => {
                blob_matched = true
            }
            Some(IfMatch::Tags(_)) => {
                return Err(StorageError::PreconditionFailed {
                    tenant: self.tenant.clone(),
                    file: change.file,
                    current: current_id,
                })
            }
        }
        Ok(blob_matched)
    }

    /// What a dry run answers: the new blob ids and the bytes stored now.
    fn dry_outcome(
        &self,
        head: &git2::Commit<'_>,
        req: &CommitRequest,
        checked: &[Checked],
    ) -> Result<CommitOutcome, StorageError> {
        let _ = head;
        let files = req
            .changes
            .iter()
            .zip(checked)
            .map(|(c, k)| {
                let before = if k.present {
                    self.repo
                        .find_blob(k.current)
                        .map(|b| b.content().to_vec())
                        .map_err(git_err(&self.tenant, "read blob", c.file.path()))?
                } else {
                    Vec::new()
                };
                Ok(FileOutcome {
                    file: c.file,
                    blob: BlobId(to_id(k.new_blob)),
                    changed: !k.unchanged(),
                    forced: k.forced,
                    before: Some(before),
                    bytes: k.bytes.clone(),
                    made: k.made,
                })
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok(CommitOutcome {
            commit: None,
            files,
        })
    }
}

//! The write path: one commit of one or both files, its preconditions, durability order and compare-and-swap of `main`.
use super::{
    backoff, git_err, signature, to_id, to_oid, tree_id_with_all, NewCommit, TenantRepo, FILE_MODE,
    MAIN, WRITE_DEADLINE,
};
use crate::domain::yaml::splice::Made;
use crate::domain::{BlobId, CommitId, Identity, PlanFile};
use crate::storage::durable::SyncGroup;
use crate::storage::versions::{Change, CommitOutcome, CommitRequest, FileOutcome};
use crate::storage::{IfMatch, ShaCheck, StorageError};
use git2::{ErrorCode, ObjectType, Oid};
use std::time::Instant;

/// One change checked against the head: its new bytes and blob, and what the head holds.
struct Checked {
    /// Made again on every attempt: a JSON change edits the text stored at this head.
    bytes: Vec<u8>,
    made: Option<Made>,
    new_blob: Oid,
    current: Oid,
    present: bool,
    forced: bool,
}

impl Checked {
    fn unchanged(&self) -> bool {
        self.present && self.new_blob == self.current
    }
}

impl TenantRepo<'_> {
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
                (hook.0)(self.tenant, &self.path);
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
                        .explain_write_failure(git_err(self.tenant, "move main", path)(e), path))
                }
            }
        }
    }

    fn head_commit(&self, path: &'static str) -> Result<git2::Commit<'_>, StorageError> {
        let oid =
            self.repo
                .refname_to_id(MAIN)
                .map_err(git_err(self.tenant, "resolve main", path))?;
        self.repo
            .find_commit(oid)
            .map_err(git_err(self.tenant, "read head commit", path))
    }

    /// Checks every change's preconditions against `head`; the first that fails names its file.
    fn check_all(
        &self,
        head: &git2::Commit<'_>,
        req: &CommitRequest,
    ) -> Result<Vec<Checked>, StorageError> {
        let tree = head
            .tree()
            .map_err(git_err(self.tenant, "read head tree", ""))?;
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
                    self.tenant,
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
        let path = change.file.path();
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
                    file: path,
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
                    file: path,
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
                        .map_err(git_err(self.tenant, "read blob", c.file.path()))?
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

    /// Writes the changed blobs, the head's tree with those entries replaced, and a commit on
    /// top of `head`. With `track` (fsync mode) it also lists the objects the commit depends
    /// on that libgit2 did not write here, and so did not fsync: those it found already there
    /// (it only touches them), and the tree's other entries.
    fn commit_changes(
        &self,
        head: &git2::Commit<'_>,
        req: &CommitRequest,
        checked: &[Checked],
        committer: &Identity,
        track: bool,
    ) -> Result<NewCommit, StorageError> {
        let path = req.changes.first().map_or("", |c| c.file.path());
        let err = |op| git_err(self.tenant, op, path);
        let mut found = Vec::new();
        let base = head.tree().map_err(err("read head tree"))?;
        let mut entries: Vec<(&'static str, Oid)> = Vec::new();
        for (change, k) in req.changes.iter().zip(checked) {
            if k.unchanged() {
                continue;
            }
            if track && self.is_loose(k.new_blob) {
                found.push(k.new_blob);
            }
            let blob = self.repo.blob(&k.bytes).map_err(err("write blob"))?;
            entries.push((change.file.path(), blob));
        }
        let expected_tree = track.then(|| tree_id_with_all(&base, &entries)).flatten();
        if track {
            found.extend(
                base.iter()
                    .filter(|e| !entries.iter().any(|(n, _)| e.name_bytes() == n.as_bytes()))
                    .map(|e| e.id()),
            );
            found.extend(expected_tree.filter(|t| self.is_loose(*t)));
        }
        let mut builder = self
            .repo
            .treebuilder(Some(&base))
            .map_err(err("build tree"))?;
        for (name, blob) in &entries {
            builder
                .insert(name, *blob, FILE_MODE)
                .map_err(err("build tree"))?;
        }
        let tree_oid = builder.write().map_err(err("write tree"))?;
        if track && expected_tree != Some(tree_oid) {
            // Not foreseen (an unusual entry in the old tree): sync it to be sure.
            found.push(tree_oid);
        }
        let tree = self
            .repo
            .find_tree(tree_oid)
            .map_err(err("read new tree"))?;
        let author = signature(&req.author).map_err(err("author signature"))?;
        let committer = signature(committer).map_err(err("committer signature"))?;
        let forced = checked.iter().any(|k| !k.unchanged() && k.forced);
        let message = message(req, &entries, forced);
        let buffer = self
            .repo
            .commit_create_buffer(&author, &committer, &message, &tree, &[head])
            .map_err(err("write commit"))?;
        if track {
            let id = Oid::hash_object(ObjectType::Commit, &buffer).map_err(err("hash commit"))?;
            if self.is_loose(id) {
                found.push(id);
            }
        }
        let id = self
            .repo
            .odb()
            .and_then(|odb| odb.write(ObjectType::Commit, &buffer))
            .map_err(err("write commit"))?;
        Ok(NewCommit { id, found })
    }
}

/// The paths a request writes, in the order of [`PlanFile::ALL`], joined by `, `.
fn paths(req: &CommitRequest) -> String {
    PlanFile::ALL
        .iter()
        .filter(|f| req.changes.iter().any(|c| c.file == **f))
        .map(|f| f.path())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The commit message: the subject (the caller's, or one that names what changed), a blank
/// line, then the trailers.
fn message(req: &CommitRequest, changed: &[(&'static str, Oid)], forced: bool) -> String {
    let subject = match (&req.subject, req.restored_from) {
        (Some(subject), _) => subject.clone(),
        (None, Some(from)) => format!(
            "Restore {} as of {}",
            changed
                .iter()
                .map(|(p, _)| *p)
                .collect::<Vec<_>>()
                .join(", "),
            &from.to_string()[..12]
        ),
        (None, None) => {
            let mut names: Vec<&str> = changed.iter().map(|(p, _)| *p).collect();
            names.sort_by_key(|p| PlanFile::ALL.iter().position(|f| f.path() == *p));
            format!("Update {}", names.join(", "))
        }
    };
    let mut message = format!("{subject}\n\nRequest-Id: {}\n", req.request_id);
    if forced {
        message.push_str("Forced: true\n");
    }
    if let Some(from) = req.restored_from {
        message.push_str(&format!("Restored-From: {from}\n"));
    }
    if let Some(record) = &req.idempotency {
        message.push_str(&format!(
            "{}{}\n{}{}\n",
            super::versions::KEY_TRAILER,
            record.key.as_str(),
            super::versions::FINGERPRINT_TRAILER,
            record.fingerprint
        ));
    }
    message
}

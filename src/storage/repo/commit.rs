//! The write path: a batch of a tenant's writes, each checked against the head the ones before it made and each its own commit, all made durable by one sync of their staged objects and ref locks, then named (objects, one compare-and-swap of `main`, the no-op records) and made durable by a second sync; dry runs.
use super::advance::{Advance, MainMove};
use super::objects::{Checked, Head};
use super::refs::RefMove;
use super::signatures::Committer;
use super::staged::Staged;
use super::{backoff, git_err, to_id, to_oid, TenantRepo, WRITE_DEADLINE};
use crate::domain::yaml::splice::Made;
use crate::domain::{BlobId, CommitId};
use crate::storage::disk::durable::SyncGroup;
use crate::storage::repo::recent_keys::RecentKeys;
use crate::storage::{
    Change, CommitOutcome, CommitRequest, Committed, FileOutcome, IfMatch, ShaCheck, StorageError,
};
use git2::{ObjectType, Oid};
use std::time::Instant;

/// What one request of a batch came to: its answer, or `None` when it was not tried (an
/// earlier request of the batch failed to write) and goes into the next batch.
pub(in crate::storage) type BatchResult = Option<Result<Committed, StorageError>>;

impl TenantRepo {
    /// See [`crate::storage::Storage::commit_batch`]: the requests in order, each checked
    /// against the head the ones before it made, each its own commit; all of them made
    /// durable by one sync of their objects, one move of `main` and one sync of the ref.
    /// `sync` is the group to share `syncfs` with; `None` in fsync mode.
    pub(in crate::storage) fn commit_batch(
        &self,
        reqs: &[&CommitRequest],
        committer: &Committer,
        sync: Option<&SyncGroup>,
        recent: &RecentKeys,
        flags: &super::Flags,
    ) -> Vec<BatchResult> {
        let path = reqs
            .first()
            .and_then(|r| r.changes.first())
            .map_or("", |c| c.file.path());
        let deadline = Instant::now() + WRITE_DEADLINE;
        // Held until this function returns: planfiles writers of a tenant, in any process,
        // take turns. The OS drops the lock when its holder dies. Dry runs alone write
        // nothing, and take no turn.
        let _write_lock = if reqs.iter().all(|r| r.dry_run) {
            None
        } else {
            match self.lock_for_write(deadline, path) {
                Ok(lock) => Some(lock),
                Err(e) => return fail_all(reqs.len(), e),
            }
        };
        // Under the write lock, which a move takes to write its record (`refs.rs`: `fence`):
        // a tenant that began to move takes no write of this batch, not even a no-op record.
        // A batch of dry runs reads it too (without the lock): it answers as the write would.
        if let Err(e) = crate::storage::placement::reread_under_lock(&self.path, &self.tenant) {
            return fail_all(reqs.len(), e);
        }
        // Read under the write lock, which `tenant set` takes: a write that began before the
        // tenant required approval and commits after it is refused.
        let required = match reqs.iter().any(|r| !r.dry_run) {
            true => match flags.get(&self.tenant, &self.path) {
                Ok(settings) => settings.required_approvals,
                Err(e) => return fail_all(reqs.len(), e),
            },
            false => 0,
        };
        let mut attempt = 0;
        // Since when main.lock has been held by someone else, without a break.
        let mut locked_since: Option<Instant> = None;
        loop {
            attempt += 1;
            match self.try_batch(reqs, committer, sync, recent, path, required) {
                Ok(results) => return results,
                // A live git transaction holds main.lock (git never takes another process's
                // lock away): wait a little, then tell the writers to retry.
                Err(Retry::Locked) => {
                    let since = *locked_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= super::REF_LOCK_WAIT || Instant::now() >= deadline {
                        return fail_all(
                            reqs.len(),
                            StorageError::RefLocked {
                                tenant: self.tenant.clone(),
                                lock: "refs/heads/main.lock",
                            },
                        );
                    }
                    backoff(attempt);
                }
                Err(Retry::Moved) if Instant::now() < deadline => {
                    locked_since = None;
                    backoff(attempt)
                }
                Err(Retry::Moved) => {
                    return fail_all(
                        reqs.len(),
                        StorageError::Contended {
                            tenant: self.tenant.clone(),
                            file: path,
                            attempts: attempt,
                        },
                    )
                }
                Err(Retry::Failed(e)) => return fail_all(reqs.len(), e),
            }
        }
    }

    /// One attempt at a batch from the head on disk now; `Retry::Moved` when `main` moved
    /// at the compare-and-swap, so that the batch is checked again against the new head.
    /// Every object is staged in a temporary file and the refs' locks get their new values;
    /// then [`TenantRepo::advance`] moves `main` in the durability order.
    fn try_batch(
        &self,
        reqs: &[&CommitRequest],
        committer: &Committer,
        sync: Option<&SyncGroup>,
        recent: &RecentKeys,
        path: &'static str,
        required: u32,
    ) -> Result<Vec<BatchResult>, Retry> {
        let fsync = sync.is_none();
        let failed = |e| Retry::Failed(self.explain_write_failure(e, path));
        let on_disk = self.read_head(path).map_err(Retry::Failed)?;
        let mut head = on_disk.clone();
        let mut staged = Staged::new(self, fsync);
        let mut no_ops = super::idempotency::NoOps::new(self).map_err(Retry::Failed)?;
        // The requests answered by a no-op record: they fail if the records cannot be moved.
        let mut recorded: Vec<usize> = Vec::new();
        // A syncfs round that runs while the objects are written may flush them and fail:
        // the syncs below count every round from here on.
        let objects_mark = sync.map(SyncGroup::mark);
        let mut results: Vec<BatchResult> = Vec::with_capacity(reqs.len());
        let now = std::time::SystemTime::now();
        for (i, req) in reqs.iter().enumerate() {
            // Under the write lock, after every wait: a write whose last moment passed meanwhile
            // is refused, not committed on a stale authority.
            if req.not_after.is_some_and(|last| now >= last) {
                results.push(Some(Err(StorageError::Expired {
                    tenant: self.tenant.clone(),
                })));
                continue;
            }
            // A tenant that requires approval: `main` moves only by an applied proposal (a
            // dry run still answers what the write would do).
            if required > 0 && !req.dry_run {
                results.push(Some(Err(StorageError::ApprovalRequired {
                    tenant: self.tenant.clone(),
                })));
                continue;
            }
            // The key looked up on disk: the in-flight markers keep a key out of the batch
            // while a request with it is in it, so the batch itself cannot hold it.
            if let Some(record) = &req.idempotency {
                match self.find_idempotent(record.key.as_str(), recent) {
                    Ok(Some(hit)) if hit.fingerprint == record.fingerprint => {
                        results.push(Some(Ok(Committed::Replayed(hit))));
                        continue;
                    }
                    Ok(Some(hit)) => {
                        results.push(Some(Err(StorageError::KeyReused {
                            tenant: self.tenant.clone(),
                            commit: hit.commit,
                        })));
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        results.push(Some(Err(e)));
                        continue;
                    }
                }
            }
            let checked = match self.check_all(&staged, on_disk.commit, &head, req) {
                Ok(checked) => checked,
                Err(e) => {
                    results.push(Some(Err(e)));
                    continue;
                }
            };
            if req.dry_run {
                results.push(Some(
                    self.dry_outcome(&staged, req, &checked)
                        .map(Committed::Written),
                ));
                continue;
            }
            let commit = if checked.iter().all(Checked::unchanged) {
                // Nothing to commit; a key is still recorded (durably, with the batch), so
                // that its retry answers this, whatever is written in between.
                if let Some(record) = &req.idempotency {
                    if let Err(e) = no_ops.record(self, &mut staged, record, head.commit, committer)
                    {
                        results.push(Some(Err(self.explain_write_failure(e, path))));
                        break;
                    }
                    recorded.push(i);
                }
                head.commit
            } else {
                match self.commit_changes(&mut staged, &head, req, &checked, committer) {
                    Ok(new) => {
                        head = new;
                        head.commit
                    }
                    Err(e) => {
                        // What it could not write, the next cannot either: the rest waits
                        // for the next batch; what was made before goes in.
                        results.push(Some(Err(self.explain_write_failure(e, path))));
                        break;
                    }
                }
            };
            results.push(Some(Ok(Committed::Written(outcome(req, &checked, commit)))));
        }
        results.resize_with(reqs.len(), || None);
        let moved = head.commit != on_disk.commit;
        if !moved && no_ops.is_empty() {
            return Ok(results);
        }
        if moved {
            if let Some(hook) = &self.before_ref_update {
                (hook.0)(&self.tenant, &self.path);
            }
        }
        // The refs' locks, their new values written: main's checked against the head the
        // batch was built on.
        let main = if moved {
            match self.lock_main(on_disk.commit, head.commit, fsync) {
                Ok(lock) => Some(MainMove {
                    old: on_disk.commit,
                    new: head.commit,
                    lock,
                }),
                // Someone outside planfiles moved main (planfiles writers take turns on the
                // write lock): check the batch again on the new head.
                Err(RefMove::Moved) => return Err(Retry::Moved),
                Err(RefMove::Locked) => return Err(Retry::Locked),
                Err(RefMove::Failed(e)) => return Err(failed(e)),
            }
        } else {
            None
        };
        let after = no_ops.lock(self, fsync).map_err(failed)?;
        let advance = Advance {
            staged,
            mark: objects_mark,
            before: Vec::new(),
            main,
            after,
        };
        let undo_records = |e: &StorageError| self.undo_unsynced_records(&no_ops, sync, path, e);
        // The no-op records failing to move fails only the writes they answer.
        if let Some(e) = self
            .advance(advance, sync, path, undo_records)
            .map_err(failed)?
        {
            for i in recorded {
                results[i] = Some(Err(self.explain_write_failure(e.again(), path)));
            }
        }
        Ok(results)
    }

    /// Checks every change's preconditions against `head`; the first that fails names its file.
    pub(super) fn check_all(
        &self,
        staged: &Staged,
        on_disk: Oid,
        head: &Head,
        req: &CommitRequest,
    ) -> Result<Vec<Checked>, StorageError> {
        req.changes
            .iter()
            .map(|change| {
                let (current, present) = match head.blob(change.file.path()) {
                    Some(blob) => (blob, true),
                    None => (super::empty_blob_oid(), false),
                };
                let forced = !self.check(staged, on_disk, change, current)?;
                let super::objects::NewText { bytes, made, spans } =
                    self.new_bytes(staged, change, current, present)?;
                let new_blob = Oid::hash_object(ObjectType::Blob, &bytes).map_err(git_err(
                    &self.tenant,
                    "hash blob",
                    change.file.path(),
                ))?;
                if let (Some(Made::Edited), Some(content)) = (made, &change.content) {
                    // The edited text was checked to parse to exactly the content.
                    self.parsed.put(new_blob, content.clone(), spans);
                }
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
    /// `ShaMismatch` / `PreconditionFailed` when a precondition fails. A commit id is looked
    /// for among the commits this attempt staged, then in the history of `on_disk`.
    fn check(
        &self,
        staged: &Staged,
        on_disk: Oid,
        change: &Change,
        current: Oid,
    ) -> Result<bool, StorageError> {
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
                if staged.commits.contains(&to_oid(&id))
                    || self.in_history_since(
                        on_disk,
                        to_oid(&id),
                        change.preconditions.ancestry,
                    ) => {}
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
        staged: &Staged,
        req: &CommitRequest,
        checked: &[Checked],
    ) -> Result<CommitOutcome, StorageError> {
        let files = req
            .changes
            .iter()
            .zip(checked)
            .map(|(c, k)| {
                let before = if k.present {
                    self.blob_bytes(staged, k.current, c.file.path())?.to_vec()
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

/// Why an attempt at a batch did not end it.
enum Retry {
    /// `main` moved (or an abandoned lock was removed): the batch is checked again on the
    /// new head.
    Moved,
    /// Another process holds `main.lock`: the batch is tried again for a moment.
    Locked,
    Failed(StorageError),
}

/// The outcome of a request that made `commit` (or found it, when nothing changed).
fn outcome(req: &CommitRequest, checked: &[Checked], commit: Oid) -> CommitOutcome {
    CommitOutcome {
        commit: Some(CommitId(to_id(commit))),
        files: req
            .changes
            .iter()
            .zip(checked)
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
    }
}

/// The same error for every request of a batch (a lock not had, a sync that failed): each
/// is told, and none of them was written.
fn fail_all(n: usize, e: StorageError) -> Vec<BatchResult> {
    let mut results = Vec::with_capacity(n);
    results.push(Some(Err(e.again())));
    for _ in 1..n {
        results.push(Some(Err(e.again())));
    }
    results
}

//! What makes a commit durable and its writer alone: the syncs of its objects and ref (group commit or fsync), putting `main` back when the last sync fails, the tenant's write lock and stale `main.lock`s, and what a failed write is told.
use super::refs::RefMove;
use super::{lock_file_until, remove_if_abandoned, TenantRepo, NO_OPS, WRITE_LOCK_FILE};
use crate::storage::disk::durable::{SyncGroup, SyncMark};
use crate::storage::disk::sync_dir;
use crate::storage::StorageError;
use git2::Oid;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

impl TenantRepo {
    /// In group-commit mode, waits for a shared `syncfs` of the volume.
    pub(super) fn group_sync(
        &self,
        sync: Option<&SyncGroup>,
        file: &'static str,
    ) -> Result<(), StorageError> {
        match sync {
            Some(group) => group
                .sync()
                .map_err(|e| self.io_err("sync the data volume", &self.path, e, file)),
            None => Ok(()),
        }
    }

    /// In group-commit mode, waits for a shared `syncfs` that covers everything written since
    /// `mark` (taken from the same group before writing).
    pub(super) fn group_sync_since(
        &self,
        sync: Option<&SyncGroup>,
        mark: Option<SyncMark>,
        file: &'static str,
    ) -> Result<(), StorageError> {
        match (sync, mark) {
            (Some(group), Some(mark)) => group
                .sync_from(mark)
                .map_err(|e| self.io_err("sync the data volume", &self.path, e, file)),
            _ => self.group_sync(sync, file),
        }
    }

    /// In fsync mode, syncs the loose files of `objects` that a commit depends on but this
    /// attempt did not write (see [`super::staged::Staged`]), their fan-out folders and
    /// `objects/`: an object that is there already (written by plain git, which syncs no
    /// loose object by default, or by a `group` instance before its `syncfs`) may not be
    /// durable yet.
    pub(super) fn sync_objects(
        &self,
        objects: &[Oid],
        file: &'static str,
    ) -> Result<(), StorageError> {
        let mut fanouts: Vec<PathBuf> = Vec::new();
        for oid in objects {
            let object = self.loose_path(*oid);
            let synced = crate::storage::disk::faults::check(
                crate::storage::disk::faults::Op::Fsync,
                &object,
            )
            .and_then(|()| File::open(&object))
            .and_then(|f| f.sync_all());
            match synced {
                Ok(()) => {}
                // Packed (packs are synced when written), or not an object (a gitlink).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io_err("sync an object", &object, e, file)),
            }
            if let Some(fanout) = object.parent().filter(|f| !fanouts.iter().any(|k| k == f)) {
                fanouts.push(fanout.to_owned());
            }
        }
        for fanout in &fanouts {
            sync_dir(fanout)?;
        }
        sync_dir(&self.path.join("objects"))
    }

    /// Puts ref `name` back from `commit` to `head` after the sync that was to make the move
    /// durable failed, and syncs that. Only if it is still at `commit`: when it moved again
    /// meanwhile (plain git), the new head builds on `commit`, which then stays.
    pub(super) fn undo_unsynced(
        &self,
        name: &'static str,
        head: Oid,
        commit: Oid,
        sync: Option<&SyncGroup>,
        file: &'static str,
        cause: &StorageError,
    ) {
        let tenant = self.tenant.as_str();
        let undo_mark = sync.map(SyncGroup::mark);
        let undone = self.move_ref(name, Some(commit), head, sync.is_none());
        match undone {
            Ok(_) => match self.group_sync_since(sync, undo_mark, file) {
                Ok(()) => {
                    tracing::warn!(
                        tenant, file, reference = name, %commit, %head, error = %cause,
                        "ref put back after its update could not be synced"
                    );
                }
                Err(e) => {
                    tracing::error!(
                        tenant, file, reference = name, %commit, %head, error = %cause, undo_error = %e,
                        "ref put back after its update could not be synced, but the undo \
                         could not be synced either: after a crash it may be at either"
                    );
                }
            },
            Err(RefMove::Moved) => {
                tracing::error!(
                    tenant, file, reference = name, %commit, error = %cause,
                    "ref could not be put back after its update could not be synced: it moved \
                     again meanwhile, so the unsynced commit stays in its history"
                );
            }
            Err(e) => {
                let undo_error = match e {
                    RefMove::Failed(e) => e.to_string(),
                    _ => "its lock is held".to_owned(),
                };
                tracing::error!(
                    tenant, file, reference = name, %commit, %head, error = %cause, %undo_error,
                    "ref could not be put back after its update could not be synced: it \
                     stays at the unsynced commit"
                );
            }
        }
    }

    /// The no-op records' twin of [`TenantRepo::undo_unsynced`]: a record may name a head of
    /// `main` that was just put back, and must not outlive it (its key would answer a commit
    /// that is not there). A ref that did not exist before is removed.
    pub(super) fn undo_unsynced_records(
        &self,
        records: &super::idempotency::NoOps,
        sync: Option<&SyncGroup>,
        file: &'static str,
        cause: &StorageError,
    ) {
        let Some(tip) = records.tip else { return };
        match records.on_disk {
            Some(old) => self.undo_unsynced(NO_OPS, old, tip, sync, file, cause),
            None => {
                let path = self.path.join(NO_OPS);
                let removed = std::fs::remove_file(&path)
                    .map_err(|e| StorageError::io("remove the no-op records", &path, e))
                    .and_then(|()| match sync {
                        Some(_) => self.group_sync(sync, file),
                        None => sync_dir(path.parent().expect("refs/planfiles")),
                    });
                match removed {
                    Ok(()) => {
                        tracing::warn!(tenant = %self.tenant, error = %cause, "new no-op records removed after their update could not be synced")
                    }
                    Err(e) => {
                        tracing::error!(tenant = %self.tenant, error = %cause, undo_error = %e, "new no-op records could not be removed after their update could not be synced")
                    }
                }
            }
        }
    }

    /// Takes the tenant's write lock (an OS file lock on a sidecar file), waiting until
    /// `deadline` at most.
    pub(super) fn lock_for_write(
        &self,
        deadline: Instant,
        file: &'static str,
    ) -> Result<File, StorageError> {
        let lock_path = self.path.join(WRITE_LOCK_FILE);
        lock_file_until(&lock_path, deadline)
            .map_err(|e| self.io_err("take the write lock", &lock_path, e, file))?
            .map_err(|attempts| StorageError::Contended {
                tenant: self.tenant.clone(),
                file,
                attempts,
            })
    }

    /// Removes ref `name`'s lock (`refs/heads/main.lock`, `refs/notes/planfiles.lock`) when
    /// it is clearly abandoned: a planfiles writer's that died holding it (planfiles makes
    /// its locks with the sticky bit, `refs.rs`), or one from before the boot or 10 minutes
    /// old ([`remove_if_abandoned`]); `true` when it did. Called only while holding the write
    /// lock, so no live planfiles writer owns it; a live git command may, and keeps it.
    pub(super) fn remove_abandoned_ref_lock(&self, name: &str) -> bool {
        let lock = self.path.join(format!("{name}.lock"));
        if super::refs::made_by_planfiles(&lock) && std::fs::remove_file(&lock).is_ok() {
            tracing::warn!(tenant = %self.tenant, "removed the {name}.lock of a planfiles writer that died holding it");
            return true;
        }
        let removed = remove_if_abandoned(&lock);
        if let Some(age) = removed {
            tracing::warn!(tenant = %self.tenant, age_s = age.as_secs(), "removed an abandoned {name}.lock (older than 10 minutes, or from before the machine booted)");
        }
        removed.is_some()
    }

    /// [`TenantRepo::lock_ref`], and once more after a lock found abandoned was removed
    /// ([`TenantRepo::remove_abandoned_ref_lock`]); a live git command's lock stays `Locked`.
    pub(super) fn lock_ref_clearing(
        &self,
        name: &str,
        old: Option<Oid>,
        new: Oid,
        fsync: bool,
    ) -> Result<super::refs::RefLock, RefMove> {
        match self.lock_ref(name, old, new, fsync) {
            Err(RefMove::Locked) if self.remove_abandoned_ref_lock(name) => {
                self.lock_ref(name, old, new, fsync)
            }
            other => other,
        }
    }

    /// libgit2 does not always keep the errno of a failed write (a full disk reads as "no
    /// error"), so a failed write probes the volume: if a small file cannot be written and
    /// synced there, the disk is full.
    pub(super) fn explain_write_failure(
        &self,
        e: StorageError,
        file: &'static str,
    ) -> StorageError {
        match &e {
            StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
                return StorageError::StorageFull {
                    tenant: self.tenant.clone(),
                    file,
                }
            }
            StorageError::Git { .. } => {}
            _ => return e,
        }
        let probe = tempfile::tempfile_in(&self.path).and_then(|mut f| {
            use std::io::Write;
            f.write_all(&[0u8; 64 * 1024])?;
            f.sync_all()
        });
        match probe {
            Err(p) if p.kind() == std::io::ErrorKind::StorageFull => StorageError::StorageFull {
                tenant: self.tenant.clone(),
                file,
            },
            _ => e,
        }
    }

    pub(super) fn io_err(
        &self,
        op: &'static str,
        path: &Path,
        e: std::io::Error,
        file: &'static str,
    ) -> StorageError {
        if e.kind() == std::io::ErrorKind::StorageFull {
            return StorageError::StorageFull {
                tenant: self.tenant.clone(),
                file,
            };
        }
        StorageError::io(op, path, e)
    }
}

//! The source side of moving a tenant to another shard: refuse its writes and wait out those under way, mark it moved, archive it after the grace period.
use crate::domain::{ShardUrl, TenantId};
use crate::storage::placement;
use crate::storage::repo::{self, TenantRepo};
use crate::storage::{MoveStart, Placement, Storage, StorageError};
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

impl Storage {
    /// Where the tenant is, when it is leaving or has left this shard.
    pub fn placement(&self, tenant: &TenantId) -> Result<Option<Placement>, StorageError> {
        placement::read(&self.locate(tenant, placement::Access::Manage)?)
    }

    /// Step 1 of a move to `to`: the tenant's writes are refused from now on (by every
    /// process on this data dir), and this returns once every write that had begun has
    /// landed, with the head that the target must have. Safe to run again: a tenant moving
    /// to `to` stays so, one that moved there says so (`moved`); one moving or moved to
    /// another shard is a conflict.
    pub fn begin_move(&self, tenant: &TenantId, to: &ShardUrl) -> Result<MoveStart, StorageError> {
        let path = self.repo_path(tenant);
        let repo = TenantRepo::open(tenant, &path)?;
        // Plain git's ref writes are refused too while the record exists.
        placement::install_fence_hook(&path)?;
        let (moved, since) = repo.fence(|| match placement::read(&path)? {
            None => {
                let since = std::time::SystemTime::now();
                placement::write(
                    &path,
                    &Placement::Moving {
                        to: to.clone(),
                        since,
                    },
                )?;
                Ok((false, since))
            }
            Some(p) if p.to() != to => Err(StorageError::MoveConflict {
                tenant: tenant.clone(),
                reason: format!(
                    "it is {} the shard at {}; finish that move first",
                    match p {
                        Placement::Moving { .. } => "moving to",
                        Placement::Aborting { .. } => "aborting its move to",
                        Placement::Moved { .. } => "moved to",
                    },
                    p.to()
                ),
            }),
            Some(Placement::Moving { since, .. }) => Ok((false, since)),
            Some(Placement::Aborting { .. }) => Err(StorageError::MoveConflict {
                tenant: tenant.clone(),
                reason: format!(
                    "an abort of its move to {to} is under way: run the abort again to finish it, then the move"
                ),
            }),
            Some(Placement::Moved { at, .. }) => Ok((true, at)),
        })?;
        let head = repo::file_head(&path).ok_or_else(|| StorageError::MoveConflict {
            tenant: tenant.clone(),
            reason: "its main has no commit".into(),
        })?;
        Ok(MoveStart {
            head,
            settings: repo.settings()?,
            since,
            moved,
        })
    }

    /// The first half of `tenant move --abort`: under the fence (see
    /// [`TenantRepo::fence`]), a move to `to` becomes `aborting`. Writes stay refused, and
    /// the tenant is no longer handed over: an import's check asks this shard just before the
    /// tenant becomes writable there, and refuses it now. Only then may the caller ask the
    /// target whether it took the tenant, and [`Storage::end_abort`] with the answer. Safe to
    /// run again (an abort that stopped halfway is `aborting` still).
    pub fn begin_abort(&self, tenant: &TenantId, to: &ShardUrl) -> Result<(), StorageError> {
        let path = self.repo_path(tenant);
        let repo = TenantRepo::open(tenant, &path)?;
        let conflict = |reason: String| StorageError::MoveConflict {
            tenant: tenant.clone(),
            reason,
        };
        repo.fence(|| match placement::read(&path)? {
            Some(Placement::Moving { to: at, since }) if &at == to => placement::write(
                &path,
                &Placement::Aborting {
                    to: to.clone(),
                    since,
                },
            ),
            Some(Placement::Aborting { to: at, .. }) if &at == to => Ok(()),
            Some(p @ Placement::Moved { .. }) => Err(conflict(format!(
                "it moved to {} already: move it back instead of aborting",
                p.to()
            ))),
            Some(p) => Err(conflict(format!(
                "it is {} {}, not {to}",
                if matches!(p, Placement::Aborting { .. }) {
                    "aborting its move to"
                } else {
                    "moving to"
                },
                p.to()
            ))),
            None => Err(conflict("it is not moving".into())),
        })
    }

    /// The second half of an abort, once the target answered: `taken` false (it does not
    /// serve the tenant, and no import can make it do so any more) clears the record, and the
    /// tenant takes writes here again; `taken` true puts the move back to `moving` (the target
    /// serves it: the move must be finished, not aborted).
    pub fn end_abort(
        &self,
        tenant: &TenantId,
        to: &ShardUrl,
        taken: bool,
    ) -> Result<(), StorageError> {
        let path = self.repo_path(tenant);
        let repo = TenantRepo::open(tenant, &path)?;
        repo.fence(|| match placement::read(&path)? {
            Some(Placement::Aborting { to: at, .. }) if &at == to && !taken => {
                placement::clear(&path)
            }
            Some(Placement::Aborting { to: at, since }) if &at == to => placement::write(
                &path,
                &Placement::Moving {
                    to: to.clone(),
                    since,
                },
            ),
            other => Err(StorageError::MoveConflict {
                tenant: tenant.clone(),
                reason: format!(
                    "it is no longer aborting its move to {to} (it is {}): another command changed it meanwhile",
                    other.as_ref().map_or("served", Placement::word)
                ),
            }),
        })
    }

    /// Step 4: the target serves the tenant now; this shard answers 421 for it.
    pub fn finish_move(&self, tenant: &TenantId, to: &ShardUrl) -> Result<(), StorageError> {
        let path = self.repo_path(tenant);
        match placement::read(&path)? {
            Some(Placement::Moved { to: at, .. }) if &at == to => Ok(()),
            Some(Placement::Moving { to: at, .. }) if &at == to => placement::write(
                &path,
                &Placement::Moved {
                    to: to.clone(),
                    at: std::time::SystemTime::now(),
                },
            ),
            _ => Err(StorageError::MoveConflict {
                tenant: tenant.clone(),
                reason: format!("it is not moving to {to}"),
            }),
        }
    }

    /// Archives a tenant that moved at least `grace` ago: its repository goes to
    /// `<data_dir>/archive/<tenant>.git.<unix secs>` (never deleted), and a tombstone stays in
    /// its place so that this shard keeps answering 421 for it. `None` when it is not due.
    pub fn archive_if_due(
        &self,
        tenant: &TenantId,
        grace: Duration,
    ) -> Result<Option<PathBuf>, StorageError> {
        let path = self.repo_path(tenant);
        let due = |path: &std::path::Path| -> Result<Option<ShardUrl>, StorageError> {
            Ok(match placement::read(path)? {
                Some(Placement::Moved { to, at }) if at.elapsed().unwrap_or_default() >= grace => {
                    Some(to)
                }
                _ => None,
            })
        };
        if due(&path)?.is_none() {
            return Ok(None);
        }
        // Under the turn that imports take to make a tenant writable here: a tenant that came
        // back meanwhile is not archived.
        let _turn = repo::creation_turn(&self.tenants_dir)?;
        let Some(to) = due(&path)? else {
            return Ok(None);
        };
        let archive = self.tenants_dir.with_file_name("archive");
        crate::storage::disk::create_dir_all_synced(&archive)?;
        let secs = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let into = archive.join(format!("{tenant}.git.{secs}"));
        // The tombstone first: a crash between the two leaves both, never neither.
        placement::write_tombstone(&self.tenants_dir, tenant, &to)?;
        std::fs::rename(&path, &into)
            .map_err(|e| StorageError::io("archive a moved tenant", &path, e))?;
        crate::storage::disk::sync_dir(&self.tenants_dir)?;
        crate::storage::disk::sync_dir(&archive)?;
        Ok(Some(into))
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::ShardUrl;
    use crate::storage::test_write as write;
    use crate::storage::StorageError;

    #[test]
    fn a_moving_tenant_takes_no_write_and_an_archived_one_is_not_made_again() {
        let (_dir, storage, acme) = crate::storage::test_storage();
        // A write keeps the repository open for the next one.
        write(&storage, &acme, "a: 1\n").unwrap();
        let to = ShardUrl::parse("http://b:8080").unwrap();
        let start = storage.begin_move(&acme, &to).unwrap();
        assert!(matches!(
            write(&storage, &acme, "a: 2\n"),
            Err(StorageError::TenantMoving { .. })
        ));
        // Another target is a conflict; the same one is a rerun.
        let other = ShardUrl::parse("http://c:8080").unwrap();
        assert!(matches!(
            storage.begin_move(&acme, &other),
            Err(StorageError::MoveConflict { .. })
        ));
        assert_eq!(storage.begin_move(&acme, &to).unwrap().head, start.head);
        storage.finish_move(&acme, &to).unwrap();
        assert!(matches!(
            write(&storage, &acme, "a: 3\n"),
            Err(StorageError::TenantMoved { .. })
        ));
        let repo = storage.repo_path(&acme);
        assert!(storage
            .archive_if_due(&acme, std::time::Duration::from_secs(3600))
            .unwrap()
            .is_none());
        let archived = storage
            .archive_if_due(&acme, std::time::Duration::ZERO)
            .unwrap()
            .expect("due");
        assert!(archived.join("HEAD").exists() && !repo.exists());
        // A write through the repository kept open finds it gone, and makes nothing again.
        assert!(matches!(
            write(&storage, &acme, "a: 4\n"),
            Err(StorageError::TenantMoved { .. })
        ));
        assert!(!repo.exists(), "an empty skeleton was made");
        assert!(matches!(
            storage.create_tenant(&acme, false),
            Err(StorageError::TenantMoved { .. })
        ));
    }

    #[test]
    fn an_abort_fences_first_and_settles_by_the_targets_answer() {
        let (_dir, storage, acme) = crate::storage::test_storage();
        let to = ShardUrl::parse("http://b:8080").unwrap();
        assert!(
            matches!(
                storage.begin_abort(&acme, &to),
                Err(StorageError::MoveConflict { .. })
            ),
            "nothing to abort"
        );
        storage.begin_move(&acme, &to).unwrap();
        storage.begin_abort(&acme, &to).unwrap();
        // Aborting: writes stay refused, the tenant is not handed over, and no move starts.
        assert_eq!(
            storage.placement(&acme).unwrap().map(|p| p.word()),
            Some("aborting")
        );
        assert!(matches!(
            write(&storage, &acme, "a: 1\n"),
            Err(StorageError::TenantMoving { .. })
        ));
        assert!(matches!(
            storage.begin_move(&acme, &to),
            Err(StorageError::MoveConflict { .. })
        ));
        assert!(matches!(
            storage.finish_move(&acme, &to),
            Err(StorageError::MoveConflict { .. })
        ));
        // A rerun of the abort is fine; the target took it: the move is back.
        storage.begin_abort(&acme, &to).unwrap();
        storage.end_abort(&acme, &to, true).unwrap();
        assert_eq!(
            storage.placement(&acme).unwrap().map(|p| p.word()),
            Some("moving")
        );
        // The target did not: writable here again, and a second end finds nothing to end.
        storage.begin_abort(&acme, &to).unwrap();
        storage.end_abort(&acme, &to, false).unwrap();
        assert_eq!(storage.placement(&acme).unwrap(), None);
        write(&storage, &acme, "a: 2\n").unwrap();
        assert!(matches!(
            storage.end_abort(&acme, &to, false),
            Err(StorageError::MoveConflict { .. })
        ));
    }
}

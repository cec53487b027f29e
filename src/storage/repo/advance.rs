//! The one way `main` moves, for a batch of API writes and for a push: its lock taken against the head the change was built on, then the durability order (the bytes synced, then the names, then the names synced before any answer), `main` put back when the last sync fails.
use super::refs::{RefLock, RefMove};
use super::staged::Staged;
use super::{TenantRepo, MAIN};
use crate::storage::disk::durable::{SyncGroup, SyncMark};
use crate::storage::disk::sync_dir;
use crate::storage::StorageError;
use git2::Oid;

/// A move of `main` from `old` to `new`, its lock held with the new value written.
pub(super) struct MainMove {
    pub old: Oid,
    pub new: Oid,
    pub lock: RefLock,
}

/// What one advance makes durable and names, in this order: the staged objects, the refs
/// moved before `main` in their order (a push's notes, which name the pushed commits; a
/// proposal's commit, then the records that name it), `main`, then the refs moved after it
/// (the no-op records, which may name `main`'s new head, so never before it).
pub(super) struct Advance {
    pub staged: Staged,
    /// The sync group's mark from before any of these bytes were written (group mode).
    pub mark: Option<SyncMark>,
    pub before: Vec<RefLock>,
    pub main: Option<MainMove>,
    pub after: Option<RefLock>,
}

impl TenantRepo {
    /// `main`'s lock with `new` written, checked against `old` (`Moved` when `main` is not
    /// there any more); a lock a dead planfiles writer left is cleared and taken once more.
    pub(super) fn lock_main(&self, old: Oid, new: Oid, fsync: bool) -> Result<RefLock, RefMove> {
        self.lock_ref_clearing(MAIN, Some(old), new, fsync)
    }

    /// The durability order (docs/ARCHITECTURE.md): 1. one sync makes every staged object
    /// and every lock's value durable; 2. the objects are named and the refs moved; 3. a
    /// second sync makes the names durable before any answer. When that sync fails `main`
    /// goes back (unless it moved again), and `undo_after` puts the refs after it back. No
    /// name ever points at bytes a power loss can still take. `Ok(Some(e))`: all moved but
    /// the refs after `main`, whose failure fails only what they record.
    pub(super) fn advance(
        &self,
        advance: Advance,
        sync: Option<&SyncGroup>,
        path: &'static str,
        undo_after: impl FnOnce(&StorageError),
    ) -> Result<Option<StorageError>, StorageError> {
        let Advance {
            staged,
            mark,
            before,
            main,
            after,
        } = advance;
        // 1. The bytes (group: one shared syncfs since the mark; fsync mode: each was synced
        // as written, and the objects found there are synced now).
        match sync {
            Some(_) => self.group_sync_since(sync, mark, path)?,
            None => self.sync_objects(&staged.found, path)?,
        }
        // 2. The names.
        staged.publish()?;
        let ref_mark = sync.map(SyncGroup::mark);
        let mut folders = Vec::new();
        for lock in before {
            folders.push(lock.folder().to_owned());
            lock.commit()?;
        }
        if let Some(main) = &main {
            folders.push(main.lock.folder().to_owned());
        }
        let moved = main
            .map(|m| m.lock.commit().map(|()| (m.old, m.new)))
            .transpose()?;
        let (mut after_moved, mut after_failed) = (false, None);
        if let Some(lock) = after {
            let folder = lock.folder().to_owned();
            match lock.commit() {
                Ok(()) => {
                    folders.push(folder);
                    after_moved = true;
                }
                Err(e) => after_failed = Some(e),
            }
        }
        // 3. The names are durable before any answer; a write that fails changes nothing.
        folders.sort();
        folders.dedup();
        let durable = match sync {
            Some(_) => self.group_sync_since(sync, ref_mark, path),
            None => folders.iter().try_for_each(|f| sync_dir(f)),
        };
        if let Err(e) = durable {
            if let Some((old, new)) = moved {
                self.undo_unsynced(MAIN, old, new, sync, path, &e);
            }
            if after_moved {
                undo_after(&e);
            }
            return Err(e);
        }
        Ok(after_failed)
    }
}

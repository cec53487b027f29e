//! The on-disk record of a tenant that leaves this shard: `planfiles-placement` in its repository (moving, then moved), and `<tenant>.moved` beside the repositories once it is archived.
//!
//! Both are plain files that every process on the data dir reads, so a `tenant move` run as
//! its own process stops the writes of a running service: the ref compare-and-swap reads the
//! record under the ref's lock, and the move takes and drops that lock after writing the
//! record (`repo/refs.rs`: `fence`), so no write that began before it can land after it.
pub(super) mod import;
pub(super) mod moves;
pub(super) mod seed;

use super::disk::{remove_synced, replace_synced};
use super::{Placement, Storage, StorageError};
use crate::domain::{ShardUrl, TenantId};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// What a caller is about to do with a tenant here (see [`Storage::locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::storage) enum Access {
    /// Read its files, versions or history, clone it, look a commit up: while it is here,
    /// until it moved (reads go on while it moves).
    Read,
    /// Follow its `main` (change streams, held long-polls): while it takes writes here. A
    /// tenant that began to move has no future here: its followers go to its next shard.
    /// (Writes are decided by the re-reads under the tenant's write lock and each ref's lock,
    /// `repo/commit.rs` and `repo/refs.rs`, which a move's fence orders against.)
    Follow,
    /// Ask or change where it is, list it, mark a key in flight: while its repository is
    /// here, whatever its placement.
    Manage,
}

impl Storage {
    /// Whether `access` to `tenant` may happen on this shard, and its repository's path when
    /// it may: the one answer to "served, moving, moved or archived?". No repository:
    /// `TenantNotFound`, or `TenantMoved` for a tenant archived after its move (its
    /// tombstone). Moved: `TenantMoved` for everything but `Manage`. Moving (or its move being
    /// aborted): `TenantMoving` for `Follow`.
    pub(in crate::storage) fn locate(
        &self,
        tenant: &TenantId,
        access: Access,
    ) -> Result<PathBuf, StorageError> {
        let path = self.repo_path(tenant);
        if !path.is_dir() {
            return Err(missing(&path, tenant));
        }
        match (read(&path)?, access) {
            (None, _) | (Some(_), Access::Manage) => Ok(path),
            (Some(Placement::Moving { .. } | Placement::Aborting { .. }), Access::Read) => Ok(path),
            (Some(p), _) => Err(refusal(tenant, &p)),
        }
    }
}

/// The record's name in the repository folder (the inotify watches of `watch.rs` and the
/// change feed treat it like a move of `main`).
pub(super) const FILE: &str = "planfiles-placement";

/// The record of `repo`, if any: one line, `moving <unix secs> <url>`, `aborting …` (the
/// seconds of the move it aborts) or `moved …`.
pub(super) fn read(repo: &Path) -> Result<Option<Placement>, StorageError> {
    let path = repo.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io("read the placement record", &path, e)),
    };
    parse(&text)
        .map(Some)
        .ok_or_else(|| StorageError::io("read the placement record", &path, bad(&text)))
}

fn bad(text: &str) -> std::io::Error {
    std::io::Error::new(
        ErrorKind::InvalidData,
        format!(
            "not a placement record: {:?}",
            text.chars().take(80).collect::<String>()
        ),
    )
}

fn parse(text: &str) -> Option<Placement> {
    let mut words = text.trim_end().splitn(3, ' ');
    let (state, secs, url) = (words.next()?, words.next()?, words.next()?);
    // Seconds, with milliseconds after a dot (records written before had whole seconds).
    let (whole, millis) = secs.split_once('.').unwrap_or((secs, "0"));
    let millis: u64 = format!("{millis:0<3}").get(..3)?.parse().ok()?;
    let at = UNIX_EPOCH + Duration::from_secs(whole.parse().ok()?) + Duration::from_millis(millis);
    let to = ShardUrl::parse(url).ok()?;
    match state {
        "moving" => Some(Placement::Moving { to, since: at }),
        "aborting" => Some(Placement::Aborting { to, since: at }),
        "moved" => Some(Placement::Moved { to, at }),
        _ => None,
    }
}

fn format(placement: &Placement) -> String {
    let at = match placement {
        Placement::Moving { since, .. } | Placement::Aborting { since, .. } => since,
        Placement::Moved { at, .. } => at,
    };
    // To the millisecond: a rerun of the move reports how long writes were refused from it.
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!(
        "{} {}.{:03} {}\n",
        placement.word(),
        since.as_secs(),
        since.subsec_millis(),
        placement.to()
    )
}

/// The hook that makes plain git respect the record: git runs `hooks/reference-transaction`
/// for every ref update (a commit, `update-ref`, a push, a fetch into the repository) and
/// aborts the update when it refuses the prepared transaction.
const HOOK: &str = "hooks/reference-transaction";
const HOOK_SCRIPT: &str = r#"#!/bin/sh
# Installed by planfiles tenant move. While this tenant moves to another shard, or after it
# moved (planfiles-placement exists), its refs take no write from plain git either: the move
# hands over the head it read, and a commit made here after that would be lost with it.
test "$1" = prepared || exit 0
test -e "${GIT_DIR:-.}/planfiles-placement" || exit 0
echo "planfiles: this tenant is moving to another shard, or moved: write to it there" >&2
exit 1
"#;

/// Installs the hook that refuses plain git's ref writes while a record exists (synced,
/// executable), before the first record is written. A `reference-transaction` hook of the
/// operator's own is left as it is (and the refusal then rests on planfiles' own writers and
/// the fence's wait for git's locks), with a warning.
pub(super) fn install_fence_hook(repo: &Path) -> Result<(), StorageError> {
    use std::os::unix::fs::PermissionsExt;
    let path = repo.join(HOOK);
    match std::fs::read_to_string(&path) {
        Ok(text) if text == HOOK_SCRIPT => return Ok(()),
        Ok(_) => {
            tracing::warn!(
                repo = %repo.display(),
                "hooks/reference-transaction is not planfiles': plain git's commits are not refused during the move"
            );
            return Ok(());
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io("read a hook", &path, e)),
    }
    let hooks = repo.join("hooks");
    if !hooks.is_dir() {
        super::disk::create_dir_synced(&hooks)
            .map_err(|e| StorageError::io("create the hooks folder", &hooks, e))?;
    }
    replace_synced(&path, HOOK_SCRIPT.as_bytes(), "install the move's hook")?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .and_then(|()| std::fs::File::open(&path)?.sync_all())
        .map_err(|e| StorageError::io("install the move's hook", &path, e))
}

/// Writes the record durably: aside, synced, renamed over the old one, the folder synced.
pub(super) fn write(repo: &Path, placement: &Placement) -> Result<(), StorageError> {
    replace_synced(
        &repo.join(FILE),
        format(placement).as_bytes(),
        "write the placement record",
    )
}

/// Removes the record (the tenant is writable here again), durably.
pub(super) fn clear(repo: &Path) -> Result<(), StorageError> {
    remove_synced(&repo.join(FILE), "remove the placement record")
}

/// The re-read that keeps a write from landing after a move began, named as such: called
/// under the tenant's write lock (`repo/commit.rs`, before a batch) and under each ref's lock
/// (`repo/refs.rs`, before a ref moves), the locks the move's fence (`repo/refs.rs`) takes
/// after it writes the record. Every other "may this happen here" is [`Storage::locate`].
pub(in crate::storage) fn reread_under_lock(
    repo: &Path,
    tenant: &TenantId,
) -> Result<(), StorageError> {
    match read(repo)? {
        None => Ok(()),
        Some(p) => Err(refusal(tenant, &p)),
    }
}

/// The refusal a write meets under `placement`.
pub(super) fn refusal(tenant: &TenantId, placement: &Placement) -> StorageError {
    match placement {
        Placement::Moving { .. } | Placement::Aborting { .. } => StorageError::TenantMoving {
            tenant: tenant.clone(),
        },
        Placement::Moved { to, .. } => StorageError::TenantMoved {
            tenant: tenant.clone(),
            to: to.clone(),
        },
    }
}

/// `<tenants>/<tenant>.moved`: what is left of a tenant archived after its move, so that this
/// shard answers 421 for it, and neither `tenant create` nor a seed makes it again here.
pub(super) fn tombstone_path(tenants_dir: &Path, tenant: &TenantId) -> PathBuf {
    tenants_dir.join(format!("{tenant}.moved"))
}

/// The shard a tombstone names, if there is one.
pub(super) fn tombstone(tenants_dir: &Path, tenant: &TenantId) -> Option<ShardUrl> {
    let text = std::fs::read_to_string(tombstone_path(tenants_dir, tenant)).ok()?;
    ShardUrl::parse(text.trim()).ok()
}

/// The error for a tenant without a repository here: moved (a tombstone), else not found.
pub(super) fn missing(repo: &Path, tenant: &TenantId) -> StorageError {
    let tenants_dir = repo.parent().unwrap_or(Path::new("."));
    match tombstone(tenants_dir, tenant) {
        Some(to) => StorageError::TenantMoved {
            tenant: tenant.clone(),
            to,
        },
        None => StorageError::TenantNotFound(tenant.clone()),
    }
}

/// Writes the tombstone durably.
pub(super) fn write_tombstone(
    tenants_dir: &Path,
    tenant: &TenantId,
    to: &ShardUrl,
) -> Result<(), StorageError> {
    replace_synced(
        &tombstone_path(tenants_dir, tenant),
        format!("{to}\n").as_bytes(),
        "write a tombstone",
    )
}

/// Removes the tombstone (the tenant came back), durably.
pub(super) fn clear_tombstone(tenants_dir: &Path, tenant: &TenantId) -> Result<(), StorageError> {
    remove_synced(&tombstone_path(tenants_dir, tenant), "remove a tombstone")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let to = ShardUrl::parse("http://b:8080").unwrap();
        // Kept to the millisecond (a rerun reports the refusal from it).
        let at = UNIX_EPOCH + Duration::from_millis(1_764_000_000_123);
        // A record of whole seconds, as written before, still reads.
        std::fs::write(dir.path().join(FILE), "moving 1764000000 http://b:8080\n").unwrap();
        assert_eq!(
            read(dir.path()).unwrap(),
            Some(Placement::Moving {
                to: to.clone(),
                since: UNIX_EPOCH + Duration::from_secs(1_764_000_000)
            })
        );
        for placement in [
            Placement::Moving {
                to: to.clone(),
                since: at,
            },
            Placement::Aborting {
                to: to.clone(),
                since: at,
            },
            Placement::Moved { to: to.clone(), at },
        ] {
            write(dir.path(), &placement).unwrap();
            assert_eq!(read(dir.path()).unwrap(), Some(placement));
        }
        std::fs::write(dir.path().join(FILE), "moved soon http://b").unwrap();
        assert!(read(dir.path()).is_err());
        clear(dir.path()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
    }
}

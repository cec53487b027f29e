//! Upkeep: packs a tenant's loose objects while it is being served, since libgit2 has no gc.
//!
//! Safe beside readers and writers without blocking them: a new pack is written and synced
//! before anything is deleted; only loose objects that are in it are deleted, and never their
//! `objects/xx/` folders, which a concurrent libgit2 write may be about to rename into; old
//! packs are deleted only after a pack holding all their objects is on disk. Readers that miss
//! an object re-scan the packs (libgit2 does that on a miss).
use super::{git_err, sync_dir, SyncGroup, TenantRepo};
use crate::storage::{RepackReport, StorageError};
use git2::Oid;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Once a tenant has this many packs, the next repack puts everything into one.
const MAX_PACKS: usize = 8;
/// The file a repack holds an OS lock on, so that one runs per tenant across processes.
const UPKEEP_LOCK_FILE: &str = "planfiles-upkeep.lock";

impl TenantRepo<'_> {
    /// About how many loose objects the repository holds, from one fan-out folder (as
    /// `git gc --auto` estimates it). Costs one small directory listing.
    pub(in crate::storage) fn loose_estimate(&self) -> usize {
        let sample = self.path.join("objects/17");
        std::fs::read_dir(sample)
            .map(|d| d.filter_map(Result::ok).filter(is_object_name).count() * 256)
            .unwrap_or(0)
    }

    /// Packs the loose objects into a new pack, or everything into one pack when `full` or
    /// when there are [`MAX_PACKS`] packs already, then deletes what the new pack made
    /// redundant. Returns `None` when another repack of this tenant is running.
    pub(in crate::storage) fn repack(
        &self,
        full: bool,
        sync: Option<&SyncGroup>,
    ) -> Result<Option<RepackReport>, StorageError> {
        let started = Instant::now();
        let Some(_lock) = self.try_upkeep_lock()? else {
            return Ok(None);
        };
        let err = |op| git_err(self.tenant, op, "");
        let objects = self.path.join("objects");
        let pack_dir = objects.join("pack");
        let loose = loose_objects(&objects)?;
        let packs_before = pack_names(&pack_dir)?;
        let full = (full && packs_before.len() + usize::from(!loose.is_empty()) > 1)
            || packs_before.len() >= MAX_PACKS;
        let mut report = RepackReport {
            loose_before: loose.len(),
            packs_before: packs_before.len(),
            objects_packed: 0,
            loose_removed: 0,
            packs_removed: 0,
            full,
            duration: Default::default(),
        };
        if loose.is_empty() && !full {
            report.duration = started.elapsed();
            return Ok(Some(report));
        }
        let mut builder = self.repo.packbuilder().map_err(err("start a pack"))?;
        builder.set_threads(1);
        if full {
            // Every object of every pack and every loose object: nothing reachable or not is
            // dropped, so a write in flight that reuses an old object keeps it.
            let odb = self.repo.odb().map_err(err("open the object database"))?;
            let mut failed = None;
            odb.foreach(|oid| match builder.insert_object(*oid, None) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            })
            .map_err(err("list objects"))?;
            if let Some(e) = failed {
                return Err(err("add an object to the pack")(e));
            }
        } else {
            for (oid, _) in &loose {
                builder
                    .insert_object(*oid, None)
                    .map_err(err("add an object to the pack"))?;
            }
        }
        report.objects_packed = builder.object_count();
        std::fs::create_dir_all(&pack_dir)
            .map_err(|e| StorageError::io("create the pack folder", &pack_dir, e))?;
        // In fsync mode libgit2 syncs the pack, its index and the folder; in group mode the
        // shared syncfs below does.
        builder.write(&pack_dir, 0).map_err(err("write the pack"))?;
        let new_pack = builder
            .name()
            .map_err(err("name the pack"))?
            .map(|n| format!("pack-{n}"));
        sync_dir(&pack_dir)?;
        self.group_sync(sync, "")?;

        // Everything below only deletes what the new, synced pack holds.
        for (_, path) in &loose {
            if std::fs::remove_file(path).is_ok() {
                report.loose_removed += 1;
            }
        }
        if full {
            for name in packs_before
                .iter()
                .filter(|n| Some(*n) != new_pack.as_ref())
            {
                if pack_dir.join(format!("{name}.keep")).exists() {
                    continue;
                }
                for ext in ["idx", "pack", "rev", "bitmap", "mtimes"] {
                    let _ = std::fs::remove_file(pack_dir.join(format!("{name}.{ext}")));
                }
                report.packs_removed += 1;
            }
            sync_dir(&pack_dir)?;
        }
        report.duration = started.elapsed();
        Ok(Some(report))
    }

    fn try_upkeep_lock(&self) -> Result<Option<File>, StorageError> {
        let path = self.path.join(UPKEEP_LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io("open the upkeep lock", &path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(StorageError::io("take the upkeep lock", &path, e)),
        }
    }
}

fn is_object_name(entry: &std::fs::DirEntry) -> bool {
    let name = entry.file_name();
    let name = name.as_encoded_bytes();
    name.len() == 38 && name.iter().all(u8::is_ascii_hexdigit)
}

/// Every loose object: its id and its file.
fn loose_objects(objects: &Path) -> Result<Vec<(Oid, PathBuf)>, StorageError> {
    let mut out = Vec::new();
    let dirs =
        std::fs::read_dir(objects).map_err(|e| StorageError::io("list objects", objects, e))?;
    for dir in dirs.filter_map(Result::ok) {
        let fanout = dir.file_name();
        let Some(fanout) = fanout.to_str().filter(|n| n.len() == 2) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok).filter(is_object_name) {
            let rest = entry.file_name();
            let hex = format!("{fanout}{}", rest.to_string_lossy());
            if let Ok(oid) = Oid::from_str(&hex) {
                out.push((oid, entry.path()));
            }
        }
    }
    Ok(out)
}

/// The packs in `objects/pack`, as `pack-<hash>` without the extension.
fn pack_names(pack_dir: &Path) -> Result<Vec<String>, StorageError> {
    let entries = match std::fs::read_dir(pack_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StorageError::io("list packs", pack_dir, e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".pack").map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

//! Upkeep: packs a tenant's loose objects while it is being served, since libgit2 has no gc.
//!
//! Safe beside readers and writers without blocking them: a new pack is written and synced
//! before anything is deleted; only loose objects that are in it are deleted, and never their
//! `objects/xx/` folders, which a concurrent libgit2 write may be about to rename into; old
//! packs are deleted only after a pack holding all their objects is on disk. Readers that miss
//! an object re-scan the packs (libgit2 does that on a miss).
use super::{git_err, TenantRepo};
use crate::storage::disk::{self, sync_dir};
use crate::storage::{RepackReport, StorageError};
use git2::Oid;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Once a tenant has this many packs, the next repack puts everything into one.
const MAX_PACKS: usize = 8;
/// The file a repack holds an OS lock on, so that one runs per tenant across processes.
const UPKEEP_LOCK_FILE: &str = "planfiles-upkeep.lock";

impl TenantRepo {
    /// About how many loose objects the repository holds, from one fan-out folder (as
    /// `git gc --auto` estimates it). Costs one small directory listing.
    pub(in crate::storage) fn loose_estimate(&self) -> usize {
        let sample = self.path.join("objects/17");
        std::fs::read_dir(sample)
            .map(|d| d.filter_map(Result::ok).filter(is_object_name).count() * 256)
            .unwrap_or(0)
    }

    /// Packs the loose objects into a new pack. With `full`, everything goes into one pack.
    /// Once there are [`MAX_PACKS`] packs, the smaller ones are merged, leaving the largest
    /// alone unless it is less than twice their size (so a big history is not rewritten on
    /// every merge). Then deletes what the new pack made redundant. Returns `None` when
    /// another repack of this tenant is running.
    pub(in crate::storage) fn repack(
        &self,
        full: bool,
        recycle: bool,
    ) -> Result<Option<RepackReport>, StorageError> {
        let started = Instant::now();
        let Some(_lock) = self.try_upkeep_lock()? else {
            return Ok(None);
        };
        let err = |op| git_err(&self.tenant, op, "");
        let objects = self.path.join("objects");
        let pack_dir = objects.join("pack");
        let loose = loose_objects(&objects)?;
        let packs = packs(&pack_dir)?;
        let merge: Vec<&Pack> = if full && packs.len() + usize::from(!loose.is_empty()) > 1 {
            packs.iter().collect()
        } else if packs.len() >= MAX_PACKS {
            let largest = packs.iter().max_by_key(|p| p.bytes).expect("not empty");
            let rest: u64 = packs.iter().map(|p| p.bytes).sum::<u64>() - largest.bytes;
            if largest.bytes >= 2 * rest {
                packs.iter().filter(|p| p.name != largest.name).collect()
            } else {
                packs.iter().collect()
            }
        } else {
            Vec::new()
        };
        let kind = if merge.len() == packs.len() && (full || !packs.is_empty()) {
            "full"
        } else if merge.is_empty() {
            "incremental"
        } else {
            "merge"
        };
        let mut report = RepackReport {
            loose_before: loose.len(),
            packs_before: packs.len(),
            objects_packed: 0,
            loose_removed: 0,
            packs_removed: 0,
            kind,
            duration: Default::default(),
        };
        if loose.is_empty() && merge.is_empty() {
            report.duration = started.elapsed();
            return Ok(Some(report));
        }
        let mut builder = self.repo.packbuilder().map_err(err("start a pack"))?;
        builder.set_threads(1);
        // Every loose object and every object of the merged packs, reachable or not: a write
        // in flight that reuses an old object keeps it.
        for pack in &merge {
            for oid in pack_index(&pack_dir.join(format!("{}.idx", pack.name)))? {
                builder
                    .insert_object(oid, None)
                    .map_err(err("add an object to the pack"))?;
            }
        }
        for (oid, _) in &loose {
            builder
                .insert_object(*oid, None)
                .map_err(err("add an object to the pack"))?;
        }
        report.objects_packed = builder.object_count();
        // `objects/pack` only: a repository archived meanwhile is not made again.
        disk::create_dir_synced(&pack_dir)
            .map_err(|e| StorageError::io("create a directory", &pack_dir, e))?;
        builder.write(&pack_dir, 0).map_err(err("write the pack"))?;
        let new_pack = builder
            .name()
            .map_err(err("name the pack"))?
            .map(|n| format!("pack-{n}"));
        // The pack, its index (and reverse index) and the folder that gained them are on
        // disk before anything they make redundant is deleted, in both durability modes and
        // on every volume (libgit2 syncs them only in fsync mode; syncfs does not reach a
        // FUSE daemon): a power loss mid-repack leaves every object reachable.
        if let Some(name) = &new_pack {
            for ext in ["pack", "idx", "rev"] {
                let file = pack_dir.join(format!("{name}.{ext}"));
                if ext != "rev" || file.exists() {
                    disk::sync_file(&file)?;
                }
            }
        }
        sync_dir(&pack_dir)?;

        // Everything below only deletes what the new, synced pack holds.
        // With `recycle`, retired rather than deleted: their files become new objects' and
        // ref locks' (`spares.rs`).
        let files: Vec<PathBuf> = loose.into_iter().map(|(_, path)| path).collect();
        report.loose_removed = super::spares::retire(&self.path, &files, recycle);
        for pack in merge.iter().filter(|p| Some(&p.name) != new_pack.as_ref()) {
            if pack_dir.join(format!("{}.keep", pack.name)).exists() {
                continue;
            }
            for ext in ["idx", "pack", "rev", "bitmap", "mtimes"] {
                let _ = std::fs::remove_file(pack_dir.join(format!("{}.{ext}", pack.name)));
            }
            report.packs_removed += 1;
        }
        if report.packs_removed > 0 {
            sync_dir(&pack_dir)?;
        }
        report.duration = started.elapsed();
        Ok(Some(report))
    }

    fn try_upkeep_lock(&self) -> Result<Option<File>, StorageError> {
        let path = self.path.join(UPKEEP_LOCK_FILE);
        let file = disk::open_or_create(&path)
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

/// A pack in `objects/pack`: `pack-<hash>` without the extension, and its size.
struct Pack {
    name: String,
    bytes: u64,
}

fn packs(pack_dir: &Path) -> Result<Vec<Pack>, StorageError> {
    let entries = match std::fs::read_dir(pack_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StorageError::io("list packs", pack_dir, e)),
    };
    let mut packs: Vec<Pack> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let name = name.strip_suffix(".pack")?.to_owned();
            let bytes = e.metadata().ok()?.len();
            Some(Pack { name, bytes })
        })
        .collect();
    packs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(packs)
}

/// The object ids a pack index lists (version 2, as git and libgit2 write it, or version 1).
fn pack_index(path: &Path) -> Result<Vec<Oid>, StorageError> {
    let bytes = std::fs::read(path).map_err(|e| StorageError::io("read a pack index", path, e))?;
    parse_pack_index(&bytes).ok_or_else(|| {
        StorageError::io(
            "read a pack index",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, "not a pack index"),
        )
    })
}

fn parse_pack_index(bytes: &[u8]) -> Option<Vec<Oid>> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    // v2: magic, version, fanout, names; v1: fanout, then (offset, name) entries.
    let (fanout, names, stride) = if bytes.starts_with(b"\xfftOc") {
        (u32_at(4).filter(|v| *v == 2).map(|_| 8)?, 8 + 256 * 4, 20)
    } else {
        (0, 256 * 4 + 4, 24)
    };
    let count = u32_at(fanout + 255 * 4)? as usize;
    (0..count)
        .map(|i| {
            let at = names + i * stride;
            Oid::from_bytes(bytes.get(at..at + 20)?).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_pack_index;

    #[test]
    fn reads_the_object_ids_of_a_version_2_index_and_refuses_garbage() {
        let mut idx = b"\xfftOc".to_vec();
        idx.extend_from_slice(&2u32.to_be_bytes());
        for i in 0..256u32 {
            idx.extend_from_slice(&(if i >= 0xab { 2u32 } else { 0 }).to_be_bytes());
        }
        idx.extend_from_slice(&[0xab; 20]);
        idx.extend_from_slice(&[0xac; 20]);
        let ids = parse_pack_index(&idx).unwrap();
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[1].to_string(), "ac".repeat(20));
        assert!(parse_pack_index(&idx[..100]).is_none());
        assert!(parse_pack_index(b"").is_none());
    }
}

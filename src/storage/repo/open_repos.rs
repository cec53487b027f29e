//! `OpenRepos`: tenant repositories kept open between writes, or lent out for reads and kept between them (`Storage` has one of each), with libgit2's object cache, the least recently used closed first. A repository is opened again when it may have changed under libgit2's feet: its folder replaced, or its packs changed (a repack, `git gc`, a `git fetch` or `fast-import` that wrote a pack), as the stamp of `objects/pack` tells. Loose objects and refs need no such check: they are read by path every time.
use super::TenantRepo;
use crate::domain::TenantId;
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

/// Repositories kept open at most: each holds a few descriptors (packs, their indexes) and
/// libgit2's caches.
const KEPT: usize = 64;

/// The repositories kept, by tenant, with the tick of their last use and their stamp.
type Kept = HashMap<TenantId, (u64, Stamp, TenantRepo), RandomState>;

#[derive(Default)]
pub(in crate::storage) struct OpenRepos {
    /// By tenant: the tick of its last use, its stamp when last used, the repository. Only
    /// tenants that exist and had a write (a read) are here, at most [`KEPT`].
    map: Mutex<(u64, Kept)>,
}

impl std::fmt::Debug for OpenRepos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpenRepos")
    }
}

/// What tells that a repository's folder or its packs changed: the folder's inode, and the
/// inode and modification time of `objects/pack` (a pack added or removed touches it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    repo: u64,
    packs: (u64, i64, i64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    let repo = std::fs::metadata(path).ok()?.ino();
    let packs = std::fs::metadata(path.join("objects/pack")).ok()?;
    Some(Stamp {
        repo,
        packs: (packs.ino(), packs.mtime(), packs.mtime_nsec()),
    })
}

impl OpenRepos {
    /// The tenant's repository, taken out (one user at a time: a tenant has one writer per
    /// process); `None` when it is not open, or its folder or packs changed since.
    pub(in crate::storage) fn take(&self, tenant: &TenantId, path: &Path) -> Option<TenantRepo> {
        let (_, then, repo) = {
            let mut guard = self.map.lock().unwrap_or_else(|e| e.into_inner());
            guard.1.remove(tenant)?
        };
        (stamp(path) == Some(then)).then_some(repo)
    }

    /// Keeps `repo` open for the tenant's next write, closing the least recently used beyond
    /// [`KEPT`].
    pub(in crate::storage) fn put(&self, tenant: &TenantId, path: &Path, repo: TenantRepo) {
        let Some(now) = stamp(path) else {
            return;
        };
        let mut guard = self.map.lock().unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        let tick = guard.0;
        guard.1.insert(tenant.clone(), (tick, now, repo));
        if guard.1.len() > KEPT {
            let oldest = guard
                .1
                .iter()
                .min_by_key(|(_, (t, _, _))| *t)
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                guard.1.remove(&id);
            }
        }
    }
}

/// A repository lent out by [`OpenRepos::lend`] for a read; it goes back when dropped.
pub(in crate::storage) struct Lent<'a> {
    repos: &'a OpenRepos,
    tenant: TenantId,
    path: std::path::PathBuf,
    repo: Option<TenantRepo>,
}

impl OpenRepos {
    /// The tenant's repository at `path` for a read: a kept one when it is still good (see
    /// [`OpenRepos::take`]), else opened now; kept again after the read. Readers of one
    /// tenant at the same moment each get their own (one of them is kept).
    pub(in crate::storage) fn lend(
        &self,
        tenant: &TenantId,
        path: &Path,
    ) -> Result<Lent<'_>, crate::storage::StorageError> {
        let repo = match self.take(tenant, path) {
            Some(repo) => repo,
            None => TenantRepo::open(tenant, path)?,
        };
        Ok(Lent {
            repos: self,
            tenant: tenant.clone(),
            path: path.to_owned(),
            repo: Some(repo),
        })
    }
}

impl std::ops::Deref for Lent<'_> {
    type Target = TenantRepo;

    fn deref(&self) -> &TenantRepo {
        self.repo.as_ref().expect("present until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(repo) = self.repo.take() {
            self.repos.put(&self.tenant, &self.path, repo);
        }
    }
}

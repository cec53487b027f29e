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
/// Taken before a repository is taken out or opened, so that one opened before a change
/// (a `git gc`, a push's first pack) is never kept under the stamp of after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::storage) struct Stamp {
    repo: u64,
    packs: (u64, i64, i64),
}

/// The repository's stamp now; `None` without a folder or an `objects/pack` (libgit2 would
/// not see a pack that comes later there: such a repository is not kept).
pub(in crate::storage) fn stamp(path: &Path) -> Option<Stamp> {
    let repo = std::fs::metadata(path).ok()?.ino();
    let packs = std::fs::metadata(path.join("objects/pack")).ok()?;
    Some(Stamp {
        repo,
        packs: (packs.ino(), packs.mtime(), packs.mtime_nsec()),
    })
}

impl OpenRepos {
    /// The tenant's repository, taken out (one user at a time: a tenant has one writer per
    /// process); `None` when it is not open, or its folder or packs changed since (`now`, the
    /// stamp just taken, is not the one it was kept under).
    pub(in crate::storage) fn take(
        &self,
        tenant: &TenantId,
        now: Option<Stamp>,
    ) -> Option<TenantRepo> {
        let (_, then, repo) = {
            let mut guard = self.map.lock().unwrap_or_else(|e| e.into_inner());
            guard.1.remove(tenant)?
        };
        (now == Some(then)).then_some(repo)
    }

    /// Keeps `repo` open for the tenant's next use, closing the least recently used beyond
    /// [`KEPT`]; only when the stamp is still `before`, the one taken before `repo` was taken
    /// out or opened (else it is closed: it may not know what changed).
    pub(in crate::storage) fn put(
        &self,
        tenant: &TenantId,
        path: &Path,
        repo: TenantRepo,
        before: Option<Stamp>,
    ) {
        let Some(now) = stamp(path).filter(|now| Some(*now) == before) else {
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
    before: Option<Stamp>,
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
        let before = stamp(path);
        let repo = match self.take(tenant, before) {
            Some(repo) => repo,
            None => TenantRepo::open(tenant, path)?,
        };
        Ok(Lent {
            repos: self,
            tenant: tenant.clone(),
            path: path.to_owned(),
            repo: Some(repo),
            before,
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
            self.repos.put(&self.tenant, &self.path, repo, self.before);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::storage::repo::write_tests::git;

    /// A plain-git commit on `main` (an empty tree, `main` as its parent); its id.
    fn plain_commit(repo: &std::path::Path, message: &str) -> String {
        let tree = git(repo, &["mktree"]);
        let commit = git(repo, &["commit-tree", &tree, "-p", "main", "-m", message]);
        git(repo, &["update-ref", "refs/heads/main", &commit]);
        commit
    }

    /// A repository copied without its empty folders has no `objects/pack`: one opened for a
    /// read then never sees a pack made later. A `git gc` during that read (the pack folder
    /// made, every object moved into a pack) must not leave it kept for the next reads.
    #[test]
    fn a_repository_opened_before_its_first_pack_is_not_kept() {
        let (_dir, storage, tenant) = crate::storage::test_storage();
        let path = storage.repo_path(&tenant);
        std::fs::remove_dir(path.join("objects/pack")).unwrap();
        // A read's view of `main`, through a lent repository.
        let head = || {
            let lent = storage.read_repos.lend(&tenant, &path).unwrap();
            lent.head_state().map(|h| h.commit.to_string())
        };
        let lent = storage.read_repos.lend(&tenant, &path).unwrap();
        lent.head_state().unwrap();
        let commit = plain_commit(&path, "packed only");
        git(&path, &["gc", "--quiet"]);
        assert!(path.join("objects/pack").is_dir());
        drop(lent);
        assert_eq!(head().unwrap(), commit);
        // Kept from here on: a second read finds it, and sees the next commit too.
        let next = plain_commit(&path, "loose");
        assert_eq!(head().unwrap(), next);
    }
}

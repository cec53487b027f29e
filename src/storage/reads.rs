//! The read side of `Storage`: a tenant's head, files, old versions, history pages, diffs, replays for the change feed, and clones; each call one operation on one tenant's repository, where [`Storage::locate`] says it may happen.
use super::placement::Access;
use super::repo::{self, TenantRepo};
use super::{
    gone_or, Ancestry, FileDiff, FileSnapshot, HeadState, HistoryPage, ReadOutcome, Replay,
    ReplayPlan, Storage, StorageError, TenantInfo, UploadPack,
};
use crate::domain::{BlobId, CommitId, Cursor, ObjectId, PlanFile, TenantId};

impl Storage {
    /// `main`'s commit and both files' blob ids in it.
    /// A tenant that is moving or moved has none here (its streams end).
    pub fn head_state(&self, tenant: &TenantId) -> Result<HeadState, StorageError> {
        self.read_repo(tenant, Access::Follow)?.head_state()
    }

    /// What the commits after `from` up to `to` on `main`'s first-parent line changed, oldest
    /// first, at most `max_commits` commits at a time; a reset when `from` is not on the line
    /// that leads to `to` (within 10,000 commits).
    pub fn replay(
        &self,
        tenant: &TenantId,
        from: CommitId,
        to: CommitId,
        max_commits: usize,
    ) -> Result<Replay, StorageError> {
        let repo = self.read_repo(tenant, Access::Read)?;
        self.replay_in(&repo, from, to, max_commits)
    }

    /// The change feed's read of a move of `main`: the head (wherever the tenant's repository
    /// is here) and, when it is not `last` and `with_changes` (the tenant did not move away),
    /// what changed since ([`Storage::replay`]), the repository opened once.
    pub(crate) fn head_and_changes(
        &self,
        tenant: &TenantId,
        last: CommitId,
        max_commits: usize,
        with_changes: bool,
    ) -> Result<(HeadState, Option<Result<Replay, StorageError>>), StorageError> {
        let repo = self.read_repo(tenant, Access::Manage)?;
        let head = repo.head_state()?;
        let changes = (with_changes && head.commit != last)
            .then(|| self.replay_in(&repo, last, head.commit, max_commits));
        Ok((head, changes))
    }

    fn replay_in(
        &self,
        repo: &TenantRepo,
        from: CommitId,
        to: CommitId,
        max_commits: usize,
    ) -> Result<Replay, StorageError> {
        let mut replay = repo.replay(from, to, max_commits)?;
        if let Replay::Changes { changes, .. } = &mut replay {
            repo.mark_pushed(changes.iter_mut().map(|c| &mut c.entry));
            for change in changes {
                repo.mark_verified(std::slice::from_mut(&mut change.entry), &self.signing);
                if let Some(judge) = &self.judge {
                    let (file, blob) = (change.file, change.entry.blob);
                    change.valid = Some(match judge.known(file, blob) {
                        Some(known) => known,
                        None => judge.judge(file, blob, &repo.version_bytes(file, blob)?),
                    });
                }
            }
        }
        Ok(replay)
    }

    /// How a webhook subscription at `from` reaches `to`, in steps of at most `step`
    /// commits: the line walked once, as far back as it goes; where the lines meet when
    /// `main` left `from`'s line (nothing of the new line skipped).
    pub fn delivery_plan(
        &self,
        tenant: &TenantId,
        from: CommitId,
        to: CommitId,
        step: usize,
    ) -> Result<crate::storage::DeliveryPlan, StorageError> {
        self.read_repo(tenant, Access::Read)?
            .delivery_plan(from, to, step)
    }

    /// [`Storage::delivery_plan`] and, when it has steps, what its first step changed
    /// ([`Storage::replay`]), the repository opened once.
    pub fn delivery_plan_and_first_step(
        &self,
        tenant: &TenantId,
        from: CommitId,
        to: CommitId,
        step: usize,
    ) -> Result<(crate::storage::DeliveryPlan, Option<Replay>), StorageError> {
        let repo = self.read_repo(tenant, Access::Read)?;
        let plan = repo.delivery_plan(from, to, step)?;
        let first = match &plan {
            crate::storage::DeliveryPlan::Steps(stops) if stops.len() > 1 => {
                Some(self.replay_in(&repo, stops[0], stops[1], step)?)
            }
            _ => None,
        };
        Ok((plan, first))
    }

    /// How to replay from `from` to `to` in steps of at most `step` commits (see
    /// [`ReplayPlan`]): the line is walked once, here; each step is then one [`Storage::replay`]
    /// of at most `step` commits.
    pub fn replay_plan(
        &self,
        tenant: &TenantId,
        from: CommitId,
        to: CommitId,
        step: usize,
    ) -> Result<ReplayPlan, StorageError> {
        self.read_repo(tenant, Access::Read)?
            .replay_plan(from, to, step)
    }

    /// The tenant's settings; `TenantNotFound` when it has no repository.
    pub fn tenant(&self, tenant: &TenantId) -> Result<TenantInfo, StorageError> {
        let settings = self
            .flags
            .get(tenant, &self.locate(tenant, Access::Manage)?)?;
        Ok(TenantInfo {
            id: tenant.clone(),
            source_hosting: settings.source_hosting,
            required_approvals: settings.required_approvals,
        })
    }

    /// The file at the head of `main`. A missing file reads as empty.
    pub fn read(&self, tenant: &TenantId, file: PlanFile) -> Result<FileSnapshot, StorageError> {
        self.read_repo(tenant, Access::Read)?.read(file)
    }

    /// Like [`Storage::read`], but answers `Unchanged` when `main` is still at `known`. That
    /// check reads only the ref files (loose, else `packed-refs`), so a commit made by anyone (another process, plain
    /// git) is seen at once.
    pub fn read_unless_at(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        known: Option<CommitId>,
    ) -> Result<ReadOutcome, StorageError> {
        let path = self.locate(tenant, Access::Read)?;
        let (outcome, head) = match known {
            Some(known) if repo::file_head(&path) == Some(known) => (ReadOutcome::Unchanged, known),
            _ => {
                let snap = self
                    .read_repos
                    .lend(tenant, &path)?
                    .read(file)
                    .map_err(|e| gone_or(e, &path, tenant))?;
                let head = snap.commit;
                (ReadOutcome::Changed(snap), head)
            }
        };
        self.watch
            .note(tenant, &path, head, || repo::file_head(&path));
        Ok(outcome)
    }

    /// The commit `main` of `tenant` is at, when a read through [`Storage::read_unless_at`]
    /// saw it and nothing has touched the tenant's refs since (inotify). Never blocks on the
    /// disk, so it may be called on an async worker; `None` means "read it".
    pub fn known_head(&self, tenant: &TenantId) -> Option<CommitId> {
        self.watch.known_head(tenant)
    }

    /// The commit a client named: a whole id as it is, a prefix as the one object it names
    /// (`Ok(None)`: it names none, or more than one, which `ambiguous` tells).
    pub fn resolve_commit(
        &self,
        tenant: &TenantId,
        name: &crate::domain::CommitName,
    ) -> Result<Result<CommitId, crate::storage::PrefixMiss>, StorageError> {
        match name {
            crate::domain::CommitName::Full(id) => Ok(Ok(*id)),
            crate::domain::CommitName::Prefix(prefix) => {
                Ok(self.read_repo(tenant, Access::Read)?.resolve_prefix(prefix))
            }
        }
    }

    /// The file as it was in `commit`; `UnknownRef` unless `commit` is in `main`'s history.
    pub fn read_at(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        commit: CommitId,
    ) -> Result<FileSnapshot, StorageError> {
        self.read_repo(tenant, Access::Read)?.read_at(file, commit)
    }

    /// The bytes of a version of `file` named by a history entry of `tenant` (see
    /// [`Storage::history`]); not for ids from clients.
    pub fn history_blob(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        blob: BlobId,
    ) -> Result<Vec<u8>, StorageError> {
        self.read_repo(tenant, Access::Read)?
            .version_bytes(file, blob)
    }

    /// Up to `limit` commits that changed `file`, newest first, from the head or where the
    /// page of `from` ended. A cursor that this data dir did not make for this tenant is
    /// `UnknownRef`: a page never starts at a commit that `main`'s history did not lead to
    /// (such as a refused or undone write), and checking that walks nothing.
    pub fn history(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        limit: usize,
        from: Option<Cursor>,
    ) -> Result<HistoryPage, StorageError> {
        let from = match from {
            None => None,
            Some(cursor) => Some(self.dir_key.open(tenant, &cursor).ok_or_else(|| {
                StorageError::UnknownRef {
                    tenant: tenant.clone(),
                    commit: cursor.commit,
                }
            })?),
        };
        let repo = self.read_repo(tenant, Access::Read)?;
        let mut page = repo.history(file, limit, from)?;
        repo.mark_verified(&mut page.0, &self.signing);
        repo.mark_pushed(&mut page.0);
        Ok(HistoryPage {
            entries: page.0,
            next: page.1.map(|commit| self.dir_key.mint(tenant, commit)),
        })
    }

    /// Whether `id` names a commit of `main`'s history now. Walks the history (a long one
    /// takes a while), so writes ask before they take the tenant's write lock, and check again
    /// under it only what changed since ([`Preconditions::ancestry`]).
    pub fn ancestry(&self, tenant: &TenantId, id: ObjectId) -> Result<Ancestry, StorageError> {
        self.read_repo(tenant, Access::Read)?.ancestry(id)
    }

    /// `file` in `from` and `to` (both `main` or ancestors of it; `to` defaults to `main`) and
    /// the unified diff between them.
    pub fn diff(
        &self,
        tenant: &TenantId,
        file: PlanFile,
        from: CommitId,
        to: Option<CommitId>,
    ) -> Result<FileDiff, StorageError> {
        self.read_repo(tenant, Access::Read)?.diff(file, from, to)
    }

    /// Read-only git access to the tenant's repository for clone and fetch. `protocol` is the
    /// client's `Git-Protocol` header.
    pub fn upload_pack(
        &self,
        tenant: &TenantId,
        protocol: Option<&str>,
    ) -> Result<UploadPack, StorageError> {
        let path = self.locate(tenant, Access::Read)?;
        Ok(UploadPack::new(
            tenant.clone(),
            path,
            protocol,
            self.upload_packs.clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::*;
    use crate::storage::*;

    /// With the watch, a read leaves `main` known, so a cached GET needs no disk read; with
    /// `watch_refs(false)` nothing is ever known, so every read checks the ref file.
    #[test]
    fn watch_refs_off_means_main_is_never_known_without_a_read() {
        init_git();
        for (on, expect_known) in [(true, true), (false, false)] {
            let dir = tempfile::tempdir().unwrap();
            let committer = Identity::new("planfiles", "p@localhost", "localhost");
            let storage = Storage::open(
                dir.path(),
                &dir.path().join("cursor.key"),
                committer,
                Durability::Fsync,
            )
            .unwrap()
            .watch_refs(on);
            let tenant = TenantId::parse("acme").unwrap();
            let head = storage.create_tenant(&tenant, false).unwrap();
            storage
                .read_unless_at(&tenant, PlanFile::Integration, None)
                .unwrap();
            assert_eq!(
                storage.known_head(&tenant),
                expect_known.then_some(head),
                "watch_refs({on})"
            );
        }
    }

    /// After `git pack-refs` (as `git gc` runs it) there is no loose `refs/heads/main`: the
    /// head is learnt from `packed-refs`, so cached reads keep working.
    #[test]
    fn main_is_known_from_packed_refs_too() {
        init_git();
        let dir = tempfile::tempdir().unwrap();
        let committer = Identity::new("planfiles", "p@localhost", "localhost");
        let storage = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            committer,
            Durability::Fsync,
        )
        .unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        let head = storage.create_tenant(&tenant, false).unwrap();
        let repo = storage.repo_path(&tenant);
        let packed = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repo)
            .args(["pack-refs", "--all"])
            .status()
            .unwrap();
        assert!(packed.success());
        assert!(!repo.join("refs/heads/main").exists());
        storage
            .read_unless_at(&tenant, PlanFile::Integration, None)
            .unwrap();
        assert_eq!(storage.known_head(&tenant), Some(head));
        assert!(matches!(
            storage
                .read_unless_at(&tenant, PlanFile::Integration, Some(head))
                .unwrap(),
            ReadOutcome::Unchanged
        ));
    }
}

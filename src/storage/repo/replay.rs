//! The change feed's git reads: the head's state, and what each commit of `main`'s first-parent line changed after a resume point.
use super::history::{entry, request_id};
use super::{git_err, to_id, to_oid, TenantRepo, MAIN};
use crate::domain::{BlobId, CommitId, PlanFile};
use crate::storage::{DeliveryPlan, FileChange, HeadState, Replay, ReplayPlan, StorageError};
use git2::Oid;

/// A resume point further back than this many commits of the first-parent line is answered
/// with a reset: the client reads the files again rather than a replay of that length.
pub(in crate::storage) const MAX_REPLAY_COMMITS: usize = 10_000;

/// How far back a webhook subscription's line is walked (ids only: 20 MB at most): a
/// receiver that was down for a long while still gets every commit.
pub(in crate::storage) const MAX_DELIVERY_LINE: usize = 1_000_000;

impl TenantRepo {
    /// `main`'s commit and the blob ids of both files in it (the empty blob when absent).
    pub(in crate::storage) fn head_state(&self) -> Result<HeadState, StorageError> {
        let head =
            self.repo
                .refname_to_id(MAIN)
                .map_err(git_err(&self.tenant, "resolve main", ""))?;
        self.state_at(head)
    }

    fn state_at(&self, commit: Oid) -> Result<HeadState, StorageError> {
        let (integration, _) = self.blob_in(commit, PlanFile::Integration)?;
        let (configuration, _) = self.blob_in(commit, PlanFile::Configuration)?;
        Ok(HeadState {
            commit: CommitId(to_id(commit)),
            integration: BlobId(to_id(integration)),
            configuration: BlobId(to_id(configuration)),
        })
    }

    /// What the commits after `from` up to `to` on `to`'s first-parent line changed, oldest
    /// first, at most `max_commits` of them (`through` says where the replay stopped). A
    /// reset when `from` is unknown or not on that line within [`MAX_REPLAY_COMMITS`]
    /// commits, or `to` is unknown.
    pub(in crate::storage) fn replay(
        &self,
        from: CommitId,
        to: CommitId,
        max_commits: usize,
    ) -> Result<Replay, StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        let (from, to) = (to_oid(&from.0), to_oid(&to.0));
        // The line from `to` back to `from`, newest first: only ids, then the oldest
        // `max_commits` of them are read whole.
        let Some(line) = self.line(from, to, MAX_REPLAY_COMMITS)? else {
            return self.reset(to);
        };
        let take = line.len().min(max_commits.max(1));
        let mut changes = Vec::new();
        let mut through = from;
        for &oid in line.iter().rev().take(take) {
            let commit = self.repo.find_commit(oid).map_err(err("read commit"))?;
            for file in [PlanFile::Integration, PlanFile::Configuration] {
                if let Some(blob) = self.changed_in(&commit, file)? {
                    let entry = entry(&commit, blob);
                    changes.push(FileChange {
                        file,
                        request_id: request_id(&entry.message),
                        entry,
                        valid: None,
                    });
                }
            }
            through = oid;
        }
        Ok(Replay::Changes {
            changes,
            through: CommitId(to_id(through)),
        })
    }

    /// How to replay from `from` to `to` in steps of at most `step` commits, walking the line
    /// once: `from`, every `step`-th commit after it, and `to` (see [`ReplayPlan`]).
    pub(in crate::storage) fn replay_plan(
        &self,
        from: CommitId,
        to: CommitId,
        step: usize,
    ) -> Result<ReplayPlan, StorageError> {
        let (from_oid, to_oid_) = (to_oid(&from.0), to_oid(&to.0));
        let Some(line) = self.line(from_oid, to_oid_, MAX_REPLAY_COMMITS)? else {
            return Ok(match self.reset(to_oid_)? {
                Replay::Reset(head) => ReplayPlan::Reset(head),
                Replay::Changes { .. } => unreachable!("a reset"),
            });
        };
        // `line` is newest first and excludes `from`.
        let mut stops = vec![from];
        let oldest_first: Vec<Oid> = line.into_iter().rev().collect();
        for chunk in oldest_first.chunks(step.max(1)) {
            stops.push(CommitId(to_id(
                *chunk.last().expect("chunks are not empty"),
            )));
        }
        Ok(ReplayPlan::Steps(stops))
    }

    /// The first-parent line from `to` back to `from` (excluded), newest first, ids only;
    /// `None` when either is unknown, or `from` is not on the line within `max` commits.
    fn line(&self, from: Oid, to: Oid, max: usize) -> Result<Option<Vec<Oid>>, StorageError> {
        if self.repo.find_commit(from).is_err() {
            return Ok(None);
        }
        let mut line = Vec::new();
        let mut at = to;
        while at != from {
            if line.len() == max {
                return Ok(None);
            }
            let Ok(commit) = self.repo.find_commit(at) else {
                return Ok(None);
            };
            line.push(at);
            match commit.parent_id(0) {
                Ok(parent) => at = parent,
                Err(_) => return Ok(None),
            }
        }
        Ok(Some(line))
    }

    /// How a webhook subscription standing at `from` reaches `to` (see [`DeliveryPlan`]):
    /// the line is walked once, as far back as it takes (up to [`MAX_DELIVERY_LINE`]
    /// commits), then each step is one [`TenantRepo::replay`] of at most `step` commits.
    pub(in crate::storage) fn delivery_plan(
        &self,
        from: CommitId,
        to: CommitId,
        step: usize,
    ) -> Result<DeliveryPlan, StorageError> {
        let (from_oid, to_oid_) = (to_oid(&from.0), to_oid(&to.0));
        if from_oid == to_oid_ {
            return Ok(DeliveryPlan::Steps(vec![from]));
        }
        if let Some(line) = self.line(from_oid, to_oid_, MAX_DELIVERY_LINE)? {
            let mut stops = vec![from];
            let oldest_first: Vec<Oid> = line.into_iter().rev().collect();
            for chunk in oldest_first.chunks(step.max(1)) {
                stops.push(CommitId(to_id(
                    *chunk.last().expect("chunks are not empty"),
                )));
            }
            return Ok(DeliveryPlan::Steps(stops));
        }
        // `to` on `from`'s line: the caller's view of `main` is behind (another process's
        // feed, say), not a reset.
        if self.line(to_oid_, from_oid, MAX_DELIVERY_LINE)?.is_some() {
            return Ok(DeliveryPlan::Behind);
        }
        // Off the line: the newest commit of `from`'s first-parent line that is on `to`'s.
        let on_line: std::collections::HashSet<Oid> = self
            .first_parents(to_oid_, MAX_DELIVERY_LINE)
            .into_iter()
            .collect();
        let fork = self
            .first_parents(from_oid, MAX_DELIVERY_LINE)
            .into_iter()
            .find(|c| on_line.contains(c));
        match fork {
            Some(fork) => Ok(DeliveryPlan::Fork(self.state_at(fork)?)),
            None => match self.reset(to_oid_)? {
                Replay::Reset(head) => Ok(DeliveryPlan::Reset(head)),
                Replay::Changes { .. } => unreachable!("a reset"),
            },
        }
    }

    /// `at` and its first parents, newest first, at most `max` (ids only; an unknown commit
    /// ends the walk).
    fn first_parents(&self, at: Oid, max: usize) -> Vec<Oid> {
        let mut out = Vec::new();
        let mut next = Some(at);
        while let Some(oid) = next.filter(|_| out.len() < max) {
            let Ok(commit) = self.repo.find_commit(oid) else {
                break;
            };
            out.push(oid);
            next = commit.parent_id(0).ok();
        }
        out
    }

    /// Makes `to` and the commits before it on its first-parent line (back to `from`,
    /// excluded; at most [`MAX_REPLAY_COMMITS`]) durable, as a reader must before it tells
    /// anyone of them: a commit is visible on `main` a moment before its writer's last sync.
    /// In fsync mode (group commit needs only a shared `syncfs`: `Storage::settle`): each
    /// commit's loose objects (the commit, its tree, both files' blobs: plain git may not
    /// have synced them), their
    /// folders and `objects/`, then `refs/heads/main`, `refs/heads`, `packed-refs` and the
    /// repository folder.
    pub(in crate::storage) fn settle(
        &self,
        from: Option<CommitId>,
        to: CommitId,
    ) -> Result<(), StorageError> {
        let to = to_oid(&to.0);
        let line = match from.map(|f| self.line(to_oid(&f.0), to, MAX_REPLAY_COMMITS)) {
            Some(result) => result?,
            None => None,
        }
        .unwrap_or_else(|| vec![to]);
        let mut objects = Vec::with_capacity(line.len() * 4);
        for &commit in &line {
            objects.push(commit);
            if let Ok(c) = self.repo.find_commit(commit) {
                objects.push(c.tree_id());
            }
            for file in [PlanFile::Integration, PlanFile::Configuration] {
                objects.push(self.blob_in(commit, file)?.0);
            }
        }
        self.sync_objects(&objects, "")?;
        let main = self.path.join(MAIN);
        match std::fs::File::open(&main).and_then(|f| f.sync_all()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io("sync main", &main, e)),
        }
        let packed = self.path.join("packed-refs");
        if packed.exists() {
            crate::storage::disk::sync_file(&packed)?;
        }
        crate::storage::disk::sync_dir(&self.path.join("refs/heads"))?;
        crate::storage::disk::sync_dir(&self.path)
    }

    /// A reset to `to`, or to `main`'s head when `to` is unknown.
    fn reset(&self, to: Oid) -> Result<Replay, StorageError> {
        let at = match self.repo.find_commit(to) {
            Ok(_) => to,
            Err(_) => {
                self.repo
                    .refname_to_id(MAIN)
                    .map_err(git_err(&self.tenant, "resolve main", ""))?
            }
        };
        Ok(Replay::Reset(self.state_at(at)?))
    }
}

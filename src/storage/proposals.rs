//! Proposals through the storage facade: open or update one, take a step (approve, close, apply), read one with its files, list them.
use super::placement::Access;
use super::repo::{self, TenantRepo};
use super::{ProposalChanges, ProposalRequest, ProposalStep, ProposedFile, Storage, StorageError};
use crate::domain::{CommitId, Proposal, ProposalNumber, ProposalState, TenantId};

impl Storage {
    /// Opens a proposal (or updates the one `req.number` names, by its author): the files
    /// checked against `main` as a write's are, a signed commit on `main`'s head under
    /// `refs/proposals/<n>`, and its record; durable before it returns. Runs under the
    /// tenant's write lock (call it in the tenant's writer turn).
    pub fn propose(
        &self,
        tenant: &TenantId,
        req: &ProposalRequest,
    ) -> Result<Proposal, StorageError> {
        self.with_write_repo(tenant, |repo| {
            repo.propose(
                req,
                &self.committer,
                self.sync.as_deref(),
                &self.proposal_records,
            )
        })
    }

    /// Takes `step` on proposal `n` under the tenant's write lock, durable before it
    /// returns: an approval of its commit by another person, its author's close, or its
    /// apply (one signed commit on `main` with the proposal's files and its record, in one
    /// advance: all or nothing).
    pub fn proposal_step(
        &self,
        tenant: &TenantId,
        n: ProposalNumber,
        step: &ProposalStep,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<Proposal, StorageError> {
        self.with_write_repo(tenant, |repo| {
            repo.proposal_step(
                n,
                step,
                &self.committer,
                self.sync.as_deref(),
                &self.flags,
                not_after,
                &self.proposal_records,
            )
        })
    }

    /// Proposal `n` as it is now.
    pub fn proposal(&self, tenant: &TenantId, n: ProposalNumber) -> Result<Proposal, StorageError> {
        self.read_repo(tenant, Access::Read)?
            .proposal(n, &self.proposal_records)
    }

    /// Up to `limit` proposals, newest first, below `before` when given, in `state` when
    /// given, of those `visible` keeps.
    pub fn proposals(
        &self,
        tenant: &TenantId,
        state: Option<ProposalState>,
        before: Option<ProposalNumber>,
        limit: usize,
        visible: &dyn Fn(&Proposal) -> bool,
    ) -> Result<Vec<std::sync::Arc<Proposal>>, StorageError> {
        self.read_repo(tenant, Access::Read)?.proposals(
            state,
            before,
            limit,
            visible,
            &self.proposal_records,
        )
    }

    /// Proposal `n` and the bytes of each file it changes, as its commit holds them.
    pub fn proposal_texts(
        &self,
        tenant: &TenantId,
        n: ProposalNumber,
    ) -> Result<(Proposal, super::ProposedTexts), StorageError> {
        self.read_repo(tenant, Access::Read)?
            .proposal_texts(n, &self.proposal_records)
    }

    /// Each file `p` changes, at its base, in the proposal and on `main` now, with the diffs.
    pub fn proposed_files(
        &self,
        tenant: &TenantId,
        p: &Proposal,
    ) -> Result<Vec<ProposedFile>, StorageError> {
        self.read_repo(tenant, Access::Read)?.proposed_files(p)
    }

    /// `run` on the tenant's repository kept open for writes (as a batch's), put back after.
    fn with_write_repo<T>(
        &self,
        tenant: &TenantId,
        run: impl FnOnce(&TenantRepo) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let path = self.repo_path(tenant);
        let before = repo::open_repos::stamp(&path);
        let repo = match self.open_repos.take(tenant, before) {
            Some(repo) => repo,
            None => TenantRepo::open_to_keep(tenant, &path)?,
        };
        let result = run(&repo);
        self.open_repos.put(tenant, &path, repo, before);
        result
    }

    /// The records ref's commit (`None` before the tenant's first proposal): where the
    /// steps' line stands.
    pub fn records_head(&self, tenant: &TenantId) -> Result<Option<CommitId>, StorageError> {
        self.read_repo(tenant, Access::Follow)?.records_head()
    }

    /// The proposals' steps after `after` (`None`: from the first), oldest first, at most
    /// `max` of the line read at once (see [`ProposalChanges`]).
    pub fn proposal_changes(
        &self,
        tenant: &TenantId,
        after: Option<CommitId>,
        max: usize,
    ) -> Result<ProposalChanges, StorageError> {
        self.read_repo(tenant, Access::Read)?
            .proposal_changes(after, max)
    }

    /// Where a resume point falls when it is a step of the records line: after `main`'s
    /// commit it names (`Some(None)`: a step recorded without it). `None` when it is no step.
    pub fn step_place(
        &self,
        tenant: &TenantId,
        id: CommitId,
    ) -> Result<Option<Option<CommitId>>, StorageError> {
        self.read_repo(tenant, Access::Read)?.step_place(id)
    }

    /// For a resume after `main`'s commit `m` (read `main`'s head first): the last step sent
    /// before it, `None` before the first.
    pub fn steps_sent_before(
        &self,
        tenant: &TenantId,
        m: CommitId,
    ) -> Result<Option<CommitId>, StorageError> {
        self.read_repo(tenant, Access::Read)?.steps_sent_before(m)
    }
}

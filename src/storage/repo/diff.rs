//! A file in two commits of `main`'s history, and the unified diff between them.
use super::{git_err, to_id, TenantRepo, MAIN};
use crate::domain::{CommitId, PlanFile};
use crate::storage::{FileDiff, StorageError};
use git2::{DiffOptions, Patch};

impl TenantRepo {
    /// See [`crate::storage::Storage::diff`].
    pub(in crate::storage) fn diff(
        &self,
        file: PlanFile,
        from: CommitId,
        to: Option<CommitId>,
    ) -> Result<FileDiff, StorageError> {
        let path = file.path();
        let err = |op| git_err(&self.tenant, op, path);
        let to = match to {
            Some(to) => to,
            None => CommitId(to_id(
                self.repo.refname_to_id(MAIN).map_err(err("resolve main"))?,
            )),
        };
        let from = self.read_at(file, from)?;
        let to = self.read_at(file, to)?;
        let text = self.unified(file, &from.bytes, &to.bytes)?;
        Ok(FileDiff { from, to, text })
    }

    /// The unified diff of `file` from `old` to `new`, as `git diff` prints it; empty when
    /// they are equal.
    pub(super) fn unified(
        &self,
        file: PlanFile,
        old: &[u8],
        new: &[u8],
    ) -> Result<String, StorageError> {
        if old == new {
            return Ok(String::new());
        }
        let err = |op| git_err(&self.tenant, op, file.path());
        let mut opts = DiffOptions::new();
        opts.context_lines(3);
        let name = std::path::Path::new(file.path());
        let mut patch = Patch::from_buffers(old, Some(name), new, Some(name), Some(&mut opts))
            .map_err(err("diff"))?;
        let buf = patch.to_buf().map_err(err("print diff"))?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

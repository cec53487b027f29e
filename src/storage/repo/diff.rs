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
        let text = if from.blob == to.blob {
            String::new()
        } else {
            let mut opts = DiffOptions::new();
            opts.context_lines(3);
            let name = std::path::Path::new(path);
            let mut patch = Patch::from_buffers(
                &from.bytes,
                Some(name),
                &to.bytes,
                Some(name),
                Some(&mut opts),
            )
            .map_err(err("diff"))?;
            let buf = patch.to_buf().map_err(err("print diff"))?;
            String::from_utf8_lossy(&buf).into_owned()
        };
        Ok(FileDiff { from, to, text })
    }
}

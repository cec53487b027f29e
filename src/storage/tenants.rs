//! Tenants as a whole: creating one, its setting, the list of them with a row each, repacks, and the readiness probe of the tenants folder.
use super::placement::Access;
use super::repo;
use super::{RepackReport, Storage, StorageError, TenantSummary};
use crate::domain::{CommitId, TenantId};

/// How long after a repack its retired files have rested: then [`Storage::empty_spares`].
pub const SPARES_REST: std::time::Duration = repo::SPARES_REST;

impl Storage {
    /// Creates a tenant repository with its first commit. Fails if the tenant exists.
    pub fn create_tenant(
        &self,
        tenant: &TenantId,
        source_hosting: bool,
    ) -> Result<CommitId, StorageError> {
        repo::create(
            tenant,
            &self.tenants_dir,
            &self.repo_path(tenant),
            source_hosting,
            &self.committer,
        )
    }

    /// Turns the source-hosting flag on or off; running servers see it on the next request.
    pub fn set_source_hosting(&self, tenant: &TenantId, on: bool) -> Result<(), StorageError> {
        self.repo_for(tenant, Access::Read)?.set_source_hosting(on)
    }

    /// Sets the approvals a tenant's proposals need (0: off); above 0 `main` moves only by
    /// applying an approved proposal. Durable when it returns; a running server reads it at
    /// the next write.
    pub fn set_required_approvals(&self, tenant: &TenantId, n: u32) -> Result<(), StorageError> {
        self.repo_for(tenant, Access::Read)?
            .set_required_approvals(n)
    }

    /// About how many loose objects the tenant's repository holds (a cheap estimate).
    pub fn loose_objects_estimate(&self, tenant: &TenantId) -> Result<usize, StorageError> {
        Ok(self.repo_for(tenant, Access::Read)?.loose_estimate())
    }

    /// Packs the tenant's loose objects, or with `full` everything into one pack (see the
    /// upkeep module); `None` when another repack of this tenant, in any process, is running.
    pub fn repack(
        &self,
        tenant: &TenantId,
        full: bool,
    ) -> Result<Option<RepackReport>, StorageError> {
        self.repo_for(tenant, Access::Read)?
            .repack(full, self.recycle_files)
    }

    /// Empties the tenant's spare files that have rested since a repack retired them (their
    /// bytes go, their inodes stay: `repo/spares.rs`); call it [`SPARES_REST`] after a repack.
    pub fn empty_spares(&self, tenant: &TenantId) -> Result<(), StorageError> {
        if self.recycle_files {
            repo::empty_spares(&self.locate(tenant, Access::Read)?);
        }
        Ok(())
    }

    /// Checks that the tenants directory can be listed and written.
    pub fn check_ready(&self) -> Result<(), StorageError> {
        std::fs::read_dir(&self.tenants_dir)
            .map_err(|e| StorageError::io("list tenants", &self.tenants_dir, e))?;
        let probe = tempfile::Builder::new()
            .prefix(".ready-")
            .tempfile_in(&self.tenants_dir)
            .map_err(|e| StorageError::io("write a probe file", &self.tenants_dir, e))?;
        drop(probe);
        Ok(())
    }

    /// Every tenant id, sorted. Directories whose names are not `<tenant_id>.git` are skipped.
    /// Opens no repository, so one broken repository does not hide the others.
    pub fn tenant_ids(&self) -> Result<Vec<TenantId>, StorageError> {
        let entries = std::fs::read_dir(&self.tenants_dir)
            .map_err(|e| StorageError::io("list tenants", &self.tenants_dir, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| StorageError::io("list tenants", &self.tenants_dir, e))?;
            let name = entry.file_name();
            if let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".git"))
                .and_then(|id| TenantId::parse(id).ok())
            {
                out.push(id);
            }
        }
        out.sort();
        Ok(out)
    }

    /// One row of `tenant list`: the flag, the head and the last change.
    pub fn summary(&self, tenant: &TenantId) -> Result<TenantSummary, StorageError> {
        self.repo_for(tenant, Access::Manage)?.summary()
    }
}

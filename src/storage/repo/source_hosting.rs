//! The tenant's source-hosting flag in the repository's config: read without opening the repository, and set under the tenant's write lock.
use super::{
    backoff, git_err, lock_file_until, remove_if_abandoned, TenantRepo, WRITE_DEADLINE,
    WRITE_LOCK_FILE,
};
use crate::domain::TenantId;
use crate::storage::disk::{self, sync_dir};
use crate::storage::StorageError;
use git2::ErrorCode;
use std::fs::File;
use std::path::Path;
use std::time::Instant;

pub(super) const SOURCE_HOSTING_KEY: &str = "planfiles.sourcehosting";

/// The source-hosting flag of the repository at `path`, read from its config file alone: no
/// repository is opened (path resolution, `HEAD`, `objects/`, `refs/`), which a check made
/// before every write does not need. A broken repository is found by the operation after it.
pub(in crate::storage) fn source_hosting_flag(
    tenant: &TenantId,
    path: &Path,
) -> Result<bool, StorageError> {
    if !path.is_dir() {
        return Err(crate::storage::placement::missing(path, tenant));
    }
    let config =
        git2::Config::open(&path.join("config")).map_err(git_err(tenant, "read config", ""))?;
    source_hosting_in(&config, tenant)
}

fn source_hosting_in(config: &git2::Config, tenant: &TenantId) -> Result<bool, StorageError> {
    match config.get_bool(SOURCE_HOSTING_KEY) {
        Ok(on) => Ok(on),
        Err(e) if e.code() == ErrorCode::NotFound => Ok(false),
        Err(e) => Err(git_err(tenant, "read config", "")(e)),
    }
}

impl TenantRepo {
    pub(in crate::storage) fn source_hosting(&self) -> Result<bool, StorageError> {
        let config = self
            .repo
            .config()
            .map_err(git_err(&self.tenant, "read config", ""))?;
        source_hosting_in(&config, &self.tenant)
    }

    /// Sets the flag in the repository's config. libgit2 writes `config.lock` and renames it
    /// over `config`; a process killed in between leaves `config.lock` behind, which would
    /// refuse every later change. So the same rule as for `main.lock` applies: planfiles
    /// setters take turns on the tenant's write lock, and a `config.lock` older than
    /// [`super::ABANDONED_LOCK`] (or from before the machine booted) found while holding it
    /// was left by a dead process and is removed.
    /// A fresh one is waited on until [`WRITE_DEADLINE`].
    pub(in crate::storage) fn set_source_hosting(&self, on: bool) -> Result<(), StorageError> {
        let deadline = Instant::now() + WRITE_DEADLINE;
        let _turn = self.config_turn(deadline)?;
        let mut config = self
            .repo
            .config()
            .map_err(git_err(&self.tenant, "open config", ""))?;
        let lock = self.path.join("config.lock");
        let mut attempt = 0;
        loop {
            attempt += 1;
            match config.set_bool(SOURCE_HOSTING_KEY, on) {
                Ok(()) => break,
                Err(e) if e.code() == ErrorCode::Locked => {
                    if let Some(age) = remove_if_abandoned(&lock) {
                        tracing::warn!(tenant = %self.tenant, age_ms = age.as_millis() as u64, "removed a stale config.lock");
                        continue;
                    }
                    if Instant::now() >= deadline {
                        return Err(StorageError::io(
                            "change the tenant's config: config.lock is held by another \
                             process; remove it if no git or planfiles process uses the \
                             repository",
                            &lock,
                            std::io::Error::new(
                                std::io::ErrorKind::WouldBlock,
                                format!(
                                    "still locked after {} s and {attempt} attempts",
                                    WRITE_DEADLINE.as_secs()
                                ),
                            ),
                        ));
                    }
                    backoff(attempt);
                }
                Err(e) => return Err(git_err(&self.tenant, "write config", "")(e)),
            }
        }
        // libgit2 never fsyncs a config it writes (renamed from config.lock): the flag
        // reaches the disk here, in both modes, before the change is reported done.
        disk::sync_file(&self.path.join("config"))?;
        sync_dir(&self.path)
    }

    /// The tenant's write lock, for a config change: while it is held no other planfiles
    /// process changes the config (or writes), so an old `config.lock` is nobody's.
    fn config_turn(&self, deadline: Instant) -> Result<File, StorageError> {
        let path = self.path.join(WRITE_LOCK_FILE);
        lock_file_until(&path, deadline)
            .map_err(|e| StorageError::io("take the write lock", &path, e))?
            .map_err(|_| {
                StorageError::io(
                    "change the tenant's config: another planfiles process kept the tenant's \
                     write lock",
                    &path,
                    std::io::ErrorKind::WouldBlock.into(),
                )
            })
    }
}

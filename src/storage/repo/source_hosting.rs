//! The tenant's settings in the repository's config (the source-hosting flag, the approvals `main` needs): read without opening the repository, and set under the tenant's write lock.
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
pub(super) const APPROVALS_KEY: &str = "planfiles.requireapprovals";

/// The most approvals a tenant may require.
pub const MAX_REQUIRED_APPROVALS: u32 = 10;

/// A tenant's settings, as its repository's config holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    pub source_hosting: bool,
    /// Approvals a proposal needs before it is applied; above 0, `main` moves only so.
    pub required_approvals: u32,
}

/// The settings of the repository at `path`, read from its config file alone: no
/// repository is opened (path resolution, `HEAD`, `objects/`, `refs/`), which a check made
/// before every write does not need. A broken repository is found by the operation after it.
pub(in crate::storage) fn settings_at(
    tenant: &TenantId,
    path: &Path,
) -> Result<Settings, StorageError> {
    if !path.is_dir() {
        return Err(crate::storage::placement::missing(path, tenant));
    }
    let config =
        git2::Config::open(&path.join("config")).map_err(git_err(tenant, "read config", ""))?;
    settings_in(&config, tenant)
}

/// The flag as last read from each tenant's config file, with that file's identity then
/// (device, inode, size, mtime, ctime): the check before every write costs one `stat`
/// instead of a parse of the config. libgit2 and git write a config anew and rename it into
/// place, so a change gives the file a new identity, and the next check parses it again.
#[derive(Debug, Default)]
pub(in crate::storage) struct Flags {
    seen: std::sync::Mutex<
        std::collections::HashMap<
            std::path::PathBuf,
            (Stamp, Settings),
            foldhash::fast::RandomState,
        >,
    >,
}

/// At most this many tenants' flags are kept; past it the map starts again.
const MAX_FLAGS: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

impl Flags {
    /// [`settings_at`], parsed again only when the config file changed since.
    pub(in crate::storage) fn get(
        &self,
        tenant: &TenantId,
        path: &Path,
    ) -> Result<Settings, StorageError> {
        let config = path.join("config");
        let Ok(meta) = std::fs::metadata(&config) else {
            // Missing or unreadable: the uncached read says why.
            return settings_at(tenant, path);
        };
        let stamp = Stamp::of(&meta);
        if let Some((seen, on)) = self.seen.lock().expect("not poisoned").get(&config) {
            if *seen == stamp {
                return Ok(*on);
            }
        }
        // A change between the stat and the parse leaves a stamp older than the file: the
        // next check parses it again.
        let settings = settings_at(tenant, path)?;
        let mut seen = self.seen.lock().expect("not poisoned");
        if seen.len() >= MAX_FLAGS {
            seen.clear();
        }
        seen.insert(config, (stamp, settings));
        Ok(settings)
    }
}

fn settings_in(config: &git2::Config, tenant: &TenantId) -> Result<Settings, StorageError> {
    let source_hosting = match config.get_bool(SOURCE_HOSTING_KEY) {
        Ok(on) => on,
        Err(e) if e.code() == ErrorCode::NotFound => false,
        Err(e) => return Err(git_err(tenant, "read config", "")(e)),
    };
    // A value set by hand beyond the bounds is held to the nearest bound: a broken setting
    // never turns the requirement off.
    let required_approvals = match config.get_i64(APPROVALS_KEY) {
        Ok(n) => n.clamp(0, i64::from(MAX_REQUIRED_APPROVALS)) as u32,
        Err(e) if e.code() == ErrorCode::NotFound => 0,
        Err(e) => return Err(git_err(tenant, "read config", "")(e)),
    };
    Ok(Settings {
        source_hosting,
        required_approvals,
    })
}

impl TenantRepo {
    pub(in crate::storage) fn settings(&self) -> Result<Settings, StorageError> {
        let config = self
            .repo
            .config()
            .map_err(git_err(&self.tenant, "read config", ""))?;
        settings_in(&config, &self.tenant)
    }

    /// Sets the flag in the repository's config. libgit2 writes `config.lock` and renames it
    /// over `config`; a process killed in between leaves `config.lock` behind, which would
    /// refuse every later change. So the same rule as for `main.lock` applies: planfiles
    /// setters take turns on the tenant's write lock, and a `config.lock` older than
    /// [`super::ABANDONED_LOCK`] (or from before the machine booted) found while holding it
    /// was left by a dead process and is removed.
    /// A fresh one is waited on until [`WRITE_DEADLINE`].
    pub(in crate::storage) fn set_source_hosting(&self, on: bool) -> Result<(), StorageError> {
        self.set_config(|c| c.set_bool(SOURCE_HOSTING_KEY, on))
    }

    /// Sets the approvals a proposal needs (0: none, and `main` moves by any write), as
    /// [`TenantRepo::set_source_hosting`] sets its flag.
    pub(in crate::storage) fn set_required_approvals(&self, n: u32) -> Result<(), StorageError> {
        let n = i64::from(n.min(MAX_REQUIRED_APPROVALS));
        self.set_config(|c| c.set_i64(APPROVALS_KEY, n))
    }

    fn set_config(
        &self,
        set: impl Fn(&mut git2::Config) -> Result<(), git2::Error>,
    ) -> Result<(), StorageError> {
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
            match set(&mut config) {
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

#[cfg(test)]
mod tests {
    /// The flag is read from a cache while the config file is the same, and again as soon as
    /// it changes: by `tenant set`, or by plain `git config`.
    #[test]
    fn a_changed_config_is_read_again() {
        let (dir, storage, tenant) = crate::storage::test_storage();
        assert!(!storage.tenant(&tenant).unwrap().source_hosting);
        storage.set_source_hosting(&tenant, true).unwrap();
        assert!(storage.tenant(&tenant).unwrap().source_hosting);
        assert!(storage.tenant(&tenant).unwrap().source_hosting, "cached");
        let repo = dir.path().join("tenants/acme.git");
        let set = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repo)
            .args(["config", "planfiles.sourcehosting", "false"])
            .status()
            .unwrap();
        assert!(set.success());
        assert!(!storage.tenant(&tenant).unwrap().source_hosting);
        std::fs::remove_dir_all(&repo).unwrap();
        assert!(
            storage.tenant(&tenant).is_err(),
            "a tenant whose repository is gone"
        );
    }
}

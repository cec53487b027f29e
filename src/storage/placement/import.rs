//! The target side of a move: a tenant's repository fetched from another shard (or a mirror on this host) with git, checked with `git fsck --strict`, synced and renamed into place.
//!
//! git itself fetches (the service already runs `git upload-pack` for clones), so the
//! transfer is git's own protocol over the source's `/git/<tenant>.git`, https included, and
//! the check is git's. Every ref planfiles writes travels: `main` and the no-op records of
//! idempotency keys (`refs/planfiles/*`); commit ids are the same on both shards.
use crate::domain::{CommitId, TenantId};
use crate::storage::disk::{sync_dir, sync_tree};
use crate::storage::placement;
use crate::storage::repo::{self, TenantRepo};
use crate::storage::{ImportPlan, ImportSource, Imported, Placement, Storage, StorageError};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Name prefix of the folders imports fetch into (in the tenants dir).
const TEMP_PREFIX: &str = ".import-";

impl Storage {
    /// Imports `tenant` from `source`, which must be at `head` when given (the head the
    /// source handed over after refusing writes). `confirm` says whether the source hands the
    /// tenant over (it refuses the tenant's writes). It is asked before the fetch, and again
    /// under the turn that creations, imports and archives take, just before the tenant
    /// becomes writable here: an error leaves nothing writable here. The tenant is writable
    /// here when this returns. Safe to run again: a tenant that is here and writable at `head` or after it
    /// is `already` imported; one that moved away from here and comes back is fetched into
    /// its old repository, which becomes writable again.
    pub fn import_tenant(
        &self,
        tenant: &TenantId,
        source: &ImportSource,
        head: Option<CommitId>,
        settings: crate::storage::Settings,
        webhooks: Option<&crate::storage::WebhookBundle>,
        confirm: &dyn Fn() -> Result<(), StorageError>,
    ) -> Result<Imported, StorageError> {
        let started = Instant::now();
        let path = self.repo_path(tenant);
        let conflict = |reason: &str| StorageError::MoveConflict {
            tenant: tenant.clone(),
            reason: reason.to_owned(),
        };
        let found = self.import_plan(tenant, head)?;
        match found {
            ImportPlan::Served {
                head,
                holds_head: Some(true),
            } => {
                return Ok(Imported {
                    found,
                    head,
                    already: true,
                    millis: elapsed_ms(started),
                })
            }
            ImportPlan::Served {
                holds_head: None, ..
            } => return Err(conflict("it is served here already")),
            ImportPlan::Served { .. } => return Err(conflict(
                "it is served here already, with a history that does not hold the head asked for",
            )),
            ImportPlan::ComeBack => {
                // Its old repository takes the newer history (no write lands here meanwhile:
                // the placement record refuses them).
                confirm()?;
                let fetched = fetch_and_check(tenant, &path, source, head, settings)?;
                if let Some(bundle) = webhooks {
                    crate::storage::webhooks::install(tenant, &path, bundle)?;
                }
                sync_tree(&path)?;
                // The source still hands it over (an abort that began meanwhile does not),
                // asked under the hand-over turn, which a dry run waits for.
                let _handover = repo::handover_turn(&self.tenants_dir, tenant)?;
                confirm()?;
                // Under the creation turn, which the archive sweep takes too: the repository
                // is still here and still moved away.
                let _turn = repo::creation_turn(&self.tenants_dir)?;
                if !path.is_dir()
                    || !matches!(placement::read(&path)?, Some(Placement::Moved { .. }))
                {
                    return Err(conflict(
                        "it was archived or changed here while it was imported: run the move again",
                    ));
                }
                placement::clear(&path)?;
                return Ok(Imported {
                    found,
                    head: fetched,
                    already: false,
                    millis: elapsed_ms(started),
                });
            }
            ImportPlan::Fresh => {}
        }
        confirm()?;
        remove_stale_imports(&self.tenants_dir, tenant);
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{TEMP_PREFIX}{tenant}+"))
            .tempdir_in(&self.tenants_dir)
            .map_err(|e| StorageError::io("create a temporary directory", &self.tenants_dir, e))?;
        run(
            tenant,
            "init",
            git(tmp.path()).args(["init", "--bare", "--quiet"]),
        )?;
        run(
            tenant,
            "init",
            git(tmp.path()).args(["symbolic-ref", "HEAD", "refs/heads/main"]),
        )?;
        let fetched = fetch_and_check(tenant, tmp.path(), source, head, settings)?;
        if let Some(bundle) = webhooks {
            crate::storage::webhooks::install(tenant, tmp.path(), bundle)?;
        }
        sync_tree(tmp.path())?;
        // The source still hands it over (an abort that began meanwhile does not), asked under
        // the hand-over turn, which a dry run waits for: the dry run never answers `fresh`
        // between this answer and the rename below.
        let _handover = repo::handover_turn(&self.tenants_dir, tenant)?;
        confirm()?;
        let _turn = repo::creation_turn(&self.tenants_dir)?;
        if path.exists() {
            return Err(conflict("it was created here while it was imported"));
        }
        let tmp_path = tmp.keep();
        std::fs::rename(&tmp_path, &path).map_err(|e| {
            let _ = std::fs::remove_dir_all(&tmp_path);
            StorageError::io("move an imported repository into place", &path, e)
        })?;
        sync_dir(&self.tenants_dir)?;
        placement::clear_tombstone(&self.tenants_dir, tenant)?;
        Ok(Imported {
            found,
            head: fetched,
            already: false,
            millis: elapsed_ms(started),
        })
    }
}

impl Storage {
    /// [`Storage::import_plan`] under the tenant's hand-over turn: what an abort relies on.
    /// An import that got its source's last "yes" has made the tenant writable here before
    /// this answers; one that has not will ask again and be refused.
    pub fn import_plan_settled(
        &self,
        tenant: &TenantId,
        head: Option<CommitId>,
    ) -> Result<ImportPlan, StorageError> {
        let _handover = repo::handover_turn(&self.tenants_dir, tenant)?;
        self.import_plan(tenant, head)
    }

    /// What [`Storage::import_tenant`] would do with `tenant` here (its dry run, and the
    /// check `tenant move` makes before it refuses any write); a tenant moving away from
    /// here is a conflict.
    pub fn import_plan(
        &self,
        tenant: &TenantId,
        head: Option<CommitId>,
    ) -> Result<ImportPlan, StorageError> {
        let path = self.repo_path(tenant);
        if !path.is_dir() {
            return Ok(ImportPlan::Fresh);
        }
        match placement::read(&path)? {
            Some(Placement::Moving { .. } | Placement::Aborting { .. }) => {
                Err(StorageError::MoveConflict {
                    tenant: tenant.clone(),
                    reason: "it is moving away from this shard".into(),
                })
            }
            Some(Placement::Moved { .. }) => Ok(ImportPlan::ComeBack),
            None => {
                let repo = TenantRepo::open(tenant, &path)?;
                let current = repo::file_head(&path).ok_or_else(|| StorageError::MoveConflict {
                    tenant: tenant.clone(),
                    reason: "its repository here has no main".into(),
                })?;
                let holds_head = match head {
                    None => None,
                    Some(head) => Some(repo.ancestry(head.0)?.in_history),
                };
                Ok(ImportPlan::Served {
                    head: current,
                    holds_head,
                })
            }
        }
    }
}

fn elapsed_ms(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}

/// Fetches `main`, `refs/planfiles/*`, `refs/notes/*` and `refs/proposals/*` into the bare
/// repository at `into`, checks it whole (`git fsck --strict`), checks `main` is at `head`
/// (when given), sets the tenant's settings, and returns `main`.
fn fetch_and_check(
    tenant: &TenantId,
    into: &Path,
    source: &ImportSource,
    head: Option<CommitId>,
    settings: crate::storage::Settings,
) -> Result<CommitId, StorageError> {
    let mut fetch = git(into);
    let from = match source {
        ImportSource::Shard { url, token } => {
            with_config(
                &mut fetch,
                &[(
                    "http.extraHeader",
                    &format!("Authorization: Bearer {token}"),
                )],
            );
            url.clone_url(tenant)
        }
        ImportSource::Path(path) => path.display().to_string(),
    };
    fetch.args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--prune",
        &from,
        "+refs/heads/*:refs/heads/*",
        "+refs/planfiles/*:refs/planfiles/*",
        // Who pushed what (`refs/notes/planfiles`): events and deliveries read it.
        "+refs/notes/*:refs/notes/*",
        // The proposals and their records: open ones go on, approvals are kept.
        "+refs/proposals/*:refs/proposals/*",
    ]);
    run(tenant, "fetch", &mut fetch)?;
    run(
        tenant,
        "fsck",
        git(into).args(["fsck", "--strict", "--no-dangling", "--no-progress"]),
    )?;
    let fetched = repo::file_head(into).ok_or_else(|| StorageError::Import {
        tenant: tenant.clone(),
        reason: "the source has no main".into(),
    })?;
    if let Some(head) = head.filter(|h| *h != fetched) {
        let why = match source {
            ImportSource::Shard { .. } => ": it still takes writes",
            ImportSource::Path(_) => "",
        };
        return Err(StorageError::Import {
            tenant: tenant.clone(),
            reason: format!("the source's main is at {fetched}, not at {head}{why}"),
        });
    }
    run(
        tenant,
        "config",
        git(into).args([
            "config",
            "--bool",
            "planfiles.sourcehosting",
            if settings.source_hosting {
                "true"
            } else {
                "false"
            },
        ]),
    )?;
    // A tenant that required approval requires it on its new shard too.
    run(
        tenant,
        "config",
        git(into).args([
            "config",
            "planfiles.requireapprovals",
            &settings.required_approvals.to_string(),
        ]),
    )?;
    Ok(fetched)
}

/// `git --git-dir <repo>`, with every file it writes synced, only the http(s) and file
/// transports, no prompt, and no system config.
fn git(repo: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir")
        .arg(repo)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR");
    with_config(
        &mut cmd,
        &[
            ("core.fsync", "all"),
            ("core.fsyncMethod", "fsync"),
            ("protocol.allow", "never"),
            ("protocol.http.allow", "always"),
            ("protocol.https.allow", "always"),
            ("protocol.file.allow", "always"),
            // A stalled source ends the fetch rather than holding the move.
            ("http.lowSpeedLimit", "1000"),
            ("http.lowSpeedTime", "30"),
            // A tenant coming back fetches into its old repository, whose move fence
            // (`placement.rs`: the reference-transaction hook) refuses ref writes.
            ("core.hooksPath", "/dev/null"),
        ],
    );
    cmd
}

/// Adds config for this command only, through the environment (`GIT_CONFIG_COUNT`), so that
/// a token never shows in the process list.
fn with_config(cmd: &mut Command, pairs: &[(&str, &str)]) {
    let start: usize = cmd
        .get_envs()
        .find(|(k, _)| *k == "GIT_CONFIG_COUNT")
        .and_then(|(_, v)| v?.to_str()?.parse().ok())
        .unwrap_or(0);
    for (i, (key, value)) in pairs.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{}", start + i), key)
            .env(format!("GIT_CONFIG_VALUE_{}", start + i), value);
    }
    cmd.env("GIT_CONFIG_COUNT", (start + pairs.len()).to_string());
}

fn run(tenant: &TenantId, what: &str, cmd: &mut Command) -> Result<(), StorageError> {
    let out = cmd.output().map_err(|e| StorageError::Import {
        tenant: tenant.clone(),
        reason: format!("git {what} could not run: {e}"),
    })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr: String = stderr.trim().chars().take(600).collect();
    Err(StorageError::Import {
        tenant: tenant.clone(),
        reason: format!("git {what} failed ({}): {stderr}", out.status),
    })
}

/// Removes what imports of `tenant` that died left behind (`+` is not in any tenant id, so
/// the prefix names this tenant's folders only).
fn remove_stale_imports(tenants_dir: &Path, tenant: &TenantId) {
    let prefix = format!("{TEMP_PREFIX}{tenant}+");
    let Ok(entries) = std::fs::read_dir(tenants_dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_source_is_asked_before_the_fetch_and_again_before_the_tenant_is_writable() {
        let (_a, source, tenant) = crate::storage::test_storage();
        let (_b, target, _) = crate::storage::test_storage();
        let other = TenantId::parse("initech").unwrap();
        let from = ImportSource::Path(source.repo_path(&tenant));
        // The source stops handing the tenant over while it is fetched: nothing is writable
        // here, and nothing is left behind.
        let asked = Cell::new(0);
        let once = || {
            asked.set(asked.get() + 1);
            match asked.get() {
                1 => Ok(()),
                _ => Err(StorageError::MoveConflict {
                    tenant: other.clone(),
                    reason: "the move was aborted".into(),
                }),
            }
        };
        assert!(matches!(
            target.import_tenant(&other, &from, None, Default::default(), None, &once),
            Err(StorageError::MoveConflict { .. })
        ));
        assert_eq!(asked.get(), 2);
        assert!(!target.repo_path(&other).exists());
        // Handed over both times: imported, at the source's head.
        let asked = Cell::new(0);
        let always = || {
            asked.set(asked.get() + 1);
            Ok(())
        };
        let done = target
            .import_tenant(&other, &from, None, Default::default(), None, &always)
            .unwrap();
        assert_eq!(asked.get(), 2);
        assert_eq!(done.found, ImportPlan::Fresh);
        assert_eq!(Some(done.head), repo::file_head(&source.repo_path(&tenant)));
        assert!(target.placement(&other).unwrap().is_none(), "writable here");
    }

    /// A push's notes (who pushed each commit) come along with a tenant, as do `main` and
    /// the idempotency records: events and deliveries on the target name the pusher.
    #[test]
    fn an_import_carries_the_pushers_notes() {
        let (_a, source, tenant) = crate::storage::test_storage();
        let (_b, target, _) = crate::storage::test_storage();
        let from_repo = source.repo_path(&tenant);
        let git_in = |repo: &Path, args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(repo)
                .args(["-c", "user.name=P", "-c", "user.email=p@x"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        git_in(
            &from_repo,
            &[
                "notes",
                "--ref=planfiles",
                "add",
                "-m",
                "Pushed-By: P <p@x>",
                "main",
            ],
        );
        let notes = git_in(&from_repo, &["rev-parse", "refs/notes/planfiles"]);
        let other = TenantId::parse("initech").unwrap();
        let from = ImportSource::Path(from_repo.clone());
        target
            .import_tenant(&other, &from, None, Default::default(), None, &|| Ok(()))
            .unwrap();
        let copy = target.repo_path(&other);
        assert_eq!(git_in(&copy, &["rev-parse", "refs/notes/planfiles"]), notes);
        assert_eq!(
            git_in(&copy, &["notes", "--ref=planfiles", "show", "main"]),
            "Pushed-By: P <p@x>"
        );
    }
}

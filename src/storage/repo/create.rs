//! Tenant creation: a new bare repository with its first commit, built in a temporary folder, synced and renamed into place.
use super::objects::commit_text;
use super::signatures::Committer;
use super::source_hosting::SOURCE_HOSTING_KEY;
use super::{git_err, lock_file_until, signature, to_id, FILE_MODE, MAIN, WRITE_DEADLINE};
use crate::domain::{CommitId, PlanFile, TenantId};
use crate::storage::disk::{sync_dir, sync_tree};
use crate::storage::StorageError;
use git2::{ObjectType, Oid, Repository, RepositoryInitOptions};
use std::path::Path;
use std::time::Instant;

/// The lock file that tenant creations of every planfiles process take turns on, in the
/// data dir (not in `tenants/`, whose emptiness means "seed me").
const CREATE_LOCK_FILE: &str = ".planfiles-create.lock";

/// The turn that creations and imports of every planfiles process take to add a repository
/// to `tenants_dir`, held until the returned file is dropped.
pub(in crate::storage) fn creation_turn(tenants_dir: &Path) -> Result<std::fs::File, StorageError> {
    let lock_path = tenants_dir
        .parent()
        .unwrap_or(tenants_dir)
        .join(CREATE_LOCK_FILE);
    lock_file_until(&lock_path, Instant::now() + WRITE_DEADLINE)
        .map_err(|e| StorageError::io("take the tenant creation lock", &lock_path, e))?
        .map_err(|_| {
            StorageError::io(
                "another process kept the tenant creation lock",
                &lock_path,
                std::io::ErrorKind::WouldBlock.into(),
            )
        })
}

/// How long a hand-over turn is waited for: an import holds it while it asks the source one
/// last time (an HTTP call of up to 30 s).
const HANDOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(40);

/// The turn in which `tenant` becomes writable here by an import, one per tenant, in the data
/// dir's `handover-locks/`: an import holds it from its last question to the source until
/// the tenant is writable, and the dry run that `tenant move --abort` asks for takes it too,
/// so that it never answers "not here" between the two. Per tenant: a slow source holds up
/// no other tenant's import or creation. `Contended` when another holder keeps it longer
/// than [`HANDOVER_WAIT`].
pub(in crate::storage) fn handover_turn(
    tenants_dir: &Path,
    tenant: &TenantId,
) -> Result<std::fs::File, StorageError> {
    let dir = tenants_dir
        .parent()
        .unwrap_or(tenants_dir)
        .join("handover-locks");
    if !dir.is_dir() {
        crate::storage::disk::create_dir_all_synced(&dir)?;
    }
    let lock_path = dir.join(format!("{tenant}.lock"));
    lock_file_until(&lock_path, Instant::now() + HANDOVER_WAIT)
        .map_err(|e| StorageError::io("take the hand-over turn", &lock_path, e))?
        .map_err(|attempts| StorageError::Contended {
            tenant: tenant.clone(),
            file: "",
            attempts,
        })
}

/// Creates a tenant repository: init in a temporary directory, first commit, then rename.
/// Creations take turns, and an id that equals an existing tenant's in another letter case is
/// refused: on a case-insensitive volume both would be one repository.
pub(in crate::storage) fn create(
    tenant: &TenantId,
    tenants_dir: &Path,
    path: &Path,
    source_hosting: bool,
    committer: &Committer,
) -> Result<CommitId, StorageError> {
    let _turn = creation_turn(tenants_dir)?;
    if let Some(to) = crate::storage::placement::tombstone(tenants_dir, tenant) {
        return Err(StorageError::TenantMoved {
            tenant: tenant.clone(),
            to,
        });
    }
    if let Some(existing) = same_id_in_other_case(tenant, tenants_dir)? {
        return Err(StorageError::TenantCaseClash {
            tenant: tenant.clone(),
            existing,
        });
    }
    if path.exists() {
        return Err(StorageError::TenantExists(tenant.clone()));
    }
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".new-{tenant}-"))
        .tempdir_in(tenants_dir)
        .map_err(|e| StorageError::io("create a temporary directory", tenants_dir, e))?;
    let commit = init_repo(tenant, tmp.path(), source_hosting, committer)?;
    // Every file and folder of the new repository (libgit2 fsyncs none of its config, and in
    // group mode nothing), then the rename, then the folder that gained it.
    sync_tree(tmp.path())?;
    let tmp_path = tmp.keep();
    if let Err(e) = std::fs::rename(&tmp_path, path) {
        let _ = std::fs::remove_dir_all(&tmp_path);
        return Err(if path.exists() {
            StorageError::TenantExists(tenant.clone())
        } else {
            StorageError::io("move the new repository into place", path, e)
        });
    }
    sync_dir(tenants_dir)?;
    Ok(CommitId(to_id(commit)))
}

/// The name of an existing tenant repository whose id equals `tenant` in another letter case.
fn same_id_in_other_case(
    tenant: &TenantId,
    tenants_dir: &Path,
) -> Result<Option<String>, StorageError> {
    let wanted = format!("{tenant}.git");
    let entries = std::fs::read_dir(tenants_dir)
        .map_err(|e| StorageError::io("list tenants", tenants_dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("list tenants", tenants_dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name != wanted && name.eq_ignore_ascii_case(&wanted) {
            let id = &name[..name.len() - ".git".len()];
            return Ok(Some(id.to_owned()));
        }
    }
    Ok(None)
}

/// Initialises a bare repository at `path` with branch `main` and the tenant's first commit.
fn init_repo(
    tenant: &TenantId,
    path: &Path,
    source_hosting: bool,
    committer: &Committer,
) -> Result<Oid, StorageError> {
    let err = |op| git_err(tenant, op, "");
    let mut opts = RepositoryInitOptions::new();
    opts.bare(true)
        .initial_head("main")
        .mkdir(true)
        .mkpath(false);
    let repo = Repository::init_opts(path, &opts).map_err(err("init repository"))?;
    repo.config()
        .and_then(|mut c| c.set_bool(SOURCE_HOSTING_KEY, source_hosting))
        .map_err(err("write config"))?;
    let mut builder = repo.treebuilder(None).map_err(err("build tree"))?;
    for (file, text) in [
        (PlanFile::Integration, "{}\n"),
        (PlanFile::Configuration, "folders: []\n"),
    ] {
        let blob = repo.blob(text.as_bytes()).map_err(err("write blob"))?;
        builder
            .insert(file.path(), blob, FILE_MODE)
            .map_err(err("build tree"))?;
    }
    let tree = repo
        .find_tree(builder.write().map_err(err("write tree"))?)
        .map_err(err("read tree"))?;
    let sig = signature(&committer.identity).map_err(err("signature"))?;
    let text = committer.finish(commit_text(
        tree.id(),
        &[],
        &sig,
        &sig,
        &format!("Create tenant {tenant}\n"),
    ));
    let commit = repo
        .odb()
        .and_then(|odb| odb.write(ObjectType::Commit, text.as_bytes()))
        .map_err(err("write commit"))?;
    repo.reference(MAIN, commit, false, "create tenant")
        .map_err(err("write main"))?;
    Ok(commit)
}

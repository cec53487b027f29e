//! A push's objects kept apart until every check passed, as git's receive-pack keeps them (indexed and fsck'd by `git index-pack --strict`): a repository under `objects/planfiles-incoming-*` whose store borrows the tenant's (an alternate), its pack moved into `objects/pack` on success and the whole folder removed otherwise; and the connectivity check of what a push makes reachable.
use crate::storage::disk::faults::{self, Op};
use crate::storage::disk::{create_dir_synced, sync_dir};
use crate::storage::StorageError;
use git2::Oid;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PREFIX: &str = "planfiles-incoming-";
/// A quarantine older than this was left by a process that died during a push.
const ABANDONED: Duration = Duration::from_secs(3600);

/// The folder of one push's objects, removed when dropped (after a migration it holds
/// nothing of value).
pub struct Quarantine {
    pub path: PathBuf,
    pub repo: git2::Repository,
}

impl Quarantine {
    /// A new quarantine in the repository at `repo_path` (and the abandoned ones removed).
    pub fn new(repo_path: &Path) -> Result<Self, StorageError> {
        let objects = repo_path.join("objects");
        sweep(&objects);
        let path = objects.join(format!("{PREFIX}{:016x}", rand::random::<u64>()));
        let io = |op, p: &Path, e| StorageError::io(op, p, e);
        let git = |e: git2::Error| {
            StorageError::io(
                "make a push's quarantine",
                &path,
                std::io::Error::other(e.message().to_owned()),
            )
        };
        git2::Repository::init_bare(&path).map_err(git)?;
        let alternates = path.join("objects/info/alternates");
        // Absolute: git reads a relative alternate against the quarantine's own objects/.
        let borrowed = std::path::absolute(&objects)
            .map_err(|e| io("find the tenant's objects folder", &objects, e))?;
        std::fs::write(&alternates, format!("{}\n", borrowed.display()))
            .map_err(|e| io("write the quarantine's alternates", &alternates, e))?;
        std::fs::create_dir_all(path.join("objects/pack"))
            .map_err(|e| io("make the quarantine's pack folder", &path, e))?;
        // Opened after its alternates are written: libgit2 reads them once.
        let repo = git2::Repository::open_bare(&path).map_err(git)?;
        Ok(Quarantine { path, repo })
    }

    /// Moves the pushed pack into `objects/pack` (the pack before its index, which makes it
    /// visible), the folder synced in fsync mode (a group commit's sync covers it otherwise).
    pub fn migrate(&self, repo_path: &Path, fsync: bool) -> Result<(), StorageError> {
        let from = self.path.join("objects/pack");
        let to = repo_path.join("objects/pack");
        if !to.is_dir() {
            create_dir_synced(&to).map_err(|e| StorageError::io("make objects/pack", &to, e))?;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&from)
            .map_err(|e| StorageError::io("list the quarantine", &from, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        // .pack first, .idx last: a pack is used once its index is there.
        files.sort_by_key(|p| p.extension().is_some_and(|e| e == "idx"));
        for file in &files {
            let name = file.file_name().expect("a file in a folder");
            let target = to.join(name);
            faults::check(Op::Rename, &target)
                .and_then(|()| std::fs::rename(file, &target))
                .map_err(|e| StorageError::io("move a pushed pack into place", &target, e))?;
        }
        if fsync && !files.is_empty() {
            sync_dir(&to)?;
        }
        Ok(())
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes quarantines that a process which died during a push left behind.
fn sweep(objects: &Path) {
    let Ok(entries) = std::fs::read_dir(objects) else {
        return;
    };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > ABANDONED);
        if old && entry.file_name().to_string_lossy().starts_with(PREFIX) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `git` in the quarantine, in an environment of its own (no user or system config).
fn git(quarantine: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new("git");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("--git-dir")
        .arg(quarantine);
    cmd
}

/// What `git fsck --strict` refuses beyond `receive.fsckObjects`' errors: its warnings (and
/// an odd file mode, which it only notes), made errors. Ids that git 2.39 already knows.
const FSCK_STRICT: &str = "--strict=emptyName=error,fullPathname=error,hasDot=error,\
hasDotdot=error,hasDotgit=error,nullSha1=error,zeroPaddedFilemode=error,nulInCommit=error,\
badFilemode=error";

/// Indexes a pushed pack into the quarantine as git's receive-pack does with
/// `receive.fsckObjects`: `git index-pack --strict`, each object checked as `git fsck
/// --strict` checks it (dates, time zones, names, modes, `.gitmodules`, NULs) and every link
/// of the pack resolved; the pack and its index synced by git before they are named.
/// `Err(why)`: the first thing git found, in git's words.
pub fn index(quarantine: &Path, pack: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = git(quarantine)
        .args([
            "-c",
            "core.fsync=pack,pack-metadata",
            "-c",
            "core.fsyncMethod=fsync",
        ])
        .args(["index-pack", "--stdin", "--fix-thin", FSCK_STRICT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("the pack could not be checked: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    // A refusal ends git before it has read everything: the broken pipe is not the reason.
    let _ = stdin.write_all(pack);
    drop(stdin);
    let out = child
        .wait_with_output()
        .map_err(|e| format!("the pack could not be checked: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why: Vec<&str> = stderr
        .lines()
        .map(|l| {
            l.trim_start_matches("fatal: ")
                .trim_start_matches("error: ")
        })
        .filter(|l| !l.is_empty())
        .take(3)
        .collect();
    Err(format!(
        "git refuses the pushed objects: {}",
        why.join("; ")
    ))
}

/// Whether every object reachable from `new` and not from `old` is in the quarantine's store
/// (its own and the tenant's): `git rev-list --objects`.
pub fn connected(quarantine: &Path, old: Oid, new: Oid) -> Result<(), String> {
    let out = git(quarantine)
        .args(["rev-list", "--objects", "--quiet"])
        .arg(new.to_string())
        .arg("--not")
        .arg(old.to_string())
        .output()
        .map_err(|e| format!("the push's objects could not be checked: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    let why = why
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("fatal: ");
    Err(format!("the push lacks objects its commits need ({why})"))
}

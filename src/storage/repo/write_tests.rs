//! Tests of the write path's failure handling, with `syncfs` results injected.
use super::signatures::{test_committer, Committer};
use super::{create, TenantRepo};
use crate::domain::{PlanFile, TenantId};
use crate::storage::disk::durable::SyncGroup;
use crate::storage::{CommitRequest, Preconditions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Runs the git CLI in `repo` (no user or system config) and returns its trimmed stdout.
pub(super) fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A log sink for one test's `tracing` output.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Asserts that a line of `log` at `level` holds `message`.
fn assert_logged(log: &str, level: &str, message: &str) {
    assert!(
        log.lines()
            .any(|l| l.contains(message) && l.contains(&format!(" {level} "))),
        "no {level} line with {message:?} in:\n{log}"
    );
}

fn eio() -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::EIO))
}

/// A new tenant `acme` in a temporary folder: the folder, the id, the repository, the
/// committer.
fn new_tenant() -> (tempfile::TempDir, TenantId, PathBuf, Committer) {
    crate::storage::init_git();
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::parse("acme").unwrap();
    let path = dir.path().join("acme.git");
    let committer = test_committer();
    create(&tenant, dir.path(), &path, false, &committer).unwrap();
    (dir, tenant, path, committer)
}

/// One write of the integration file's `text`, a batch of one.
fn write_one(
    repo: &TenantRepo,
    committer: &Committer,
    sync: Option<&SyncGroup>,
    text: &str,
) -> Result<crate::storage::Committed, crate::storage::StorageError> {
    let req = CommitRequest::of(
        PlanFile::Integration,
        text.as_bytes().to_vec(),
        Preconditions::default(),
        committer.identity.clone(),
    );
    repo.commit_batch(
        &[&req],
        committer,
        sync,
        &Default::default(),
        &Default::default(),
    )
    .pop()
    .flatten()
    .expect("tried")
}

/// What the injected sync function does on its n-th call (1-based), in the repository.
type Script = fn(usize, &Path) -> io::Result<()>;

/// Creates a tenant, then writes its integration file once with `script` standing in for
/// `syncfs`. Returns the repository, the head before the write, the result, the number of
/// sync calls and the log.
fn write_with(script: Script) -> (tempfile::TempDir, PathBuf, String, bool, usize, String) {
    let (dir, tenant, path, committer) = new_tenant();
    let head = git(&path, &["rev-parse", "main"]);
    let calls = Arc::new(AtomicUsize::new(0));
    let group = SyncGroup::with_sync_fn({
        let calls = calls.clone();
        let path = path.clone();
        move || script(calls.fetch_add(1, Ordering::SeqCst) + 1, &path)
    });
    let log = Log::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .finish();
    let result = tracing::subscriber::with_default(subscriber, || {
        let repo = TenantRepo::open(&tenant, &path).unwrap();
        write_one(&repo, &committer, Some(&group), "changed: true\n")
    });
    let calls = calls.load(Ordering::SeqCst);
    (dir, path, head, result.is_ok(), calls, log.text())
}

/// The commit `main` had after the write (its first parent is the head before it).
fn written_commit(path: &Path) -> String {
    git(
        path,
        &["log", "--all", "--reflog", "--format=%H %s", "-n", "20"],
    )
    .lines()
    .find(|l| l.ends_with("Update integrations.yml"))
    .expect("the write made a commit")
    .split(' ')
    .next()
    .unwrap()
    .to_owned()
}

#[test]
fn a_failed_sync_after_moving_main_puts_main_back_and_syncs_that() {
    let (_dir, path, head, ok, calls, log) = write_with(|n, _| match n {
        2 => eio(),
        _ => Ok(()),
    });
    assert!(!ok, "the write must fail");
    assert_eq!(git(&path, &["rev-parse", "main"]), head, "main is back");
    assert_eq!(calls, 3, "objects, ref, and the undo are synced");
    assert_logged(
        &log,
        "WARN",
        "ref put back after its update could not be synced",
    );
    git(&path, &["fsck", "--strict"]);
}

#[test]
fn an_undo_whose_sync_fails_too_is_logged_as_an_error() {
    let (_dir, path, head, ok, calls, log) = write_with(|n, _| match n {
        2 | 3 => eio(),
        _ => Ok(()),
    });
    assert!(!ok);
    assert_eq!(git(&path, &["rev-parse", "main"]), head);
    assert_eq!(calls, 3);
    assert_logged(&log, "ERROR", "could not be synced either");
    git(&path, &["fsck", "--strict"]);
}

#[test]
fn main_moved_again_meanwhile_is_left_where_it_is() {
    // During the ref's sync, plain git commits on top of the write's commit.
    let (_dir, path, head, ok, _, log) = write_with(|n, path| {
        if n == 2 {
            let tree = git(path, &["rev-parse", "main^{tree}"]);
            let ours = git(path, &["rev-parse", "main"]);
            let next = git(
                path,
                &["commit-tree", &tree, "-p", &ours, "-m", "plain git"],
            );
            git(path, &["update-ref", "refs/heads/main", &next, &ours]);
            return eio();
        }
        Ok(())
    });
    assert!(!ok);
    let main = git(&path, &["rev-parse", "main"]);
    assert_ne!(main, head, "plain git's commit is not undone");
    assert_eq!(
        git(&path, &["log", "-1", "--format=%s", "main"]),
        "plain git"
    );
    assert_eq!(git(&path, &["rev-parse", "main~1"]), written_commit(&path));
    assert_logged(&log, "ERROR", "moved again meanwhile");
    git(&path, &["fsck", "--strict"]);
}

#[test]
fn an_undo_that_cannot_move_main_is_logged_as_an_error() {
    // During the ref's sync, someone takes main's lock: the undo cannot move main.
    let (_dir, path, head, ok, calls, log) = write_with(|n, path| {
        if n == 2 {
            std::fs::write(path.join("refs/heads/main.lock"), "").unwrap();
            return eio();
        }
        Ok(())
    });
    assert!(!ok);
    assert_eq!(calls, 2, "nothing to sync when main did not move back");
    let main = git(&path, &["rev-parse", "main"]);
    assert_ne!(main, head);
    assert_eq!(main, written_commit(&path));
    assert_logged(&log, "ERROR", "stays at the unsynced commit");
    std::fs::remove_file(path.join("refs/heads/main.lock")).unwrap();
    git(&path, &["fsck", "--strict"]);
}

#[test]
fn the_new_tree_id_is_foreseen_as_git_writes_it() {
    use super::objects::tree_id_with;
    use super::FILE_MODE;
    crate::storage::init_git();
    let dir = tempfile::tempdir().unwrap();
    let repo = git2::Repository::init_bare(dir.path()).unwrap();
    let blob = repo.blob(b"x: 1\n").unwrap();
    let other = repo.blob(b"y: 2\n").unwrap();
    let mut sub = repo.treebuilder(None).unwrap();
    sub.insert("inner.yml", other, FILE_MODE).unwrap();
    let sub = sub.write().unwrap();
    // Names that sort differently as files and as folders ("a" < "a.yml" < "a/"), another
    // mode, and the entry replaced or added.
    let mut base = repo.treebuilder(None).unwrap();
    base.insert("a.yml", other, FILE_MODE).unwrap();
    base.insert("a", sub, 0o040000).unwrap();
    base.insert("run.sh", other, 0o100755).unwrap();
    base.insert("integrations.yml", other, FILE_MODE).unwrap();
    let base = repo.find_tree(base.write().unwrap()).unwrap();
    for name in ["integrations.yml", "configuration.yml", "a.yml", "zz.yml"] {
        let mut builder = repo.treebuilder(Some(&base)).unwrap();
        builder.insert(name, blob, FILE_MODE).unwrap();
        assert_eq!(
            tree_id_with(&base, name, blob),
            Some(builder.write().unwrap()),
            "{name}"
        );
    }
}

/// Every system call of the write path, made to fail once (injected), in both modes: the write
/// fails and changes nothing (`main` where it was, or put back), leaves no temporary file or
/// lock behind, says why (out of descriptors is its own error), and the next write succeeds.
#[test]
fn a_failed_system_call_anywhere_in_the_write_path_changes_nothing() {
    use crate::storage::disk::faults::{inject, Op};
    let eio = libc::EIO;
    let emfile = libc::EMFILE;
    // (mode, the call, on a path containing, errno). The last fails after main's rename:
    // main is put back.
    let cases: &[(&str, Op, &str, i32)] = &[
        ("group", Op::Create, "tmp_obj_", emfile),
        ("fsync", Op::Create, "tmp_obj_", emfile),
        ("group", Op::Write, "tmp_obj_", eio),
        ("fsync", Op::Fsync, "tmp_obj_", eio),
        ("group", Op::Rename, "/objects/", eio),
        ("fsync", Op::Rename, "/objects/", eio),
        ("fsync", Op::SyncDir, "/objects/", eio),
        ("group", Op::Create, "main.lock", emfile),
        ("fsync", Op::Write, "main.lock", eio),
        ("fsync", Op::Fsync, "main.lock", eio),
        ("group", Op::Rename, "refs/heads/main", eio),
        ("fsync", Op::Rename, "refs/heads/main", eio),
        ("fsync", Op::SyncDir, "refs/heads", eio),
    ];
    for &(mode, op, on, errno) in cases {
        let case = format!("{mode} {op:?} {on} errno {errno}");
        let (_dir, tenant, path, committer) = new_tenant();
        let head = git(&path, &["rev-parse", "main"]);
        let group = SyncGroup::with_sync_fn(|| Ok(()));
        let sync = (mode == "group").then_some(&group);
        let repo = TenantRepo::open(&tenant, &path).unwrap();
        let write = |text: &str| write_one(&repo, &committer, sync, text);
        let fault = inject(op, on, errno, 1);
        let result = write("failed: true\n");
        assert!(fault.fired(), "{case}: the call was never made");
        drop(fault);
        let err = result.expect_err(&case);
        if errno == emfile {
            assert!(err.is_out_of_descriptors(), "{case}: {err}");
        }
        assert_eq!(
            git(&path, &["rev-parse", "main"]),
            head,
            "{case}: main moved"
        );
        // What failed before the objects were named left no object named.
        let named = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&path)
            .args(["cat-file", "-e", &git_hash("failed: true\n")])
            .status()
            .unwrap()
            .success();
        let before_names = matches!(op, Op::Create | Op::Write | Op::Fsync)
            || (op == Op::Rename && on == "/objects/");
        assert!(!(before_names && named), "{case}: an object was named");
        let leftovers: Vec<String> = walk(&path)
            .into_iter()
            .filter(|p| p.contains("tmp_obj_") || p.ends_with(".lock") && !p.contains("planfiles-"))
            .collect();
        assert!(leftovers.is_empty(), "{case}: left {leftovers:?}");
        write("after: true\n").unwrap_or_else(|e| panic!("{case}: the next write: {e}"));
        assert_eq!(
            git(&path, &["show", "main:integrations.yml"]),
            "after: true"
        );
        git(&path, &["fsck", "--strict"]);
    }
}

/// The blob id of `text`, as git computes it.
fn git_hash(text: &str) -> String {
    git2::Oid::hash_object(git2::ObjectType::Blob, text.as_bytes())
        .unwrap()
        .to_string()
}

/// Every file below `dir`, as paths.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.to_string_lossy().into_owned());
        }
    }
    out
}

/// A `main.lock` left by a planfiles writer that died holding it (planfiles makes its locks
/// with the sticky bit) is removed by the next writer at once; one without it (a live git
/// command's) is kept, and the write answers `RefLocked` after a short wait.
#[test]
fn a_main_lock_of_a_dead_planfiles_writer_goes_at_once_and_gits_stays() {
    let (_dir, tenant, path, committer) = new_tenant();
    let repo = TenantRepo::open(&tenant, &path).unwrap();
    let head = git2::Oid::from_str(&git(&path, &["rev-parse", "main"])).unwrap();
    let write = |text: &str| write_one(&repo, &committer, None, text);
    let lock = path.join("refs/heads/main.lock");
    // A writer takes the write lock and main.lock, then dies: main.lock is not cleaned up.
    {
        let _owner = repo
            .lock_for_write(
                std::time::Instant::now() + std::time::Duration::from_secs(1),
                "",
            )
            .unwrap();
        let held = repo.lock_ref(super::MAIN, Some(head), head, true);
        std::mem::forget(held.unwrap_or_else(|_| panic!("main.lock taken")));
    }
    assert!(lock.exists());
    let started = std::time::Instant::now();
    write("after: a crash\n").expect("the next write goes through");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert!(!lock.exists());
    // A live git command's lock (git makes it 0644): it stays.
    std::fs::write(&lock, format!("{head}\n")).unwrap();
    let started = std::time::Instant::now();
    let err = write("during: git\n").expect_err("git holds main");
    assert!(
        matches!(err, crate::storage::StorageError::RefLocked { .. }),
        "{err}"
    );
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    assert!(lock.exists(), "a live lock was removed");
    std::fs::remove_file(&lock).unwrap();
    write("after: git\n").unwrap();
    git(&path, &["fsck", "--strict"]);
}

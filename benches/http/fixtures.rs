//! Test data for the benchmark: tenants, long histories (git fast-import), the git CLI commit
//! the service is compared with, and many tenants for the start-up measurement.
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn git_stdin(repo: &Path, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A bare tenant repository at `repo` with `commits` commits, each changing the integration
/// file, written by git fast-import (one pack, as after upkeep).
pub fn history(repo: &Path, commits: usize) {
    let out = Command::new("git")
        .args(["init", "-q", "--bare", "-b", "main"])
        .arg(repo)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut stream = Vec::new();
    for i in 0..commits {
        let file = format!("aws:\n- account_id: '{i:012}'\n  regions: [us-east-1]\n  type: aws\n");
        let msg = format!("Update integrations.yml\n\nRequest-Id: fast-import-{i}\n");
        write!(
            stream,
            "commit refs/heads/main\nauthor Bench <bench@example.com> {} +0000\ncommitter planfiles <planfiles@localhost> {} +0000\ndata {}\n{msg}",
            1_700_000_000 + i,
            1_700_000_000 + i,
            msg.len()
        )
        .unwrap();
        if i == 0 {
            let config = "folders: []\n";
            write!(
                stream,
                "M 100644 inline configuration.yml\ndata {}\n{config}",
                config.len()
            )
            .unwrap();
        }
        write!(
            stream,
            "M 100644 inline integrations.yml\ndata {}\n{file}\n",
            file.len()
        )
        .unwrap();
    }
    git_stdin(repo, &["fast-import", "--quiet"], &stream);
}

/// One commit of `text` as `integrations.yml` on `main`, made with git plumbing and
/// `core.fsync=all`, the way a script would do it without the service.
pub fn git_cli_commit(repo: &Path, text: &str) {
    let fsync = ["-c", "core.fsync=all", "-c", "core.fsyncMethod=fsync"];
    fn with<'a>(fsync: &[&'a str], args: &[&'a str]) -> Vec<&'a str> {
        [fsync, args].concat()
    }
    let head = git(repo, &["rev-parse", "main"]);
    let blob = git_stdin(
        repo,
        &with(&fsync, &["hash-object", "-w", "--stdin"]),
        text.as_bytes(),
    );
    let config = git(repo, &["rev-parse", "main:configuration.yml"]);
    let tree = git_stdin(
        repo,
        &with(&fsync, &["mktree"]),
        format!("100644 blob {config}\tconfiguration.yml\n100644 blob {blob}\tintegrations.yml\n")
            .as_bytes(),
    );
    let commit = git_stdin(
        repo,
        &with(&fsync, &["commit-tree", &tree, "-p", &head]),
        b"Update integrations.yml\n",
    );
    git(
        repo,
        &with(&fsync, &["update-ref", "refs/heads/main", &commit, &head]),
    );
}

/// Serial git CLI commits: their latencies.
pub fn git_cli_commits(repo: &Path, count: usize) -> Vec<Duration> {
    (0..count)
        .map(|i| {
            let t = Instant::now();
            git_cli_commit(repo, &format!("aws:\n- account_id: '{i:012}'\n"));
            t.elapsed()
        })
        .collect()
}

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

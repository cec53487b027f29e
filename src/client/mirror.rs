//! `planfiles mirror --to DIR`: the tenant's two files kept in DIR as the service has them, each replaced atomically, with the commit they are at (`DIR/.planfiles-commit`); a version that breaks its rules is not applied (the last good one stays, and it says so); it resumes from that commit after a restart, and keeps the last good files while the service is unreachable ("stale since …").
use super::local::{ensure_dir, read_kept, replace};
use super::watch::{exit_0_on_interrupt, follow, Event};
use super::{Client, ClientError};
use crate::domain::PlanFile;
use std::path::Path;

/// The file beside the two that names the commit they were last brought to.
pub const COMMIT_FILE: &str = ".planfiles-commit";

/// Mirrors the tenant's files into `dir` until interrupted.
pub fn mirror(c: &Client, dir: &Path) -> Result<(), ClientError> {
    exit_0_on_interrupt();
    ensure_dir(dir)?;
    let since = read_kept(dir, COMMIT_FILE)
        .map(|s| s.trim().to_owned())
        .filter(|s| s.len() == 40);
    if let Some(since) = &since {
        super::note(&format!("mirror resumes after {since}"));
    }
    let stale_since: std::cell::RefCell<Option<String>> = Default::default();
    follow(
        c,
        since.clone(),
        |e| {
            if let Some(at) = stale_since.take() {
                super::note(&format!("the service answers again (stale since {at})"));
            }
            match e.kind.as_str() {
                "head" | "reset" => sync_all(c, dir, &e.id)?,
                "integration-file" | "configuration-file" => apply_event(c, dir, e)?,
                _ => return Ok(()),
            }
            replace(dir, COMMIT_FILE, format!("{}\n", e.id).as_bytes())
        },
        |e| {
            let mut stale = stale_since.borrow_mut();
            if stale.is_none() {
                let now = crate::domain::timestamp::rfc3339(std::time::SystemTime::now());
                super::note(&format!(
                    "stale since {now}: {e}; the last good files stay in {}",
                    dir.display()
                ));
                *stale = Some(now);
            }
        },
    )
}

/// The files as of `commit` (a start, a reset): each one that is valid there. A file that
/// is not, and that the folder does not have yet (a first start), is taken at its newest
/// valid version of the last 100, so that the folder is never left without it.
fn sync_all(c: &Client, dir: &Path, commit: &str) -> Result<(), ClientError> {
    for file in PlanFile::ALL {
        let view = c.get(&format!("/plans/{}?ref={commit}", file.part_name()))?;
        let valid = view["status"] != "invalid";
        apply(c, dir, file, commit, valid)?;
        if !valid && read_kept(dir, file.path()).is_none() {
            let page = c.get(&format!("/plans/{}/history?limit=100", file.part_name()))?;
            let good = page["entries"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["status"] == "valid")
                .and_then(|e| e["commit_sha"].as_str());
            match good {
                Some(good) => apply(c, dir, file, good, true)?,
                None => super::note(&format!(
                    "{} has no valid version in its last 100: none is in {}",
                    file.path(),
                    dir.display()
                )),
            }
        }
    }
    Ok(())
}

/// One file changed by one commit: applied when the event says it is valid.
fn apply_event(c: &Client, dir: &Path, e: &Event) -> Result<(), ClientError> {
    let file = if e.kind == "integration-file" {
        PlanFile::Integration
    } else {
        PlanFile::Configuration
    };
    apply(c, dir, file, &e.id, e.data["status"] != "invalid")
}

fn apply(
    c: &Client,
    dir: &Path,
    file: PlanFile,
    commit: &str,
    valid: bool,
) -> Result<(), ClientError> {
    if !valid {
        super::note(&format!(
            "not applied: {} at {} breaks its rules; the last good version stays",
            file.path(),
            super::short(commit)
        ));
        return Ok(());
    }
    let text = c.text(file, Some(commit))?.text;
    if read_kept(dir, file.path()).as_deref() != Some(text.as_str()) {
        replace(dir, file.path(), text.as_bytes())?;
        println!("{} at {}", file.path(), commit);
    }
    Ok(())
}

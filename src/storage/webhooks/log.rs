//! A subscription's deliveries log: one JSON line per attempt appended to `<id>.log`, which is turned into `<id>.log.1` past 256 KiB (so at most 512 KiB per subscription).
use crate::domain::WebhookId;
use serde::{Deserialize, Serialize};
use std::io::{self, Read as _, Seek as _, Write as _};
use std::path::Path;

const ROTATE_AT: u64 = 256 * 1024;

/// One delivery attempt, as `GET /plans/webhooks/{id}/deliveries` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The event's `webhook-id` (the same for each attempt of one event).
    pub webhook_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub commit_sha: String,
    /// 1 for the first attempt of the event.
    pub attempt: u32,
    pub status: AttemptStatus,
    pub duration_ms: u64,
    /// RFC 3339, seconds.
    pub at: String,
    /// What the receiver answered (the start of its body), or why no answer came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The receiver's HTTP status, or `timeout`, `refused` (a destination rule) or `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttemptStatus {
    Http(u16),
    Failed(String),
}

/// Appends `attempts` in one write (none: the log is left as it is).
pub(super) fn append(dir: &Path, id: &WebhookId, attempts: &[Attempt]) -> io::Result<()> {
    if attempts.is_empty() {
        return Ok(());
    }
    let path = dir.join(format!("{id}.log"));
    let mut lines = Vec::new();
    for attempt in attempts {
        serde_json::to_writer(&mut lines, attempt).map_err(io::Error::other)?;
        lines.push(b'\n');
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    if file.metadata()?.len() >= ROTATE_AT {
        std::fs::rename(&path, dir.join(format!("{id}.log.1")))?;
        file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
    }
    file.write_all(&lines)
}

/// The latest `limit` attempts, newest first.
pub(super) fn recent(dir: &Path, id: &WebhookId, limit: usize) -> io::Result<Vec<Attempt>> {
    let mut out = Vec::new();
    for name in [format!("{id}.log"), format!("{id}.log.1")] {
        let text = match read_tail(&dir.join(name)) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        // A line cut by a crash (or by the tail's start) is skipped.
        out.extend(
            text.lines()
                .rev()
                .filter_map(|l| serde_json::from_str::<Attempt>(l).ok())
                .take(limit - out.len()),
        );
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

/// At most the last `ROTATE_AT * 2` bytes of a log.
fn read_tail(path: &Path) -> io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    file.seek(io::SeekFrom::Start(len.saturating_sub(2 * ROTATE_AT)))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

pub(super) fn remove(dir: &Path, id: &WebhookId) {
    for name in [format!("{id}.log"), format!("{id}.log.1")] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(n: u32) -> Attempt {
        Attempt {
            webhook_id: format!("evt-{n}"),
            kind: "integration-file.updated".into(),
            commit_sha: "ab".repeat(20),
            attempt: n,
            status: if n.is_multiple_of(2) {
                AttemptStatus::Http(200)
            } else {
                AttemptStatus::Failed("timeout".into())
            },
            duration_ms: 3,
            at: "2026-11-27T00:00:00Z".into(),
            detail: None,
        }
    }

    #[test]
    fn the_log_keeps_the_latest_attempts_newest_first_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let id = WebhookId::generate();
        for n in (0..4000).step_by(4) {
            let four: Vec<_> = (n..n + 4).map(attempt).collect();
            append(dir.path(), &id, &four).unwrap();
        }
        let size = |name: String| std::fs::metadata(dir.path().join(name)).map_or(0, |m| m.len());
        assert!(size(format!("{id}.log")) + size(format!("{id}.log.1")) <= 2 * ROTATE_AT + 512);
        let got = recent(dir.path(), &id, 50).unwrap();
        assert_eq!(got.len(), 50);
        assert_eq!(got[0], attempt(3999));
        assert_eq!(got[49], attempt(3950));
        assert_eq!(
            serde_json::to_value(&got[0]).unwrap()["status"],
            serde_json::json!("timeout")
        );
        assert_eq!(serde_json::to_value(&got[1]).unwrap()["status"], 200);
        remove(dir.path(), &id);
        assert!(recent(dir.path(), &id, 10).unwrap().is_empty());
    }
}

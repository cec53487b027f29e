//! `planfiles watch`: the change stream, one line per event, followed across dropped connections (resumed with `Last-Event-ID` from the last commit all of whose events were handed on, with backoff), never an event twice or one skipped; Ctrl-C ends it with exit 0. `follow` is shared with `mirror`.
use super::commands::Output;
use super::{described, short, Client, ClientError};
use serde_json::Value;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

/// One event of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `head`, `integration-file`, `configuration-file`, `reset`, or a proposal's step
    /// (`proposal.opened` and the others).
    pub kind: String,
    /// The commit it is about (a step's commit on the proposals' records).
    pub id: String,
    pub data: Value,
}

/// Where a follower is: the last commit all of whose events were handed on, and the commit
/// being handed on with the files done so far.
#[derive(Debug, Default)]
struct Position {
    done: Option<String>,
    current: Option<(String, HashSet<String>)>,
}

impl Position {
    /// Whether `e` is new (then it counts as handed on).
    fn take(&mut self, e: &Event) -> bool {
        match e.kind.as_str() {
            // The start of a follow from now: where it starts (a resumed follow has one).
            "head" => {
                let fresh = self.done.is_none() && self.current.is_none();
                if fresh {
                    self.done = Some(e.id.clone());
                }
                fresh
            }
            "reset" => {
                self.done = Some(e.id.clone());
                self.current = None;
                true
            }
            file => match &mut self.current {
                Some((id, files)) if *id == e.id => files.insert(file.to_owned()),
                current => {
                    if let Some((id, _)) = current.take() {
                        self.done = Some(id);
                    }
                    *current = Some((e.id.clone(), HashSet::from([file.to_owned()])));
                    true
                }
            },
        }
    }
}

/// Follows the stream from after `since` (or from `main` now), handing each new event to
/// `on_event` once, in `main`'s order; reconnects after a dropped connection or an outage
/// (`on_outage` is told each time) with backoff up to 5 s. Ends only on an error the user
/// must act on (the token, a permission, the tenant) or one `on_event` returns.
pub(super) fn follow(
    c: &Client,
    since: Option<String>,
    mut on_event: impl FnMut(&Event) -> Result<(), ClientError>,
    mut on_outage: impl FnMut(&ClientError),
) -> Result<(), ClientError> {
    let mut at = Position {
        done: since,
        current: None,
    };
    let mut pause = Duration::from_millis(100);
    loop {
        let resume = at.done.clone();
        match c.events(resume.as_deref()) {
            Ok(res) => {
                // Connected: a cut from here on is a dropped link, not an outage; the next
                // attempt comes soon.
                pause = Duration::from_millis(100);
                let mut fields = (String::new(), String::new(), String::new());
                for line in BufReader::new(res).lines() {
                    let Ok(line) = line else { break };
                    if line.is_empty() {
                        let (kind, id, data) = std::mem::take(&mut fields);
                        if kind.is_empty() || id.is_empty() {
                            continue; // `moving` (no id) and the retry field
                        }
                        let data = serde_json::from_str(&data).unwrap_or(Value::Null);
                        let event = Event { kind, id, data };
                        if at.take(&event) {
                            on_event(&event)?;
                        }
                        pause = Duration::from_millis(100);
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        fields.0 = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        fields.1 = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        fields.2 = v.to_owned();
                    }
                }
            }
            Err(e @ (ClientError::Unreachable(_) | ClientError::Refused { status: 503, .. })) => {
                on_outage(&e)
            }
            Err(e) => return Err(e),
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Ctrl-C ends the process at once with exit 0 (each line is written whole and flushed).
pub(super) fn exit_0_on_interrupt() {
    extern "C" fn quit(_: libc::c_int) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(0) }
    }
    // SAFETY: installs a handler that only calls an async-signal-safe function.
    unsafe {
        libc::signal(libc::SIGINT, quit as *const () as libc::sighandler_t);
    }
}

/// `watch`: one line per event, from after `since` (a commit or a prefix) or from now.
pub fn watch(c: &Client, since: Option<&str>, out: Output) -> Result<(), ClientError> {
    exit_0_on_interrupt();
    let since = since.map(|s| c.commit_id(s)).transpose()?;
    let told = std::cell::Cell::new(false);
    follow(
        c,
        since,
        |e| {
            if e.kind == "head" {
                super::note(&format!("watching {} from {}", "main", short(&e.id)));
                return Ok(());
            }
            let line = match out {
                Output::Json => {
                    let mut v = e.data.clone();
                    if let Value::Object(m) = &mut v {
                        m.insert("event".into(), Value::String(e.kind.clone()));
                    }
                    v.to_string()
                }
                Output::Text => line(e),
            };
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{line}");
            let _ = stdout.flush();
            told.set(false);
            Ok(())
        },
        |e| {
            if !told.replace(true) {
                super::note(&format!("{e}; trying again"));
            }
        },
    )
}

/// An event as one line for a person.
fn line(e: &Event) -> String {
    if e.kind == "reset" {
        return format!("{} reset: main moved off the line it was on", short(&e.id));
    }
    if e.kind.starts_with("proposal.") {
        let d = &e.data;
        return format!(
            "{} {} #{} {:?} by {}",
            short(&e.id),
            e.kind,
            d["number"],
            d["title"].as_str().unwrap_or(""),
            d["by"]["name"].as_str().unwrap_or("")
        );
    }
    format!(
        "{} {} {} {}",
        short(&e.id),
        e.kind,
        short(e.data["file_sha"].as_str().unwrap_or("")),
        described(&e.data)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, id: &str) -> Event {
        Event {
            kind: kind.into(),
            id: id.into(),
            data: Value::Null,
        }
    }

    /// A replay after a cut repeats the commit that was being handed on: only its files not
    /// handed on yet pass, and the resume point is the commit before it.
    #[test]
    fn a_replayed_commit_passes_only_its_files_not_seen() {
        let mut at = Position::default();
        assert!(at.take(&ev("head", "h")), "where a fresh follow starts");
        assert_eq!(at.done.as_deref(), Some("h"));
        assert!(
            !at.take(&ev("head", "h2")),
            "a reconnection's head is not news"
        );
        assert!(at.take(&ev("integration-file", "a")));
        assert_eq!(at.done.as_deref(), Some("h"), "a may have more events");
        // Cut here; the stream replays from h: a's integration event again, then its other.
        assert!(!at.take(&ev("integration-file", "a")));
        assert!(at.take(&ev("configuration-file", "a")));
        assert!(at.take(&ev("integration-file", "b")));
        assert_eq!(at.done.as_deref(), Some("a"));
        assert!(at.take(&ev("reset", "r")));
        assert_eq!(at.done.as_deref(), Some("r"));
        assert!(
            at.take(&ev("integration-file", "b")),
            "after a reset b is new again"
        );
    }
}

//! The wire format of a push: the request's pkt-lines (commands, capabilities, where the pack starts) and the answer (`report-status`, in side-band 1 when asked, messages in side-band 2).
use super::super::pkt_line;
use crate::domain::ObjectId;
use crate::plans::push::{Command, Outcome};

/// A push request: its commands, the capabilities the client asked for, and its pack.
#[derive(Debug)]
pub(super) struct PushRequest {
    pub commands: Vec<Command>,
    pub side_band: bool,
    pub report_status: bool,
    /// Where the pack starts in the body.
    pub pack_at: usize,
}

/// The answer: `ok` or `ng <reason>` per ref, and lines for the pusher's terminal.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub refs: Vec<(String, Option<String>)>,
    pub messages: Vec<String>,
}

impl Report {
    /// The answer to every command of a push (all or nothing): `ok`, or `ng` with the
    /// reason, whose line comes last in the pusher's terminal.
    pub(super) fn of(commands: &[Command], outcome: Outcome) -> Self {
        let Outcome {
            refused,
            mut messages,
        } = outcome;
        if let Some(reason) = &refused {
            messages.push(format!("planfiles: push refused: {reason}"));
        }
        Report {
            refs: commands
                .iter()
                .map(|c| (c.name.clone(), refused.clone()))
                .collect(),
            messages,
        }
    }
}

/// The commands (pkt-lines up to a flush) and the pack after them.
pub(super) fn parse(body: &[u8]) -> Result<PushRequest, String> {
    let mut at = 0;
    let mut commands = Vec::new();
    let mut caps = String::new();
    loop {
        let len = body
            .get(at..at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or("a push request starts with pkt-lines of commands")?;
        if len == 0 {
            at += 4;
            break;
        }
        if len < 4 || at + len > body.len() {
            return Err("a pkt-line of the push is cut short".into());
        }
        let line = &body[at + 4..at + len];
        at += len;
        let (text, capabilities) = match line.iter().position(|b| *b == 0) {
            Some(nul) => (&line[..nul], Some(&line[nul + 1..])),
            None => (line, None),
        };
        if let Some(c) = capabilities {
            caps = String::from_utf8_lossy(c).into_owned();
        }
        let text = std::str::from_utf8(text).map_err(|_| "a command of the push is not text")?;
        let text = text.trim_end_matches('\n');
        if text.starts_with("shallow ") || text.starts_with("push-cert") {
            return Err("shallow pushes and signed pushes are not taken".into());
        }
        let mut parts = text.splitn(3, ' ');
        let (Some(old), Some(new), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("not a push command: {text:?}"));
        };
        let id = |s: &str| ObjectId::parse(s).map_err(|_| format!("not an object id: {s:?}"));
        commands.push(Command {
            old: id(old)?,
            new: id(new)?,
            name: name.to_owned(),
        });
    }
    if commands.is_empty() {
        return Err("the push names no ref".into());
    }
    let has = |cap: &str| caps.split(' ').any(|c| c == cap);
    Ok(PushRequest {
        commands,
        side_band: has("side-band-64k"),
        report_status: has("report-status"),
        pack_at: at,
    })
}

/// `report-status` (inside side-band 1 when asked), side-band 2 messages first.
pub(super) fn answer(report: &Report, side_band: bool, report_status: bool) -> Vec<u8> {
    let mut status = Vec::new();
    if report_status {
        status.extend(pkt_line("unpack ok\n"));
        for (name, reason) in &report.refs {
            let line = match reason {
                None => format!("ok {name}\n"),
                // One line: git shows it as "[remote rejected] (reason)".
                Some(why) => format!("ng {name} {}\n", why.replace('\n', " ")),
            };
            status.extend(pkt_line(line.as_bytes()));
        }
        status.extend_from_slice(b"0000");
    }
    if !side_band {
        return status;
    }
    let mut out = Vec::new();
    for m in &report.messages {
        let mut band = vec![2u8];
        band.extend_from_slice(m.as_bytes());
        band.push(b'\n');
        out.extend(pkt_line(&band));
    }
    for chunk in status.chunks(65_000) {
        let mut band = vec![1u8];
        band.extend_from_slice(chunk);
        out.extend(pkt_line(&band));
    }
    out.extend_from_slice(b"0000");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    #[test]
    fn commands_capabilities_and_the_pack_are_read() {
        let mut body = pkt_line(
            format!("{A} {B} refs/heads/main\0report-status side-band-64k agent=git/2\n")
                .as_bytes(),
        );
        body.extend(pkt_line(format!("{A} {B} refs/tags/v1\n").as_bytes()));
        body.extend_from_slice(b"0000PACKxyz");
        let r = parse(&body).unwrap();
        assert_eq!(r.commands.len(), 2);
        assert_eq!(r.commands[1].name, "refs/tags/v1");
        assert!(r.side_band && r.report_status);
        assert_eq!(&body[r.pack_at..], b"PACKxyz");
        for bad in [&b""[..], b"zzzz", b"0000", b"0010short"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_report_goes_in_band_one_and_messages_in_band_two() {
        let report = Report {
            refs: vec![("refs/heads/main".into(), Some("no".into()))],
            messages: vec!["planfiles: why".into()],
        };
        let plain = answer(&report, false, true);
        assert_eq!(plain, b"000eunpack ok\n001ang refs/heads/main no\n0000");
        let banded = answer(&report, true, true);
        assert!(banded.starts_with(b"0014\x02planfiles: why\n"));
        assert!(banded.ends_with(b"0000"));
    }
}

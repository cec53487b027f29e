//! The service's own commit trailers: one parser that writes them, reads them back and finds them in a pushed message however they are spelled.

/// A trailer the service writes and reads back. A commit made elsewhere (a push) may not
/// carry one, in any spelling: its readers would take it for the service's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    RequestId,
    Forced,
    RestoredFrom,
    IdempotencyKey,
    IdempotencyFingerprint,
    Replays,
    /// The proposal a commit applies (or, on a proposal's own commit, is).
    Proposal,
    ProposedBy,
    ApprovedBy,
}

impl Reserved {
    pub const ALL: [Reserved; 9] = [
        Reserved::RequestId,
        Reserved::Forced,
        Reserved::RestoredFrom,
        Reserved::IdempotencyKey,
        Reserved::IdempotencyFingerprint,
        Reserved::Replays,
        Reserved::Proposal,
        Reserved::ProposedBy,
        Reserved::ApprovedBy,
    ];

    /// The key as the service writes it.
    pub const fn key(self) -> &'static str {
        match self {
            Reserved::RequestId => "Request-Id",
            Reserved::Forced => "Forced",
            Reserved::RestoredFrom => "Restored-From",
            Reserved::IdempotencyKey => "Idempotency-Key",
            Reserved::IdempotencyFingerprint => "Idempotency-Fingerprint",
            Reserved::Replays => "Replays",
            Reserved::Proposal => "Proposal",
            Reserved::ProposedBy => "Proposed-by",
            Reserved::ApprovedBy => "Approved-by",
        }
    }

    /// The trailer's line as the service writes it, newline included.
    pub fn line(self, value: impl std::fmt::Display) -> String {
        format!("{}: {value}\n", self.key())
    }

    fn named(key: &str) -> Option<Reserved> {
        Reserved::ALL
            .into_iter()
            .find(|r| r.key().eq_ignore_ascii_case(key))
    }
}

/// A line read as a trailer: the key before the first `:` (spaces around it dropped, as git's
/// trailer parser drops them) and the value after it, trimmed.
fn split(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    Some((key, value.trim()))
}

/// The trailer block: the message's last paragraph (lines after its last blank line). A
/// message of one paragraph has none: that paragraph is its subject.
fn block(message: &str) -> impl Iterator<Item = &str> {
    let text = message.trim_end();
    let (mut offset, mut start) = (0, None);
    for line in text.split_inclusive('\n') {
        offset += line.len();
        if line.trim().is_empty() {
            start = Some(offset);
        }
    }
    start.map_or("", |s| &text[s..]).lines()
}

/// The value of the first `which` trailer in the trailer block, however its key is cased.
pub fn value(message: &str, which: Reserved) -> Option<&str> {
    block(message)
        .filter_map(split)
        .find(|(key, _)| Reserved::named(key) == Some(which))
        .map(|(_, value)| value)
}

/// Every value of `which` in the trailer block, in order.
pub fn values(message: &str, which: Reserved) -> impl Iterator<Item = &str> {
    block(message)
        .filter_map(split)
        .filter(move |(key, _)| Reserved::named(key) == Some(which))
        .map(|(_, value)| value)
}

/// `message` without the `which` lines of its trailer block (the text before it as it is).
pub fn without(message: &str, which: Reserved) -> String {
    let text = message.trim_end();
    let start = text.rfind("\n\n").map_or(text.len(), |i| i + 2);
    let (body, block) = text.split_at(start);
    let kept: Vec<&str> = block
        .lines()
        .filter(|l| split(l).is_none_or(|(key, _)| Reserved::named(key) != Some(which)))
        .collect();
    let mut out = body.to_owned();
    out.push_str(&kept.join("\n"));
    out
}

/// True when the trailer block says `Forced: true` (in any case).
pub fn is_forced(message: &str) -> bool {
    value(message, Reserved::Forced).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The first line anywhere in `message` that a reader could take for one of the service's
/// trailers, in any case or spacing: what a commit made elsewhere may not carry.
pub fn first_reserved(message: &[u8]) -> Option<Reserved> {
    let text = String::from_utf8_lossy(message);
    text.lines()
        .filter_map(split)
        .find_map(|(key, _)| Reserved::named(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trailer_is_read_from_the_last_paragraph_in_any_case_and_spacing() {
        let m = "Update x\n\nrequest-id:abc-1\nFORCED : TRUE\n";
        assert_eq!(value(m, Reserved::RequestId), Some("abc-1"));
        assert!(is_forced(m));
        // The subject is not a trailer, nor is a paragraph before the last.
        assert_eq!(value("Request-Id: a\n", Reserved::RequestId), None);
        let m = "Forced: true\n\nRequest-Id: a\n\nSigned-off-by: x\n";
        assert!(!is_forced(m));
        assert_eq!(value(m, Reserved::RequestId), None);
        assert!(!is_forced("x\n\nForced: false\n"));
        let two = "x\n\nReplays: a\nreplays: b\n";
        assert_eq!(
            values(two, Reserved::Replays).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn without_drops_one_trailer_of_the_last_paragraph() {
        let m = "Add x\n\nProposal: in the body stays\n\nSigned-off-by: d\nproposal: 4\n";
        let left = without(m, Reserved::Proposal);
        assert_eq!(
            left,
            "Add x\n\nProposal: in the body stays\n\nSigned-off-by: d"
        );
        assert_eq!(value(m, Reserved::Proposal), Some("4"));
        assert_eq!(without("One line", Reserved::Proposal), "One line");
    }

    #[test]
    fn what_the_service_writes_is_what_it_reads() {
        for which in Reserved::ALL {
            let message = format!("Subject\n\n{}", which.line("v-1"));
            assert_eq!(value(&message, which), Some("v-1"), "{which:?}");
            assert_eq!(first_reserved(message.as_bytes()), Some(which));
        }
    }

    #[test]
    fn every_spelling_a_reader_accepts_is_refused() {
        for spelled in [
            "Request-Id: x",
            "request-id: x",
            "Request-Id:x",
            "REQUEST-ID : x",
            "  Forced: true",
            "FORCED: true",
            "restored-from: 0123",
            "idempotency-key: k",
            "Idempotency-Fingerprint:f",
            "replays: abc",
            "proposal: 7",
            "Approved-By: Eve <e@x>",
        ] {
            let message = format!("A change\n\nSigned-off-by: d\n{spelled}\n");
            assert!(first_reserved(message.as_bytes()).is_some(), "{spelled}");
            // A reader takes it for the service's word: that is why it is refused.
            let key = spelled.split(':').next().unwrap().trim();
            let which = Reserved::named(key).unwrap();
            assert!(value(&message, which).is_some(), "{spelled}");
        }
        for fine in [
            "Signed-off-by: d",
            "Request-Identity: x",
            "X-Request-Id: x",
            "Forced-Push note",
            "a line that says Forced: true in passing",
        ] {
            let message = format!("A change\n\n{fine}\n");
            assert_eq!(first_reserved(message.as_bytes()), None, "{fine}");
        }
    }
}

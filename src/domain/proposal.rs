//! Proposals: `ProposalNumber`, `ProposalState`, the people on one (`Reviewer`), its description (`Description`), and `Proposal` with the four-eyes rules (who may update, close, approve and apply it).
use super::{CommitId, ContentError, PlanFile};
use serde_json::Value;

/// A proposal's number in its tenant: 1 to [`ProposalNumber::MAX`], written in decimal
/// without leading zeros (so a path names one proposal one way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalNumber(u64);

impl ProposalNumber {
    pub const MAX: u64 = 999_999_999;
    pub const FIRST: ProposalNumber = ProposalNumber(1);

    pub fn parse(raw: &str) -> Result<Self, String> {
        let digits = !raw.is_empty() && raw.len() <= 9 && raw.bytes().all(|b| b.is_ascii_digit());
        if !digits || raw.starts_with('0') {
            return Err(format!(
                "a proposal number is 1 to {} in decimal, without leading zeros",
                Self::MAX
            ));
        }
        Ok(Self(raw.parse().expect("nine digits fit")))
    }

    pub fn new(n: u64) -> Option<Self> {
        (1..=Self::MAX).contains(&n).then_some(Self(n))
    }

    pub fn get(self) -> u64 {
        self.0
    }

    /// The number after this one; `None` past the last.
    pub fn next(self) -> Option<Self> {
        Self::new(self.0 + 1)
    }
}

impl std::fmt::Display for ProposalNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a proposal is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProposalState {
    Open,
    Applied,
    Closed,
}

impl ProposalState {
    pub const ALL: [ProposalState; 3] = [Self::Open, Self::Applied, Self::Closed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Applied => "applied",
            Self::Closed => "closed",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// What one step of a proposal did: the verb its records commit starts with, and the event
/// the change streams and webhooks name it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepKind {
    Opened,
    Updated,
    Approved,
    Applied,
    Closed,
}

impl StepKind {
    pub const ALL: [StepKind; 5] = [
        Self::Opened,
        Self::Updated,
        Self::Approved,
        Self::Applied,
        Self::Closed,
    ];

    /// The event's name: `proposal.opened` and so on.
    pub fn event(self) -> &'static str {
        match self {
            Self::Opened => "proposal.opened",
            Self::Updated => "proposal.updated",
            Self::Approved => "proposal.approved",
            Self::Applied => "proposal.applied",
            Self::Closed => "proposal.closed",
        }
    }

    /// The first word of the records commit's subject (`Approve proposal 3`).
    pub fn verb(self) -> &'static str {
        match self {
            Self::Opened => "Open",
            Self::Updated => "Update",
            Self::Approved => "Approve",
            Self::Applied => "Apply",
            Self::Closed => "Close",
        }
    }

    /// The step a records commit's subject names (`Approve proposal 3`, `Open proposal 3:
    /// its title`); `None` for any other subject.
    pub fn of_subject(subject: &str) -> Option<Self> {
        let mut words = subject.split(' ');
        let verb = words.next()?;
        let number = words.nth(1)?.trim_end_matches(':');
        let shaped = subject[verb.len()..].starts_with(" proposal ");
        if !shaped || ProposalNumber::parse(number).is_err() {
            return None;
        }
        Self::ALL.into_iter().find(|k| k.verb() == verb)
    }
}

/// A person on a proposal: the token's `sub` (what tells two people apart) and the name and
/// email its commits carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewer {
    pub sub: String,
    pub name: String,
    pub email: String,
}

/// The most characters of a `sub` kept on a proposal.
pub const MAX_SUB_CHARS: usize = 256;

impl Reviewer {
    /// A reviewer with `sub`; `None` when the token has no `sub` (or an empty or over-long
    /// one): four eyes need to tell people apart.
    /// A `sub` with spaces at its ends, or a control, bidirectional or zero-width
    /// character, is refused too: two tokens whose subs differ only by what a reader cannot
    /// see must not pass for two people. Those characters are removed from the name and
    /// email the trailers show.
    pub fn new(sub: Option<&str>, name: &str, email: &str) -> Option<Self> {
        let sub = sub?;
        let hidden = |c: char| {
            super::commit_message::is_removed(c)
                || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{180e}')
        };
        let ok = !sub.is_empty()
            && sub.chars().count() <= MAX_SUB_CHARS
            && sub.trim() == sub
            && !sub.chars().any(hidden);
        let shown = |s: &str| s.chars().filter(|c| !hidden(*c)).collect::<String>();
        ok.then(|| Self {
            sub: sub.to_owned(),
            name: shown(name),
            email: shown(email),
        })
    }

    /// `Name <email>`, as a trailer names a person.
    pub fn signature(&self) -> String {
        format!("{} <{}>", self.name, self.email)
    }
}

/// A proposal's description (`message`): up to [`Description::MAX_CHARS`] characters, line
/// breaks kept (`\r\n` read as `\n`), other control characters removed, ends trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description(String);

impl Description {
    pub const MAX_CHARS: usize = 10_000;

    pub fn from_field(value: Option<&Value>, pointer: &str) -> Result<Option<Self>, ContentError> {
        let text = match value {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(s)) => s,
            Some(_) => return Err(ContentError::new(pointer, "must be a string")),
        };
        let cleaned: String = text
            .replace("\r\n", "\n")
            .chars()
            .filter(|c| *c == '\n' || !super::commit_message::is_removed(*c))
            .collect();
        let cleaned = cleaned.trim();
        let count = cleaned.chars().count();
        if count > Self::MAX_CHARS {
            return Err(ContentError::new(
                pointer,
                format!(
                    "has {count} characters; at most {} are allowed",
                    Self::MAX_CHARS
                ),
            ));
        }
        Ok((!cleaned.is_empty()).then(|| Self(cleaned.to_owned())))
    }

    /// A description read back from where it was stored.
    pub fn stored(text: String) -> Self {
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One approval: who, of which commit, when (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub by: Reviewer,
    pub commit: CommitId,
    pub at: u64,
}

/// A proposal as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub number: ProposalNumber,
    pub state: ProposalState,
    pub title: String,
    pub message: Option<Description>,
    pub author: Reviewer,
    /// Unix seconds.
    pub created: u64,
    pub updated: u64,
    /// `main` when the proposal's commit was made: the commit's parent.
    pub base: CommitId,
    /// The proposal's commit (what approvals name and apply writes).
    pub commit: CommitId,
    /// The files it changes against its base.
    pub files: Vec<PlanFile>,
    pub approvals: Vec<Approval>,
    /// The commit on `main` that applied it.
    pub applied: Option<CommitId>,
    /// Who closed it.
    pub closed_by: Option<String>,
}

/// Why a proposal's rule refuses a step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("proposal {number} is {}, not open", state.as_str())]
    NotOpen {
        number: ProposalNumber,
        state: ProposalState,
    },
    #[error("only the author of proposal {number} may {action} it")]
    NotAuthor {
        number: ProposalNumber,
        action: &'static str,
    },
    #[error("the author of proposal {number} cannot approve it: another person must")]
    OwnProposal { number: ProposalNumber },
    #[error("{sub} has approved proposal {number} already")]
    AlreadyApproved { number: ProposalNumber, sub: String },
    #[error("proposal {number} is at commit {current} now, not the one approved")]
    Changed {
        number: ProposalNumber,
        current: CommitId,
    },
    #[error("proposal {number} has {have} of the {need} approvals it needs")]
    ApprovalsMissing {
        number: ProposalNumber,
        have: usize,
        need: usize,
    },
    #[error("only the author or an approver of proposal {number} may apply it")]
    NotParticipant { number: ProposalNumber },
}

impl Proposal {
    fn open(&self) -> Result<(), Refusal> {
        match self.state {
            ProposalState::Open => Ok(()),
            state => Err(Refusal::NotOpen {
                number: self.number,
                state,
            }),
        }
    }

    /// Whether a reader sees the proposal (its listing, diffs and events): one that reads
    /// every file it changes (`reads`), or an approver.
    pub fn visible_to(&self, reads: impl Fn(PlanFile) -> bool, approves: bool) -> bool {
        approves || self.files.iter().all(|f| reads(*f))
    }

    /// The approvals of the proposal's current commit (an update voids the earlier ones).
    pub fn approvals_in_force(&self) -> impl Iterator<Item = &Approval> {
        self.approvals.iter().filter(|a| a.commit == self.commit)
    }

    /// The author updates or closes an open proposal.
    pub fn may_change(&self, sub: &str, action: &'static str) -> Result<(), Refusal> {
        self.open()?;
        if self.author.sub != sub {
            return Err(Refusal::NotAuthor {
                number: self.number,
                action,
            });
        }
        Ok(())
    }

    /// Another person approves the commit they saw (`seen`, when they name it): not the
    /// author, not someone who approved this commit already.
    pub fn may_approve(&self, sub: &str, seen: Option<CommitId>) -> Result<(), Refusal> {
        self.open()?;
        if seen.is_some_and(|s| s != self.commit) {
            return Err(Refusal::Changed {
                number: self.number,
                current: self.commit,
            });
        }
        if self.author.sub == sub {
            return Err(Refusal::OwnProposal {
                number: self.number,
            });
        }
        if self.approvals_in_force().any(|a| a.by.sub == sub) {
            return Err(Refusal::AlreadyApproved {
                number: self.number,
                sub: sub.to_owned(),
            });
        }
        Ok(())
    }

    /// The author or an approver applies an open proposal with `need` approvals of its
    /// commit.
    pub fn may_apply(&self, sub: &str, need: usize) -> Result<(), Refusal> {
        self.open()?;
        let approvers: Vec<&Approval> = self.approvals_in_force().collect();
        if self.author.sub != sub && !approvers.iter().any(|a| a.by.sub == sub) {
            return Err(Refusal::NotParticipant {
                number: self.number,
            });
        }
        if approvers.len() < need {
            return Err(Refusal::ApprovalsMissing {
                number: self.number,
                have: approvers.len(),
                need,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ObjectId;

    fn id(c: char) -> CommitId {
        CommitId(ObjectId::parse(&c.to_string().repeat(40)).unwrap())
    }

    fn person(sub: &str) -> Reviewer {
        Reviewer::new(Some(sub), sub, &format!("{sub}@x")).unwrap()
    }

    #[test]
    fn a_proposal_is_seen_by_readers_of_every_file_it_changes_or_by_approvers() {
        let mut p = proposal();
        p.files = vec![PlanFile::Integration, PlanFile::Configuration];
        let only_integration = |f| f == PlanFile::Integration;
        assert!(!p.visible_to(only_integration, false));
        assert!(p.visible_to(only_integration, true));
        assert!(p.visible_to(|_| true, false));
        p.files = vec![PlanFile::Integration];
        assert!(p.visible_to(only_integration, false));
        assert!(!p.visible_to(|_| false, false));
    }

    #[test]
    fn a_step_is_read_back_from_its_records_subject_and_nothing_else_is() {
        for kind in StepKind::ALL {
            let subject = format!("{} proposal 7: a title", kind.verb());
            assert_eq!(StepKind::of_subject(&subject), Some(kind));
        }
        assert_eq!(
            StepKind::of_subject("Apply proposal 12"),
            Some(StepKind::Applied)
        );
        for other in [
            "",
            "Opened proposal 1",
            "open proposal 1",
            "Apply",
            "Apply proposal",
            "Apply proposal 01",
            "Open port 443",
            "Approve proposals 3",
            "Merge 3",
        ] {
            assert_eq!(StepKind::of_subject(other), None, "{other:?}");
        }
        assert_eq!(StepKind::Approved.event(), "proposal.approved");
    }

    fn proposal() -> Proposal {
        Proposal {
            number: ProposalNumber::FIRST,
            state: ProposalState::Open,
            title: "t".into(),
            message: None,
            author: person("ann"),
            created: 1,
            updated: 1,
            base: id('a'),
            commit: id('b'),
            files: vec![PlanFile::Integration],
            approvals: vec![],
            applied: None,
            closed_by: None,
        }
    }

    #[test]
    fn numbers_are_written_one_way() {
        assert_eq!(ProposalNumber::parse("42").unwrap().get(), 42);
        assert_eq!(
            ProposalNumber::parse("999999999").unwrap().get(),
            999_999_999
        );
        for bad in ["", "0", "042", "-1", "1e3", "1000000000", "+1", " 1", "x"] {
            assert!(ProposalNumber::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ProposalNumber::new(999_999_999).unwrap().next().is_none());
    }

    #[test]
    fn a_reviewer_needs_a_sub() {
        assert!(Reviewer::new(None, "a", "a@x").is_none());
        assert!(Reviewer::new(Some(""), "a", "a@x").is_none());
        assert!(Reviewer::new(Some("a\nb"), "a", "a@x").is_none());
        assert!(Reviewer::new(Some(&"s".repeat(257)), "a", "a@x").is_none());
        for hidden in [" ann", "ann ", "ann\u{200b}", "\u{202e}bo", "a\u{2066}b"] {
            assert!(
                Reviewer::new(Some(hidden), "a", "a@x").is_none(),
                "{hidden:?}"
            );
        }
        let shown = Reviewer::new(Some("bo"), "\u{202e}Bo", "b\u{200b}o@x").unwrap();
        assert_eq!(shown.signature(), "Bo <bo@x>");
        assert_eq!(person("bo").signature(), "bo <bo@x>");
    }

    #[test]
    fn a_description_keeps_its_lines_and_drops_controls() {
        let d = |v: Value| Description::from_field(Some(&v), "/message");
        let got = d(Value::from("  one\r\ntwo\u{7}\u{202e}  "))
            .unwrap()
            .unwrap();
        assert_eq!(got.as_str(), "one\ntwo");
        assert!(d(Value::from("   ")).unwrap().is_none());
        assert!(d(Value::from(1)).is_err());
        assert!(d(Value::from("x".repeat(10_001))).is_err());
    }

    #[test]
    fn the_author_cannot_approve_nor_anyone_twice() {
        let mut p = proposal();
        assert!(matches!(
            p.may_approve("ann", None),
            Err(Refusal::OwnProposal { .. })
        ));
        assert!(p.may_approve("bo", None).is_ok());
        assert!(p.may_approve("bo", Some(id('b'))).is_ok());
        assert!(matches!(
            p.may_approve("bo", Some(id('c'))),
            Err(Refusal::Changed { .. })
        ));
        p.approvals.push(Approval {
            by: person("bo"),
            commit: id('b'),
            at: 2,
        });
        assert!(matches!(
            p.may_approve("bo", None),
            Err(Refusal::AlreadyApproved { .. })
        ));
        // An update voids it: the approval names the old commit.
        p.commit = id('c');
        assert!(p.may_approve("bo", None).is_ok());
    }

    #[test]
    fn apply_needs_a_participant_and_enough_approvals_of_this_commit() {
        let mut p = proposal();
        assert!(p.may_apply("ann", 0).is_ok());
        assert!(matches!(
            p.may_apply("ann", 1),
            Err(Refusal::ApprovalsMissing {
                have: 0,
                need: 1,
                ..
            })
        ));
        assert!(matches!(
            p.may_apply("cy", 0),
            Err(Refusal::NotParticipant { .. })
        ));
        p.approvals.push(Approval {
            by: person("bo"),
            commit: id('b'),
            at: 2,
        });
        assert!(p.may_apply("bo", 1).is_ok());
        p.commit = id('c');
        assert!(matches!(
            p.may_apply("ann", 1),
            Err(Refusal::ApprovalsMissing { have: 0, .. })
        ));
        assert!(matches!(
            p.may_apply("bo", 0),
            Err(Refusal::NotParticipant { .. })
        ));
    }

    #[test]
    fn only_the_author_changes_an_open_one() {
        let mut p = proposal();
        assert!(p.may_change("ann", "update").is_ok());
        assert!(matches!(
            p.may_change("bo", "close"),
            Err(Refusal::NotAuthor { .. })
        ));
        p.state = ProposalState::Closed;
        assert!(matches!(
            p.may_change("ann", "update"),
            Err(Refusal::NotOpen { .. })
        ));
        assert!(matches!(
            p.may_approve("bo", None),
            Err(Refusal::NotOpen { .. })
        ));
        assert!(matches!(
            p.may_apply("ann", 0),
            Err(Refusal::NotOpen { .. })
        ));
    }
}

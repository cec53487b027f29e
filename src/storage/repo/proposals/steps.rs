//! The records ref read as a line of steps, for the change streams and webhooks: what each step did, the proposal as it left it, and where it falls among `main`'s commits (its `Main-Head` trailer).
use super::{record, shard, RECORDS};
use crate::domain::trailers::Reserved;
use crate::domain::{CommitId, ObjectId, StepKind};
use crate::storage::repo::refs::read_ref_checked;
use crate::storage::repo::replay::MAX_REPLAY_COMMITS;
use crate::storage::repo::{git_err, to_id, to_oid, TenantRepo};
use crate::storage::{ProposalChange, ProposalChanges, StorageError};
use git2::Oid;
use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

/// The trailer of a records commit that names `main`'s commit when the step was taken.
pub(super) const MAIN_HEAD: &str = "Main-Head";

impl TenantRepo {
    /// The records ref's commit; `None` before the tenant's first proposal.
    pub(in crate::storage) fn records_head(&self) -> Result<Option<CommitId>, StorageError> {
        Ok(self.records_oid()?.map(|o| CommitId(to_id(o))))
    }

    fn records_oid(&self) -> Result<Option<Oid>, StorageError> {
        read_ref_checked(&self.path, RECORDS).map_err(|e| {
            StorageError::io("read the proposals' records", &self.path.join(RECORDS), e)
        })
    }

    /// The steps after `after` (`None`: from the first) up to the records ref's head, oldest
    /// first, at most `max` commits of the line read. An apply whose move of `main` did not
    /// happen is passed over; one whose move may still come (its commit is the head, and
    /// `main` is where the step found it) ends the read before it.
    pub(in crate::storage) fn proposal_changes(
        &self,
        after: Option<CommitId>,
        max: usize,
    ) -> Result<ProposalChanges, StorageError> {
        let Some(head) = self.records_oid()? else {
            return Ok(ProposalChanges::default());
        };
        let Some(line) = self.steps_line(head, after.map(|c| to_oid(&c.0)))? else {
            return Ok(ProposalChanges {
                steps: Vec::new(),
                through: Some(CommitId(to_id(head))),
                more: false,
            });
        };
        let take = line.len().min(max.max(1));
        let mut out = ProposalChanges {
            steps: Vec::new(),
            through: after,
            more: line.len() > take,
        };
        let main_now = self.main_commit("")?;
        for &oid in line.iter().rev().take(take) {
            if let Some(step) = self.step(oid)? {
                if step.kind == StepKind::Applied && !self.applied_landed(&step)? {
                    if oid == head && step.main.map(|m| to_oid(&m.0)) == Some(main_now) {
                        out.more = false;
                        break;
                    }
                } else {
                    out.steps.push(step);
                }
            }
            out.through = Some(CommitId(to_id(oid)));
        }
        Ok(out)
    }

    /// Where step `id` falls among `main`'s commits, when `id` is a step on the records line
    /// (within [`MAX_REPLAY_COMMITS`] of its head): `Some(main)`, with `main` `None` for a
    /// step recorded without it. `None` when `id` is no step of the line.
    pub(in crate::storage) fn step_place(
        &self,
        id: CommitId,
    ) -> Result<Option<Option<CommitId>>, StorageError> {
        let target = to_oid(&id.0);
        let Some(head) = self.records_oid()? else {
            return Ok(None);
        };
        // Most resume points are `main`'s commits, told apart by their message without a
        // walk; a commit whose message reads like a step's (a proposal titled so) is one only
        // on the records line.
        let Some(marks) = self.marks(target)? else {
            return Ok(None);
        };
        if target != head && self.steps_line(head, Some(target))?.is_none() {
            return Ok(None);
        }
        Ok(Some(marks.main))
    }

    /// For a stream that resumes after `main`'s commit `m`: the last step it was sent, the
    /// newest step taken before `main` reached `m` (`None`: before the first step). Read the
    /// head of `main` before calling: every step that falls before it is then in the line
    /// read here. When `m` is not on `main`'s line, the records' head (no step is replayed).
    pub(in crate::storage) fn steps_sent_before(
        &self,
        m: CommitId,
    ) -> Result<Option<CommitId>, StorageError> {
        let Some(head) = self.records_oid()? else {
            return Ok(None);
        };
        let err = |op| git_err(&self.tenant, op, "");
        // `m` and the commits after it, read after the records' head: every step of that
        // head found `main` at one of them, or before `m`.
        let m = to_oid(&m.0);
        let mut after_m = HashSet::new();
        let mut at = Some(self.main_commit("")?);
        while let Some(oid) = at {
            after_m.insert(oid);
            if oid == m {
                break;
            }
            if after_m.len() > MAX_REPLAY_COMMITS {
                return Ok(Some(CommitId(to_id(head))));
            }
            at = self.first_parent(oid, "read main's line")?;
        }
        if !after_m.contains(&m) {
            return Ok(Some(CommitId(to_id(head))));
        }
        let mut at = Some(head);
        let mut walked = 0;
        while let Some(oid) = at {
            // One read of each records commit: its message and its parent.
            let commit = self
                .repo
                .find_commit(oid)
                .map_err(err("read the proposals' records"))?;
            let placed_after = marks_of(&String::from_utf8_lossy(commit.message_bytes()))
                .and_then(|m| m.main)
                .is_some_and(|main| after_m.contains(&to_oid(&main.0)));
            walked += 1;
            if !placed_after || walked > MAX_REPLAY_COMMITS {
                return Ok(Some(CommitId(to_id(oid))));
            }
            at = commit.parent_id(0).ok();
        }
        Ok(None)
    }

    /// The records line from `head` back to `after` (not included), newest first; `None` when
    /// `after` is not on it within [`MAX_REPLAY_COMMITS`] commits.
    fn steps_line(&self, head: Oid, after: Option<Oid>) -> Result<Option<Vec<Oid>>, StorageError> {
        let mut line = Vec::new();
        let mut at = Some(head);
        while let Some(oid) = at {
            if Some(oid) == after {
                return Ok(Some(line));
            }
            if line.len() >= MAX_REPLAY_COMMITS {
                return Ok(None);
            }
            line.push(oid);
            at = self.first_parent(oid, "read the proposals' records")?;
        }
        Ok(after.is_none().then_some(line))
    }

    /// Commit `oid`'s first parent (`None` at a root).
    fn first_parent(&self, oid: Oid, op: &'static str) -> Result<Option<Oid>, StorageError> {
        let commit = self
            .repo
            .find_commit(oid)
            .map_err(git_err(&self.tenant, op, ""))?;
        Ok(commit.parent_id(0).ok())
    }

    /// What the message of commit `oid` says of a step (its verb, `Proposal` and `Main-Head`
    /// trailers), without its record; `None` when it reads as no step, or is not in the store.
    fn marks(&self, oid: Oid) -> Result<Option<Marks>, StorageError> {
        match self.repo.find_commit(oid) {
            Ok(commit) => Ok(marks_of(&String::from_utf8_lossy(commit.message_bytes()))),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(git_err(&self.tenant, "read a proposal's step", "")(e)),
        }
    }

    /// The step records commit `oid` took; `None` for a commit whose message reads as no step.
    fn step(&self, oid: Oid) -> Result<Option<ProposalChange>, StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        let commit = self
            .repo
            .find_commit(oid)
            .map_err(err("read a proposal's step"))?;
        let Some(Marks {
            kind,
            number: n,
            main,
        }) = marks_of(&String::from_utf8_lossy(commit.message_bytes()))
        else {
            return Ok(None);
        };
        let tree = commit.tree().map_err(err("read a proposal's step"))?;
        let path = format!("{}/{n}", shard(n));
        let blob = tree
            .get_path(std::path::Path::new(&path))
            .and_then(|e| self.repo.find_blob(e.id()))
            .map_err(err("read a proposal's step"))?;
        let proposal = record::decode(blob.content()).map_err(|why| StorageError::Git {
            tenant: self.tenant.clone(),
            op: "read a proposal's step",
            message: format!("the record of proposal {n} at {oid}: {why}"),
            code: 0,
            class: 0,
        })?;
        let author = commit.author();
        let seconds = u64::try_from(author.when().seconds()).unwrap_or(0);
        Ok(Some(ProposalChange {
            id: CommitId(to_id(oid)),
            main,
            kind,
            proposal,
            by_name: String::from_utf8_lossy(author.name_bytes()).into_owned(),
            by_email: String::from_utf8_lossy(author.email_bytes()).into_owned(),
            time: UNIX_EPOCH + Duration::from_secs(seconds),
        }))
    }

    /// Whether the apply `step` recorded is on `main`.
    fn applied_landed(&self, step: &ProposalChange) -> Result<bool, StorageError> {
        match step.proposal.applied {
            Some(applied) => self.landed(to_oid(&applied.0)),
            None => Ok(false),
        }
    }
}

/// What a records commit's message says: the step's verb, its proposal, and `main` then.
struct Marks {
    kind: StepKind,
    number: u64,
    main: Option<CommitId>,
}

/// The marks of a step's message (`Approve proposal 3`, `Proposal: 3`, `Main-Head: …`);
/// `None` without a step's verb or a `Proposal` trailer.
fn marks_of(message: &str) -> Option<Marks> {
    let kind = StepKind::of_subject(message.lines().next().unwrap_or_default())?;
    let (mut number, mut main) = (None, None);
    for line in message.lines().skip(1) {
        match line.split_once(": ") {
            Some((k, v)) if k == Reserved::Proposal.key() => number = v.parse::<u64>().ok(),
            Some((k, v)) if k == MAIN_HEAD => main = ObjectId::parse(v).ok().map(CommitId),
            _ => {}
        }
    }
    Some(Marks {
        kind,
        number: number?,
        main,
    })
}

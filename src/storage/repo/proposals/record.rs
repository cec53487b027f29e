//! A proposal's record as stored: one JSON blob per proposal, read back into the domain's `Proposal` (a record that does not read is a fault, said with its number, never a proposal made up).
use crate::domain::proposal::{Approval, Description};
use crate::domain::{
    CommitId, ObjectId, PlanFile, Proposal, ProposalNumber, ProposalState, Reviewer,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Stored {
    number: u64,
    state: String,
    title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    author: Person,
    created: u64,
    updated: u64,
    base: String,
    commit: String,
    files: Vec<String>,
    approvals: Vec<StoredApproval>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    applied: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    closed_by: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Person {
    sub: String,
    name: String,
    email: String,
}

#[derive(Serialize, Deserialize)]
struct StoredApproval {
    by: Person,
    commit: String,
    at: u64,
}

fn person(p: &Reviewer) -> Person {
    Person {
        sub: p.sub.clone(),
        name: p.name.clone(),
        email: p.email.clone(),
    }
}

fn reviewer(p: Person) -> Result<Reviewer, String> {
    Reviewer::new(Some(&p.sub), &p.name, &p.email).ok_or_else(|| "a person without a sub".into())
}

fn commit(raw: &str) -> Result<CommitId, String> {
    ObjectId::parse(raw)
        .map(CommitId)
        .map_err(|e| e.to_string())
}

/// The record's bytes.
pub(super) fn encode(p: &Proposal) -> Vec<u8> {
    let stored = Stored {
        number: p.number.get(),
        state: p.state.as_str().into(),
        title: p.title.clone(),
        message: p.message.as_ref().map(|m| m.as_str().to_owned()),
        author: person(&p.author),
        created: p.created,
        updated: p.updated,
        base: p.base.to_string(),
        commit: p.commit.to_string(),
        files: p.files.iter().map(|f| f.part_name().to_owned()).collect(),
        approvals: p
            .approvals
            .iter()
            .map(|a| StoredApproval {
                by: person(&a.by),
                commit: a.commit.to_string(),
                at: a.at,
            })
            .collect(),
        applied: p.applied.map(|c| c.to_string()),
        closed_by: p.closed_by.clone(),
    };
    let mut bytes = serde_json::to_vec(&stored).expect("a record serializes");
    bytes.push(b'\n');
    bytes
}

/// A record read back; why not, when it does not read.
pub(super) fn decode(bytes: &[u8]) -> Result<Proposal, String> {
    let s: Stored = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let number = ProposalNumber::new(s.number).ok_or("a number out of range")?;
    let state = ProposalState::parse(&s.state).ok_or("an unknown state")?;
    let files = s
        .files
        .iter()
        .map(|f| {
            PlanFile::ALL
                .into_iter()
                .find(|p| p.part_name() == f)
                .ok_or_else(|| format!("an unknown file {f:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Proposal {
        number,
        state,
        title: s.title,
        message: s.message.map(Description::stored),
        author: reviewer(s.author)?,
        created: s.created,
        updated: s.updated,
        base: commit(&s.base)?,
        commit: commit(&s.commit)?,
        files,
        approvals: s
            .approvals
            .into_iter()
            .map(|a| {
                Ok(Approval {
                    by: reviewer(a.by)?,
                    commit: commit(&a.commit)?,
                    at: a.at,
                })
            })
            .collect::<Result<Vec<_>, String>>()?,
        applied: s.applied.as_deref().map(commit).transpose()?,
        closed_by: s.closed_by,
    })
}

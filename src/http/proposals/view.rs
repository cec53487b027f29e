//! The bodies of `/plans/proposals`: a proposal as the API shows it, with its files' diffs when asked for one, and the list.
use super::super::schema::{DiffSide, FileDiff};
use super::super::views;
use crate::domain::proposal::Approval;
use crate::domain::{json_patch, timestamp, CommitId, Proposal, Reviewer};
use crate::storage::ProposedFile;
use serde::Serialize;
use utoipa::ToSchema;

/// A person on a proposal.
#[derive(Debug, Serialize, ToSchema)]
pub struct Person {
    /// The token's `sub`: what tells two people apart.
    pub sub: String,
    pub name: String,
    pub email: String,
}

impl Person {
    fn of(r: &Reviewer) -> Self {
        Person {
            sub: r.sub.clone(),
            name: r.name.clone(),
            email: r.email.clone(),
        }
    }
}

/// An approval of one commit of the proposal.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalView {
    pub by: Person,
    /// The proposal's commit it approves (approvals of an earlier commit are void).
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub commit: CommitId,
    /// RFC 3339.
    pub at: String,
}

impl ApprovalView {
    fn of(a: &Approval) -> Self {
        ApprovalView {
            by: Person::of(&a.by),
            commit: a.commit,
            at: timestamp::unix(a.at),
        }
    }
}

/// A proposal.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalView {
    pub number: u64,
    /// `open`, `applied` or `closed`.
    pub state: &'static str,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `main` when the proposal's commit was made (its parent).
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub base: CommitId,
    /// The proposal's commit, under `refs/proposals/<number>`.
    #[schema(value_type = String, pattern = "^[0-9a-f]{40}$")]
    pub commit: CommitId,
    /// The files it changes: `integration-file`, `configuration-file`.
    pub files: Vec<&'static str>,
    pub author: Person,
    /// The approvals of its current commit.
    pub approvals: Vec<ApprovalView>,
    /// Approvals the tenant requires before it is applied.
    pub approvals_required: u32,
    /// RFC 3339.
    pub created: String,
    pub updated: String,
    /// The commit on `main` that applied it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub applied_commit: Option<CommitId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<String>,
    /// Each file it changes, with its diffs (`GET /plans/proposals/{number}` only; files the
    /// token may not read are left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diffs: Option<Vec<ProposedFileView>>,
    /// True when a file it changes moved on `main` since its base: apply would answer 409
    /// `proposal_stale` (`GET /plans/proposals/{number}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<bool>,
}

impl ProposalView {
    pub fn new(p: &Proposal, required: u32) -> Self {
        ProposalView {
            number: p.number.get(),
            state: p.state.as_str(),
            title: p.title.clone(),
            message: p.message.as_ref().map(|m| m.as_str().to_owned()),
            base: p.base,
            commit: p.commit,
            files: p.files.iter().map(|f| f.part_name()).collect(),
            author: Person::of(&p.author),
            approvals: p.approvals_in_force().map(ApprovalView::of).collect(),
            approvals_required: required,
            created: timestamp::unix(p.created),
            updated: timestamp::unix(p.updated),
            applied_commit: p.applied,
            closed_by: p.closed_by.clone(),
            diffs: None,
            stale: None,
        }
    }

    /// With each readable file's diffs, and whether one moved on `main`.
    pub fn with_files(mut self, files: &[ProposedFile]) -> Self {
        self.stale = Some(files.iter().any(|f| f.main.blob != f.base.blob));
        self.diffs = Some(files.iter().map(ProposedFileView::of).collect());
        self
    }
}

/// One file of a proposal: from its base to the proposal, and from `main` now to it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposedFileView {
    /// `integration-file` or `configuration-file`.
    pub file: &'static str,
    pub from_base: FileDiff,
    pub from_main: FileDiff,
}

impl ProposedFileView {
    fn of(f: &ProposedFile) -> Self {
        let diff = |from: &crate::storage::FileSnapshot, text: &str| FileDiff {
            from: DiffSide {
                commit_sha: from.commit,
                file_sha: from.blob,
            },
            to: DiffSide {
                commit_sha: f.proposed.commit,
                file_sha: f.proposed.blob,
            },
            patch: json_patch::diff(
                &views::stored_content(f.file, &from.bytes),
                &views::stored_content(f.file, &f.proposed.bytes),
            ),
            text: text.to_owned(),
        };
        ProposedFileView {
            file: f.file.part_name(),
            from_base: diff(&f.base, &f.from_base),
            from_main: diff(&f.main, &f.from_main),
        }
    }
}

/// `GET /plans/proposals`: newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalList {
    pub proposals: Vec<ProposalView>,
    /// The number to pass as `before` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

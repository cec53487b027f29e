//! The objects of a commit: each change's new bytes (a JSON content edited into the stored text), its blob, the head's tree with those entries replaced, the commit and its message.
use super::{git_err, signature, TenantRepo, FILE_MODE};
use crate::domain::yaml::splice::{self, Made, Rewrite};
use crate::domain::{Identity, PlanFile};
use crate::storage::{Change, CommitRequest, StorageError};
use git2::{ObjectType, Oid};
use std::borrow::Cow;

/// One change checked against the head: its new bytes and blob, and what the head holds.
pub(super) struct Checked {
    /// Made again on every attempt: a JSON change edits the text stored at this head.
    pub(super) bytes: Vec<u8>,
    pub(super) made: Option<Made>,
    pub(super) new_blob: Oid,
    pub(super) current: Oid,
    pub(super) present: bool,
    pub(super) forced: bool,
}

impl Checked {
    pub(super) fn unchanged(&self) -> bool {
        self.present && self.new_blob == self.current
    }
}

impl TenantRepo {
    pub(super) fn new_bytes<'r>(
        &self,
        req: &'r Change,
        current: Oid,
        present: bool,
    ) -> Result<(Cow<'r, [u8]>, Option<Made>), StorageError> {
        let Some(content) = &req.content else {
            return Ok((Cow::Borrowed(&req.bytes), None));
        };
        if !present {
            return Ok((Cow::Borrowed(&req.bytes), Some(Made::Emitted)));
        }
        let blob = self.repo.find_blob(current).map_err(git_err(
            &self.tenant,
            "read blob",
            req.file.path(),
        ))?;
        let rewrite = match std::str::from_utf8(blob.content()) {
            Ok(old) => splice::rewrite(old, content),
            Err(_) => Rewrite::Fresh,
        };
        let made = rewrite.made();
        if made == Made::Fallback {
            tracing::warn!(
                tenant = %self.tenant,
                file = req.file.path(),
                "the stored text could not be edited into the new content; emitted whole"
            );
        }
        Ok(match rewrite {
            Rewrite::Edited(text) => (Cow::Owned(text.into_bytes()), Some(made)),
            Rewrite::Fresh | Rewrite::Fallback => (Cow::Borrowed(&req.bytes), Some(made)),
        })
    }

    /// Writes the changed blobs, the head's tree with those entries replaced, and a commit on
    /// top of `head`. With `track` (fsync mode) it also lists the objects the commit depends
    /// on that libgit2 did not write here, and so did not fsync: those it found already there
    /// (it only touches them), and the tree's other entries.
    pub(super) fn commit_changes(
        &self,
        head: &git2::Commit<'_>,
        req: &CommitRequest,
        checked: &[Checked],
        committer: &Identity,
        track: bool,
    ) -> Result<NewCommit, StorageError> {
        let path = req.changes.first().map_or("", |c| c.file.path());
        let err = |op| git_err(&self.tenant, op, path);
        let mut found = Vec::new();
        let base = head.tree().map_err(err("read head tree"))?;
        let mut entries: Vec<(&'static str, Oid)> = Vec::new();
        for (change, k) in req.changes.iter().zip(checked) {
            if k.unchanged() {
                continue;
            }
            if track && self.is_loose(k.new_blob) {
                found.push(k.new_blob);
            }
            let blob = self.repo.blob(&k.bytes).map_err(err("write blob"))?;
            entries.push((change.file.path(), blob));
        }
        let expected_tree = track.then(|| tree_id_with_all(&base, &entries)).flatten();
        if track {
            found.extend(
                base.iter()
                    .filter(|e| !entries.iter().any(|(n, _)| e.name_bytes() == n.as_bytes()))
                    .map(|e| e.id()),
            );
            found.extend(expected_tree.filter(|t| self.is_loose(*t)));
        }
        let mut builder = self
            .repo
            .treebuilder(Some(&base))
            .map_err(err("build tree"))?;
        for (name, blob) in &entries {
            builder
                .insert(name, *blob, FILE_MODE)
                .map_err(err("build tree"))?;
        }
        let tree_oid = builder.write().map_err(err("write tree"))?;
        if track && expected_tree != Some(tree_oid) {
            // Not foreseen (an unusual entry in the old tree): sync it to be sure.
            found.push(tree_oid);
        }
        let tree = self
            .repo
            .find_tree(tree_oid)
            .map_err(err("read new tree"))?;
        let author = signature(&req.author).map_err(err("author signature"))?;
        let committer = signature(committer).map_err(err("committer signature"))?;
        let forced = checked.iter().any(|k| !k.unchanged() && k.forced);
        let message = message(req, &entries, forced);
        let buffer = self
            .repo
            .commit_create_buffer(&author, &committer, &message, &tree, &[head])
            .map_err(err("write commit"))?;
        if track {
            let id = Oid::hash_object(ObjectType::Commit, &buffer).map_err(err("hash commit"))?;
            if self.is_loose(id) {
                found.push(id);
            }
        }
        let id = self
            .repo
            .odb()
            .and_then(|odb| odb.write(ObjectType::Commit, &buffer))
            .map_err(err("write commit"))?;
        Ok(NewCommit { id, found })
    }
}

/// A commit [`TenantRepo::commit_changes`] wrote, and the objects it depends on that libgit2 did
/// not write (and fsync) for it.
pub(super) struct NewCommit {
    pub(super) id: Oid,
    pub(super) found: Vec<Oid>,
}

/// The id of `base` with the blob entry `name` set to `blob`, as git would write it, computed
/// without writing it.
#[cfg(test)]
pub(super) fn tree_id_with(base: &git2::Tree<'_>, name: &str, blob: Oid) -> Option<Oid> {
    tree_id_with_all(base, &[(name, blob)])
}

/// The id of `base` with each blob entry of `set` replaced, as git would write it, computed
/// without writing it (entries sorted as git sorts them: a folder as if its name ended in `/`).
fn tree_id_with_all(base: &git2::Tree<'_>, set: &[(&str, Oid)]) -> Option<Oid> {
    let mut entries: Vec<(Vec<u8>, i32, Oid)> = base
        .iter()
        .filter(|e| !set.iter().any(|(n, _)| e.name_bytes() == n.as_bytes()))
        .map(|e| (e.name_bytes().to_vec(), e.filemode(), e.id()))
        .collect();
    entries.extend(
        set.iter()
            .map(|(name, blob)| (name.as_bytes().to_vec(), FILE_MODE, *blob)),
    );
    let key = |(name, mode, _): &(Vec<u8>, i32, Oid)| {
        let mut key = name.clone();
        if *mode == 0o040000 {
            key.push(b'/');
        }
        key
    };
    entries.sort_by_cached_key(key);
    let mut bytes = Vec::with_capacity(entries.len() * 48);
    for (name, mode, id) in &entries {
        bytes.extend_from_slice(format!("{mode:o} ").as_bytes());
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend_from_slice(id.as_bytes());
    }
    Oid::hash_object(ObjectType::Tree, &bytes).ok()
}

/// The paths a request writes, in the order of [`PlanFile::ALL`], joined by `, `.
pub(super) fn paths(req: &CommitRequest) -> String {
    PlanFile::ALL
        .iter()
        .filter(|f| req.changes.iter().any(|c| c.file == **f))
        .map(|f| f.path())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The commit message: the subject (the caller's, or one that names what changed), a blank
/// line, then the trailers.
fn message(req: &CommitRequest, changed: &[(&'static str, Oid)], forced: bool) -> String {
    let subject = match (&req.subject, req.restored_from) {
        (Some(subject), _) => subject.as_str().to_owned(),
        (None, Some(from)) => format!(
            "Restore {} as of {}",
            changed
                .iter()
                .map(|(p, _)| *p)
                .collect::<Vec<_>>()
                .join(", "),
            &from.to_string()[..12]
        ),
        (None, None) => {
            let mut names: Vec<&str> = changed.iter().map(|(p, _)| *p).collect();
            names.sort_by_key(|p| PlanFile::ALL.iter().position(|f| f.path() == *p));
            format!("Update {}", names.join(", "))
        }
    };
    let mut message = format!("{subject}\n\nRequest-Id: {}\n", req.request_id);
    if forced {
        message.push_str("Forced: true\n");
    }
    if let Some(from) = req.restored_from {
        message.push_str(&format!("Restored-From: {from}\n"));
    }
    if let Some(record) = &req.idempotency {
        message.push_str(&format!(
            "{}{}\n{}{}\n",
            super::idempotency::KEY_TRAILER,
            record.key.as_str(),
            super::idempotency::FINGERPRINT_TRAILER,
            record.fingerprint
        ));
    }
    message
}

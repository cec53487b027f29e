//! The objects of a commit: each change's new bytes (a JSON content edited into the stored text), its blob, the head's tree with those entries replaced, the commit and its message; staged as loose objects by `staged.rs`, not by libgit2.
use super::signatures::Committer;
use super::staged::Staged;
use super::{git_err, signature, TenantRepo, FILE_MODE, MAIN};
use crate::domain::trailers::Reserved;
use crate::domain::yaml::splice::{self, Made, Rewrite, Spans};
use crate::domain::yaml::Mapping;
use crate::domain::PlanFile;
use crate::storage::{Change, CommitRequest, StorageError};
use git2::{ObjectType, Oid, Signature};
use std::borrow::Cow;
use std::sync::Arc;

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

/// What the last few blobs a JSON edit stored parse to, by blob id, with their spans: the
/// next edit of that file starts from that text and needs its content and its node tree,
/// which this spares it from parsing again. A blob id names its bytes, so an entry is right
/// for as long as it is kept, whoever moved `main` since; it is put here only once the text
/// was checked to parse to exactly it (the spans come from that same check).
#[derive(Default)]
pub(super) struct Parsed(std::sync::Mutex<Vec<Known>>);

/// A stored text's content and, when known, its spans.
#[derive(Clone)]
pub(super) struct Known {
    blob: Oid,
    pub content: Arc<Mapping>,
    pub spans: Option<Arc<Spans>>,
}

/// Entries kept: one per file of a tenant.
const PARSED: usize = 2;

impl Parsed {
    fn get(&self, blob: Oid) -> Option<Known> {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        known.iter().find(|k| k.blob == blob).cloned()
    }

    /// Records `blob`'s content and spans; spans not given keep those known for that blob
    /// (an edit that changed nothing stored the same text).
    pub(super) fn put(&self, blob: Oid, content: Arc<Mapping>, spans: Option<Spans>) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let before = known
            .iter()
            .position(|k| k.blob == blob)
            .map(|i| known.remove(i));
        let spans = spans.map(Arc::new).or_else(|| before.and_then(|k| k.spans));
        if known.len() == PARSED {
            known.remove(0);
        }
        known.push(Known {
            blob,
            content,
            spans,
        });
    }
}

/// A change's new text: its bytes, how they were made (for JSON content) and, for an edit,
/// the edited text's spans.
pub(super) struct NewText<'r> {
    pub bytes: Cow<'r, [u8]>,
    pub made: Option<Made>,
    pub spans: Option<Spans>,
}

impl TenantRepo {
    pub(super) fn new_bytes<'r>(
        &self,
        staged: &Staged,
        req: &'r Change,
        current: Oid,
        present: bool,
    ) -> Result<NewText<'r>, StorageError> {
        let Some(content) = &req.content else {
            return Ok(NewText {
                bytes: Cow::Borrowed(&req.bytes),
                made: None,
                spans: None,
            });
        };
        // The emission is stored only once it reads back as the content (the handler did not
        // verify it: an edited text, verified by the splice, is stored instead most times).
        let emitted = |made: Made| {
            let verified = std::str::from_utf8(&req.bytes)
                .is_ok_and(|text| crate::domain::yaml::reads_back_as(text, content));
            if verified {
                Ok(NewText {
                    bytes: Cow::Borrowed(req.bytes.as_slice()),
                    made: Some(made),
                    spans: None,
                })
            } else {
                Err(StorageError::NotRepresentable {
                    tenant: self.tenant.clone(),
                    file: req.file,
                })
            }
        };
        if !present {
            return emitted(Made::Emitted);
        }
        let old = self.blob_bytes(staged, current, req.file.path())?;
        let known = self.parsed.get(current);
        let (rewrite, spans) = match std::str::from_utf8(&old) {
            Ok(old) => splice::rewrite_spanned(
                old,
                known.as_ref().map(|k| k.content.as_ref()),
                known.as_ref().and_then(|k| k.spans.as_deref()),
                content,
            ),
            Err(_) => (Rewrite::Fresh, None),
        };
        let made = rewrite.made();
        if made == Made::Fallback {
            tracing::warn!(
                tenant = %self.tenant,
                file = req.file.path(),
                "the stored text could not be edited into the new content; emitted whole"
            );
        }
        match rewrite {
            Rewrite::Edited(text) => Ok(NewText {
                bytes: Cow::Owned(text.into_bytes()),
                made: Some(made),
                spans,
            }),
            Rewrite::Fresh | Rewrite::Fallback => emitted(made),
        }
    }

    /// Stages the changed blobs, `head`'s tree with those entries replaced, and a commit on
    /// top of `head` (see [`Staged`]), and returns the new head. In fsync mode, `staged.found`
    /// gets what the commit depends on that was not written here: objects that were there
    /// already, and the tree's other entries.
    pub(super) fn commit_changes(
        &self,
        staged: &mut Staged,
        head: &Head,
        req: &CommitRequest,
        checked: &[Checked],
        committer: &Committer,
    ) -> Result<Head, StorageError> {
        let set = self.stage_blobs(staged, req, checked)?;
        let forced = checked.iter().any(|k| !k.unchanged() && k.forced);
        let message = message(req, &set, forced);
        self.stage_commit(staged, head, &set, &req.author, &message, committer)
    }

    /// Stages the blob of each change that changes its file; the entries to set.
    pub(super) fn stage_blobs(
        &self,
        staged: &mut Staged,
        req: &CommitRequest,
        checked: &[Checked],
    ) -> Result<Vec<(&'static str, Oid)>, StorageError> {
        let mut set: Vec<(&'static str, Oid)> = Vec::new();
        for (change, k) in req.changes.iter().zip(checked) {
            if k.unchanged() {
                continue;
            }
            let blob = self.stage_object(staged, ObjectType::Blob, &k.bytes)?;
            set.push((change.file.path(), blob));
        }
        Ok(set)
    }

    /// Stages `head`'s tree with the entries of `set` (blobs there already or staged) and a
    /// commit of it on top of `head` by `author` with `message`, signed; the new head.
    pub(super) fn stage_commit(
        &self,
        staged: &mut Staged,
        head: &Head,
        set: &[(&'static str, Oid)],
        author: &crate::domain::Identity,
        message: &str,
        committer: &Committer,
    ) -> Result<Head, StorageError> {
        let path = set.first().map_or("", |(p, _)| p);
        let err = |op| git_err(&self.tenant, op, path);
        let entries = with_entries(&head.entries, set);
        let tree = self.stage_object(staged, ObjectType::Tree, &tree_bytes(&entries))?;
        staged.found.extend(
            head.entries
                .iter()
                .filter(|e| !set.iter().any(|(n, _)| e.name == n.as_bytes()))
                .map(|e| e.id),
        );
        let author = signature(author).map_err(err("author signature"))?;
        let who = signature(&committer.identity).map_err(err("committer signature"))?;
        let text = committer.finish(commit_text(tree, &[head.commit], &author, &who, message));
        let id = self.stage_object(staged, ObjectType::Commit, text.as_bytes())?;
        staged.commits.push(id);
        Ok(Head {
            commit: id,
            entries,
        })
    }

    /// The bytes of blob `id`: staged by this attempt, or in the object store.
    pub(super) fn blob_bytes<'a>(
        &'a self,
        staged: &'a Staged,
        id: Oid,
        path: &'static str,
    ) -> Result<BlobBytes<'a>, StorageError> {
        if let Some(bytes) = staged.blob(id) {
            return Ok(BlobBytes::Staged(bytes));
        }
        self.repo
            .find_blob(id)
            .map(BlobBytes::Stored)
            .map_err(git_err(&self.tenant, "read blob", path))
    }

    /// `main`'s commit as it is on disk (the loose ref, else `packed-refs`).
    pub(super) fn main_commit(&self, path: &'static str) -> Result<Oid, StorageError> {
        match super::refs::read_ref_checked(&self.path, MAIN) {
            Ok(Some(oid)) => Ok(oid),
            Ok(None) => {
                self.repo
                    .refname_to_id(MAIN)
                    .map_err(git_err(&self.tenant, "resolve main", path))
            }
            Err(e) => Err(StorageError::io("read main", &self.path.join(MAIN), e)),
        }
    }

    /// `main` as it is on disk: its commit and its tree's entries.
    pub(super) fn read_head(&self, path: &'static str) -> Result<Head, StorageError> {
        let err = |op| git_err(&self.tenant, op, path);
        let commit = self.main_commit(path)?;
        let tree = self
            .repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(err("read head tree"))?;
        let entries = tree
            .iter()
            .map(|e| Entry {
                name: e.name_bytes().to_vec(),
                mode: e.filemode(),
                id: e.id(),
            })
            .collect();
        Ok(Head { commit, entries })
    }
}

/// A blob's bytes, borrowed from where they are.
pub(super) enum BlobBytes<'a> {
    Staged(&'a [u8]),
    Stored(git2::Blob<'a>),
}

impl std::ops::Deref for BlobBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            BlobBytes::Staged(bytes) => bytes,
            BlobBytes::Stored(blob) => blob.content(),
        }
    }
}

/// `main` as a writer sees it: the commit, and its tree's entries in git's order.
#[derive(Debug, Clone)]
pub(super) struct Head {
    pub(super) commit: Oid,
    pub(super) entries: Vec<Entry>,
}

impl Head {
    /// The blob of `name`, if the tree has one.
    pub(super) fn blob(&self, name: &str) -> Option<Oid> {
        self.entries
            .iter()
            // A blob: a file (executable or not) or a symlink, as git's object kinds go.
            .find(|e| e.name == name.as_bytes() && matches!(e.mode, 0o100644 | 0o100755 | 0o120000))
            .map(|e| e.id)
    }
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) name: Vec<u8>,
    pub(super) mode: i32,
    pub(super) id: Oid,
}

/// `entries` with each blob entry of `set` replaced or added, in git's order (a folder sorts
/// as if its name ended in `/`).
fn with_entries(entries: &[Entry], set: &[(&str, Oid)]) -> Vec<Entry> {
    let mut out: Vec<Entry> = entries
        .iter()
        .filter(|e| !set.iter().any(|(n, _)| e.name == n.as_bytes()))
        .cloned()
        .collect();
    out.extend(set.iter().map(|(name, blob)| Entry {
        name: name.as_bytes().to_vec(),
        mode: FILE_MODE,
        id: *blob,
    }));
    let key = |e: &Entry| {
        let mut key = e.name.clone();
        if e.mode == 0o040000 {
            key.push(b'/');
        }
        key
    };
    out.sort_by_cached_key(key);
    out
}

/// The entries of a stored tree, modes as libgit2 reads them.
pub(super) fn entries_of(tree: &git2::Tree<'_>) -> Vec<Entry> {
    tree.iter()
        .map(|e| Entry {
            name: e.name_bytes().to_vec(),
            mode: e.filemode(),
            id: e.id(),
        })
        .collect()
}

/// The bytes of the tree of `entries` with each blob entry of `set` replaced or added.
pub(super) fn tree_with(entries: &[Entry], set: &[(&str, Oid)]) -> Vec<u8> {
    tree_bytes(&with_entries(entries, set))
}

/// The bytes of the tree of `entries` (blobs and folders), put in git's order.
pub(super) fn tree_of(entries: &[Entry]) -> Vec<u8> {
    tree_with(entries, &[])
}

/// A tree object's bytes.
fn tree_bytes(entries: &[Entry]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(entries.len() * 48);
    for e in entries {
        bytes.extend_from_slice(format!("{:o} ", e.mode).as_bytes());
        bytes.extend_from_slice(&e.name);
        bytes.push(0);
        bytes.extend_from_slice(e.id.as_bytes());
    }
    bytes
}

/// The id of `base` with the blob entry `name` set to `blob`, as git would write it, computed
/// without writing it.
#[cfg(test)]
pub(super) fn tree_id_with(base: &git2::Tree<'_>, name: &str, blob: Oid) -> Option<Oid> {
    let entries: Vec<Entry> = base
        .iter()
        .map(|e| Entry {
            name: e.name_bytes().to_vec(),
            mode: e.filemode(),
            id: e.id(),
        })
        .collect();
    let bytes = tree_bytes(&with_entries(&entries, &[(name, blob)]));
    Oid::hash_object(ObjectType::Tree, &bytes).ok()
}

/// A commit object's text, as git writes it.
pub(super) fn commit_text(
    tree: Oid,
    parents: &[Oid],
    author: &Signature<'_>,
    committer: &Signature<'_>,
    message: &str,
) -> String {
    let who = |s: &Signature<'_>| {
        let when = s.when();
        let offset = when.offset_minutes();
        format!(
            "{} <{}> {} {}{:02}{:02}",
            s.name().unwrap_or_default(),
            s.email().unwrap_or_default(),
            when.seconds(),
            if offset < 0 { '-' } else { '+' },
            offset.abs() / 60,
            offset.abs() % 60
        )
    };
    let mut text = format!("tree {tree}\n");
    for parent in parents {
        text.push_str(&format!("parent {parent}\n"));
    }
    text.push_str(&format!(
        "author {}\ncommitter {}\n\n{message}",
        who(author),
        who(committer)
    ));
    text
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
    let mut message = format!("{subject}\n\n{}", Reserved::RequestId.line(&req.request_id));
    if forced {
        message.push_str(&Reserved::Forced.line(true));
    }
    if let Some(from) = req.restored_from {
        message.push_str(&Reserved::RestoredFrom.line(from));
    }
    if let Some(record) = &req.idempotency {
        message.push_str(&Reserved::IdempotencyKey.line(record.key.as_str()));
        message.push_str(&Reserved::IdempotencyFingerprint.line(&record.fingerprint));
    }
    message
}

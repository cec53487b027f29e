//! The objects of a commit: each change's new bytes (a JSON content edited into the stored text), its blob, the head's tree with those entries replaced, the commit and its message; loose objects written here, not by libgit2.
use super::{git_err, signature, TenantRepo, FILE_MODE, MAIN};
use crate::domain::yaml::splice::{self, Made, Rewrite};
use crate::domain::yaml::Mapping;
use crate::domain::{Identity, PlanFile};
use crate::storage::disk::sync_dir;
use crate::storage::{Change, CommitRequest, StorageError};
use flate2::write::ZlibEncoder;
use flate2::Compression;
use git2::{ObjectType, Oid, Signature};
use std::borrow::Cow;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
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

/// What the last few blobs a JSON edit stored parse to, by blob id: the next edit of that file
/// starts from that text and needs its content, which this spares it from parsing again. A
/// blob id names its bytes, so an entry is right for as long as it is kept, whoever moved
/// `main` since; it is put here only once the text was checked to parse to exactly it.
#[derive(Default)]
pub(super) struct Parsed(std::sync::Mutex<Vec<(Oid, Arc<Mapping>)>>);

/// Entries kept: one per file of a tenant.
const PARSED: usize = 2;

impl Parsed {
    fn get(&self, blob: Oid) -> Option<Arc<Mapping>> {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        known
            .iter()
            .find(|(id, _)| *id == blob)
            .map(|(_, m)| m.clone())
    }

    pub(super) fn put(&self, blob: Oid, content: Arc<Mapping>) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        known.retain(|(id, _)| *id != blob);
        if known.len() == PARSED {
            known.remove(0);
        }
        known.push((blob, content));
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
        let known = self.parsed.get(current);
        let rewrite = match std::str::from_utf8(blob.content()) {
            Ok(old) => splice::rewrite_known(old, known.as_deref(), content),
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

    /// Writes `data` as a loose object of `kind`, unless it is loose there already: deflated
    /// into a new file in its fan-out folder, then renamed to its name. Nothing is linked or
    /// unlinked (ext4 makes every new file pay for recently deleted inodes). With `fsync`
    /// the file and its folder are synced (and `objects/` when the folder is new); otherwise
    /// the group's `syncfs` covers them. Returns the id, and whether it was there already (an
    /// object someone else wrote, which a writer in fsync mode syncs too: it may not be yet).
    pub(super) fn put_object(
        &self,
        kind: ObjectType,
        data: &[u8],
        fsync: bool,
    ) -> Result<(Oid, bool), StorageError> {
        let id = Oid::hash_object(kind, data).map_err(git_err(&self.tenant, "hash", ""))?;
        let path = self.loose_path(id);
        if path.exists() {
            return Ok((id, true));
        }
        let fanout = path.parent().expect("objects/xx");
        let io = |op, p: &std::path::Path, e| StorageError::io(op, p, e);
        let tmp = fanout.join(format!("tmp_obj_{:016x}", rand::random::<u64>()));
        let create = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .open(&tmp)
        };
        // As git does: the fan-out folder is made when the file cannot be, since it may not
        // be there yet, or no more (`git gc` and `git prune-packed` remove emptied ones at any
        // moment, also between a check and the create).
        let mut new_fanout = false;
        let mut opened = create();
        for _ in 0..3 {
            match &opened {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                _ => break,
            }
            match std::fs::create_dir(fanout) {
                Ok(()) => new_fanout = true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("create an object folder", fanout, e)),
            }
            opened = create();
        }
        let mut file = opened.map_err(|e| io("create an object", &tmp, e))?;
        let mut z = ZlibEncoder::new(Vec::with_capacity(data.len() / 2 + 64), Compression::fast());
        let header = format!("{} {}\0", kind.str(), data.len());
        let deflated = z
            .write_all(header.as_bytes())
            .and_then(|()| z.write_all(data))
            .and_then(|()| z.finish())
            .map_err(|e| io("deflate an object", &tmp, e))?;
        let written =
            file.write_all(&deflated)
                .and_then(|()| if fsync { file.sync_all() } else { Ok(()) });
        drop(file);
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("write an object", &path, e));
        }
        if fsync {
            sync_dir(fanout)?;
            if new_fanout {
                sync_dir(&self.path.join("objects"))?;
            }
        }
        Ok((id, false))
    }

    /// Writes the changed blobs, `head`'s tree with those entries replaced, and a commit on
    /// top of `head`, and returns the new head. With `fsync` (fsync mode) each object is
    /// synced as it is written, and `found` lists what the commit depends on that was not
    /// written here: objects that were there already, and the tree's other entries.
    pub(super) fn commit_changes(
        &self,
        head: &Head,
        req: &CommitRequest,
        checked: &[Checked],
        committer: &Identity,
        fsync: bool,
    ) -> Result<NewCommit, StorageError> {
        let path = req.changes.first().map_or("", |c| c.file.path());
        let err = |op| git_err(&self.tenant, op, path);
        let mut found = Vec::new();
        let mut set: Vec<(&'static str, Oid)> = Vec::new();
        for (change, k) in req.changes.iter().zip(checked) {
            if k.unchanged() {
                continue;
            }
            let (blob, there) = self.put_object(ObjectType::Blob, &k.bytes, fsync)?;
            if there && fsync {
                found.push(blob);
            }
            set.push((change.file.path(), blob));
        }
        let entries = with_entries(&head.entries, &set);
        let (tree, there) = self.put_object(ObjectType::Tree, &tree_bytes(&entries), fsync)?;
        if fsync {
            if there {
                found.push(tree);
            }
            found.extend(
                head.entries
                    .iter()
                    .filter(|e| !set.iter().any(|(n, _)| e.name == n.as_bytes()))
                    .map(|e| e.id),
            );
        }
        let author = signature(&req.author).map_err(err("author signature"))?;
        let committer = signature(committer).map_err(err("committer signature"))?;
        let forced = checked.iter().any(|k| !k.unchanged() && k.forced);
        let message = message(req, &set, forced);
        let text = commit_text(tree, &[head.commit], &author, &committer, &message);
        let (id, there) = self.put_object(ObjectType::Commit, text.as_bytes(), fsync)?;
        if there && fsync {
            found.push(id);
        }
        Ok(NewCommit {
            head: Head {
                commit: id,
                entries,
            },
            found,
        })
    }

    /// `main` as it is on disk: its commit and its tree's entries.
    pub(super) fn read_head(&self, path: &'static str) -> Result<Head, StorageError> {
        let err = |op| git_err(&self.tenant, op, path);
        let commit = match super::refs::read_ref(&self.path, MAIN) {
            Some(oid) => oid,
            None => self.repo.refname_to_id(MAIN).map_err(err("resolve main"))?,
        };
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

/// A commit [`TenantRepo::commit_changes`] wrote: the new head, and the objects it depends on
/// that were not written (and, in fsync mode, synced) for it.
pub(super) struct NewCommit {
    pub(super) head: Head,
    pub(super) found: Vec<Oid>,
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
            super::KEY_TRAILER,
            record.key.as_str(),
            super::FINGERPRINT_TRAILER,
            record.fingerprint
        ));
    }
    message
}

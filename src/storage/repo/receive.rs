//! A push's storage side: the pack scanned and indexed into the object store, the commits it adds to `main`'s first-parent line read with what each changed (and each tree's shape checked), then `main` moved by the same compare-and-swap and syncs as an API write, with the pusher on a note.
pub mod scan;

mod quarantine;

use super::advance::{Advance, MainMove};
use super::objects::commit_text;
use super::refs::{RefLock, RefMove};
use super::signatures::Committer;
use super::staged::Staged;
use super::{git_err, signature, to_id, to_oid, TenantRepo, MAIN, WRITE_DEADLINE};
use crate::domain::trailers;
use crate::domain::{CommitId, Identity, PlanFile};
use crate::storage::disk::durable::{SyncGroup, SyncMark};
use crate::storage::{FastForward, PushCheck, StorageError};
use git2::{ObjectType, Oid};
use quarantine::{connected, Quarantine};
use std::collections::HashSet;
use std::time::Instant;

/// At most this many bytes of changed files are checked in one push.
pub const MAX_CHECKED_BYTES: usize = 64 * 1024 * 1024;

/// A push that passed its checks: its pack still in its quarantine (moved into
/// `objects/pack` only once `main` is about to move: a push refused after its checks, or
/// dropped, leaves nothing), and `mark` is where the durability of what it wrote starts.
pub struct StagedPush {
    /// How many commits the push adds to main's first-parent line.
    pub commits: usize,
    mark: Option<SyncMark>,
    /// The commits to note, newest first.
    line: Vec<Oid>,
    /// The pushed pack, unless the push adds no commit (then nothing of it is kept).
    quarantine: Option<Quarantine>,
    /// For a push that proposes (`refs/for/main`): the pushed head's message and files.
    tip: Option<PushedTip>,
}

/// The head of a push that proposes: its message, and the bytes of each file in its tree.
#[derive(Debug, Clone)]
pub struct PushedTip {
    pub message: String,
    pub files: Vec<(PlanFile, Vec<u8>)>,
}

impl StagedPush {
    /// The pushed head, when the push was staged to propose.
    pub fn tip(&self) -> Option<&PushedTip> {
        self.tip.as_ref()
    }
}

impl std::fmt::Debug for StagedPush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedPush")
            .field("commits", &self.commits)
            .field("quarantine", &self.quarantine.as_ref().map(|q| &q.path))
            .finish_non_exhaustive()
    }
}

/// Where the pusher and the request id of each pushed head are kept.
pub const NOTES_REF: &str = "refs/notes/planfiles";

/// At most this many commits in one push.
pub const MAX_PUSH_COMMITS: usize = 1_000;

impl TenantRepo {
    /// A push's checks, before anything is named in the repository: the pack is scanned
    /// ([`scan::PackLimits`]) and indexed into a quarantine (`objects/planfiles-incoming-*`,
    /// a repository whose store borrows the tenant's), every object the push makes reachable
    /// must be there (`git rev-list --objects`), and the commits it adds to `main`'s
    /// first-parent line, which must pass through `old` itself, are walked oldest first: each
    /// tree must be the two files as regular files, no message may carry the service's own
    /// trailers, and `check` is called with each file a commit changes (once per blob). Only
    /// when all of that holds is the pack moved into `objects/pack`. `Ok(Err(reason))`:
    /// refused, and the quarantine removed.
    pub(in crate::storage) fn stage_push(
        &self,
        pack: &[u8],
        old: CommitId,
        new: CommitId,
        sync: Option<&SyncGroup>,
        check: &mut PushCheck<'_>,
        proposes: bool,
    ) -> Result<Result<StagedPush, String>, StorageError> {
        // The durability of everything written from here on is what the move of main waits
        // for (a syncfs round that fails after this mark is seen).
        let mark = sync.map(SyncGroup::mark);
        // The push must start where main is (git's "fetch first" otherwise): checked again
        // under the write lock when main moves.
        if self.main_commit("")? != to_oid(&old.0) {
            return Ok(Err(format!(
                "fetch first: main is not at {old} (someone pushed or wrote since you fetched)"
            )));
        }
        let quarantine = Quarantine::new(&self.path)?;
        let staged = self.check_push(&quarantine, pack, old, new, check, proposes)?;
        match staged {
            Ok(line) => {
                let tip = match (proposes, line.first()) {
                    (true, Some(&head)) => Some(self.pushed_tip(&quarantine, head)?),
                    _ => None,
                };
                Ok(Ok(StagedPush {
                    commits: line.len(),
                    mark,
                    quarantine: (!line.is_empty() && !proposes).then_some(quarantine),
                    line,
                    tip,
                }))
            }
            Err(reason) => Ok(Err(reason)),
        }
    }

    /// The message and files of pushed commit `head` (checked already), read from the
    /// quarantine.
    fn pushed_tip(&self, quarantine: &Quarantine, head: Oid) -> Result<PushedTip, StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        let commit = quarantine
            .repo
            .find_commit(head)
            .map_err(err("read a pushed commit"))?;
        let tree = commit.tree().map_err(err("read a pushed tree"))?;
        let files = PlanFile::ALL
            .into_iter()
            .map(|file| {
                let entry = tree.get_name(file.path()).expect("checked: both files");
                let blob = quarantine
                    .repo
                    .find_blob(entry.id())
                    .map_err(err("read a pushed file"))?;
                Ok((file, blob.content().to_vec()))
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok(PushedTip {
            message: String::from_utf8_lossy(commit.message_bytes()).into_owned(),
            files,
        })
    }

    fn check_push(
        &self,
        quarantine: &Quarantine,
        pack: &[u8],
        old: CommitId,
        new: CommitId,
        check: &mut PushCheck<'_>,
        proposes: bool,
    ) -> Result<Result<Vec<Oid>, String>, StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        let repo = &quarantine.repo;
        if !pack.is_empty() {
            if let Err(reason) = scan::scan(pack, scan::PackLimits::default()) {
                return Ok(Err(reason));
            }
            if let Err(reason) = quarantine::index(&quarantine.path, pack) {
                return Ok(Err(reason));
            }
            let odb = repo.odb().map_err(err("open the quarantine"))?;
            odb.refresh().map_err(err("read the quarantine again"))?;
        }
        let (old, new) = (to_oid(&old.0), to_oid(&new.0));
        if repo.find_commit(new).is_err() {
            return Ok(Err(format!("{new} is not a commit the push carries")));
        }
        if old == new {
            return Ok(Ok(Vec::new()));
        }
        // Every object the push makes reachable is in the store (git's own connectivity
        // check): a commit, tree or blob the pack lacks would break every clone after it.
        if let Err(reason) = connected(&quarantine.path, old, new) {
            return Ok(Err(reason));
        }
        // A rewind or a side branch: git's own word for it, before any walk.
        if !repo
            .graph_descendant_of(new, old)
            .map_err(err("walk a push"))?
        {
            return Ok(Err(format!(
                "non-fast-forward: {new} does not build on main ({old}); fetch and rebase"
            )));
        }
        // main's first-parent line stays a line: the pushed commits lead back to `old` itself
        // by first parents (a merge whose first parent is the client's side would take main's
        // own commits off it: rebase instead).
        let mut line = Vec::new();
        let mut at = repo.find_commit(new).map_err(err("read a pushed commit"))?;
        while at.id() != old {
            if line.len() == MAX_PUSH_COMMITS {
                return Ok(Err(format!(
                    "the push adds more than {MAX_PUSH_COMMITS} commits to main"
                )));
            }
            let Ok(parent) = at.parent(0) else {
                return Ok(Err(format!(
                    "non-fast-forward: main ({old}) is not on the first-parent line of {new}; \
                     rebase on main (git pull --rebase) instead of merging it in"
                )));
            };
            line.push(at);
            at = parent;
        }
        // Every commit the push makes reachable is on that line: a merge's other parent may
        // not bring commits of its own, which no rule of a write would have looked at.
        if let Some(reason) = off_the_line(repo, old, new, &line).map_err(err("walk a push"))? {
            return Ok(Err(reason));
        }
        let mut checked: HashSet<(PlanFile, Oid)> = HashSet::new();
        let mut bytes_checked = 0usize;
        let odb = repo.odb().map_err(err("read a pushed tree"))?;
        for commit in line.iter().rev() {
            let id = CommitId(to_id(commit.id()));
            // The message and who wrote and committed it: what history, events, the console
            // and `git log` show as sent.
            let (author, committer) = (commit.author(), commit.committer());
            let said = [
                ("message", commit.message_bytes()),
                ("author's name", author.name_bytes()),
                ("author's email", author.email_bytes()),
                ("committer's name", committer.name_bytes()),
                ("committer's email", committer.email_bytes()),
            ];
            for (what, bytes) in said {
                if let Some(c) =
                    crate::domain::commit_message::hidden(&String::from_utf8_lossy(bytes))
                {
                    return Ok(Err(format!(
                        "commit {id}: the {what} holds U+{:04X}, a control character that can \
                         hide or reorder what it says (an API write removes them); leave it out",
                        u32::from(c)
                    )));
                }
            }
            // The head of a push that proposes may name the proposal it updates.
            let message = String::from_utf8_lossy(commit.message_bytes());
            let message = if proposes && commit.id() == line[0].id() {
                trailers::without(&message, trailers::Reserved::Proposal)
            } else {
                message.into_owned()
            };
            if let Some(trailer) = trailers::first_reserved(message.as_bytes()) {
                return Ok(Err(format!(
                    "commit {id}: the trailer {} is the service's own (in any spelling); leave it out",
                    trailer.key()
                )));
            }
            let tree = commit.tree().map_err(err("read a pushed tree"))?;
            let raw = odb.read(tree.id()).map_err(err("read a pushed tree"))?;
            if let Err(reason) = two_regular_files(&tree).and_then(|()| exact_modes(raw.data())) {
                return Ok(Err(format!("commit {id}: {reason}")));
            }
            let parent_tree = commit.parent(0).ok().and_then(|p| p.tree().ok());
            for file in PlanFile::ALL {
                let entry = tree.get_name(file.path()).expect("checked above");
                let before = parent_tree
                    .as_ref()
                    .and_then(|t| t.get_name(file.path()).map(|e| e.id()));
                if before == Some(entry.id()) || !checked.insert((file, entry.id())) {
                    continue;
                }
                let blob = repo
                    .find_blob(entry.id())
                    .map_err(err("read a pushed file"))?;
                bytes_checked += blob.size();
                if bytes_checked > MAX_CHECKED_BYTES {
                    return Ok(Err(format!(
                        "the push changes more than {MAX_CHECKED_BYTES} bytes of files"
                    )));
                }
                if let Err(reason) = check(id, file, blob.content()) {
                    return Ok(Err(reason));
                }
            }
        }
        Ok(Ok(line.iter().map(git2::Commit::id).collect()))
    }

    /// Stages one notes commit on `refs/notes/planfiles` with `note` on every pushed commit
    /// (its blob, tree and signed commit, as an API write stages its objects) and takes the
    /// notes ref's lock for it; `None` when the push adds no commit. A lock left by a
    /// planfiles writer that died, or abandoned as `main.lock` is judged, is removed (we hold
    /// the tenant's write lock); a live git command's is kept, and the push is told to retry.
    fn stage_notes(
        &self,
        staged: &mut Staged,
        push: &StagedPush,
        note: &str,
        committer: &Committer,
        fsync: bool,
    ) -> Result<Option<RefLock>, RefMove> {
        if push.line.is_empty() {
            return Ok(None);
        }
        let failed = |op| move |e: git2::Error| RefMove::Failed(git_err(&self.tenant, op, "")(e));
        let parent = super::refs::read_ref_checked(&self.path, NOTES_REF)
            .map_err(|e| RefMove::Failed(StorageError::io("read the notes", &self.path, e)))?;
        let entries = match parent {
            Some(id) => {
                let tree = self
                    .repo
                    .find_commit(id)
                    .and_then(|c| c.tree())
                    .map_err(failed("read the notes"))?;
                super::objects::entries_of(&tree)
            }
            None => Vec::new(),
        };
        let blob = self
            .stage_object(staged, ObjectType::Blob, note.as_bytes())
            .map_err(RefMove::Failed)?;
        let names: Vec<String> = push.line.iter().map(Oid::to_string).collect();
        let set: Vec<(&str, Oid)> = names.iter().map(|n| (n.as_str(), blob)).collect();
        let tree = self
            .stage_object(
                staged,
                ObjectType::Tree,
                &super::objects::tree_with(&entries, &set),
            )
            .map_err(RefMove::Failed)?;
        let who = signature(&committer.identity).map_err(failed("committer signature"))?;
        let message = format!("Notes of a push of {} commits\n", push.line.len());
        let parents: Vec<Oid> = parent.into_iter().collect();
        let text = committer.finish(commit_text(tree, &parents, &who, &who, &message));
        let commit = self
            .stage_object(staged, ObjectType::Commit, text.as_bytes())
            .map_err(RefMove::Failed)?;
        self.lock_ref_clearing(NOTES_REF, parent, commit, fsync)
            .map(Some)
    }

    /// Moves `main` from `old` to `new` as an API write moves it (the order of
    /// docs/ARCHITECTURE.md, "Durability order"): under the tenant's write lock (after the
    /// placement is read again), the pusher's note staged and both refs' locks taken; one
    /// sync makes the pack, the note's objects and the locks' values durable; only then are
    /// the objects named and the notes and `main` moved; a second sync makes the names
    /// durable before report-status says ok (a failed one puts `main` back). `Stale` when
    /// `main` is not at `old` any more (git's "fetch first").
    #[allow(clippy::too_many_arguments)]
    pub(in crate::storage) fn fast_forward(
        &self,
        old: CommitId,
        new: CommitId,
        push: StagedPush,
        note: &str,
        committer: &Committer,
        sync: Option<&SyncGroup>,
        not_after: std::time::SystemTime,
        flags: &super::Flags,
    ) -> Result<FastForward, StorageError> {
        const PATH: &str = "";
        let _lock = self.lock_for_write(Instant::now() + WRITE_DEADLINE, PATH)?;
        crate::storage::placement::reread_under_lock(&self.path, &self.tenant)?;
        // As an API write: read under the lock `tenant set` takes.
        if flags.get(&self.tenant, &self.path)?.required_approvals > 0 {
            return Err(StorageError::ApprovalRequired {
                tenant: self.tenant.clone(),
            });
        }
        // Under the write lock, after every wait: a token that ended meanwhile moves nothing.
        if std::time::SystemTime::now() >= not_after {
            return Err(StorageError::Expired {
                tenant: self.tenant.clone(),
            });
        }
        let (old, new) = (to_oid(&old.0), to_oid(&new.0));
        if self.main_commit(PATH)? != old {
            return Ok(FastForward::Stale);
        }
        let fsync = sync.is_none();
        let mut staged = Staged::new(self, fsync);
        // A lock a dead planfiles writer left is removed; a live git command's is waited for
        // no longer than an answer can.
        let take = |name: &str, lock: Result<RefLock, RefMove>| match lock {
            Ok(lock) => Ok(Ok(lock)),
            Err(RefMove::Moved) => Ok(Err(FastForward::Stale)),
            Err(RefMove::Locked) => {
                tracing::info!(tenant = %self.tenant, "a push found {name}.lock held");
                Ok(Err(FastForward::Locked))
            }
            Err(RefMove::Failed(e)) => Err(e),
        };
        let notes = match self
            .stage_notes(&mut staged, &push, note, committer, fsync)
            .transpose()
        {
            None => None,
            Some(lock) => match take(NOTES_REF, lock)? {
                Ok(lock) => Some(lock),
                Err(answer) => return Ok(answer),
            },
        };
        let main = match take(MAIN, self.lock_main(old, new, fsync))? {
            Ok(lock) => lock,
            Err(answer) => return Ok(answer),
        };
        // main will move: the pack comes out of its quarantine (git synced its bytes; the
        // folder's sync is the advance's first, in group mode; here in fsync mode).
        let mut push = push;
        if let Some(quarantine) = push.quarantine.take() {
            quarantine.migrate(&self.path, fsync)?;
        }
        let advance = Advance {
            staged,
            mark: push.mark,
            before: notes.into_iter().collect(),
            main: Some(MainMove {
                old,
                new,
                lock: main,
            }),
            after: None,
        };
        self.advance(advance, sync, PATH, |_| {})?;
        Ok(FastForward::Moved)
    }

    /// Sets each entry's `pushed_by` from the notes; a tenant that never took a push (no
    /// notes ref) costs one ref lookup.
    pub(in crate::storage) fn mark_pushed<'a>(
        &self,
        entries: impl IntoIterator<Item = &'a mut crate::storage::HistoryEntry>,
    ) {
        if self.repo.refname_to_id(NOTES_REF).is_err() {
            return;
        }
        for entry in entries {
            entry.pushed_by = self.pushed_by(super::to_oid(&entry.commit.0));
        }
    }

    /// The pusher named by the note on `commit`, if a push left one.
    pub(in crate::storage) fn pushed_by(&self, commit: Oid) -> Option<Identity> {
        let note = self.repo.find_note(Some(NOTES_REF), commit).ok()?;
        let line = note
            .message()
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Pushed-By: "))?
            .to_owned();
        let (name, email) = line.rsplit_once(" <")?;
        Some(Identity::new(
            name,
            email.trim_end_matches('>'),
            "localhost",
        ))
    }
}

/// The first commit reachable from `new` and not from `old` that is not on the first-parent
/// `line`, said as a refusal; past [`MAX_PUSH_COMMITS`] commits, the count.
fn off_the_line(
    repo: &git2::Repository,
    old: Oid,
    new: Oid,
    line: &[git2::Commit<'_>],
) -> Result<Option<String>, git2::Error> {
    let on_line: HashSet<Oid> = line.iter().map(git2::Commit::id).collect();
    let mut walk = repo.revwalk()?;
    walk.push(new)?;
    walk.hide(old)?;
    for (n, id) in walk.enumerate() {
        let id = id?;
        if n == MAX_PUSH_COMMITS {
            return Ok(Some(format!(
                "the push adds more than {MAX_PUSH_COMMITS} commits"
            )));
        }
        if !on_line.contains(&id) {
            return Ok(Some(format!(
                "commit {id} comes in through a merge's second parent: only main's \
                 first-parent line can be pushed (rebase those commits onto main instead)"
            )));
        }
    }
    Ok(None)
}

/// Each entry's mode as written in the tree object, exactly `100644`: libgit2 reads a
/// zero-padded or odd mode (`0100644`, `100664`) as `100644`, git does not.
fn exact_modes(raw: &[u8]) -> Result<(), String> {
    let mut rest = raw;
    while !rest.is_empty() {
        let space = memchr::memchr(b' ', rest).ok_or("a tree entry without a mode")?;
        let nul = memchr::memchr(0, rest).ok_or("a tree entry without a name")?;
        if nul < space || rest.len() < nul + 21 {
            return Err("a malformed tree entry".into());
        }
        let (mode, name) = (&rest[..space], &rest[space + 1..nul]);
        if mode != b"100644" {
            return Err(format!(
                "{} must be a regular file written as mode 100644, not {}",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(mode)
            ));
        }
        rest = &rest[nul + 21..];
    }
    Ok(())
}

/// A pushed tree must be the tenant's two files, as regular files, and nothing else.
fn two_regular_files(tree: &git2::Tree<'_>) -> Result<(), String> {
    if tree.len() > PlanFile::ALL.len() {
        let names: Vec<String> = tree
            .iter()
            .map(|e| e.name().unwrap_or("?").to_owned())
            .collect();
        if names
            .iter()
            .all(|n| PlanFile::ALL.iter().any(|f| f.path() == n))
        {
            return Err(format!(
                "the tree names a file twice ({})",
                names.join(", ")
            ));
        }
    }
    for entry in tree.iter() {
        let name = entry.name().unwrap_or("(a name that is not UTF-8)");
        if !PlanFile::ALL.iter().any(|f| f.path() == name) {
            return Err(format!(
                "{name}: a tenant's repository holds only integrations.yml and configuration.yml"
            ));
        }
        if entry.kind() != Some(ObjectType::Blob) || entry.filemode() != 0o100644 {
            return Err(format!(
                "{name} must be a regular file (mode 100644), not mode {:o}",
                entry.filemode()
            ));
        }
    }
    for file in PlanFile::ALL {
        if tree.get_name(file.path()).is_none() {
            return Err(format!("{} is missing", file.path()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::domain::{CommitId, Identity, ObjectId, RequestId};
    use crate::storage::disk::faults::{inject, Op};
    use crate::storage::FastForward;
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=D", "-c", "user.email=d@x"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn id(hex: &str) -> CommitId {
        CommitId(ObjectId::parse(hex).unwrap())
    }

    /// Every system call of a push's move of `main`, made to fail once: the push fails, `main`
    /// stays (or is put back), and the same push then goes through.
    #[test]
    fn a_failed_system_call_in_a_push_changes_nothing() {
        let eio = libc::EIO;
        for (op, on, errno) in [
            (Op::Create, "main.lock", libc::EMFILE),
            (Op::Write, "main.lock", eio),
            (Op::Fsync, "main.lock", eio),
            (Op::Rename, "refs/heads/main", eio),
            (Op::SyncDir, "refs/heads", eio),
            // The pack out of its quarantine, its index after it.
            (Op::Rename, "objects/pack/pack-", eio),
            (Op::Rename, ".idx", eio),
            // The pusher's notes: its staged objects, its ref's lock, the ref's move.
            (Op::Create, "tmp_obj_", libc::ENOSPC),
            (Op::Rename, "objects/", eio),
            (Op::Create, "refs/notes/planfiles.lock", libc::EMFILE),
            (Op::Write, "refs/notes/planfiles.lock", eio),
            (Op::Rename, "refs/notes/planfiles", eio),
        ] {
            let case = format!("{op:?} {on}");
            let (dir, storage, tenant) = crate::storage::test_storage();
            let repo = dir.path().join("tenants/acme.git");
            let work = dir.path().join("work");
            git(dir.path(), &["clone", "-q", repo.to_str().unwrap(), "work"]);
            let old = git(&work, &["rev-parse", "HEAD"]);
            std::fs::write(work.join("integrations.yml"), "pushed: {a: 1}\n").unwrap();
            git(&work, &["commit", "-qam", "pushed"]);
            let new = git(&work, &["rev-parse", "HEAD"]);
            let objects = git(&work, &["rev-list", "--objects", &format!("{old}..{new}")]);
            let mut packer = Command::new("git")
                .current_dir(&work)
                .args(["pack-objects", "--stdout", "-q"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let names: String = objects
                .lines()
                .map(|l| format!("{}\n", l.split(' ').next().unwrap()))
                .collect();
            packer
                .stdin
                .take()
                .unwrap()
                .write_all(names.as_bytes())
                .unwrap();
            let pack = packer.wait_with_output().unwrap().stdout;
            let stage = || {
                storage
                    .stage_push(
                        &tenant,
                        &pack,
                        id(&old),
                        id(&new),
                        &mut |_, _, _| Ok(()),
                        false,
                    )
                    .unwrap()
                    .unwrap()
            };
            let staged = stage();
            assert_eq!(staged.commits, 1, "{case}");
            let who = Identity::new("Pusher", "p@x", "x");
            let rid = RequestId::generate();
            let fault = inject(op, on, errno, 1);
            let later = std::time::SystemTime::now() + std::time::Duration::from_secs(600);
            let result =
                storage.fast_forward(&tenant, id(&old), id(&new), staged, &who, &rid, later);
            assert!(fault.fired(), "{case}: the call was never made");
            drop(fault);
            assert!(result.is_err(), "{case}: {result:?}");
            let head = git(
                dir.path(),
                &["--git-dir", repo.to_str().unwrap(), "rev-parse", "main"],
            );
            assert_eq!(head, old, "{case}: main moved");
            let again =
                storage.fast_forward(&tenant, id(&old), id(&new), stage(), &who, &rid, later);
            assert_eq!(again.unwrap(), FastForward::Moved, "{case}");
            let head = git(
                dir.path(),
                &["--git-dir", repo.to_str().unwrap(), "rev-parse", "main"],
            );
            assert_eq!(head, new, "{case}");
            git(
                dir.path(),
                &["--git-dir", repo.to_str().unwrap(), "fsck", "--strict"],
            );
        }
    }
}

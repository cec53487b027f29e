//! A push's storage side: the pack scanned and indexed into the object store, the commits it adds to `main`'s first-parent line read with what each changed (and each tree's shape checked), then `main` moved by the same compare-and-swap and syncs as an API write, with the pusher on a note.
pub mod scan;

use super::refs::RefMove;
use super::{git_err, to_id, to_oid, TenantRepo, MAIN, WRITE_DEADLINE};
use crate::domain::{CommitId, Identity, PlanFile};
use crate::storage::disk::durable::SyncGroup;
use crate::storage::disk::sync_dir;
use crate::storage::{FastForward, PushedCommit, StorageError};
use git2::{ObjectType, Oid};
use std::io::Write;
use std::time::Instant;

/// Where the pusher and the request id of each pushed head are kept.
pub const NOTES_REF: &str = "refs/notes/planfiles";

/// At most this many commits in one push.
pub const MAX_PUSH_COMMITS: usize = 1_000;

impl TenantRepo {
    /// Scans `pack` (limits: [`scan::PackLimits`]) and indexes it into the object store, then
    /// reads the commits `new` adds to `old`'s first-parent line, oldest first, with the
    /// files each changed. `Ok(Err(reason))` refuses the push: a bad pack, `new` not a
    /// descendant of `old`, too many commits, or a tree that is not the tenant's two files as
    /// regular files. Objects of a refused push stay unreachable (git's gc removes them).
    pub(in crate::storage) fn stage_push(
        &self,
        pack: &[u8],
        old: CommitId,
        new: CommitId,
    ) -> Result<Result<Vec<PushedCommit>, String>, StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        // The push must start where main is (git's "fetch first" otherwise): checked again
        // under the write lock when main moves.
        if self.read_head("")?.commit != to_oid(&old.0) {
            return Ok(Err(format!(
                "fetch first: main is not at {old} (someone pushed or wrote since you fetched)"
            )));
        }
        if !pack.is_empty() {
            if let Err(reason) = scan::scan(pack, scan::PackLimits::default()) {
                return Ok(Err(reason));
            }
            // libgit2 writes the pack into objects/pack, which a repository that was never
            // packed does not have yet (made and synced into objects/).
            let packs = self.path.join("objects/pack");
            if !packs.is_dir() {
                crate::storage::disk::create_dir_all_synced(&packs)?;
            }
            // A repository opened now: one whose object store was first read before the pack
            // folder existed writes no pack (libgit2 looks for the folder once).
            let fresh =
                git2::Repository::open_bare(&self.path).map_err(err("open the repository"))?;
            let odb = fresh.odb().map_err(err("open the object store"))?;
            let mut writer = odb.packwriter().map_err(err("index a pushed pack"))?;
            if let Err(e) = writer.write_all(pack) {
                return Ok(Err(format!("the pack cannot be indexed: {e}")));
            }
            if let Err(e) = writer.commit() {
                return Ok(Err(format!("the pack cannot be indexed: {}", e.message())));
            }
        }
        // Read through a repository opened now: the one open before the pack was written
        // may not look for new packs (nor in a pack folder it did not see).
        let repo = git2::Repository::open_bare(&self.path).map_err(err("open the repository"))?;
        let (old, new) = (to_oid(&old.0), to_oid(&new.0));
        let Ok(head) = repo.find_commit(new) else {
            return Ok(Err(format!("{new} is not a commit the push carries")));
        };
        if old != new
            && !repo
                .graph_descendant_of(new, old)
                .map_err(err("compare the pushed commit with main"))?
        {
            return Ok(Err(
                "non-fast-forward: fetch first, and push a commit that has main in its history"
                    .into(),
            ));
        }
        // The commits that will be new on main's first-parent line: from `new` down its
        // first parents until one that main's history has already (`old`, or an ancestor of
        // it when a merge brought `old` in on another parent). Newest first while walking.
        let mut line = Vec::new();
        let mut at = head;
        loop {
            let known = at.id() == old
                || repo
                    .graph_descendant_of(old, at.id())
                    .map_err(err("walk the pushed history"))?;
            if known {
                break;
            }
            if line.len() == MAX_PUSH_COMMITS {
                return Ok(Err(format!(
                    "the push adds more than {MAX_PUSH_COMMITS} commits to main"
                )));
            }
            let parent = at.parent(0).ok();
            line.push(at);
            match parent {
                Some(p) => at = p,
                None => break,
            }
        }
        let mut commits = Vec::with_capacity(line.len());
        for commit in line.iter().rev() {
            let id = CommitId(to_id(commit.id()));
            let tree = commit.tree().map_err(err("read a pushed tree"))?;
            if let Err(reason) = two_regular_files(&tree) {
                return Ok(Err(format!("commit {id}: {reason}")));
            }
            let parent_tree = commit.parent(0).ok().and_then(|p| p.tree().ok());
            let mut changed = Vec::new();
            for file in PlanFile::ALL {
                let entry = tree.get_name(file.path()).expect("checked above");
                let before = parent_tree
                    .as_ref()
                    .and_then(|t| t.get_name(file.path()).map(|e| e.id()));
                if before != Some(entry.id()) {
                    let blob = repo
                        .find_blob(entry.id())
                        .map_err(err("read a pushed file"))?;
                    changed.push((file, blob.content().to_vec()));
                }
            }
            commits.push(PushedCommit { id, changed });
        }
        Ok(Ok(commits))
    }

    /// Moves `main` from `old` to `new` as an API write moves it: under the tenant's write
    /// lock (after the placement is read again), the pusher's note and the pack made durable
    /// first, then the compare-and-swap of `main`, then its sync. `Stale` when `main` is not
    /// at `old` any more (git's "fetch first").
    pub(in crate::storage) fn fast_forward(
        &self,
        old: CommitId,
        new: CommitId,
        note: &str,
        committer: &Identity,
        sync: Option<&SyncGroup>,
    ) -> Result<FastForward, StorageError> {
        const PATH: &str = "";
        let err = |op| git_err(&self.tenant, op, PATH);
        let _lock = self.lock_for_write(Instant::now() + WRITE_DEADLINE, PATH)?;
        crate::storage::placement::reread_under_lock(&self.path, &self.tenant)?;
        let (old, new) = (to_oid(&old.0), to_oid(&new.0));
        if self.read_head(PATH)?.commit != old {
            return Ok(FastForward::Stale);
        }
        let fsync = sync.is_none();
        let mark = sync.map(SyncGroup::mark);
        // The note first: it names `new`, which is in the store already; on main's line only
        // once main moves.
        let who = git2::Signature::now(committer.name(), committer.email())
            .map_err(err("make the note's signature"))?;
        self.repo
            .note(&who, &who, Some(NOTES_REF), new, note, true)
            .map_err(err("write the push's note"))?;
        // 1. The pack, the note and its ref are durable (fsync mode: libgit2 synced them).
        self.group_sync_since(sync, mark, PATH)?;
        // 2. main, compared and swapped.
        let lock = match self.lock_ref(MAIN, Some(old), new, fsync) {
            Ok(lock) => lock,
            Err(RefMove::Moved) => return Ok(FastForward::Stale),
            Err(RefMove::Locked) => {
                return Err(StorageError::RefLocked {
                    tenant: self.tenant.clone(),
                    lock: "refs/heads/main.lock",
                })
            }
            Err(RefMove::Failed(e)) => return Err(e),
        };
        let folder = lock.folder().to_owned();
        let ref_mark = sync.map(SyncGroup::mark);
        lock.commit()?;
        // 3. Durable before report-status says ok; a failed sync puts main back.
        let durable = match sync {
            Some(_) => self.group_sync_since(sync, ref_mark, PATH),
            None => sync_dir(&folder),
        };
        if let Err(e) = durable {
            self.undo_unsynced(MAIN, old, new, sync, PATH, &e);
            return Err(e);
        }
        Ok(FastForward::Moved)
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

/// A pushed tree must be the tenant's two files, as regular files, and nothing else.
fn two_regular_files(tree: &git2::Tree<'_>) -> Result<(), String> {
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
            use std::io::Write;
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
            let pushed = storage
                .stage_push(&tenant, &pack, id(&old), id(&new))
                .unwrap()
                .unwrap();
            assert_eq!(pushed.len(), 1, "{case}");
            let who = Identity::new("Pusher", "p@x", "x");
            let rid = RequestId::generate();
            let fault = inject(op, on, errno, 1);
            let result = storage.fast_forward(&tenant, id(&old), id(&new), &who, &rid);
            assert!(fault.fired(), "{case}: the call was never made");
            drop(fault);
            assert!(result.is_err(), "{case}: {result:?}");
            let head = git(
                dir.path(),
                &["--git-dir", repo.to_str().unwrap(), "rev-parse", "main"],
            );
            assert_eq!(head, old, "{case}: main moved");
            let again = storage.fast_forward(&tenant, id(&old), id(&new), &who, &rid);
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

//! A file's history and old versions: commits on `main`'s first-parent line that changed it.
use super::{empty_blob_oid, git_err, to_id, to_oid, TenantRepo, MAIN};
use crate::domain::trailers::{self, Reserved};
use crate::domain::{BlobId, CommitId, PlanFile, RequestId};
use crate::storage::{FileSnapshot, HistoryEntry, StorageError};
use git2::{ObjectType, Oid};
use std::time::{Duration, UNIX_EPOCH};

impl TenantRepo {
    /// The file as it was in `commit`, which must be `main` or one of its ancestors.
    /// The commit whose id starts with `prefix`, if exactly one object's does.
    pub(in crate::storage) fn resolve_prefix(
        &self,
        prefix: &str,
    ) -> Result<CommitId, crate::storage::PrefixMiss> {
        match self.repo.find_commit_by_prefix(prefix) {
            Ok(commit) => Ok(CommitId(to_id(commit.id()))),
            Err(e) if e.code() == git2::ErrorCode::Ambiguous => {
                Err(crate::storage::PrefixMiss::Ambiguous)
            }
            Err(_) => Err(crate::storage::PrefixMiss::Unknown),
        }
    }

    pub(in crate::storage) fn read_at(
        &self,
        file: PlanFile,
        commit: CommitId,
    ) -> Result<FileSnapshot, StorageError> {
        let oid = self.commit_in_history(file, commit)?;
        self.snapshot(oid, file)
    }

    /// `file` in commit `at` (the empty file when absent), without asking whether `at` is in
    /// `main`'s history: for commits the service itself recorded (a proposal's, its base).
    pub(super) fn snapshot(&self, at: Oid, file: PlanFile) -> Result<FileSnapshot, StorageError> {
        let (blob, present) = self.blob_in(at, file)?;
        let bytes = if present {
            self.repo
                .find_blob(blob)
                .map_err(git_err(&self.tenant, "read blob", file.path()))?
                .content()
                .to_vec()
        } else {
            Vec::new()
        };
        Ok(FileSnapshot {
            bytes,
            blob: BlobId(to_id(blob)),
            commit: CommitId(to_id(at)),
        })
    }

    /// The bytes of `blob`, a version of `file` that a history entry of this repository
    /// named (never an id from a client: any object of the repository would be read).
    pub(in crate::storage) fn version_bytes(
        &self,
        file: PlanFile,
        blob: BlobId,
    ) -> Result<Vec<u8>, StorageError> {
        let oid = to_oid(&blob.0);
        if oid == empty_blob_oid() {
            return Ok(Vec::new());
        }
        let found =
            self.repo
                .find_blob(oid)
                .map_err(git_err(&self.tenant, "read blob", file.path()))?;
        Ok(found.content().to_vec())
    }

    /// Up to `limit` commits that changed `file`, newest first, starting at `from` (a cursor
    /// from an earlier page) or at the head of `main`. Merges are followed on their first
    /// parent, as `git log --first-parent`, so a cursor always resumes exactly. A page looks
    /// at no more than [`SCAN_BUDGET`] commits: a file that rarely changes gets short (even
    /// empty) pages with a cursor, never one request that reads the whole history.
    pub(in crate::storage) fn history(
        &self,
        file: PlanFile,
        limit: usize,
        from: Option<CommitId>,
    ) -> Result<(Vec<HistoryEntry>, Option<CommitId>), StorageError> {
        let path = file.path();
        let err = |op| git_err(&self.tenant, op, path);
        let start = match from {
            Some(c) => self.commit_in_repo(file, c)?,
            None => self.repo.refname_to_id(MAIN).map_err(err("resolve main"))?,
        };
        // No sorting: the first-parent line is a chain, walked as it is read. (Topological
        // sorting would load the whole history before the first commit.)
        let mut walk = self.repo.revwalk().map_err(err("walk history"))?;
        walk.simplify_first_parent().map_err(err("walk history"))?;
        walk.push(start).map_err(err("walk history"))?;
        let mut entries = Vec::new();
        for (scanned, oid) in walk.enumerate() {
            let oid = oid.map_err(err("walk history"))?;
            if entries.len() == limit || scanned == SCAN_BUDGET {
                return Ok((entries, Some(CommitId(to_id(oid)))));
            }
            let commit = self.repo.find_commit(oid).map_err(err("read commit"))?;
            let Some(blob) = self.changed_in(&commit, file)? else {
                continue;
            };
            entries.push(entry(&commit, blob));
        }
        Ok((entries, None))
    }

    /// Whether `commit` changed `file` (against its first parent; a root commit changed every
    /// file it has), and the file's blob id after it.
    pub(in crate::storage) fn changed_in(
        &self,
        commit: &git2::Commit<'_>,
        file: PlanFile,
    ) -> Result<Option<Oid>, StorageError> {
        let (blob, present) = self.blob_in(commit.id(), file)?;
        let changed = match commit.parent_id(0) {
            Ok(parent) => {
                let (before, was_present) = self.blob_in(parent, file)?;
                before != blob || was_present != present
            }
            Err(_) => present,
        };
        Ok(changed.then_some(blob))
    }

    /// The blob id of `file` in `commit` (the empty blob when absent) and whether it is there.
    pub(super) fn blob_in(&self, commit: Oid, file: PlanFile) -> Result<(Oid, bool), StorageError> {
        let err = |op| git_err(&self.tenant, op, file.path());
        let tree = self
            .repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(err("read tree"))?;
        let found = tree
            .get_name(file.path())
            .filter(|e| e.kind() == Some(ObjectType::Blob))
            .map(|e| e.id());
        Ok(match found {
            Some(id) => (id, true),
            None => (empty_blob_oid(), false),
        })
    }

    /// `commit` as an oid when it is a commit of this tenant's repository (a cursor, which an
    /// earlier page made); `UnknownRef` otherwise. Unlike [`Self::commit_in_history`] it
    /// costs the same however deep the commit is: each tenant has its own object store, so
    /// nothing of another tenant can be named.
    fn commit_in_repo(&self, file: PlanFile, commit: CommitId) -> Result<Oid, StorageError> {
        let oid = to_oid(&commit.0);
        match self.repo.find_commit(oid) {
            Ok(_) => Ok(oid),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Err(StorageError::UnknownRef {
                tenant: self.tenant.clone(),
                commit,
            }),
            Err(e) => Err(git_err(&self.tenant, "read commit", file.path())(e)),
        }
    }

    /// `commit` as an oid when it is `main` or an ancestor of it; `UnknownRef` otherwise.
    fn commit_in_history(&self, file: PlanFile, commit: CommitId) -> Result<Oid, StorageError> {
        let head = self.repo.refname_to_id(MAIN).map_err(git_err(
            &self.tenant,
            "resolve main",
            file.path(),
        ))?;
        let oid = to_oid(&commit.0);
        if self.in_history(head, oid) {
            Ok(oid)
        } else {
            Err(StorageError::UnknownRef {
                tenant: self.tenant.clone(),
                commit,
            })
        }
    }
}

/// The most commits one history page looks at.
const SCAN_BUDGET: usize = 2_000;

/// The history entry of `commit`, after which the file's blob is `blob`.
pub(super) fn entry(commit: &git2::Commit<'_>, blob: Oid) -> HistoryEntry {
    let author = commit.author();
    let seconds = u64::try_from(author.when().seconds()).unwrap_or(0);
    let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
    HistoryEntry {
        commit: CommitId(to_id(commit.id())),
        blob: BlobId(to_id(blob)),
        author_name: String::from_utf8_lossy(author.name_bytes()).into_owned(),
        author_email: String::from_utf8_lossy(author.email_bytes()).into_owned(),
        time: UNIX_EPOCH + Duration::from_secs(seconds),
        forced: trailers::is_forced(&message),
        message,
        // Set by the reader that knows the keys (`TenantRepo::mark_verified`).
        verified: false,
        // Set by the reader, from the notes (`TenantRepo::mark_pushed`).
        pushed_by: None,
    }
}

/// The value of the `Request-Id` trailer planfiles writes, when the message's trailer block
/// has one that is a valid request id.
pub(super) fn request_id(message: &str) -> Option<RequestId> {
    RequestId::parse(trailers::value(message, Reserved::RequestId)?)
}

#[cfg(test)]
mod tests {
    use super::request_id;
    use crate::domain::trailers::is_forced;

    #[test]
    fn request_id_is_read_from_the_trailer_block_only() {
        let id = |m: &str| request_id(m).map(|r| r.as_str().to_owned());
        assert_eq!(
            id("Update x\n\nRequest-Id: abc-1\nForced: true\n").as_deref(),
            Some("abc-1")
        );
        assert_eq!(
            id("Update x\n\nRequest-Id: a b\n"),
            None,
            "not a valid request id"
        );
        assert_eq!(
            id("Request-Id: a\n\nSigned-off-by: x\n"),
            None,
            "not in the trailers"
        );
        assert_eq!(id("Update x\n"), None);
    }

    #[test]
    fn forced_is_read_from_the_trailer_block_only() {
        assert!(is_forced("Update x\n\nRequest-Id: a\nForced: true\n"));
        assert!(!is_forced("Update x\n\nRequest-Id: a\n"));
        assert!(!is_forced("Forced: true\n\nRequest-Id: a\n"));
    }
}

//! The write side of `Storage`: batches of a tenant's writes (each its own commit, all made durable together), the fingerprint of a request, and the in-flight markers of idempotency keys.
use super::placement::Access;
use super::repo::{self, TenantRepo};
use super::{
    CommitRequest, Committed, FastForward, InFlight, PushCheck, StagedPush, Storage, StorageError,
};
use crate::domain::{CommitId, IdempotencyKey, Identity, RequestId, TenantId};

impl Storage {
    /// A push's first half: the pack indexed into a quarantine, every commit it adds to
    /// `main`'s first-parent line checked (its tree's shape and trailers here, each changed
    /// file by `check`), and only then its pack moved into the store (`Ok(Err(reason))`:
    /// refused, nothing kept). Nothing moves `main`. With `proposes` (a push to
    /// `refs/for/main`), nothing of the pack is kept either: the pushed head's message and
    /// files are read from it, for a proposal.
    pub fn stage_push(
        &self,
        tenant: &TenantId,
        pack: &[u8],
        old: CommitId,
        new: CommitId,
        check: &mut PushCheck<'_>,
        proposes: bool,
    ) -> Result<Result<StagedPush, String>, StorageError> {
        self.repo_for(tenant, Access::Follow)?.stage_push(
            pack,
            old,
            new,
            self.sync.as_deref(),
            check,
            proposes,
        )
    }

    /// A push's second half: `main` moved from `old` to `new` under the tenant's write lock
    /// and the same compare-and-swap and syncs as [`Storage::commit_batch`], `pusher` and
    /// `request_id` kept on a note of each pushed commit (`refs/notes/planfiles`). Past
    /// `not_after` (the token's end) once the write lock is held: `Expired`, nothing moved.
    #[allow(clippy::too_many_arguments)]
    pub fn fast_forward(
        &self,
        tenant: &TenantId,
        old: CommitId,
        new: CommitId,
        staged: StagedPush,
        pusher: &Identity,
        request_id: &RequestId,
        not_after: std::time::SystemTime,
    ) -> Result<FastForward, StorageError> {
        let note = format!(
            "Pushed-By: {} <{}>\nRequest-Id: {}\n",
            pusher.name(),
            pusher.email(),
            request_id.as_str()
        );
        self.repo_for(tenant, Access::Follow)?.fast_forward(
            old,
            new,
            staged,
            &note,
            &self.committer,
            self.sync.as_deref(),
            not_after,
            &self.flags,
        )
    }

    /// Commits one or both files if every change's preconditions hold (all or nothing): a
    /// batch of one (see [`Storage::commit_batch`]).
    pub fn commit(&self, tenant: &TenantId, req: CommitRequest) -> Result<Committed, StorageError> {
        self.commit_batch(tenant, &[&req])
            .pop()
            .flatten()
            .expect("a batch of one is tried")
    }

    /// A tenant's writes in order, each checked against the head the ones before it made and
    /// each its own commit on `main`'s first-parent line, made durable together: one sync of
    /// their objects, one compare-and-swap of `main` from the old head to the last commit,
    /// one sync of the ref. A request whose preconditions fail (409, 412) or whose key was
    /// recorded (a replay, 422) fails alone. With an idempotency key, the key is looked up in
    /// recent history first; a real write's caller holds the key's marker
    /// ([`Storage::claim_in_flight`]) until this returns, a dry run's caller has looked that
    /// nobody does ([`Storage::key_in_flight`]). `None`: not tried (an earlier write of the
    /// batch could not be written); try it again.
    ///
    /// The tenant's repository stays open for its next batch (see `open_repos.rs`).
    pub fn commit_batch(
        &self,
        tenant: &TenantId,
        reqs: &[&CommitRequest],
    ) -> Vec<Option<Result<Committed, StorageError>>> {
        let path = self.repo_path(tenant);
        let before = repo::open_repos::stamp(&path);
        let repo = match self.open_repos.take(tenant, before) {
            Some(repo) => repo,
            None => match TenantRepo::open_to_keep(tenant, &path) {
                Ok(repo) => repo.with_write_hook(self.write_hook.clone()),
                Err(e) => {
                    let mut out: Vec<_> =
                        reqs.iter().skip(1).map(|_| Some(Err(e.again()))).collect();
                    out.insert(0, Some(Err(e)));
                    return out;
                }
            },
        };
        let mut results = repo.commit_batch(
            reqs,
            &self.committer,
            self.sync.as_deref(),
            &self.recent_keys,
            &self.flags,
        );
        self.open_repos.put(tenant, &path, repo, before);
        // A repository archived under the batch (it moved away): the tenant moved, not a fault.
        if !path.is_dir() {
            for result in results.iter_mut().flatten() {
                if matches!(
                    result,
                    Err(StorageError::Git { .. } | StorageError::Io { .. })
                ) {
                    *result = Err(super::placement::missing(&path, tenant));
                }
            }
        }
        results
    }

    /// The fingerprint of a request to `target` (`PUT /plans/integration-file`, …) with
    /// `body`, keyed with the data dir's secret, for its [`IdempotencyRecord`].
    pub fn fingerprint(&self, target: &str, body: &[u8]) -> String {
        self.dir_key.fingerprint(target, body)
    }

    /// Marks a write with `key` as in flight, for every process on this data dir; `None` when
    /// one is in flight already. Held by a keyed write from before its turn until it is
    /// durable.
    pub fn claim_in_flight(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<Option<InFlight>, StorageError> {
        let path = self.locate(tenant, Access::Manage)?;
        repo::inflight::Marker::claim(&path, key.as_str())
            .map(|m| m.map(InFlight))
            .map_err(|e| StorageError::io("mark an idempotency key in flight", &path, e))
    }

    /// True when someone, in any process on this data dir, holds the marker of `key`. Takes
    /// nothing and creates nothing (a dry run's look).
    pub fn key_in_flight(
        &self,
        tenant: &TenantId,
        key: &IdempotencyKey,
    ) -> Result<bool, StorageError> {
        let path = self.locate(tenant, Access::Manage)?;
        repo::inflight::Marker::held(&path, key.as_str())
            .map_err(|e| StorageError::io("look for an idempotency key in flight", &path, e))
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::*;
    use crate::storage::*;

    /// A commit-hash force checked before the lock stays right when `main` moved after the
    /// check: commits added since are looked at, and a `main` moved elsewhere is walked again.
    #[test]
    fn an_ancestry_found_before_the_lock_is_checked_again_for_what_changed() {
        init_git();
        let dir = tempfile::tempdir().unwrap();
        let committer = Identity::new("planfiles", "p@localhost", "localhost");
        let storage = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            committer.clone(),
            Durability::Fsync,
        )
        .unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        let first = storage.create_tenant(&tenant, false).unwrap();
        let write = |n: usize, id: &ObjectId, ancestry| {
            let req = CommitRequest::of(
                PlanFile::Configuration,
                format!("folders:\n- path: p{n}\n").into_bytes(),
                Preconditions {
                    file_sha: Some(ShaCheck::BlobOrCommit(*id)),
                    if_match: None,
                    ancestry,
                },
                committer.clone(),
            );
            match storage.commit(&tenant, req)? {
                Committed::Written(outcome) => Ok((
                    outcome.commit.expect("not a dry run"),
                    outcome.files[0].forced,
                )),
                Committed::Replayed(_) => unreachable!("no key"),
            }
        };
        // Found in history at the first head; two commits land before the write.
        let found = storage.ancestry(&tenant, first.0).unwrap();
        assert!(found.in_history);
        let second = write(1, &first.0, None).unwrap().0;
        write(2, &first.0, None).unwrap();
        assert!(write(3, &first.0, Some(found)).unwrap().1);
        // Not in history at the check, but among the commits added since.
        let stale = Ancestry {
            head: first,
            in_history: false,
        };
        assert!(write(4, &second.0, Some(stale)).is_ok());
        // A check that said yes, but main was moved elsewhere since: walked again, refused.
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(storage.repo_path(&tenant))
                .args(args)
                .env("GIT_AUTHOR_NAME", "x")
                .env("GIT_AUTHOR_EMAIL", "x@x")
                .env("GIT_COMMITTER_NAME", "x")
                .env("GIT_COMMITTER_EMAIL", "x@x")
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        let tree = git(&["rev-parse", "main^{tree}"]);
        let orphan = git(&["commit-tree", &tree, "-m", "new root"]);
        git(&["update-ref", "refs/heads/main", &orphan]);
        let said_yes = storage.ancestry(&tenant, second.0).unwrap();
        assert!(!said_yes.in_history, "main no longer reaches it");
        let before_reset = Ancestry {
            head: second,
            in_history: true,
        };
        assert!(matches!(
            write(5, &second.0, Some(before_reset)),
            Err(StorageError::ShaMismatch { .. })
        ));
    }

    /// A batch commits exactly what writing its requests one by one commits: the same trees
    /// and messages in the same order on `main`'s first-parent line, the same answers (a
    /// stale `file_sha` refused, a no-op, a dry run), each write its own commit.
    /// Content sent as JSON comes with its emission unverified: storage stores an emission
    /// only once it reads back as the content, and refuses one that does not, changing
    /// nothing, both where there is no file yet and where the stored text cannot be edited.
    #[test]
    fn an_emission_that_does_not_read_back_is_not_stored() {
        let (_dir, storage, tenant) = crate::storage::test_storage();
        let who = Identity::new("t", "t@localhost", "localhost");
        let content: crate::domain::yaml::Mapping =
            serde_json::from_value(serde_json::json!({"a": 1})).unwrap();
        // `bytes` as YAML text, or as the emission of `content` sent as JSON.
        let commit = |file: PlanFile, bytes: &str, json: bool| {
            let mut req = CommitRequest::of(
                file,
                bytes.as_bytes().to_vec(),
                Preconditions::default(),
                who.clone(),
            );
            req.changes[0].content = json.then(|| std::sync::Arc::new(content.clone()));
            storage.commit(&tenant, req)
        };
        let write = |file: PlanFile, emission: &str| commit(file, emission, true);
        commit(PlanFile::Integration, "x: 0\n", false).unwrap();
        let head = storage.head_state(&tenant).unwrap().commit;
        // The stored integration file is a block mapping that the splice edits: the verified
        // edit is stored, whatever the (wrong) emission says.
        assert!(write(PlanFile::Integration, "a: 2\n").is_ok());
        let stored = storage.read(&tenant, PlanFile::Integration).unwrap();
        assert_eq!(
            stored.bytes, b"a: 1\n",
            "the splice's text, not the emission"
        );
        let edited = storage.head_state(&tenant).unwrap().commit;
        assert_ne!(edited, head);
        // A file that is not a block mapping is emitted whole: the wrong emission is refused.
        commit(PlanFile::Configuration, "{b: 1}\n", false).unwrap();
        let before = storage.head_state(&tenant).unwrap().commit;
        let e = write(PlanFile::Configuration, "a: 2\n").unwrap_err();
        assert!(matches!(e, StorageError::NotRepresentable { .. }), "{e}");
        assert_eq!(
            storage.head_state(&tenant).unwrap().commit,
            before,
            "nothing written"
        );
        // The right emission is stored.
        assert!(write(PlanFile::Configuration, "a: 1\n").is_ok());
    }

    #[test]
    fn a_batch_commits_what_one_by_one_commits() {
        use crate::domain::{BlobId, RequestId};
        init_git();
        let committer = Identity::new("planfiles", "p@localhost", "localhost");
        let tenant = TenantId::parse("acme").unwrap();
        let open = || {
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(
                dir.path(),
                &dir.path().join("cursor.key"),
                committer.clone(),
                Durability::Fsync,
            )
            .unwrap();
            storage.create_tenant(&tenant, false).unwrap();
            (dir, storage)
        };
        let (_a, batched) = open();
        let (_b, single) = open();
        let initial = single.read(&tenant, PlanFile::Integration).unwrap().blob;
        let initial_conf = single.read(&tenant, PlanFile::Configuration).unwrap().blob;
        let req = |n: u32, file: PlanFile, text: &str, pre: Preconditions, dry_run: bool| {
            let mut r = CommitRequest::of(file, text.as_bytes().to_vec(), pre, committer.clone());
            r.request_id = RequestId::parse(&format!("req-{n}")).unwrap();
            r.dry_run = dry_run;
            r
        };
        let blob_of = |text: &str| {
            BlobId(
                ObjectId::parse(
                    &git2::Oid::hash_object(git2::ObjectType::Blob, text.as_bytes())
                        .unwrap()
                        .to_string(),
                )
                .unwrap(),
            )
        };
        let sha = |id: BlobId| Preconditions {
            file_sha: Some(ShaCheck::Blob(id.0)),
            ..Default::default()
        };
        let reqs = [
            req(
                1,
                PlanFile::Integration,
                "a: 1\n",
                Preconditions::default(),
                false,
            ),
            req(
                2,
                PlanFile::Configuration,
                "folders: []\nx: 1\n",
                sha(initial_conf),
                false,
            ),
            // Stale: the first write changed the file.
            req(3, PlanFile::Integration, "a: 3\n", sha(initial), false),
            // The same bytes again: a no-op.
            req(
                4,
                PlanFile::Integration,
                "a: 1\n",
                Preconditions::default(),
                false,
            ),
            req(
                5,
                PlanFile::Integration,
                "a: 5\n",
                Preconditions::default(),
                true,
            ),
            req(
                6,
                PlanFile::Configuration,
                "folders: []\nx: 6\n",
                sha(blob_of("folders: []\nx: 1\n")),
                false,
            ),
        ];
        let refs: Vec<&CommitRequest> = reqs.iter().collect();
        let together = batched.commit_batch(&tenant, &refs);
        let apart: Vec<_> = reqs
            .iter()
            .map(|r| single.commit(&tenant, r.clone()))
            .collect();
        let shape = |r: &Result<Committed, StorageError>| match r {
            Ok(Committed::Written(o)) => format!(
                "written changed={} dry={} files={:?}",
                o.changed(),
                o.commit.is_none(),
                o.files
                    .iter()
                    .map(|f| (f.blob, f.changed))
                    .collect::<Vec<_>>()
            ),
            Ok(Committed::Replayed(_)) => "replayed".into(),
            Err(e) => format!(
                "error {}",
                e.to_string().split(';').next().unwrap_or_default()
            ),
        };
        let together: Vec<String> = together
            .iter()
            .map(|r| shape(r.as_ref().expect("tried")))
            .collect();
        let apart: Vec<String> = apart.iter().map(shape).collect();
        assert_eq!(together, apart);
        assert!(together[2].starts_with("error"), "{}", together[2]);
        let log = |storage: &Storage| {
            let out = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(storage.repo_path(&tenant))
                .args(["log", "--first-parent", "--format=%T %s%n%b", "main"])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        let log_together = log(&batched);
        assert_eq!(log_together, log(&single));
        assert_eq!(
            log_together.matches("Request-Id:").count(),
            3,
            "{log_together}"
        );
        let fsck = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(batched.repo_path(&tenant))
            .args(["fsck", "--strict"])
            .status()
            .unwrap();
        assert!(fsck.success());
    }
}

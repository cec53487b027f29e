//! Tests of a batch of writes against the same writes one by one: the same commits on `main`, each precondition checked against the writes before it.
use super::commit::BatchResult;
use super::signatures::{test_committer, Committer};
use super::write_tests::git;
use super::{create, TenantRepo};
use crate::domain::{PlanFile, TenantId};
use crate::storage::{CommitRequest, Preconditions, ShaCheck, StorageError};
use std::path::{Path, PathBuf};

/// The blob id of `bytes`, as a `file_sha`.
fn blob_of(bytes: &str) -> ShaCheck {
    let oid = git2::Oid::hash_object(git2::ObjectType::Blob, bytes.as_bytes()).unwrap();
    ShaCheck::Blob(super::to_id(oid))
}

fn new_tenant(dir: &Path) -> (TenantId, PathBuf, Committer) {
    crate::storage::init_git();
    let tenant = TenantId::parse("acme").unwrap();
    let path = dir.join("acme.git");
    let committer = test_committer();
    create(&tenant, dir, &path, false, &committer).unwrap();
    (tenant, path, committer)
}

/// Four writes: the second one's `file_sha` is the blob the first replaced (a 409 once the
/// first is in), the third's is the blob the first wrote, the fourth has no precondition.
fn writes(repo: &TenantRepo, committer: &Committer) -> Vec<CommitRequest> {
    let before = repo.read(PlanFile::Integration).unwrap().blob;
    let at = |sha: ShaCheck| Preconditions {
        file_sha: Some(sha),
        ..Preconditions::default()
    };
    let read_at = ShaCheck::Blob(before.0);
    let one = |file, bytes: &str, pre| {
        CommitRequest::of(
            file,
            bytes.as_bytes().to_vec(),
            pre,
            committer.identity.clone(),
        )
    };
    vec![
        one(PlanFile::Integration, "first: 1\n", at(read_at)),
        one(PlanFile::Integration, "stale: 2\n", at(read_at)),
        one(
            PlanFile::Integration,
            "third: 3\n",
            at(blob_of("first: 1\n")),
        ),
        one(
            PlanFile::Configuration,
            "folders:\n- path: src\n",
            Preconditions::default(),
        ),
    ]
}

/// What `git log` says of each first-parent commit of `main`: its tree, subject, author and
/// number of parents; everything but the dates and so the ids.
fn history(path: &Path) -> String {
    git(
        path,
        &["log", "--first-parent", "--format=%T %s <%an> %p", "main"],
    )
    .lines()
    .map(|l| {
        let (head, parents) = l.rsplit_once('>').unwrap();
        format!("{head}> parents: {}\n", parents.split_whitespace().count())
    })
    .collect()
}

fn outcome(r: BatchResult) -> Result<String, String> {
    match r.expect("tried") {
        Ok(c) => Ok(c.written().unwrap().commit.unwrap().to_string()),
        Err(StorageError::ShaMismatch { .. }) => Err("409".into()),
        Err(e) => panic!("unexpected {e}"),
    }
}

#[test]
fn a_batch_makes_the_commits_of_its_writes_one_by_one_and_a_conflict_stops_only_its_own() {
    let (one_dir, batch_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (tenant, one_path, committer) = new_tenant(one_dir.path());
    let (_, batch_path, _) = new_tenant(batch_dir.path());
    assert_eq!(history(&one_path), history(&batch_path), "the same start");

    let one_repo = TenantRepo::open(&tenant, &one_path).unwrap();
    let alone: Vec<_> = writes(&one_repo, &committer)
        .iter()
        .map(|w| {
            let mut r = one_repo.commit_batch(
                &[w],
                &committer,
                None,
                &Default::default(),
                &Default::default(),
            );
            outcome(r.pop().unwrap())
        })
        .collect();

    let batch_repo = TenantRepo::open(&tenant, &batch_path).unwrap();
    let reqs = writes(&batch_repo, &committer);
    let together: Vec<_> = batch_repo
        .commit_batch(
            &reqs.iter().collect::<Vec<_>>(),
            &committer,
            None,
            &Default::default(),
            &Default::default(),
        )
        .into_iter()
        .map(outcome)
        .collect();

    let verdicts = |rs: &[Result<String, String>]| rs.iter().map(Result::is_ok).collect::<Vec<_>>();
    assert_eq!(verdicts(&together), [true, false, true, true]);
    assert_eq!(verdicts(&together), verdicts(&alone));
    assert_eq!(
        history(&batch_path),
        history(&one_path),
        "git log of the batch is git log of the writes one by one"
    );
    // Each acknowledged write is its own commit, in order, on main's first-parent line.
    let line: Vec<String> = git(&batch_path, &["rev-list", "--first-parent", "main"])
        .lines()
        .take(3)
        .map(str::to_owned)
        .collect();
    let acked: Vec<String> = together.into_iter().filter_map(Result::ok).rev().collect();
    assert_eq!(line, acked);
    assert_eq!(
        git(&batch_path, &["show", "main~1:integrations.yml"]),
        "third: 3"
    );
    assert!(git(&batch_path, &["fsck", "--strict"]).is_empty());
}

/// A batch whose move of `main` is retried (plain git moved `main` just before it, once) and
/// that holds a keyed write that changes nothing: the no-op record is published only by the
/// attempt whose move succeeded, so it names a commit on `main`, and the keyed write is
/// answered with that commit (before, the first attempt's record named a commit that never
/// reached `main`, and the key answered it, then 404, for ever).
#[test]
fn a_retried_batch_records_a_no_op_only_with_the_commit_main_got() {
    use crate::domain::IdempotencyKey;
    use crate::storage::IdempotencyRecord;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let (tenant, path, committer) = new_tenant(dir.path());
    let moved = Arc::new(AtomicBool::new(false));
    let hook = {
        let moved = moved.clone();
        crate::storage::WriteHook(Arc::new(move |_: &TenantId, path: &Path| {
            if !moved.swap(true, Ordering::SeqCst) {
                let tree = git(path, &["rev-parse", "main^{tree}"]);
                let head = git(path, &["rev-parse", "main"]);
                let next = git(
                    path,
                    &["commit-tree", &tree, "-p", &head, "-m", "plain git"],
                );
                git(path, &["update-ref", "refs/heads/main", &next, &head]);
            }
        }))
    };
    let repo = TenantRepo::open(&tenant, &path)
        .unwrap()
        .with_write_hook(Some(hook));
    let first = CommitRequest::of(
        PlanFile::Integration,
        b"same: 1\n".to_vec(),
        Preconditions::default(),
        committer.identity.clone(),
    );
    let mut keyed = first.clone();
    keyed.idempotency = Some(IdempotencyRecord {
        key: IdempotencyKey::parse(b"k-1").unwrap(),
        fingerprint: "f".into(),
    });
    let recent = Default::default();
    let results = repo.commit_batch(
        &[&first, &keyed],
        &committer,
        None,
        &recent,
        &Default::default(),
    );
    assert!(moved.load(Ordering::SeqCst), "main was moved once");
    let commits: Vec<String> = results.into_iter().map(|r| outcome(r).unwrap()).collect();
    let main = git(&path, &["rev-parse", "main"]);
    assert_eq!(
        commits,
        [main.clone(), main.clone()],
        "both answer main's head"
    );
    assert_eq!(
        git(&path, &["log", "-1", "--format=%s", "main~1"]),
        "plain git"
    );
    let record = git(
        &path,
        &["log", "-1", "--format=%B", "refs/planfiles/no-ops"],
    );
    assert!(
        record.contains(&format!("Replays: {main}")),
        "the record names main's commit: {record}"
    );
    // The key's retry answers the same commit.
    let again = repo.commit_batch(&[&keyed], &committer, None, &recent, &Default::default());
    match again.into_iter().next().flatten() {
        Some(Ok(crate::storage::Committed::Replayed(hit))) => {
            assert_eq!(hit.commit.to_string(), main)
        }
        other => panic!("the retry was not a replay of main's commit: {other:?}"),
    }
    assert!(git(&path, &["fsck", "--strict"]).is_empty());
}

/// A no-op records' ref that cannot be read (here: out of descriptors) fails the keyed write
/// that would add to it; it is never taken for a ref that does not exist, which would start
/// the records' chain again over the old one and lose every key it held.
#[test]
fn an_unreadable_no_op_ref_fails_the_write_and_keeps_the_records() {
    use crate::domain::IdempotencyKey;
    use crate::storage::disk::faults::{inject, Op};
    use crate::storage::IdempotencyRecord;
    let dir = tempfile::tempdir().unwrap();
    let (tenant, path, committer) = new_tenant(dir.path());
    let repo = TenantRepo::open(&tenant, &path).unwrap();
    let keyed = |key: &str| {
        let mut req = CommitRequest::of(
            PlanFile::Integration,
            repo.read(PlanFile::Integration).unwrap().bytes,
            Preconditions::default(),
            committer.identity.clone(),
        );
        req.idempotency = Some(IdempotencyRecord {
            key: IdempotencyKey::parse(key.as_bytes()).unwrap(),
            fingerprint: "f".into(),
        });
        req
    };
    let recent = Default::default();
    let first = keyed("k-1");
    outcome(
        repo.commit_batch(&[&first], &committer, None, &recent, &Default::default())
            .pop()
            .unwrap(),
    )
    .unwrap();
    let records = git(&path, &["rev-parse", "refs/planfiles/no-ops"]);
    // Every read of it fails while the fault lasts.
    let fault = inject(Op::Read, "refs/planfiles/no-ops", libc::EMFILE, 0);
    let second = keyed("k-2");
    let result = repo
        .commit_batch(&[&second], &committer, None, &recent, &Default::default())
        .pop()
        .flatten();
    assert!(fault.fired());
    drop(fault);
    let err = result.expect("tried").expect_err("the write must fail");
    assert!(err.is_out_of_descriptors(), "{err}");
    assert_eq!(git(&path, &["rev-parse", "refs/planfiles/no-ops"]), records);
    // Once it can be read, the chain goes on from the old records.
    outcome(
        repo.commit_batch(&[&second], &committer, None, &recent, &Default::default())
            .pop()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        git(&path, &["rev-parse", "refs/planfiles/no-ops~1"]),
        records,
        "the chain was started again"
    );
}

//! Proposals in a tenant's repository: each one's commit under `refs/proposals/<n>` and every proposal's record on `refs/proposals/records` (a signed commit per step; its tree: `pending`, `<nn>/<n>` JSON records); read without a lock, changed under the tenant's write lock in a write's durability order; an apply moves `main` and its record in one advance.
mod record;
mod steps;

use steps::MAIN_HEAD;

use super::advance::{Advance, MainMove};
use super::objects::{Entry, Head};
use super::refs::{read_ref_checked, RefLock, RefMove};
use super::signatures::Committer;
use super::staged::Staged;
use super::{git_err, signature, to_id, to_oid, Flags, TenantRepo, WRITE_DEADLINE};
use crate::domain::proposal::{Approval, Refusal};
use crate::domain::trailers::Reserved;
use crate::domain::{
    BlobId, CommitId, Identity, PlanFile, Proposal, ProposalNumber, ProposalState, StepKind,
};
use crate::storage::disk::durable::SyncGroup;
use crate::storage::{CommitRequest, ProposalRequest, ProposalStep, ProposedFile, StorageError};
use git2::{ObjectType, Oid};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The ref of every proposal's record.
pub(super) const RECORDS: &str = "refs/proposals/records";

fn content_ref(n: ProposalNumber) -> String {
    format!("refs/proposals/{n}")
}

/// The folder of the records tree that holds proposal `n` (256 of them, so that a step
/// rewrites a small tree whatever the number of proposals).
fn shard(n: u64) -> String {
    format!("{:02x}", n % 256)
}

const FOLDER_MODE: i32 = 0o040000;

/// Open proposals a tenant may have at once.
pub(in crate::storage) const MAX_OPEN: usize = 10_000;

/// First parents of `main` looked at for an apply's commit before git's ancestry is asked.
const LANDED_WALK: usize = 64;

/// Every proposal's record at one commit of the records ref.
#[derive(Default)]
pub(super) struct Records {
    commit: Option<Oid>,
    /// Each folder, by name: shared with the records read before while its tree is the same,
    /// so that reading a step's records reads one folder.
    folders: HashMap<String, Arc<Folder>>,
    /// The highest number recorded.
    last: u64,
    /// An apply whose move of `main` may not have happened: the proposal, and the commit it
    /// put on `main`.
    pending: Option<(u64, Oid)>,
    /// Every record by number, made on the first list (a writer never needs it).
    index: std::sync::OnceLock<BTreeMap<u64, Arc<Proposal>>>,
}

/// One folder of the records tree: its tree, and its records by number with their blobs.
struct Folder {
    tree: Oid,
    entries: BTreeMap<u64, (Oid, Arc<Proposal>)>,
}

impl Records {
    fn get(&self, n: u64) -> Option<&(Oid, Arc<Proposal>)> {
        self.folders.get(&shard(n))?.entries.get(&n)
    }

    fn index(&self) -> &BTreeMap<u64, Arc<Proposal>> {
        self.index.get_or_init(|| {
            self.folders
                .values()
                .flat_map(|f| f.entries.iter().map(|(n, (_, p))| (*n, p.clone())))
                .collect()
        })
    }
}

/// Each tenant's records as last read (by repository path), to read only what changed at
/// the next commit: kept by storage, so that a repository opened again (after a repack) does
/// not read every record again. At most [`MAX_CACHED_RECORDS`] records in all; past that,
/// only the tenant read last is kept.
#[derive(Default)]
pub(in crate::storage) struct RecordsCaches(Mutex<HashMap<std::path::PathBuf, Arc<Records>>>);

impl std::fmt::Debug for RecordsCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordsCaches")
    }
}

/// Records kept in memory at most, in all (about 0.6 KB each).
const MAX_CACHED_RECORDS: usize = 200_000;

impl Records {
    fn len(&self) -> usize {
        self.folders.values().map(|f| f.entries.len()).sum()
    }
}

impl TenantRepo {
    /// The records at the records ref now (none yet: empty).
    fn records(&self, caches: &RecordsCaches) -> Result<Arc<Records>, StorageError> {
        let err = |e| StorageError::io("read the proposals' records", &self.path.join(RECORDS), e);
        let at = read_ref_checked(&self.path, RECORDS).map_err(err)?;
        let previous = caches
            .0
            .lock()
            .expect("not poisoned")
            .get(&self.path)
            .cloned();
        if let Some(p) = &previous {
            if p.commit == at {
                return Ok(p.clone());
            }
        }
        let records = Arc::new(match at {
            None => Records::default(),
            Some(at) => self.read_records(at, previous.as_deref())?,
        });
        let mut kept = caches.0.lock().expect("not poisoned");
        let others: usize = kept
            .iter()
            .filter(|(path, _)| **path != self.path)
            .map(|(_, r)| r.len())
            .sum();
        if others + records.len() > MAX_CACHED_RECORDS {
            kept.clear();
        }
        kept.insert(self.path.clone(), records.clone());
        Ok(records)
    }

    /// The records at commit `at`; what `previous` read from the same folders and blobs is
    /// taken from it.
    fn read_records(&self, at: Oid, previous: Option<&Records>) -> Result<Records, StorageError> {
        let err = |op| git_err(&self.tenant, op, "");
        let tree = self
            .repo
            .find_commit(at)
            .and_then(|c| c.tree())
            .map_err(err("read the proposals' records"))?;
        let mut records = Records {
            commit: Some(at),
            ..Records::default()
        };
        let broken = |what: String| StorageError::Git {
            tenant: self.tenant.clone(),
            op: "read the proposals' records",
            message: what,
            code: 0,
            class: 0,
        };
        for entry in tree.iter() {
            let name = entry.name().unwrap_or_default().to_owned();
            match name.as_str() {
                "pending" => {
                    let blob = self
                        .repo
                        .find_blob(entry.id())
                        .map_err(err("read pending"))?;
                    let text = String::from_utf8_lossy(blob.content()).into_owned();
                    let (n, c) = text
                        .trim()
                        .split_once(' ')
                        .ok_or_else(|| broken("`pending` is not `<number> <commit>`".into()))?;
                    let n = n.parse().map_err(|_| broken("`pending` number".into()))?;
                    let c = Oid::from_str(c).map_err(|_| broken("`pending` commit".into()))?;
                    records.pending = Some((n, c));
                }
                _ => {
                    let known = previous
                        .and_then(|p| p.folders.get(&name))
                        .filter(|f| f.tree == entry.id());
                    if let Some(folder) = known {
                        records.folders.insert(name, folder.clone());
                        continue;
                    }
                    let old = previous.and_then(|p| p.folders.get(&name));
                    let sub = self
                        .repo
                        .find_tree(entry.id())
                        .map_err(err("read a records folder"))?;
                    let mut entries = BTreeMap::new();
                    for e in sub.iter() {
                        let n: u64 = e
                            .name()
                            .ok()
                            .and_then(|n| n.parse().ok())
                            .ok_or_else(|| broken(format!("{name}/{:?}", e.name())))?;
                        let same = old
                            .and_then(|f| f.entries.get(&n))
                            .filter(|(blob, _)| *blob == e.id());
                        let proposal = match same {
                            Some((_, p)) => p.clone(),
                            None => {
                                let blob =
                                    self.repo.find_blob(e.id()).map_err(err("read a record"))?;
                                Arc::new(
                                    record::decode(blob.content())
                                        .map_err(|why| broken(format!("proposal {n}: {why}")))?,
                                )
                            }
                        };
                        entries.insert(n, (e.id(), proposal));
                    }
                    records.folders.insert(
                        name,
                        Arc::new(Folder {
                            tree: entry.id(),
                            entries,
                        }),
                    );
                }
            }
        }
        records.last = records
            .folders
            .values()
            .filter_map(|f| f.entries.keys().next_back())
            .max()
            .copied()
            .unwrap_or(0);
        Ok(records)
    }

    /// Whether the apply that `pending` names reached `main` (`main` at its commit or past
    /// it): when it did not (a crash or a failed sync between the record and `main`), its
    /// proposal is still open. `main`'s first parents are walked back (an apply's commit is
    /// on that line, a few commits down when it landed); past [`LANDED_WALK`] of them, git's
    /// ancestry answers.
    fn landed(&self, commit: Oid) -> Result<bool, StorageError> {
        let err = git_err(&self.tenant, "look for an applied proposal", "");
        // Not in the store (a crash left it unreachable and `git gc` pruned it): `main`, whose
        // history is never pruned, does not hold it.
        if self.repo.find_commit(commit).is_err() {
            return Ok(false);
        }
        let main = self.main_commit("")?;
        let mut at = main;
        for _ in 0..LANDED_WALK {
            if at == commit {
                return Ok(true);
            }
            let c = self.repo.find_commit(at).map_err(&err)?;
            match c.parent_id(0) {
                Ok(parent) => at = parent,
                Err(_) => return Ok(false),
            }
        }
        self.repo.graph_descendant_of(main, commit).map_err(err)
    }

    /// Proposal `n` as it is: its record, open again when its apply did not land.
    fn settled(&self, records: &Records, n: u64) -> Result<Option<Proposal>, StorageError> {
        let Some((_, p)) = records.get(n) else {
            return Ok(None);
        };
        match records.pending {
            Some((pending, commit)) if pending == n && !self.landed(commit)? => {
                Ok(Some(reopened((**p).clone())))
            }
            _ => Ok(Some((**p).clone())),
        }
    }

    /// See [`crate::storage::Storage::proposal`].
    pub(in crate::storage) fn proposal(
        &self,
        n: ProposalNumber,
        caches: &RecordsCaches,
    ) -> Result<Proposal, StorageError> {
        let records = self.records(caches)?;
        self.settled(&records, n.get())?
            .ok_or_else(|| StorageError::ProposalNotFound {
                tenant: self.tenant.clone(),
                number: n,
            })
    }

    /// See [`crate::storage::Storage::proposals`].
    pub(in crate::storage) fn proposals(
        &self,
        state: Option<ProposalState>,
        before: Option<ProposalNumber>,
        limit: usize,
        visible: &dyn Fn(&Proposal) -> bool,
        caches: &RecordsCaches,
    ) -> Result<Vec<Arc<Proposal>>, StorageError> {
        let records = self.records(caches)?;
        let lost = match records.pending {
            Some((n, commit)) if !self.landed(commit)? => Some(n),
            _ => None,
        };
        let end = before.map_or(u64::MAX, ProposalNumber::get);
        let index = records.index();
        let mut out = Vec::with_capacity(limit.min(index.len()));
        for (n, p) in index.range(..end).rev() {
            if out.len() == limit {
                break;
            }
            let p = if Some(*n) == lost {
                Arc::new(reopened((**p).clone()))
            } else {
                p.clone()
            };
            if state.is_none_or(|s| s == p.state) && visible(&p) {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// See [`crate::storage::Storage::proposal_texts`].
    pub(in crate::storage) fn proposal_texts(
        &self,
        n: ProposalNumber,
        caches: &RecordsCaches,
    ) -> Result<(Proposal, crate::storage::ProposedTexts), StorageError> {
        let p = self.proposal(n, caches)?;
        let at = to_oid(&p.commit.0);
        let files = p
            .files
            .iter()
            .map(|&f| Ok((f, self.snapshot(at, f)?.bytes)))
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((p, files))
    }

    /// See [`crate::storage::Storage::proposed_files`].
    pub(in crate::storage) fn proposed_files(
        &self,
        p: &Proposal,
    ) -> Result<Vec<ProposedFile>, StorageError> {
        let main = self.main_commit("")?;
        p.files
            .iter()
            .map(|&file| {
                let at = |c: Oid| self.snapshot(c, file);
                let base = at(to_oid(&p.base.0))?;
                let proposed = at(to_oid(&p.commit.0))?;
                let main = at(main)?;
                let from_base = self.unified(file, &base.bytes, &proposed.bytes)?;
                let from_main = self.unified(file, &main.bytes, &proposed.bytes)?;
                Ok(ProposedFile {
                    file,
                    base,
                    proposed,
                    main,
                    from_base,
                    from_main,
                })
            })
            .collect()
    }

    /// See [`crate::storage::Storage::propose`].
    pub(in crate::storage) fn propose(
        &self,
        req: &ProposalRequest,
        committer: &Committer,
        sync: Option<&SyncGroup>,
        caches: &RecordsCaches,
    ) -> Result<Proposal, StorageError> {
        self.under_lock(req.not_after, |attempt| {
            self.try_propose(req, committer, sync, attempt, caches)
        })
    }

    /// See [`crate::storage::Storage::proposal_step`].
    #[allow(clippy::too_many_arguments)]
    pub(in crate::storage) fn proposal_step(
        &self,
        n: ProposalNumber,
        step: &ProposalStep,
        committer: &Committer,
        sync: Option<&SyncGroup>,
        flags: &Flags,
        not_after: Option<std::time::SystemTime>,
        caches: &RecordsCaches,
    ) -> Result<Proposal, StorageError> {
        self.under_lock(not_after, |attempt| {
            self.try_step(n, step, committer, sync, flags, attempt, caches)
        })
    }

    /// `attempt` under the tenant's write lock (after the placement's re-read and the
    /// token's end), again while a ref it moves was moved under it by someone else.
    fn under_lock<T>(
        &self,
        not_after: Option<std::time::SystemTime>,
        mut attempt: impl FnMut(&mut Attempt) -> Result<T, Step>,
    ) -> Result<T, StorageError> {
        let deadline = Instant::now() + WRITE_DEADLINE;
        let _lock = self.lock_for_write(deadline, "")?;
        crate::storage::placement::reread_under_lock(&self.path, &self.tenant)?;
        if not_after.is_some_and(|last| std::time::SystemTime::now() >= last) {
            return Err(StorageError::Expired {
                tenant: self.tenant.clone(),
            });
        }
        let mut tries = 0;
        loop {
            tries += 1;
            let mut a = Attempt { now: now_secs() };
            match attempt(&mut a) {
                Ok(t) => return Ok(t),
                Err(Step::Failed(e)) => return Err(e),
                Err(Step::Again) if Instant::now() < deadline => super::backoff(tries),
                Err(Step::Again) => {
                    return Err(StorageError::RefLocked {
                        tenant: self.tenant.clone(),
                        lock: "refs/proposals/records.lock",
                    })
                }
            }
        }
    }

    fn try_propose(
        &self,
        req: &ProposalRequest,
        committer: &Committer,
        sync: Option<&SyncGroup>,
        a: &mut Attempt,
        caches: &RecordsCaches,
    ) -> Result<Proposal, Step> {
        let fsync = sync.is_none();
        let mut staged = Staged::new(self, fsync);
        let mark = sync.map(SyncGroup::mark);
        let records = self.records(caches)?;
        let head = self.read_head("")?;
        let (number, created) = match req.number {
            Some(n) => {
                let p = self.settled(&records, n.get())?.ok_or_else(|| {
                    StorageError::ProposalNotFound {
                        tenant: self.tenant.clone(),
                        number: n,
                    }
                })?;
                p.may_change(&req.author.sub, "update")
                    .map_err(|r| self.refused(r))?;
                (n, p.created)
            }
            None => {
                let open = records
                    .folders
                    .values()
                    .flat_map(|f| f.entries.values())
                    .filter(|(_, p)| p.state == ProposalState::Open)
                    .count();
                let n = ProposalNumber::new(records.last + 1)
                    .filter(|_| open < MAX_OPEN)
                    .ok_or_else(|| StorageError::ProposalLimit {
                        tenant: self.tenant.clone(),
                        limit: MAX_OPEN as u64,
                    })?;
                (n, a.now)
            }
        };
        // The files as a write of them: preconditions against `main`, JSON edited into the
        // stored text.
        let write = CommitRequest {
            changes: req.changes.clone(),
            subject: Some(req.title.clone()),
            restored_from: None,
            idempotency: None,
            dry_run: false,
            author: identity(&req.author),
            request_id: req.request_id.clone(),
            not_after: req.not_after,
        };
        let checked = self.check_all(&staged, head.commit, &head, &write)?;
        let files: Vec<PlanFile> = req
            .changes
            .iter()
            .zip(&checked)
            .filter(|(_, k)| !k.unchanged())
            .map(|(c, _)| c.file)
            .collect();
        if files.is_empty() {
            return Err(StorageError::NothingProposed {
                tenant: self.tenant.clone(),
            }
            .into());
        }
        let set = self.stage_blobs(&mut staged, &write, &checked)?;
        let mut message = body(&req.title, req.message.as_ref());
        message.push_str(&Reserved::Proposal.line(number));
        message.push_str(&Reserved::ProposedBy.line(req.author.signature()));
        message.push_str(&Reserved::RequestId.line(&req.request_id));
        let proposed =
            self.stage_commit(&mut staged, &head, &set, &write.author, &message, committer)?;
        let proposal = Proposal {
            number,
            state: ProposalState::Open,
            title: req.title.as_str().to_owned(),
            message: req.message.clone(),
            author: req.author.clone(),
            created,
            updated: a.now,
            base: CommitId(to_id(head.commit)),
            commit: CommitId(to_id(proposed.commit)),
            files,
            // An update voids every approval: they named the commit it replaces.
            approvals: Vec::new(),
            applied: None,
            closed_by: None,
        };
        let verb = if req.number.is_some() {
            StepKind::Updated.verb()
        } else {
            StepKind::Opened.verb()
        };
        let records_lock = self.stage_records(
            &mut staged,
            &records,
            &proposal,
            None,
            &format!("{verb} proposal {number}: {}", proposal.title),
            &write.author,
            committer,
            fsync,
        )?;
        let name = content_ref(number);
        let current = read_ref_checked(&self.path, &name)
            .map_err(|e| StorageError::io("read a proposal's ref", &self.path.join(&name), e))?;
        let content_lock = take(self.lock_ref_clearing(&name, current, proposed.commit, fsync))?;
        self.advance(
            Advance {
                staged,
                mark,
                before: vec![content_lock, records_lock],
                main: None,
                after: None,
            },
            sync,
            "",
            |_| {},
        )?;
        Ok(proposal)
    }

    #[allow(clippy::too_many_arguments)]
    fn try_step(
        &self,
        n: ProposalNumber,
        step: &ProposalStep,
        committer: &Committer,
        sync: Option<&SyncGroup>,
        flags: &Flags,
        a: &mut Attempt,
        caches: &RecordsCaches,
    ) -> Result<Proposal, Step> {
        let fsync = sync.is_none();
        let mut staged = Staged::new(self, fsync);
        let mark = sync.map(SyncGroup::mark);
        let records = self.records(caches)?;
        let mut p =
            self.settled(&records, n.get())?
                .ok_or_else(|| StorageError::ProposalNotFound {
                    tenant: self.tenant.clone(),
                    number: n,
                })?;
        let mut main = None;
        let mut pending = None;
        let (subject, who) = match step {
            ProposalStep::Approve { by, seen } => {
                p.may_approve(&by.sub, Some(*seen))
                    .map_err(|r| self.refused(r))?;
                p.approvals.push(Approval {
                    by: by.clone(),
                    commit: p.commit,
                    at: a.now,
                });
                (
                    format!("{} proposal {n}", StepKind::Approved.verb()),
                    identity(by),
                )
            }
            ProposalStep::Close { by } => {
                p.may_change(by, "close").map_err(|r| self.refused(r))?;
                p.state = ProposalState::Closed;
                p.closed_by = Some(by.clone());
                (
                    format!("{} proposal {n}", StepKind::Closed.verb()),
                    self.named(&p, by),
                )
            }
            ProposalStep::Apply {
                by,
                request_id,
                checked,
            } => {
                let need = flags.get(&self.tenant, &self.path)?.required_approvals as usize;
                p.may_apply(by, need).map_err(|r| self.refused(r))?;
                // Its files were held to today's rules at this commit: an update since is
                // not applied unchecked.
                if p.commit != *checked {
                    return Err(self
                        .refused(Refusal::Changed {
                            number: n,
                            current: p.commit,
                        })
                        .into());
                }
                let head = self.read_head("")?;
                let applied = self.stage_apply(&mut staged, &head, &p, request_id, committer)?;
                let lock = match self.lock_main(head.commit, applied, fsync) {
                    Ok(lock) => lock,
                    Err(RefMove::Moved | RefMove::Locked) => return Err(Step::Again),
                    Err(RefMove::Failed(e)) => return Err(e.into()),
                };
                main = Some(MainMove {
                    old: head.commit,
                    new: applied,
                    lock,
                });
                p.state = ProposalState::Applied;
                p.applied = Some(CommitId(to_id(applied)));
                pending = Some((n.get(), applied));
                (
                    format!("{} proposal {n}", StepKind::Applied.verb()),
                    self.named(&p, by),
                )
            }
        };
        p.updated = a.now;
        let records_lock = self.stage_records(
            &mut staged,
            &records,
            &p,
            pending,
            &subject,
            &who,
            committer,
            fsync,
        )?;
        // The record first, then `main`: a crash between them leaves the record `pending`,
        // and the proposal reads as open until `main` holds the applied commit.
        self.advance(
            Advance {
                staged,
                mark,
                before: vec![records_lock],
                main,
                after: None,
            },
            sync,
            "",
            |_| {},
        )?;
        Ok(p)
    }

    /// The commit that applies `p` on `head`: `head`'s tree with the proposal's files, by
    /// the proposal's author, with the trailers that name the proposal and its approvers.
    /// `ProposalStale` when a file it changes moved on `main` since its base.
    fn stage_apply(
        &self,
        staged: &mut Staged,
        head: &Head,
        p: &Proposal,
        request_id: &crate::domain::RequestId,
        committer: &Committer,
    ) -> Result<Oid, StorageError> {
        let (base, proposed) = (to_oid(&p.base.0), to_oid(&p.commit.0));
        let mut set = Vec::new();
        for &file in &p.files {
            let (was, _) = self.blob_in(base, file)?;
            let now = head.blob(file.path()).unwrap_or_else(super::empty_blob_oid);
            if now != was {
                return Err(StorageError::ProposalStale {
                    tenant: self.tenant.clone(),
                    number: p.number,
                    file,
                    current: BlobId(to_id(now)),
                });
            }
            let (blob, _) = self.blob_in(proposed, file)?;
            set.push((file.path(), blob));
            staged.found.push(blob);
        }
        let mut message = body_str(&p.title, p.message.as_ref());
        message.push_str(&Reserved::RequestId.line(request_id));
        message.push_str(&Reserved::Proposal.line(p.number));
        message.push_str(&Reserved::ProposedBy.line(p.author.signature()));
        for approval in p.approvals_in_force() {
            message.push_str(&Reserved::ApprovedBy.line(approval.by.signature()));
        }
        let author = identity(&p.author);
        Ok(self
            .stage_commit(staged, head, &set, &author, &message, committer)?
            .commit)
    }

    /// Stages the records commit with `p` written (and `pending` as given: a step settles the
    /// one before it, whose proposal is written open again when its apply did not land), and
    /// takes the records ref's lock with it.
    #[allow(clippy::too_many_arguments)]
    fn stage_records(
        &self,
        staged: &mut Staged,
        records: &Records,
        p: &Proposal,
        pending: Option<(u64, Oid)>,
        subject: &str,
        who: &Identity,
        committer: &Committer,
        fsync: bool,
    ) -> Result<RefLock, Step> {
        let err = |op| git_err(&self.tenant, op, "");
        let mut writes = vec![p.clone()];
        if let Some((m, commit)) = records.pending.filter(|(m, _)| *m != p.number.get()) {
            if !self.landed(commit)? {
                if let Some((_, was)) = records.get(m) {
                    writes.push(reopened((**was).clone()));
                }
            }
        }
        let mut folders: HashMap<String, Oid> = records
            .folders
            .iter()
            .map(|(k, f)| (k.clone(), f.tree))
            .collect();
        let mut changed: BTreeMap<String, Vec<(u64, Oid)>> = BTreeMap::new();
        for w in &writes {
            let blob = self.stage_object(staged, ObjectType::Blob, &record::encode(w))?;
            changed
                .entry(shard(w.number.get()))
                .or_default()
                .push((w.number.get(), blob));
        }
        for (name, new) in changed {
            let mut list: Vec<(u64, Oid)> = records
                .folders
                .get(&name)
                .into_iter()
                .flat_map(|f| f.entries.iter())
                .filter(|(k, _)| !new.iter().any(|(m, _)| m == *k))
                .map(|(k, (blob, _))| (*k, *blob))
                .collect();
            list.extend(new);
            let tree: Vec<Entry> = list
                .into_iter()
                .map(|(k, id)| Entry {
                    name: k.to_string().into_bytes(),
                    mode: super::FILE_MODE,
                    id,
                })
                .collect();
            let id =
                self.stage_object(staged, ObjectType::Tree, &super::objects::tree_of(&tree))?;
            folders.insert(name, id);
        }
        let mut root: Vec<Entry> = folders
            .into_iter()
            .map(|(name, id)| Entry {
                name: name.into_bytes(),
                mode: FOLDER_MODE,
                id,
            })
            .collect();
        let mut file = |name: &str, text: String| -> Result<(), StorageError> {
            let id = self.stage_object(staged, ObjectType::Blob, text.as_bytes())?;
            root.push(Entry {
                name: name.as_bytes().to_vec(),
                mode: super::FILE_MODE,
                id,
            });
            Ok(())
        };
        if let Some((m, commit)) = pending {
            file("pending", format!("{m} {commit}\n"))?;
        }
        let tree = self.stage_object(staged, ObjectType::Tree, &super::objects::tree_of(&root))?;
        let author = signature(who).map_err(err("author signature"))?;
        let by = signature(&committer.identity).map_err(err("committer signature"))?;
        // `main` as the step found it, under the write lock: where the change streams place
        // the step among `main`'s commits (see `steps.rs`).
        let main = self.main_commit("")?;
        let message = format!(
            "{subject}\n\n{}{MAIN_HEAD}: {main}\n",
            Reserved::Proposal.line(p.number)
        );
        let parents: Vec<Oid> = records.commit.into_iter().collect();
        let text = committer.finish(super::objects::commit_text(
            tree, &parents, &author, &by, &message,
        ));
        let commit = self.stage_object(staged, ObjectType::Commit, text.as_bytes())?;
        take(self.lock_ref_clearing(RECORDS, records.commit, commit, fsync))
    }

    fn refused(&self, refusal: Refusal) -> StorageError {
        StorageError::ProposalRefused {
            tenant: self.tenant.clone(),
            refusal,
        }
    }

    /// The identity of `sub` on `p`: its author's, or an approver's.
    fn named(&self, p: &Proposal, sub: &str) -> Identity {
        let person = std::iter::once(&p.author)
            .chain(p.approvals.iter().map(|a| &a.by))
            .find(|r| r.sub == sub)
            .unwrap_or(&p.author);
        identity(person)
    }
}

/// One attempt's moment.
pub(super) struct Attempt {
    now: u64,
}

/// Why an attempt ended without its answer.
pub(super) enum Step {
    /// A ref it moves was moved or locked by someone else: the step is tried again.
    Again,
    Failed(StorageError),
}

impl From<StorageError> for Step {
    fn from(e: StorageError) -> Self {
        Step::Failed(e)
    }
}

fn take(lock: Result<RefLock, RefMove>) -> Result<RefLock, Step> {
    match lock {
        Ok(lock) => Ok(lock),
        Err(RefMove::Moved | RefMove::Locked) => Err(Step::Again),
        Err(RefMove::Failed(e)) => Err(Step::Failed(e)),
    }
}

/// An applied proposal whose apply did not land: open again.
fn reopened(mut p: Proposal) -> Proposal {
    p.state = ProposalState::Open;
    p.applied = None;
    p
}

fn identity(r: &crate::domain::Reviewer) -> Identity {
    Identity::new(&r.name, &r.email, "localhost")
}

/// The subject and the description, then the blank line before the trailers.
fn body(
    title: &crate::domain::CommitMessage,
    message: Option<&crate::domain::proposal::Description>,
) -> String {
    body_str(title.as_str(), message)
}

fn body_str(title: &str, message: Option<&crate::domain::proposal::Description>) -> String {
    match message {
        Some(m) => format!("{title}\n\n{}\n\n", m.as_str()),
        None => format!("{title}\n\n"),
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

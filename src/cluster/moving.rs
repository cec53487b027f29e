//! `planfiles tenant move`: one tenant handed from this shard to another in four steps, each safe to run again, after checks that refuse no write (docs/SCALING.md); and `--abort`.
use super::haproxy;
use crate::domain::{ShardUrl, TenantId};
use crate::storage::{Placement, Storage, StorageError};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// Where the routing of a moved tenant is switched.
#[derive(Debug, Clone, Default)]
pub struct Router {
    /// HAProxy runtime API addresses (a socket path, `unix:PATH` or `HOST:PORT`), one per
    /// HAProxy in front of the shards.
    pub haproxy: Vec<String>,
    /// The map's name in the HAProxy config (its file path there).
    pub map: Option<String>,
    /// The map file to rewrite, for HAProxy's restarts (usually the same path).
    pub map_file: Option<PathBuf>,
    /// The map's value for the target: its HAProxy backend.
    pub backend: Option<String>,
    /// The operator switches the routing by other means (`--no-router`): the move stops
    /// after step 2 until it is run again with `routed`.
    pub by_hand: bool,
    /// With `by_hand`: the routing now sends the tenant to the target (`--routed`).
    pub routed: bool,
}

/// A move of `tenant` from this shard (`from`, as the target reaches it) to `to`.
#[derive(Debug, Clone)]
pub struct Move {
    pub tenant: TenantId,
    pub from: ShardUrl,
    pub to: ShardUrl,
    /// A token for `tenant` with `planfiles.repos.import`, valid on both shards.
    pub token: String,
    pub router: Router,
    /// How long the source answers 421 before it archives the tenant.
    pub grace: Duration,
    /// This shard's schema set (`SchemaSet::digests`): the target must have the same.
    pub schemas: std::collections::BTreeMap<String, String>,
}

/// How often a target that is importing is asked whether it is there.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long a target that is importing may not answer before the move stops waiting.
const SILENT_LIMIT: Duration = Duration::from_secs(20);

/// What the answers of an importing target's `/healthz` say about the import under way: go
/// on waiting, or stop (why).
struct TargetWatch {
    /// The instance that took the import (the first that answered).
    instance: Option<String>,
    silent_since: Option<std::time::Instant>,
}

impl TargetWatch {
    fn new(first: Option<String>) -> Self {
        Self {
            instance: first,
            silent_since: None,
        }
    }

    /// Takes one probe's answer (`None`: no answer) at `now`; `Some(reason)` to stop.
    fn probed(&mut self, answer: Option<String>, now: std::time::Instant) -> Option<String> {
        let Some(id) = answer else {
            let since = *self.silent_since.get_or_insert(now);
            return (now.duration_since(since) >= SILENT_LIMIT).then(|| {
                format!(
                    "it stopped answering during the import ({} s without an answer to \
                     /healthz). Writes stay refused here: run the same command again once it \
                     answers (that finishes the move), or undo it with --abort",
                    SILENT_LIMIT.as_secs()
                )
            });
        };
        self.silent_since = None;
        match &self.instance {
            // A shard that predates instance ids answers none: only silence counts then.
            Some(before) if !before.is_empty() && *before != id => Some(
                "it restarted during the import (another instance answers its /healthz), and \
                 the import ended with it. Writes stay refused here: run the same command again \
                 (that finishes the move), or undo it with --abort"
                    .into(),
            ),
            Some(_) => None,
            None => {
                self.instance = Some(id);
                None
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("tenant {0} is not on this shard (no tenants/{0}.git in its data dir)")]
    NotHere(TenantId),
    #[error("the target at {to} answered {status}: {detail}")]
    Target {
        to: ShardUrl,
        status: u16,
        detail: String,
    },
    #[error("the target at {to} could not be reached: {reason}")]
    Unreachable { to: ShardUrl, reason: String },
    #[error("the target at {to} serves a tenant {tenant} already: nothing was changed")]
    TargetServes { to: ShardUrl, tenant: TenantId },
    #[error("the target imported the tenant at {got}, not at the handed-over head {want}")]
    HeadMismatch { want: String, got: String },
    #[error("{0}")]
    Router(String),
    #[error(transparent)]
    Haproxy(#[from] haproxy::HaproxyError),
    #[error("{0}")]
    Abort(String),
    #[error("the target at {to} signs commits with {target}, this shard with {here}: a tenant's history would change signer with the move. Give both shards the same signing.key_file (and list retired keys in signing.previous_public_keys) first")]
    SigningKey {
        to: ShardUrl,
        here: String,
        target: String,
    },
    #[error("the target at {to} has another schema set ({difference}): the tenant's files would be judged by other rules there. Deploy the same validation.schemas_dir to both shards (and SIGHUP them) first")]
    SchemaSet { to: ShardUrl, difference: String },
    #[error("the target at {to} does not list the retired signing key {key}, which signed commits here: they would read unverified there. List it in the target's signing.previous_public_keys first")]
    RetiredKey { to: ShardUrl, key: String },
    #[error("the shard at {shard} still takes {tenant}'s writes (it is {placement} there): start the move there with planfiles tenant move")]
    SourceWritable {
        shard: ShardUrl,
        tenant: TenantId,
        placement: String,
    },
    #[error("the shard at {shard} is moving {tenant} to {to}, not to this shard")]
    MovingElsewhere {
        shard: ShardUrl,
        tenant: TenantId,
        to: ShardUrl,
    },
}

/// What a move did, for its last line.
#[derive(Debug, Clone)]
pub struct MoveReport {
    pub head: String,
    /// From the moment writes were refused (by this run or an earlier one) until the router
    /// sent them to the target.
    pub writes_refused: Duration,
    pub import_millis: u64,
    pub archived: Option<PathBuf>,
}

/// The target's answer to an import (or its dry run).
#[derive(Debug, Deserialize)]
struct TargetAnswer {
    found: String,
    /// Absent from shards that predate signed commits.
    #[serde(default)]
    signing_keys: Option<Vec<String>>,
    /// Absent from shards that predate validators.
    #[serde(default)]
    schemas: Option<std::collections::BTreeMap<String, String>>,
    head: Option<String>,
    already: bool,
    millis: u64,
}

impl Move {
    /// Runs the steps; `progress` gets one line as each begins (the command prints them).
    /// Before step 1, nothing is refused: the tenant must be here and bound nowhere else,
    /// the target must answer and accept it, and the router must know the target's backend.
    pub fn run(
        &self,
        storage: &Storage,
        progress: &mut dyn FnMut(&str),
    ) -> Result<MoveReport, MoveError> {
        let t = &self.tenant;
        let placement = self.placement(storage)?;
        let moved = matches!(placement, Some(Placement::Moved { .. }));
        if !moved {
            self.check_target_is_another_shard()?;
            let check = self.ask_target()?;
            if check.found == "served" && placement.is_none() {
                return Err(MoveError::TargetServes {
                    to: self.to.clone(),
                    tenant: t.clone(),
                });
            }
            self.check_signing_key(storage, &check)?;
            self.check_schemas(&check)?;
        }
        self.check_router()?;
        progress(&format!(
            "step 1/4: refusing writes of {t} here, waiting for the writes under way"
        ));
        let start = storage.begin_move(t, &self.to)?;
        let head = start.head.to_string();
        let mut import_millis = 0;
        if start.moved {
            progress("step 2/4: skipped (the move had finished: the target serves the tenant)");
        } else {
            progress(&format!(
                "step 2/4: the target {} imports {t} at {head}",
                self.to
            ));
            // The subscriptions as they stand now that no change can land (the source's
            // deliveries stop at their next event: the target goes on from these cursors).
            let webhooks = storage.export_webhooks(t)?;
            let done = self.import(&head, start.settings, webhooks)?;
            let got = done.head.unwrap_or_default();
            // A rerun after the router switched finds the target ahead (writes went on there).
            if got != head && !done.already {
                return Err(MoveError::HeadMismatch { want: head, got });
            }
            import_millis = done.millis;
        }
        // An abort may have begun while the target imported the tenant: the router is
        // switched only for a move that is still this one.
        match self.placement(storage)? {
            Some(Placement::Moving { .. } | Placement::Moved { .. }) => {}
            other => {
                return Err(MoveError::Abort(format!(
                    "{t} is {} here now, not moving: an abort of this move ran while the target \
                     imported it. The router was not switched. If the abort fails because the \
                     target serves the tenant, run this move again to finish it",
                    other.as_ref().map_or("served", Placement::word)
                )))
            }
        }
        if self.router.by_hand && !self.router.routed {
            return Err(MoveError::Router(format!(
                "{t} is on the target now and its writes are refused here: switch the routing to the target, then run the same command with --routed to finish"
            )));
        }
        progress("step 3/4: switching the router to the target");
        self.switch_router()?;
        let writes_refused = start.since.elapsed().unwrap_or_default();
        progress("step 4/4: answering 421 here for the grace period");
        storage.finish_move(t, &self.to)?;
        let archived = storage.archive_if_due(t, self.grace)?;
        Ok(MoveReport {
            head,
            writes_refused,
            import_millis,
            archived,
        })
    }

    /// Undoes step 1 of a move that has not reached the target: the tenant takes writes here
    /// again. Fences first, asks second: the record becomes `aborting` (writes stay refused,
    /// and no import can take the tenant any more: the target's last check before the
    /// tenant becomes writable there asks this shard, which no longer says `moving`); only
    /// then is the target asked, and the record is cleared only when it answers that it does
    /// not serve the tenant. When it does (step 2 ran first), the move is put back and this
    /// fails: finish the move instead. Unless `force`, a target that cannot say leaves the
    /// tenant `aborting` (writes refused): run the abort again.
    pub fn abort(&self, storage: &Storage, force: bool) -> Result<(), MoveError> {
        self.placement(storage)?;
        storage.begin_abort(&self.tenant, &self.to)?;
        let taken = match self.ask_target() {
            Ok(check) => check.found == "served",
            Err(e) if force => {
                eprintln!("planfiles: {e}; aborting anyway (--force)");
                false
            }
            Err(e) => {
                return Err(MoveError::Abort(format!(
                    "{e}. Cannot tell whether the target imported the tenant: its writes stay \
                     refused here; run the abort again, or with --force abort anyway (only if \
                     you know the target never imported it)"
                )))
            }
        };
        storage.end_abort(&self.tenant, &self.to, taken)?;
        if taken {
            return Err(MoveError::Abort(format!(
                "the target at {} serves {} already (step 2 ran): finish the move by running it again without --abort",
                self.to, self.tenant
            )));
        }
        Ok(())
    }

    /// The tenant's placement here; an error when it is not here, or bound to another shard.
    fn placement(&self, storage: &Storage) -> Result<Option<Placement>, MoveError> {
        let placement = match storage.placement(&self.tenant) {
            Err(StorageError::TenantNotFound(t)) => return Err(MoveError::NotHere(t)),
            other => other?,
        };
        if let Some(p) = placement.as_ref().filter(|p| p.to() != &self.to) {
            return Err(StorageError::MoveConflict {
                tenant: self.tenant.clone(),
                reason: match p {
                    Placement::Moving { to, .. } => format!(
                        "it is moving to the shard at {to}: finish that move, or abort it (--to {to} --abort)"
                    ),
                    Placement::Aborting { to, .. } => format!(
                        "an abort of its move to the shard at {to} is under way: run it again (--to {to} --abort)"
                    ),
                    Placement::Moved { to, .. } => format!(
                        "it moved to the shard at {to}: to move it on, run the move there"
                    ),
                },
            }
            .into());
        }
        Ok(placement)
    }

    /// The target (`--to`) is another shard, not this one reached another way: an `--to`
    /// that names the router sends the tenant's requests here. Asks where the tenant is
    /// there; a shard that answers with this shard's own URL is this one.
    fn check_target_is_another_shard(&self) -> Result<(), MoveError> {
        let answer = match super::peer::placement_at(&self.to, &self.tenant, &self.token) {
            Ok(answer) => answer,
            // Not there (404), or an older shard: the dry run that follows says the rest.
            Err(_) => return Ok(()),
        };
        let answered_by = answer
            .shard
            .as_deref()
            .and_then(|s| ShardUrl::parse(s).ok());
        if answered_by.as_ref() == Some(&self.from) {
            return Err(MoveError::Router(format!(
                "--to {} reaches this shard ({}), not another one: it is probably the router \
                 (HAProxy), which sends {}'s requests here. Give the target shard's own URL, \
                 as this host reaches it",
                self.to, self.from, self.tenant
            )));
        }
        Ok(())
    }

    /// Both shards sign with the same key, and the target counts every retired key this
    /// shard counts, so that each commit that reads verified here does there (a shard that
    /// does not say predates signing).
    fn check_signing_key(&self, storage: &Storage, check: &TargetAnswer) -> Result<(), MoveError> {
        let Some(theirs) = &check.signing_keys else {
            return Ok(());
        };
        let none = || "no key (signing is off)".to_owned();
        let ours = storage.signing_keys().fingerprints();
        let (here, there) = (ours.first().cloned(), theirs.first().cloned());
        if here != there {
            return Err(MoveError::SigningKey {
                to: self.to.clone(),
                here: here.unwrap_or_else(none),
                target: there.unwrap_or_else(none),
            });
        }
        match ours.iter().skip(1).find(|key| !theirs.contains(key)) {
            Some(key) => Err(MoveError::RetiredKey {
                to: self.to.clone(),
                key: key.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Both shards judge the tenant's files by the same schemas (a shard that does not say
    /// predates validators).
    fn check_schemas(&self, check: &TargetAnswer) -> Result<(), MoveError> {
        let Some(theirs) = &check.schemas else {
            return Ok(());
        };
        match crate::validation::SchemaSet::difference(&self.schemas, theirs) {
            Some(difference) => Err(MoveError::SchemaSet {
                to: self.to.clone(),
                difference,
            }),
            None => Ok(()),
        }
    }

    /// `POST /admin/tenants/<id>/import?dry_run=true` on the target: what it would find.
    fn ask_target(&self) -> Result<TargetAnswer, MoveError> {
        let path = format!("/admin/tenants/{}/import?dry_run=true", self.tenant);
        let body = serde_json::json!({ "from": self.from.as_str() });
        super::peer::call(
            &self.to,
            &path,
            &self.token,
            Some(&body),
            Duration::from_secs(30),
        )
    }

    /// Step 2: the target imports `head`, with the tenant's webhooks. A large tenant may take
    /// long (fetch, fsck), so the answer is awaited as long as the same target process
    /// answers `/healthz`: a target cut off mid-import (whose answer would never come) ends
    /// the wait after [`SILENT_LIMIT`] instead of the call's hour, and one that restarted
    /// (another instance id; its import ended with it, and after a network cut no reset
    /// reaches this side) ends it at once.
    fn import(
        &self,
        head: &str,
        settings: crate::storage::Settings,
        webhooks: crate::storage::WebhookBundle,
    ) -> Result<TargetAnswer, MoveError> {
        let path = format!("/admin/tenants/{}/import", self.tenant);
        let body = serde_json::json!({
            "from": self.from.as_str(),
            "head": head,
            "source_hosting": settings.source_hosting,
            "required_approvals": settings.required_approvals,
            "webhooks": webhooks,
        });
        let mut watch = TargetWatch::new(super::peer::instance(&self.to, PROBE_EVERY));
        let (tx, rx) = std::sync::mpsc::channel();
        let (to, token) = (self.to.clone(), self.token.clone());
        std::thread::spawn(move || {
            let answer =
                super::peer::call(&to, &path, &token, Some(&body), Duration::from_secs(3600));
            let _ = tx.send(answer);
        });
        loop {
            match rx.recv_timeout(PROBE_EVERY) {
                Ok(answer) => return answer,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(self.unreachable("the import call ended without an answer".into()))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            let probe = super::peer::instance(&self.to, PROBE_EVERY);
            if let Some(reason) = watch.probed(probe, std::time::Instant::now()) {
                return Err(self.unreachable(reason));
            }
        }
    }

    fn unreachable(&self, reason: String) -> MoveError {
        MoveError::Unreachable {
            to: self.to.clone(),
            reason,
        }
    }

    /// Before any write is refused: the router is named (or `--no-router`), and each HAProxy
    /// has the target's backend.
    fn check_router(&self) -> Result<(), MoveError> {
        let r = &self.router;
        if r.by_hand {
            return Ok(());
        }
        let Some(backend) = &r.backend else {
            return Err(MoveError::Router(
                "name the target's HAProxy backend (--backend) with --haproxy and --map (or --map-file), or pass --no-router to switch the routing yourself".into(),
            ));
        };
        if r.map_file.is_none() && (r.haproxy.is_empty() || r.map.is_none()) {
            return Err(MoveError::Router(
                "--backend needs --haproxy ADDR and --map NAME (the running HAProxy), or --map-file PATH".into(),
            ));
        }
        for addr in &r.haproxy {
            if !haproxy::backends(addr)?.iter().any(|b| b == backend) {
                return Err(MoveError::Router(format!(
                    "the HAProxy at {addr} has no backend {backend}"
                )));
            }
            if let Some(map) = &r.map {
                haproxy::check_map(addr, map)?;
            }
        }
        if let Some(file) = &r.map_file {
            haproxy::check_map_file(file)?;
        }
        Ok(())
    }

    fn switch_router(&self) -> Result<(), MoveError> {
        let r = &self.router;
        let (Some(backend), key) = (&r.backend, self.tenant.as_str()) else {
            return Ok(());
        };
        if let Some(map) = &r.map {
            for addr in &r.haproxy {
                haproxy::set_map(addr, map, key, backend)?;
            }
        }
        if let Some(file) = &r.map_file {
            haproxy::write_map_file(file, key, backend)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn id(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    /// The same process answering keeps the wait going, however long the import takes.
    #[test]
    fn a_target_that_answers_as_itself_is_waited_for() {
        let t0 = Instant::now();
        let mut watch = TargetWatch::new(id("aaaa"));
        for k in 0..1000u64 {
            assert_eq!(watch.probed(id("aaaa"), t0 + PROBE_EVERY * k as u32), None);
        }
    }

    /// Another instance: the import ended with the one that restarted (after a network cut no
    /// reset comes, so the call alone would wait its hour): stop at once.
    #[test]
    fn a_target_that_restarted_ends_the_wait_at_once() {
        let t0 = Instant::now();
        let mut watch = TargetWatch::new(id("aaaa"));
        assert_eq!(watch.probed(None, t0), None);
        let reason = watch.probed(id("bbbb"), t0 + PROBE_EVERY).unwrap();
        assert!(reason.contains("restarted"), "{reason}");
        // The first answer sets the instance when the probe before the call had none.
        let mut watch = TargetWatch::new(None);
        assert_eq!(watch.probed(id("cccc"), t0), None);
        assert!(watch.probed(id("dddd"), t0).is_some());
    }

    /// Silence ends the wait after SILENT_LIMIT, counted from the first unanswered probe; an
    /// answer in between starts the count again.
    #[test]
    fn silence_ends_the_wait_after_the_limit() {
        let t0 = Instant::now();
        let mut watch = TargetWatch::new(id("aaaa"));
        assert_eq!(watch.probed(None, t0), None);
        assert_eq!(watch.probed(None, t0 + SILENT_LIMIT / 2), None);
        assert_eq!(watch.probed(id("aaaa"), t0 + SILENT_LIMIT / 2), None);
        assert_eq!(watch.probed(None, t0 + SILENT_LIMIT), None, "counted again");
        let reason = watch.probed(None, t0 + SILENT_LIMIT * 2).unwrap();
        assert!(reason.contains("stopped answering"), "{reason}");
    }

    /// A shard that predates instance ids answers with none: only its silence counts.
    #[test]
    fn an_older_target_without_instance_ids_is_judged_by_silence_alone() {
        let t0 = Instant::now();
        let mut watch = TargetWatch::new(id(""));
        assert_eq!(watch.probed(id(""), t0), None);
        assert_eq!(watch.probed(id(""), t0 + SILENT_LIMIT * 3), None);
    }
}

//! `planfiles tenant move`: one tenant handed from this shard to another in four steps, each safe to run again (docs/SCALING.md); and the sweep that archives tenants moved away.
pub mod haproxy;

use crate::domain::{ShardUrl, TenantId};
use crate::storage::{Storage, StorageError};
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
}

#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the target at {to} answered {status}: {detail}")]
    Target {
        to: ShardUrl,
        status: u16,
        detail: String,
    },
    #[error("the target at {to} could not be reached: {reason}")]
    Unreachable { to: ShardUrl, reason: String },
    #[error("the target imported the tenant at {got}, not at the handed-over head {want}")]
    HeadMismatch { want: String, got: String },
    #[error(transparent)]
    Router(#[from] haproxy::HaproxyError),
}

/// What a move did, for its last line.
#[derive(Debug, Clone)]
pub struct MoveReport {
    pub head: String,
    /// From the moment writes were refused until the router sent them to the target.
    pub writes_refused: Duration,
    pub import_millis: u64,
    pub archived: Option<PathBuf>,
}

impl Move {
    /// Runs the steps; `progress` gets one line as each begins (the command prints them).
    pub fn run(
        &self,
        storage: &Storage,
        progress: &mut dyn FnMut(&str),
    ) -> Result<MoveReport, MoveError> {
        let t = &self.tenant;
        progress(&format!(
            "step 1/4: refusing writes of {t} here, waiting for the writes under way"
        ));
        let refused_at = Instant::now();
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
            import_millis = self.import(&head, start.source_hosting)?;
        }
        progress("step 3/4: switching the router to the target");
        self.switch_router()?;
        let writes_refused = refused_at.elapsed();
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

    /// Asks the target to import the tenant from here; returns how long it took there.
    fn import(&self, head: &str, source_hosting: bool) -> Result<u64, MoveError> {
        let url = format!("{}/admin/tenants/{}/import", self.to, self.tenant);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(3600)))
            .build()
            .into();
        let body = serde_json::json!({
            "from": self.from.as_str(),
            "head": head,
            "source_hosting": source_hosting,
        });
        let unreachable = |e: ureq::Error| MoveError::Unreachable {
            to: self.to.clone(),
            reason: e.to_string(),
        };
        let mut res = agent
            .post(&url)
            .header("Authorization", &format!("Bearer {}", self.token))
            .send_json(&body)
            .map_err(unreachable)?;
        let status = res.status().as_u16();
        let answer: serde_json::Value = res
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_json()
            .unwrap_or_default();
        if status != 200 {
            return Err(MoveError::Target {
                to: self.to.clone(),
                status,
                detail: answer["detail"].as_str().unwrap_or("no detail").to_owned(),
            });
        }
        let got = answer["head"].as_str().unwrap_or_default();
        // A rerun after the router switched finds the target ahead (writes went on there).
        if got != head && answer["already"] != true {
            return Err(MoveError::HeadMismatch {
                want: head.to_owned(),
                got: got.to_owned(),
            });
        }
        Ok(answer["millis"].as_u64().unwrap_or(0))
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

/// Archives every tenant that moved away from this shard at least `grace` ago (see
/// [`Storage::archive_if_due`]): one read of each tenant's placement record. Blocking.
/// Returns what was archived, and the tenants that failed, each with its error.
pub fn archive_moved(storage: &Storage, grace: Duration) -> Result<Archived, StorageError> {
    let (mut archived, mut failed) = (Vec::new(), Vec::new());
    for tenant in storage.tenant_ids()? {
        match storage.archive_if_due(&tenant, grace) {
            Ok(Some(into)) => archived.push((tenant, into)),
            Ok(None) => {}
            Err(e) => failed.push((tenant, e)),
        }
    }
    Ok((archived, failed))
}

/// What a sweep archived, and the tenants it could not, with the error.
pub type Archived = (Vec<(TenantId, PathBuf)>, Vec<(TenantId, StorageError)>);

/// How often the service looks for moved tenants to archive (at most; sooner with a short
/// grace period).
const SWEEP: Duration = Duration::from_secs(60);

/// The service's sweep: [`archive_moved`] on the blocking pool every minute (or every grace
/// period, when shorter), each result logged. Runs until the server's runtime stops.
pub async fn archive_moved_loop(storage: Storage, grace: Duration) {
    let mut tick = tokio::time::interval(grace.clamp(Duration::from_secs(1), SWEEP));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let storage = storage.clone();
        let (archived, failed) =
            match tokio::task::spawn_blocking(move || archive_moved(&storage, grace)).await {
                Ok(Ok(done)) => done,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not list tenants to archive moved ones");
                    continue;
                }
                Err(_) => continue,
            };
        for (tenant, into) in archived {
            tracing::info!(%tenant, into = %into.display(), "archived a tenant that moved to another shard");
        }
        for (tenant, e) in failed {
            tracing::warn!(%tenant, error = %e, "could not archive a tenant that moved to another shard");
        }
    }
}

//! Shards: `planfiles tenant move` (`moving.rs`), calls to other shards (`peer.rs`), HAProxy's runtime API (`haproxy.rs`), and the sweep that archives tenants moved away.
pub mod haproxy;
mod moving;
mod peer;

pub use moving::{Move, MoveError, MoveReport, Router};
pub use peer::{handed_over, placement_at, PeerPlacement};

use crate::domain::TenantId;
use crate::storage::{Storage, StorageError};
use std::path::PathBuf;
use std::time::Duration;

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

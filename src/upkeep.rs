//! `Upkeep`: repacks a tenant in the background once its loose objects pass a threshold.
use crate::domain::TenantId;
use crate::metrics::Metrics;
use crate::storage::{RepackReport, Storage, StorageError};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Schedules repacks after writes: at most one per tenant in this process (and, through a
/// file lock in storage, across processes).
#[derive(Clone)]
pub struct Upkeep {
    storage: Storage,
    /// 0 turns background repacks off.
    threshold: usize,
    metrics: Metrics,
    running: Arc<Mutex<HashSet<TenantId>>>,
}

impl Upkeep {
    pub fn new(storage: Storage, threshold: usize, metrics: Metrics) -> Self {
        Self {
            storage,
            threshold,
            metrics,
            running: Arc::default(),
        }
    }

    /// True when `tenant` should be repacked now. Blocking (one small directory listing).
    pub fn due(&self, tenant: &TenantId) -> bool {
        self.threshold > 0
            && !self.running.lock().expect("not poisoned").contains(tenant)
            && self
                .storage
                .loose_objects_estimate(tenant)
                .is_ok_and(|n| n >= self.threshold)
    }

    /// Starts a repack of `tenant` on the blocking pool, unless one is running already.
    pub fn spawn(&self, tenant: TenantId) {
        if !self
            .running
            .lock()
            .expect("not poisoned")
            .insert(tenant.clone())
        {
            return;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let _ = this.run(&tenant, false);
            this.running.lock().expect("not poisoned").remove(&tenant);
        });
    }

    /// Repacks `tenant` now (everything into one pack with `full`), logging and counting the
    /// result. Blocking.
    pub fn run(&self, tenant: &TenantId, full: bool) -> Result<Option<RepackReport>, StorageError> {
        let result = self.storage.repack(tenant, full);
        match &result {
            Ok(Some(r)) => {
                let kind = r.kind;
                self.metrics.repacks.with_label_values(&[kind, "ok"]).inc();
                self.metrics
                    .repack_duration
                    .with_label_values(&[kind])
                    .observe(r.duration.as_secs_f64());
                tracing::info!(
                    tenant = %tenant, kind, objects = r.objects_packed,
                    loose_removed = r.loose_removed, packs_removed = r.packs_removed,
                    ms = r.duration.as_millis() as u64, "repacked"
                );
            }
            Ok(None) => tracing::debug!(tenant = %tenant, "repack already running elsewhere"),
            Err(e) => {
                self.metrics
                    .repacks
                    .with_label_values(&["unknown", "error"])
                    .inc();
                tracing::error!(tenant = %tenant, error = %e, "repack failed");
            }
        }
        result
    }
}

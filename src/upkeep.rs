//! `Upkeep`: repacks a tenant in the background once its loose objects pass a threshold.
use crate::domain::TenantId;
use crate::metrics::Metrics;
use crate::storage::{RepackReport, Storage, StorageError};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// After a failed repack, a tenant is not repacked again for this long, doubled after each
/// further failure up to [`MAX_RETRY`]. A success starts over.
const FIRST_RETRY: Duration = Duration::from_secs(60);
const MAX_RETRY: Duration = Duration::from_secs(3600);

/// Schedules repacks after writes: at most one per tenant in this process (and, through a
/// file lock in storage, across processes).
#[derive(Clone)]
pub struct Upkeep {
    storage: Storage,
    /// 0 turns background repacks off.
    threshold: usize,
    metrics: Metrics,
    tenants: Arc<Mutex<Tenants>>,
    retry: (Duration, Duration),
}

/// Which tenants are being repacked, and which wait after failed repacks.
#[derive(Default)]
struct Tenants {
    running: HashSet<TenantId>,
    backoff: HashMap<TenantId, Backoff>,
}

struct Backoff {
    failures: u32,
    until: Instant,
}

/// A tenant's turn to be repacked in the background. Dropping it, however the repack ended
/// (a panic too), lets the tenant be repacked again; a failure or a panic backs off first.
struct Turn {
    upkeep: Upkeep,
    tenant: TenantId,
    /// `Some(true)` after a repack that succeeded, `Some(false)` after one that ran elsewhere.
    ended: Option<bool>,
}

impl Turn {
    /// Records how the repack ended (`None`: it failed); the drop acts on it.
    fn end(&mut self, ended: Option<bool>) {
        self.ended = ended;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let (first, max) = self.upkeep.retry;
        let mut t = self
            .upkeep
            .tenants
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        t.running.remove(&self.tenant);
        match self.ended {
            Some(true) => {
                t.backoff.remove(&self.tenant);
            }
            Some(false) => {}
            None => {
                let failures = t.backoff.get(&self.tenant).map_or(0, |b| b.failures) + 1;
                let wait = first.saturating_mul(1 << (failures - 1).min(16)).min(max);
                tracing::warn!(
                    tenant = %self.tenant, failures, retry_in_secs = wait.as_secs(),
                    "background repacks of this tenant paused after a failure"
                );
                t.backoff.insert(
                    self.tenant.clone(),
                    Backoff {
                        failures,
                        until: Instant::now() + wait,
                    },
                );
            }
        }
    }
}

impl Upkeep {
    pub fn new(storage: Storage, threshold: usize, metrics: Metrics) -> Self {
        Self {
            storage,
            threshold,
            metrics,
            tenants: Arc::default(),
            retry: (FIRST_RETRY, MAX_RETRY),
        }
    }

    /// True when `tenant` should be repacked now. Blocking (one small directory listing,
    /// skipped while a repack runs or the tenant backs off after a failure).
    pub fn due(&self, tenant: &TenantId) -> bool {
        if self.threshold == 0 {
            return false;
        }
        {
            let t = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
            if t.running.contains(tenant)
                || t.backoff
                    .get(tenant)
                    .is_some_and(|b| Instant::now() < b.until)
            {
                return false;
            }
        }
        self.storage
            .loose_objects_estimate(tenant)
            .is_ok_and(|n| n >= self.threshold)
    }

    /// Starts a repack of `tenant` on the blocking pool, unless one is running already.
    pub fn spawn(&self, tenant: TenantId) {
        self.spawn_job(tenant, |upkeep, tenant| upkeep.run(tenant, false));
    }

    /// Runs `job` for `tenant` on the blocking pool, unless a job for it is running already.
    fn spawn_job(
        &self,
        tenant: TenantId,
        job: impl FnOnce(&Upkeep, &TenantId) -> Result<Option<RepackReport>, StorageError>
            + Send
            + 'static,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let fresh = self
            .tenants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .running
            .insert(tenant.clone());
        if !fresh {
            return None;
        }
        let mut turn = Turn {
            upkeep: self.clone(),
            tenant,
            ended: None,
        };
        Some(tokio::task::spawn_blocking(move || {
            let result = job(&turn.upkeep, &turn.tenant);
            turn.end(result.map(|report| report.is_some()).ok());
        }))
    }

    /// Repacks `tenant` now (everything into one pack with `full`), logging and counting the
    /// result. Blocking.
    pub fn run(&self, tenant: &TenantId, full: bool) -> Result<Option<RepackReport>, StorageError> {
        let result = self.storage.repack(tenant, full);
        match &result {
            Ok(Some(r)) => {
                self.empty_spares_later(tenant);
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

impl Upkeep {
    /// Once the files a repack retired have rested, their bytes go (an idle tenant's spares
    /// take inodes, not blocks): a timer, then a short job on the blocking pool (no thread
    /// waits the rest out). Only where storage recycles files.
    fn empty_spares_later(&self, tenant: &TenantId) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.storage.recycles_files() {
            return;
        }
        let (storage, tenant) = (self.storage.clone(), tenant.clone());
        runtime.spawn(async move {
            // Named in whole seconds: rested a little after the rest itself.
            tokio::time::sleep(crate::storage::SPARES_REST + Duration::from_secs(2)).await;
            let emptied = tokio::task::spawn_blocking(move || {
                let result = storage.empty_spares(&tenant);
                (tenant, result)
            })
            .await;
            if let Ok((tenant, Err(e))) = emptied {
                tracing::warn!(%tenant, error = %e, "could not empty the spare files");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Identity, PlanFile};
    use crate::storage::{CommitRequest, Durability};

    /// A tenant whose one write left a loose object in `objects/17` (the folder the estimate
    /// samples), and upkeep that finds it due; retries after `first`, doubling up to `max`.
    fn setup(first: Duration, max: Duration) -> (tempfile::TempDir, Upkeep, TenantId) {
        crate::storage::init_git();
        let dir = tempfile::tempdir().unwrap();
        let who = Identity::new("planfiles", "p@localhost", "localhost");
        let storage = Storage::open(
            dir.path(),
            &dir.path().join("cursor.key"),
            who.clone(),
            Durability::Fsync,
        )
        .unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        storage.create_tenant(&tenant, false).unwrap();
        // The blob of "n: 203\n" is 17726d27…
        let req = CommitRequest::of(
            PlanFile::Integration,
            b"n: 203\n".to_vec(),
            Default::default(),
            who,
        );
        storage.commit(&tenant, req).unwrap();
        let mut upkeep = Upkeep::new(storage, 256, Metrics::new());
        upkeep.retry = (first, max);
        assert!(upkeep.due(&tenant), "one object in objects/17 reads as 256");
        (dir, upkeep, tenant)
    }

    fn is_running(upkeep: &Upkeep, tenant: &TenantId) -> bool {
        upkeep.tenants.lock().unwrap().running.contains(tenant)
    }

    /// Polls `due` until it is true; returns how long that took.
    async fn time_until_due(upkeep: &Upkeep, tenant: &TenantId) -> Duration {
        let started = Instant::now();
        while !upkeep.due(tenant) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "never due again"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started.elapsed()
    }

    fn repack(upkeep: &Upkeep, tenant: &TenantId) -> tokio::task::JoinHandle<()> {
        upkeep
            .spawn_job(tenant.clone(), |u, t| u.run(t, false))
            .expect("no repack was running")
    }

    #[tokio::test]
    async fn a_panicking_repack_clears_the_running_mark() {
        let (_dir, upkeep, tenant) = setup(Duration::from_millis(200), Duration::from_secs(1));
        let job = upkeep
            .spawn_job(tenant.clone(), |_, _| panic!("a repack that panics"))
            .unwrap();
        assert!(job.await.unwrap_err().is_panic());
        assert!(!is_running(&upkeep, &tenant), "the panic left the mark");
        // It counts as a failure: the tenant waits, then is repacked again.
        assert!(!upkeep.due(&tenant));
        let waited = time_until_due(&upkeep, &tenant).await;
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        repack(&upkeep, &tenant).await.unwrap();
        assert!(!upkeep.due(&tenant), "the repack packed the loose objects");
    }

    #[tokio::test]
    async fn a_failed_repack_backs_off_doubling_and_a_success_starts_over() {
        let first = Duration::from_millis(300);
        let (dir, upkeep, tenant) = setup(first, Duration::from_secs(5));
        // A regular file where the pack folder should be: listing the packs fails.
        let pack_dir = dir.path().join("tenants/acme.git/objects/pack");
        std::fs::remove_dir_all(&pack_dir).unwrap();
        std::fs::write(&pack_dir, "not a folder").unwrap();
        for failures in 1..=2u32 {
            repack(&upkeep, &tenant).await.unwrap();
            assert!(!is_running(&upkeep, &tenant));
            assert!(!upkeep.due(&tenant), "due right after failure {failures}");
            let wait = first * (1 << (failures - 1));
            let waited = time_until_due(&upkeep, &tenant).await;
            assert!(
                waited >= wait - Duration::from_millis(50) && waited < wait * 3,
                "after failure {failures}: due again after {waited:?}, expected {wait:?}"
            );
        }
        std::fs::remove_file(&pack_dir).unwrap();
        std::fs::create_dir(&pack_dir).unwrap();
        repack(&upkeep, &tenant).await.unwrap();
        assert!(upkeep.tenants.lock().unwrap().backoff.is_empty());
        let errors = upkeep
            .metrics
            .repacks
            .with_label_values(&["unknown", "error"])
            .get();
        assert_eq!(errors, 2);
    }
}

//! `RecentKeys`: per process, the recent first-parent commits of a few tenants and the idempotency key each records, so that a lookup reads only the commits added since the last one.
use crate::domain::{ObjectId, TenantId};
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Tenants remembered at most (the least recently used goes first); one tenant's scan holds
/// at most [`super::IDEMPOTENCY_COMMITS`] entries of about 50 bytes.
const TENANTS: usize = 64;

/// One commit of a scan.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub commit: ObjectId,
    /// The committer time, in seconds since the epoch.
    pub time: i64,
    /// A hash of the idempotency key the commit records, if any.
    pub key: Option<u64>,
}

/// What a lookup learnt: `main` was at `head`, and these were its first-parent commits,
/// newest first.
#[derive(Debug, Clone)]
pub(super) struct Scan {
    pub head: ObjectId,
    pub commits: VecDeque<Seen>,
}

/// The scans by tenant, each with the tick of its last use, and the clock of those ticks.
type Scans = (u64, HashMap<TenantId, (u64, Scan)>);

#[derive(Debug, Default)]
pub(super) struct RecentKeys {
    scans: Mutex<Scans>,
}

/// The hash a key is remembered by (a match is then checked on the commit itself).
pub(super) fn key_hash(key: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl RecentKeys {
    /// Takes the tenant's scan out (a concurrent lookup of that tenant then scans itself).
    pub(super) fn take(&self, tenant: &TenantId) -> Option<Scan> {
        let mut guard = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        guard.1.remove(tenant).map(|(_, scan)| scan)
    }

    /// Keeps the tenant's scan, forgetting the least recently used tenant beyond [`TENANTS`].
    pub(super) fn put(&self, tenant: &TenantId, scan: Scan) {
        let mut guard = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        let tick = guard.0;
        guard.1.insert(tenant.clone(), (tick, scan));
        if guard.1.len() > TENANTS {
            let oldest = guard
                .1
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                guard.1.remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_a_fixed_number_of_tenants_is_remembered() {
        let keys = RecentKeys::default();
        let scan = || Scan {
            head: ObjectId::parse(&"a".repeat(40)).unwrap(),
            commits: VecDeque::new(),
        };
        for i in 0..TENANTS + 10 {
            keys.put(&TenantId::parse(&format!("t{i}")).unwrap(), scan());
        }
        assert_eq!(keys.scans.lock().unwrap().1.len(), TENANTS);
        assert!(
            keys.take(&TenantId::parse("t0").unwrap()).is_none(),
            "the oldest went"
        );
        let last = TenantId::parse(&format!("t{}", TENANTS + 9)).unwrap();
        assert!(keys.take(&last).is_some());
        assert!(keys.take(&last).is_none(), "taken out");
    }
}

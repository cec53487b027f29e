//! `RecentKeys`: per process, the recent first-parent commits of a few tenants' lines (`main`, the no-op records) and the idempotency key each records, so that a lookup reads only the commits added since the last one.
use crate::domain::{ObjectId, TenantId};
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Scans remembered at most (the least recently used goes first), two per tenant; one scan
/// holds at most [`super::IDEMPOTENCY_COMMITS`] entries of about 40 bytes.
const TENANTS: usize = 64;

/// The lines of commits a key is recorded on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(in crate::storage) enum Line {
    /// `main`'s first-parent line: writes that made a commit.
    Main,
    /// The records of writes that changed nothing (their own ref).
    NoOps,
}

/// One commit of a scan.
#[derive(Debug, Clone)]
pub(in crate::storage) struct Seen {
    pub commit: ObjectId,
    /// A hash of the idempotency key the commit records, if any.
    pub key: Option<u64>,
}

/// What a lookup learnt: `main` was at `head`, and these were its first-parent commits,
/// newest first.
#[derive(Debug, Clone)]
pub(in crate::storage) struct Scan {
    pub head: ObjectId,
    pub commits: VecDeque<Seen>,
}

/// The scans by tenant and line, each with the tick of its last use, and the clock of those
/// ticks.
type Scans = (u64, HashMap<(TenantId, Line), (u64, Scan)>);

#[derive(Debug, Default)]
pub(in crate::storage) struct RecentKeys {
    scans: Mutex<Scans>,
}

/// The hash a key is remembered by (a match is then checked on the commit itself).
pub(in crate::storage) fn key_hash(key: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl RecentKeys {
    /// Takes the scan of a tenant's line out (a concurrent lookup of that tenant then scans
    /// itself).
    pub(in crate::storage) fn take(&self, tenant: &TenantId, line: Line) -> Option<Scan> {
        let mut guard = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .1
            .remove(&(tenant.clone(), line))
            .map(|(_, scan)| scan)
    }

    /// Keeps the scan of a tenant's line, forgetting the least recently used beyond twice
    /// [`TENANTS`].
    pub(in crate::storage) fn put(&self, tenant: &TenantId, line: Line, scan: Scan) {
        let mut guard = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        let tick = guard.0;
        guard.1.insert((tenant.clone(), line), (tick, scan));
        if guard.1.len() > 2 * TENANTS {
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
        for i in 0..2 * TENANTS + 10 {
            keys.put(
                &TenantId::parse(&format!("t{i}")).unwrap(),
                Line::Main,
                scan(),
            );
        }
        assert_eq!(keys.scans.lock().unwrap().1.len(), 2 * TENANTS);
        assert!(
            keys.take(&TenantId::parse("t0").unwrap(), Line::Main)
                .is_none(),
            "the oldest went"
        );
        let last = TenantId::parse(&format!("t{}", 2 * TENANTS + 9)).unwrap();
        assert!(keys.take(&last, Line::NoOps).is_none(), "another line");
        assert!(keys.take(&last, Line::Main).is_some());
        assert!(keys.take(&last, Line::Main).is_none(), "taken out");
    }
}

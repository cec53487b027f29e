//! `Gates`: one semaphore per tenant, made on first use and dropped once nobody holds or waits on it.
//!
//! Keys are tenant ids of verified tokens whose repositories exist, so the map holds at most
//! one entry per tenant that has a request in flight: it never grows with what clients send.
use crate::domain::TenantId;
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Cheap to clone; shared by every worker.
#[derive(Debug, Clone)]
pub struct Gates {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    permits: usize,
    map: Mutex<HashMap<TenantId, Entry, RandomState>>,
}

#[derive(Debug)]
struct Entry {
    semaphore: Arc<Semaphore>,
    /// Leases out: requests that hold a permit or wait for one.
    users: usize,
}

/// A request's hold on its tenant's semaphore, whether or not it has permits yet.
#[derive(Debug)]
pub struct Lease {
    inner: Arc<Inner>,
    tenant: TenantId,
    semaphore: Arc<Semaphore>,
    /// Leases of this tenant out when this one was taken, itself included.
    pub users: usize,
}

impl Gates {
    /// Gates whose semaphores hold `permits` each.
    pub fn new(permits: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                permits,
                map: Mutex::default(),
            }),
        }
    }

    /// The permits of each tenant's semaphore.
    pub fn permits(&self) -> usize {
        self.inner.permits
    }

    /// Joins the tenant's gate (making it when it has no users).
    pub fn lease(&self, tenant: &TenantId) -> Lease {
        let mut map = self.inner.map.lock().expect("not poisoned");
        let entry = map.entry(tenant.clone()).or_insert_with(|| Entry {
            semaphore: Arc::new(Semaphore::new(self.inner.permits)),
            users: 0,
        });
        entry.users += 1;
        Lease {
            inner: self.inner.clone(),
            tenant: tenant.clone(),
            semaphore: entry.semaphore.clone(),
            users: entry.users,
        }
    }

    /// Leases of `tenant` out now (holding or waiting).
    pub fn users(&self, tenant: &TenantId) -> usize {
        let map = self.inner.map.lock().expect("not poisoned");
        map.get(tenant).map_or(0, |e| e.users)
    }

    /// How many tenants have a gate now (requests in flight or waiting).
    pub fn tenants(&self) -> usize {
        self.inner.map.lock().expect("not poisoned").len()
    }
}

impl Lease {
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.semaphore
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut map = self.inner.map.lock().expect("not poisoned");
        if let Some(entry) = map.get_mut(&self.tenant) {
            entry.users -= 1;
            if entry.users == 0 {
                map.remove(&self.tenant);
            }
        }
    }
}

/// Turns, or shares of a budget, for a process: a number in all, fewer for one tenant, and a
/// deadline on every wait. A tenant's excess waits on its own gate, behind its own requests,
/// not in the queue every tenant shares. Used for rendering stored files, the request-body
/// budget (weighted by size) and clone slots.
#[derive(Debug, Clone)]
pub struct Turns {
    global: Arc<Semaphore>,
    total: usize,
    tenants: Gates,
    wait: std::time::Duration,
}

/// A turn, given back on drop.
#[derive(Debug)]
pub struct Turn {
    _global: tokio::sync::OwnedSemaphorePermit,
    _tenant: tokio::sync::OwnedSemaphorePermit,
    _lease: Lease,
}

impl Turns {
    /// `global` in all, at most `per_tenant` of them for one tenant (at least 1, at most
    /// `global`), each waited for no longer than `wait`.
    pub fn new(global: usize, per_tenant: usize, wait: std::time::Duration) -> Self {
        let total = global.max(1);
        Self {
            global: Arc::new(Semaphore::new(total)),
            total,
            tenants: Gates::new(per_tenant.clamp(1, total)),
            wait,
        }
    }

    /// One turn of the tenant's, or `None` when it did not come within the wait.
    pub async fn take(&self, tenant: &TenantId) -> Option<Turn> {
        self.take_many(tenant, 1).await
    }

    /// `n` turns at once (capped at what one tenant may hold), or `None` when they did not
    /// come within the wait.
    pub async fn take_many(&self, tenant: &TenantId, n: usize) -> Option<Turn> {
        let n = u32::try_from(n.clamp(1, self.per_tenant())).unwrap_or(u32::MAX);
        let deadline = tokio::time::Instant::now() + self.wait;
        let lease = self.tenants.lease(tenant);
        let tenant_turn =
            tokio::time::timeout_at(deadline, lease.semaphore().clone().acquire_many_owned(n))
                .await
                .ok()?
                .ok()?;
        let global = tokio::time::timeout_at(deadline, self.global.clone().acquire_many_owned(n))
            .await
            .ok()?
            .ok()?;
        Some(Turn {
            _global: global,
            _tenant: tenant_turn,
            _lease: lease,
        })
    }

    /// Turns in all, and what one tenant may hold.
    pub fn total(&self) -> usize {
        self.total
    }

    pub fn per_tenant(&self) -> usize {
        self.tenants.permits()
    }

    pub fn wait(&self) -> std::time::Duration {
        self.wait
    }

    /// How many tenants hold or wait for a turn.
    pub fn tenants(&self) -> usize {
        self.tenants.tenants()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_gate_lives_while_it_has_users_and_tenants_do_not_share_one() {
        let gates = Gates::new(1);
        let (a, b) = (TenantId::parse("a").unwrap(), TenantId::parse("b").unwrap());
        let first = gates.lease(&a);
        let held = first.semaphore().clone().acquire_owned().await.unwrap();
        let second = gates.lease(&a);
        assert_eq!(second.users, 2);
        assert_eq!(second.semaphore().available_permits(), 0, "same gate");
        let other = gates.lease(&b);
        assert_eq!(other.semaphore().available_permits(), 1, "b has its own");
        assert_eq!(gates.tenants(), 2);
        drop((held, first, second, other));
        assert_eq!(gates.tenants(), 0, "gates without users are dropped");
        assert_eq!(gates.lease(&a).users, 1);
    }

    #[tokio::test]
    async fn one_tenant_takes_at_most_its_turns_and_waits_end() {
        let turns = Turns::new(4, 2, std::time::Duration::from_millis(50));
        let (hot, other) = (
            TenantId::parse("hot").unwrap(),
            TenantId::parse("o").unwrap(),
        );
        let a = turns.take(&hot).await.unwrap();
        let b = turns.take(&hot).await.unwrap();
        assert!(
            turns.take(&hot).await.is_none(),
            "a third turn of one tenant"
        );
        let c = turns.take(&other).await.unwrap();
        drop((a, b, c));
        assert!(turns.take(&hot).await.is_some());
    }
}

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
}

//! Turns to run `git upload-pack`: a fixed number for the process, at most half of them for one
//! tenant, and a deadline on every wait.
use crate::domain::TenantId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many `git upload-pack` processes may run at once, and how long a client may wait for
/// one or keep one without reading.
#[derive(Debug)]
pub struct CloneTurns {
    all: Arc<Semaphore>,
    /// Turns one tenant may hold at once: half of them, at least one.
    per_tenant: usize,
    /// Tenants with a turn or waiting for one; an entry goes when its last user does. Only
    /// tenants that exist get here (the caller checks first).
    tenants: Mutex<HashMap<TenantId, TenantTurns>>,
    /// A turn ends when the client accepts no bytes for this long.
    pub stall: Duration,
    /// The longest wait for a turn.
    pub queue_timeout: Duration,
}

#[derive(Debug)]
struct TenantTurns {
    turns: Arc<Semaphore>,
    /// Holders and waiters.
    users: usize,
}

/// No turn came within the queue timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoTurn {
    pub waited: Duration,
}

/// One running `git upload-pack`; the turn is given back on drop.
#[derive(Debug)]
pub struct Turn {
    _all: OwnedSemaphorePermit,
    _mine: OwnedSemaphorePermit,
    _user: User,
}

/// One tenant's claim on its entry in the map, held while waiting and while running.
#[derive(Debug)]
struct User {
    turns: Arc<CloneTurns>,
    tenant: TenantId,
}

impl CloneTurns {
    pub fn new(turns: usize, stall: Duration, queue_timeout: Duration) -> Self {
        let turns = turns.max(1);
        Self {
            all: Arc::new(Semaphore::new(turns)),
            per_tenant: (turns / 2).max(1),
            tenants: Mutex::default(),
            stall,
            queue_timeout,
        }
    }

    /// Waits for a turn of the tenant's own (at most half of all) and then one of all, both
    /// within one queue timeout.
    pub async fn acquire(self: &Arc<Self>, tenant: &TenantId) -> Result<Turn, NoTurn> {
        let (mine, user) = {
            let mut tenants = self.tenants.lock().expect("clone turns lock");
            let entry = tenants
                .entry(tenant.clone())
                .or_insert_with(|| TenantTurns {
                    turns: Arc::new(Semaphore::new(self.per_tenant)),
                    users: 0,
                });
            entry.users += 1;
            let user = User {
                turns: self.clone(),
                tenant: tenant.clone(),
            };
            (entry.turns.clone(), user)
        };
        let deadline = tokio::time::Instant::now() + self.queue_timeout;
        let no_turn = |_| NoTurn {
            waited: self.queue_timeout,
        };
        let mine = tokio::time::timeout_at(deadline, mine.acquire_owned())
            .await
            .map_err(no_turn)?
            .expect("the semaphore is never closed");
        let all = tokio::time::timeout_at(deadline, self.all.clone().acquire_owned())
            .await
            .map_err(no_turn)?
            .expect("the semaphore is never closed");
        Ok(Turn {
            _all: all,
            _mine: mine,
            _user: user,
        })
    }

    /// How many tenants hold or wait for a turn.
    #[cfg(test)]
    fn tenants_in_map(&self) -> usize {
        self.tenants.lock().unwrap().len()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let mut tenants = self.turns.tenants.lock().expect("clone turns lock");
        if let Some(entry) = tenants.get_mut(&self.tenant) {
            entry.users -= 1;
            if entry.users == 0 {
                tenants.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).unwrap()
    }

    fn turns(n: usize) -> Arc<CloneTurns> {
        Arc::new(CloneTurns::new(
            n,
            Duration::from_secs(30),
            Duration::from_millis(200),
        ))
    }

    #[tokio::test]
    async fn one_tenant_gets_half_the_turns_and_the_others_the_rest() {
        let turns = turns(8);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(turns.acquire(&tenant("acme")).await.unwrap());
        }
        let started = tokio::time::Instant::now();
        assert_eq!(
            turns.acquire(&tenant("acme")).await.unwrap_err(),
            NoTurn {
                waited: Duration::from_millis(200)
            }
        );
        assert!(started.elapsed() >= Duration::from_millis(200));
        for t in ["globex", "globex", "initech", "initech"] {
            held.push(turns.acquire(&tenant(t)).await.unwrap());
        }
        // All eight are taken: anyone waits, then gives up.
        assert!(turns.acquire(&tenant("umbrella")).await.is_err());
        held.truncate(3);
        assert!(turns.acquire(&tenant("umbrella")).await.is_ok());
    }

    #[tokio::test]
    async fn entries_go_when_their_last_holder_or_waiter_does() {
        let turns = turns(2);
        let a = turns.acquire(&tenant("acme")).await.unwrap();
        assert_eq!(turns.tenants_in_map(), 1);
        // A waiter that times out leaves the count as it was.
        assert!(turns.acquire(&tenant("acme")).await.is_err());
        assert_eq!(turns.tenants_in_map(), 1);
        let b = turns.acquire(&tenant("globex")).await.unwrap();
        assert_eq!(turns.tenants_in_map(), 2);
        drop(a);
        assert_eq!(turns.tenants_in_map(), 1);
        drop(b);
        assert_eq!(turns.tenants_in_map(), 0);
    }
}

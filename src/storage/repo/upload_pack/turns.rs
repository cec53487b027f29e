//! Turns to run `git upload-pack`: a fixed number for the process, at most half of them for one
//! tenant, and a deadline on every wait.
use crate::domain::TenantId;
use crate::gates::Turns;
use std::sync::Arc;
use std::time::Duration;

/// How many `git upload-pack` processes may run at once, and how long a client may wait for
/// one or keep one without reading.
#[derive(Debug)]
pub struct CloneTurns {
    /// All the turns, at most half of them (at least one) for one tenant.
    turns: Turns,
    /// A turn ends when the client accepts no bytes for this long.
    pub stall: Duration,
    /// The longest wait for a turn.
    pub queue_timeout: Duration,
}

/// No turn came within the queue timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoTurn {
    pub waited: Duration,
}

/// One running `git upload-pack`; the turn is given back on drop.
pub type Turn = crate::gates::Turn;

impl CloneTurns {
    pub fn new(turns: usize, stall: Duration, queue_timeout: Duration) -> Self {
        let turns = turns.max(1);
        Self {
            turns: Turns::new(turns, turns / 2, queue_timeout),
            stall,
            queue_timeout,
        }
    }

    /// Waits for a turn of the tenant's own (at most half of all) and then one of all, both
    /// within one queue timeout.
    pub async fn acquire(self: &Arc<Self>, tenant: &TenantId) -> Result<Turn, NoTurn> {
        self.turns.take(tenant).await.ok_or(NoTurn {
            waited: self.queue_timeout,
        })
    }

    /// How many tenants hold or wait for a turn.
    #[cfg(test)]
    fn tenants_in_map(&self) -> usize {
        self.turns.tenants()
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

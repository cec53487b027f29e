//! `BodyBudget`: how many bytes of request bodies are read and processed at once, in all and per tenant.
//!
//! Bodies take a share by their declared size, so many small writes run side by side while a
//! few large ones wait their turn, and memory stays bounded either way. One tenant gets at most
//! its share of the budget (a connection sends one body at a time, and a body is at most
//! `body_limit`), so one tenant's slow or large bodies cannot take the whole budget, and a
//! request waits for its turn no longer than the queue timeout.
use super::problem::ApiError;
use crate::domain::TenantId;
use crate::gates::{Turn, Turns};
use std::time::Duration;

/// Cheap to clone; shared by every worker. Counts KiB.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    kib: Turns,
}

/// A body's turn: its share of the tenant's and of the whole budget, returned on drop.
pub type BodyTurn = Turn;

impl BodyBudget {
    /// A budget of `bytes` (at least 1 KiB), of which one tenant gets at most `per_tenant`;
    /// a body waits at most `wait` for its share.
    pub fn new(bytes: usize, per_tenant: usize, wait: Duration) -> Self {
        Self {
            kib: Turns::new((bytes / 1024).max(1), per_tenant / 1024, wait),
        }
    }

    /// Waits until a body of `declared` bytes (its Content-Length; `limit` when it has none)
    /// fits in the tenant's share and in the budget. 503 `busy` when it does not within the
    /// wait.
    pub async fn admit(
        &self,
        tenant: &TenantId,
        declared: Option<usize>,
        limit: usize,
    ) -> Result<BodyTurn, ApiError> {
        let kib = declared.unwrap_or(limit).min(limit) / 1024 + 1;
        self.kib.take_many(tenant, kib).await.ok_or_else(|| {
            ApiError::busy(
                "too many request bodies are being received for this tenant or in all",
                self.kib.wait().as_secs().clamp(1, 5),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::BodyBudget;
    use crate::domain::TenantId;
    use std::time::Duration;

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).unwrap()
    }

    #[tokio::test]
    async fn small_bodies_share_the_budget_and_large_ones_wait() {
        let budget = BodyBudget::new(64 * 1024, 64 * 1024, Duration::from_millis(50));
        let a = tenant("a");
        let small: Vec<_> =
            futures_util::future::join_all((0..30).map(|_| budget.admit(&a, Some(500), 1 << 20)))
                .await;
        assert!(
            small.iter().all(Result::is_ok),
            "30 small bodies fit at once"
        );
        let waited = budget.admit(&a, None, 1 << 20).await;
        assert!(
            waited.is_err(),
            "a body as large as the limit waits while the budget is in use, then is refused"
        );
        drop(small);
        let large = budget.admit(&a, Some(10 << 20), 1 << 20).await;
        assert!(large.is_ok());
    }

    #[tokio::test]
    async fn one_tenant_gets_its_share_and_no_more() {
        let budget = BodyBudget::new(16 << 20, 4 << 20, Duration::from_millis(50));
        let (hot, other) = (tenant("hot"), tenant("other"));
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(budget.admit(&hot, Some(1 << 20), 1 << 20).await.unwrap());
        }
        assert!(
            budget.admit(&hot, Some(1 << 20), 1 << 20).await.is_err(),
            "a fourth megabyte body of one tenant is past its 4 MiB share"
        );
        for _ in 0..3 {
            held.push(budget.admit(&other, Some(1 << 20), 1 << 20).await.unwrap());
        }
    }
}

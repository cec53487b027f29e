//! `BodyBudget`: how many bytes of request bodies are read and processed at once. Bodies take
//! a share by their declared size, so many small writes run side by side while a few large
//! ones wait their turn, and memory stays bounded either way.
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Cheap to clone; shared by every worker.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    kib: Arc<Semaphore>,
    total_kib: u32,
}

impl BodyBudget {
    /// A budget of `bytes` (at least 1 KiB).
    pub fn new(bytes: usize) -> Self {
        let total_kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).max(1);
        Self {
            kib: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    /// Waits until a body of `declared` bytes (its Content-Length; `limit` when it has none)
    /// fits in the budget. Its share is returned when the permit is dropped.
    pub async fn admit(&self, declared: Option<usize>, limit: usize) -> OwnedSemaphorePermit {
        let bytes = declared.unwrap_or(limit).min(limit);
        let kib = u32::try_from(bytes / 1024 + 1)
            .unwrap_or(u32::MAX)
            .min(self.total_kib);
        self.kib
            .clone()
            .acquire_many_owned(kib)
            .await
            .expect("the semaphore is never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::BodyBudget;

    #[tokio::test]
    async fn small_bodies_share_the_budget_and_large_ones_wait() {
        let budget = BodyBudget::new(64 * 1024);
        let small: Vec<_> =
            futures_util::future::join_all((0..30).map(|_| budget.admit(Some(500), 1 << 20))).await;
        assert_eq!(small.len(), 30, "30 small bodies fit in 64 KiB at once");
        let large = budget.admit(None, 1 << 20);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), large).await;
        assert!(
            waited.is_err(),
            "a body as large as the limit waits while the budget is in use"
        );
        drop(small);
        let large = budget.admit(Some(10 << 20), 1 << 20).await;
        drop(large);
    }
}

//! Name lookups of webhook destinations: two pools (subscriptions being made, deliveries' connections), a tenant's share of the deliveries' pool (set around each of its attempts), and each turn held until the system resolver's thread is free again, not just until we stop waiting for it.
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The longest wait for a turn: well inside an attempt's connection time (5 s by default),
/// so that a delivery that got none is told `busy`, not `timeout`.
const TURN_WAIT: Duration = Duration::from_secs(2);
/// The longest wait for an answer.
const WAIT: Duration = Duration::from_secs(5);
/// Lookups at once for subscriptions being made (requests and the CLI) and for deliveries.
/// Each holds a blocking thread until the system resolver answers, which a dead name server
/// stretches well past [`WAIT`].
static CREATION: Semaphore = Semaphore::const_new(2);
static DELIVERY: Semaphore = Semaphore::const_new(8);
/// Of the deliveries' lookups, the most one tenant's attempts hold.
pub(super) const PER_TENANT: usize = 2;

tokio::task_local! {
    /// The lookup turns of the tenant whose attempt runs.
    static TENANT: Arc<Semaphore>;
}

/// Who a lookup is for.
#[derive(Debug, Clone, Copy)]
pub enum LookupFor {
    Creation,
    Delivery,
}

/// A lookup that gave no addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("{0}")]
    Failed(String),
    /// No turn within 5 s: others' lookups hold them (not the destination's fault).
    #[error("name lookups are busy")]
    Busy,
}

/// Runs `attempt` with its tenant's share of the deliveries' lookups: a connection it opens
/// resolves its name within that share.
pub(super) async fn within_share<F: Future>(share: Arc<Semaphore>, attempt: F) -> F::Output {
    TENANT.scope(share, attempt).await
}

/// The share of the attempt under way on this task, if any (read when a connection starts,
/// which may finish on another task).
pub(super) fn current_share() -> Option<Arc<Semaphore>> {
    TENANT.try_with(Arc::clone).ok()
}

/// The addresses of `host`, with the system resolver.
pub(super) async fn lookup(
    host: &str,
    port: u16,
    who: LookupFor,
    share: Option<Arc<Semaphore>>,
) -> Result<Vec<SocketAddr>, LookupError> {
    let pool = match who {
        LookupFor::Creation => &CREATION,
        LookupFor::Delivery => &DELIVERY,
    };
    resolve_with(host, port, pool, share, (TURN_WAIT, WAIT), system).await
}

fn system(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

async fn resolve_with(
    host: &str,
    port: u16,
    pool: &'static Semaphore,
    share: Option<Arc<Semaphore>>,
    (turn_wait, wait): (Duration, Duration),
    resolve: fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>,
) -> Result<Vec<SocketAddr>, LookupError> {
    // The tenant's turn first: a tenant whose names hang waits in its own share.
    let turns = tokio::time::timeout(turn_wait, async {
        let mine = match share {
            Some(share) => Some(share.acquire_owned().await.ok()?),
            None => None,
        };
        Some((mine, pool.acquire().await.ok()?))
    })
    .await
    .ok()
    .flatten()
    .ok_or(LookupError::Busy)?;
    let name = host.to_owned();
    let job = tokio::task::spawn_blocking(move || {
        let _held = turns;
        resolve(&name, port)
    });
    match tokio::time::timeout(wait, job).await {
        Ok(Ok(Ok(found))) => Ok(found),
        Ok(Ok(Err(e))) => Err(LookupError::Failed(format!("{host} does not resolve: {e}"))),
        Ok(Err(_)) => Err(LookupError::Failed(format!("{host}: the lookup failed"))),
        Err(_) => Err(LookupError::Failed(format!(
            "{host} did not resolve within {} s",
            wait.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Names starting with `hang` take three seconds to answer; the others answer at once.
    fn slow(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        if host.starts_with("hang") {
            std::thread::sleep(HANG);
        }
        Ok(vec![SocketAddr::from(([192, 0, 2, 1], port))])
    }

    fn pool(n: usize) -> &'static Semaphore {
        Box::leak(Box::new(Semaphore::new(n)))
    }

    const SHORT: Duration = Duration::from_millis(300);
    const HANG: Duration = Duration::from_secs(3);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_lookup_keeps_its_turn_until_its_thread_is_free() {
        let pool = pool(1);
        let start = Instant::now();
        let hung = resolve_with("hang.example", 443, pool, None, (SHORT, SHORT), slow).await;
        assert!(matches!(hung, Err(LookupError::Failed(ref m)) if m.contains("within")));
        // We stopped waiting; the resolver's thread did not: its turn is still held.
        let next = resolve_with("ok.example", 443, pool, None, (SHORT, SHORT), slow).await;
        assert_eq!(next, Err(LookupError::Busy));
        tokio::time::sleep((HANG + SHORT).saturating_sub(start.elapsed())).await;
        let after = resolve_with("ok.example", 443, pool, None, (SHORT, SHORT), slow).await;
        assert_eq!(after.unwrap().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenant_whose_names_hang_holds_its_share_and_no_more() {
        let pool = pool(3);
        let (a, b) = (Arc::new(Semaphore::new(2)), Arc::new(Semaphore::new(2)));
        let hung: Vec<_> = (0..3)
            .map(|i| {
                let a = a.clone();
                tokio::spawn(async move {
                    resolve_with(
                        &format!("hang{i}.a.example"),
                        443,
                        pool,
                        Some(a),
                        (SHORT, SHORT),
                        slow,
                    )
                    .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Tenant a's third lookup waits in a's share; b's is not kept waiting (a turn not had
        // within SHORT would be Busy).
        let other = resolve_with("ok.b.example", 443, pool, Some(b), (SHORT, SHORT), slow).await;
        assert!(other.is_ok(), "{other:?}");
        let mut outcomes = Vec::new();
        for h in hung {
            outcomes.push(h.await.unwrap());
        }
        assert_eq!(
            outcomes
                .iter()
                .filter(|o| **o == Err(LookupError::Busy))
                .count(),
            1,
            "a's third lookup waited in a's share: {outcomes:?}"
        );
    }

    /// What the client's resolver saw of the attempt's share when it was asked for a name.
    struct Probe(Arc<std::sync::Mutex<Option<bool>>>);

    impl reqwest::dns::Resolve for Probe {
        fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
            *self.0.lock().unwrap() = Some(current_share().is_some());
            Box::pin(async { Err("probed".into()) })
        }
    }

    #[tokio::test]
    async fn the_client_resolves_a_name_within_the_attempts_share() {
        let seen = Arc::new(std::sync::Mutex::new(None));
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(Probe(seen.clone())))
            .build()
            .unwrap();
        let share = Arc::new(Semaphore::new(PER_TENANT));
        let sent = within_share(share, client.get("http://probe.example/").send()).await;
        assert!(sent.is_err());
        assert_eq!(*seen.lock().unwrap(), Some(true));
        let _ = client.get("http://probe2.example/").send().await;
        assert_eq!(
            *seen.lock().unwrap(),
            Some(false),
            "no share outside an attempt"
        );
    }
}

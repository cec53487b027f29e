//! The dispatcher's CPU budget (`webhooks.cpu_share` of one core): its threads' CPU time read from their own clocks, and a first-come turn an attempt takes before its others, waiting while the budget is spent, so that subscriptions catching up never take the cores that reads and writes need.
use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Unspent CPU time a quiet spell leaves for a burst after it.
const BURST: Duration = Duration::from_millis(50);
/// The longest one turn sleeps once it is its turn (waiters before it come first): work that
/// overran the budget by more (a long plan, a start's catch-up) is not owed beyond it, and
/// whatever is spent while it sleeps does not keep it longer, so a waiter never holds what it
/// holds for longer than this after its turn came.
const MAX_WAIT: Duration = Duration::from_secs(1);

pub(super) struct CpuBudget {
    /// Of one core; `None`: no limit.
    share: Option<f64>,
    clocks: Mutex<Clocks>,
    /// The balance, behind a fair (first come, first served) lock: a waiter holds it while it
    /// waits, so turns go in the order they were asked for.
    balance: tokio::sync::Mutex<Balance>,
}

/// The CPU clock of each live thread of the dispatcher, and what the ended ones used.
#[derive(Default)]
struct Clocks {
    live: HashMap<ThreadId, libc::clockid_t>,
    ended: Duration,
}

struct Balance {
    at: Instant,
    used: Duration,
    /// Seconds of CPU that may be spent now (negative: owed).
    credit: f64,
}

impl CpuBudget {
    /// `share` of one core (0: no limit).
    pub(super) fn new(share: f64) -> Self {
        Self {
            share: (share > 0.0).then_some(share),
            clocks: Mutex::default(),
            balance: tokio::sync::Mutex::new(Balance {
                at: Instant::now(),
                used: Duration::ZERO,
                credit: 0.0,
            }),
        }
    }

    /// Counts the calling thread (a runtime's `on_thread_start`).
    pub(super) fn enter(&self) {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: `pthread_self` is the live calling thread; `clock` outlives the call.
        if unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } == 0 {
            let mut clocks = self.clocks.lock().expect("not poisoned");
            clocks.live.insert(std::thread::current().id(), clock);
        }
    }

    /// The calling thread ends (a runtime's `on_thread_stop`): what it used is kept.
    pub(super) fn leave(&self) {
        let mut clocks = self.clocks.lock().expect("not poisoned");
        if clocks.live.remove(&std::thread::current().id()).is_some() {
            clocks.ended += cpu_time(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or_default();
        }
    }

    /// CPU time the dispatcher's threads have used.
    pub(super) fn used(&self) -> Duration {
        let clocks = self.clocks.lock().expect("not poisoned");
        clocks.ended
            + clocks
                .live
                .values()
                .filter_map(|c| cpu_time(*c))
                .sum::<Duration>()
    }

    /// Waits until the budget allows more work, in turn with the other waiters; returns how
    /// long it waited.
    pub(super) async fn turn(&self) -> Duration {
        self.timed_turn().await.0
    }

    /// [`CpuBudget::turn`], and how long it took once its turn came (the lock taken).
    async fn timed_turn(&self) -> (Duration, Duration) {
        let Some(share) = self.share else {
            return (Duration::ZERO, Duration::ZERO);
        };
        let asked = Instant::now();
        let mut balance = self.balance.lock().await;
        let its_turn = Instant::now();
        let deadline = its_turn + MAX_WAIT;
        loop {
            let (now, used) = (Instant::now(), self.used());
            let earned = share * now.duration_since(balance.at).as_secs_f64();
            let spent = used.saturating_sub(balance.used).as_secs_f64();
            balance.credit = (balance.credit + earned - spent)
                .clamp(-share * MAX_WAIT.as_secs_f64(), BURST.as_secs_f64());
            (balance.at, balance.used) = (now, used);
            // Bounded by a deadline, not by the balance alone: the waiter's own wake-ups and
            // the dispatcher's other threads spend while it sleeps, and at a small share that
            // can outrun what a sleep earns back (a loaded CI machine saw 186 s).
            let owed = Duration::from_secs_f64(-balance.credit.min(0.0) / share)
                .min(deadline.saturating_duration_since(now));
            if owed.is_zero() {
                return (asked.elapsed(), its_turn.elapsed());
            }
            tokio::time::sleep(owed).await;
        }
    }
}

fn cpu_time(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` outlives the call; an ended thread's clock fails and is skipped.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spends `d` of this thread's CPU (not of wall time: a loaded machine takes longer).
    fn spin(d: Duration) {
        let now = || cpu_time(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
        let start = now();
        while now() - start < d {
            std::hint::black_box(0u64.wrapping_add(1));
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn work_over_the_budget_waits_until_the_share_is_earned_back() {
        let budget = std::sync::Arc::new(CpuBudget::new(0.25));
        budget.enter();
        let start = Instant::now();
        // 400 ms of CPU in 20 ms pieces, each after a turn: at a quarter of a core that is
        // about 1.6 s of wall time, less the burst.
        for _ in 0..20 {
            budget.turn().await;
            spin(Duration::from_millis(20));
        }
        let took = start.elapsed();
        let used = budget.used();
        assert!(used >= Duration::from_millis(380), "{used:?}");
        assert!(
            took >= Duration::from_millis(1300),
            "400 ms of CPU at 0.25 of a core in {took:?}"
        );
        budget.leave();
        assert!(budget.used() >= used, "an ended thread's time is kept");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_turn_waits_a_second_at_most_whatever_was_overspent() {
        let budget = CpuBudget::new(0.01);
        budget.enter();
        spin(Duration::from_millis(200));
        // Owed in full, 200 ms of CPU at 0.01 of a core would be 20 s: the debt is cut to a
        // second's worth. The margin is for a loaded machine's timers (the last sleep's end).
        let (_, took) = budget.timed_turn().await;
        assert!(took < MAX_WAIT + Duration::from_secs(3), "{took:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_turn_waits_a_second_at_most_while_other_threads_go_on_spending() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let budget = std::sync::Arc::new(CpuBudget::new(0.01));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        // Another of the dispatcher's threads, busy with the attempt it already has: at 0.01 of
        // a core, every sleep of the waiter is owed again a hundred times over.
        let spinner = std::thread::spawn({
            let (budget, stop) = (budget.clone(), stop.clone());
            move || {
                budget.enter();
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(10) {
                    spin(Duration::from_millis(5));
                }
                budget.leave();
            }
        });
        budget.enter();
        spin(Duration::from_millis(20));
        let (_, took) = budget.timed_turn().await;
        stop.store(true, Ordering::Relaxed);
        spinner.join().expect("the spinner ends");
        // Without the deadline, as long as the spinner spins (10 s).
        assert!(took < MAX_WAIT + Duration::from_secs(3), "{took:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn no_share_means_no_wait() {
        let budget = CpuBudget::new(0.0);
        budget.enter();
        spin(Duration::from_millis(100));
        assert_eq!(budget.turn().await, Duration::ZERO);
    }
}

//! Honest figures from interleaved rounds: each ratio per round, reported as its median and range, the floor's own spread between rounds ("unsettled" past 30%), and a wait for the volume's dirty pages before the writes start.
use std::time::{Duration, Instant};

/// A floor whose rounds differ by more than this (max / min - 1) makes its run "unsettled".
const UNSETTLED: f64 = 0.30;

/// One value per round.
#[derive(Debug, Default, Clone)]
pub struct Rounds(Vec<f64>);

impl Rounds {
    pub fn push(&mut self, v: f64) {
        self.0.push(v);
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    pub fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    pub fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }

    pub fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }

    /// How far apart the rounds are: max / min - 1.
    pub fn spread(&self) -> f64 {
        self.max() / self.min() - 1.0
    }

    /// "0.62x (0.55-0.70x over 5 rounds)", with `unit` after each figure.
    pub fn describe(&self, precision: usize, unit: &str) -> String {
        format!(
            "{:.p$}{unit} ({:.p$}-{:.p$}{unit} over {} rounds)",
            self.median(),
            self.min(),
            self.max(),
            self.0.len(),
            p = precision
        )
    }

    /// A ratio as a change: "+1.4% (rounds -6.4% to +15.4%)".
    pub fn change(&self) -> String {
        let pct = |r: f64| (r - 1.0) * 100.0;
        format!(
            "{:+.1}% (rounds {:+.1}% to {:+.1}%)",
            pct(self.median()),
            pct(self.min()),
            pct(self.max())
        )
    }

    /// The floor's spread, and "unsettled" when it is past 30%.
    pub fn floor_note(&self) -> String {
        let spread = self.spread() * 100.0;
        if self.spread() > UNSETTLED {
            format!("floor spread {spread:.0}% between rounds: UNSETTLED (the volume was busy; run again)")
        } else {
            format!("floor spread {spread:.0}% between rounds: settled")
        }
    }
}

/// The kernel's dirty and writeback pages, in KiB (`/proc/meminfo`).
fn dirty_kib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some(field("Dirty:")? + field("Writeback:")?)
}

/// Waits (at most `limit`) until the page cache holds less than 4 MiB of dirty and writeback
/// pages, so that what was written before the bench (a build, the rounds before) is not
/// written back during its rounds. Says how long it waited.
pub fn settle(limit: Duration) {
    let started = Instant::now();
    let first = dirty_kib();
    loop {
        match dirty_kib() {
            Some(kib) if kib < 4096 => break,
            None => {
                println!("volume: cannot read /proc/meminfo; not waiting for it to settle");
                return;
            }
            Some(kib) if started.elapsed() >= limit => {
                println!(
                    "volume: still {kib} KiB dirty after {limit:?}; going on (figures may be unsettled)"
                );
                return;
            }
            Some(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    println!(
        "volume: settled ({} KiB dirty at first, waited {:.1} s)",
        first.unwrap_or(0),
        started.elapsed().as_secs_f64()
    );
}

/// Rounds of two contenders (index 0 the baseline, 1 the one measured against it), each
/// round the other one first, so that neither always runs on a warmer or busier volume:
/// each one's runs, the commits `measure` counted for it, and contender / baseline p50 per
/// round.
pub fn alternate(
    rounds: usize,
    mut measure: impl FnMut(usize) -> (crate::load::Run, usize),
) -> ([crate::load::Run; 2], [usize; 2], Rounds) {
    use crate::load::Run;
    let (mut runs, mut counted) = ([Run::empty(), Run::empty()], [0; 2]);
    let mut ratios = Rounds::default();
    for r in 0..rounds {
        let mut p50 = [0.0; 2];
        for i in if r % 2 == 0 { [1, 0] } else { [0, 1] } {
            let (run, n) = measure(i);
            p50[i] = run.ms(0.5);
            runs[i].add(&run);
            counted[i] += n;
        }
        ratios.push(p50[1] / p50[0]);
    }
    (runs, counted, ratios)
}

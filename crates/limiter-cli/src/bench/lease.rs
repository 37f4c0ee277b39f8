//! `limiter bench --lease`: the limiter behind leases (limiter-lease), and
//! what the run shows of them: the lease size reached, the share of the
//! admitted taken from leases and the over-admission budget in force, with
//! a warning when the leases did not take off; and of the lease bound: the
//! most units one key admitted in one aligned window of the first policy,
//! beside the most the exact algorithm admits in a window and
//! docs/spec.md section 8's bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use limiter_core::{Algorithm, Limiter, Policy};
use limiter_lease::{LeaseStats, Leased};

/// The leases asked for: the options given, the rest limiter-lease's.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseOptions {
    pub(super) lifetime: Option<Duration>,
    pub(super) max_lease: Option<u64>,
    pub(super) min_lease: Option<u64>,
    /// The over-admission budget, in percent of the limit.
    pub(super) budget: Option<f64>,
}

/// The limiter `--lease` decides through.
pub(super) type BenchLeased = Leased<Arc<dyn Limiter>>;

/// What a leased run reports besides its decisions.
#[derive(Debug, Clone)]
pub(super) struct LeaseFacts {
    pub(super) lifetime: Duration,
    pub(super) max_lease: u64,
    pub(super) min_lease: u64,
    /// The over-admission budget in force, in percent of the limit.
    pub(super) budget_percent: f64,
    /// What the leased limiter sent to the backend in the run.
    pub(super) stats: LeaseStats,
    /// The most units one key admitted in one aligned window.
    pub(super) most_in_window: u64,
    /// The most the exact algorithm admits in a window of its length.
    pub(super) exact_most: u64,
    /// What leases may add to that (one instance: its largest lease; none
    /// in a fixed window, whose leases end with it).
    pub(super) bound: u64,
    /// `FCALL`s Redis ran in the run (one server only).
    pub(super) redis_calls: Option<u64>,
}

impl LeaseFacts {
    /// The units admitted beyond what the exact algorithm admits at most.
    pub(super) fn over_admission(&self) -> u64 {
        self.most_in_window.saturating_sub(self.exact_most)
    }
}

/// `inner` behind leases, with the options given.
pub(super) fn leased(inner: Arc<dyn Limiter>, options: LeaseOptions) -> Arc<BenchLeased> {
    let mut builder = Leased::builder(inner);
    if let Some(lifetime) = options.lifetime {
        builder = builder.lifetime(lifetime);
    }
    if let Some(percent) = options.budget {
        builder = builder.over_admission_budget(percent);
    }
    if let Some(units) = options.max_lease {
        builder = builder.max_lease(units);
    }
    if let Some(units) = options.min_lease {
        builder = builder.min_lease(units);
    }
    Arc::new(builder.build())
}

/// Decisions per call to the global limiter (lease requests and requests
/// at their own cost): how far leases spare it.
pub(super) fn decisions_per_call(decisions: u64, stats: &LeaseStats) -> f64 {
    decisions as f64 / stats.leases.saturating_add(stats.exact).max(1) as f64
}

/// The warning for a run whose leases did not take off: fewer than two
/// of its `decisions` per call to the global limiter, with the reason and
/// the option that would change it. Denials at the keys' limit are the
/// global limiter's by design; leases at their maximum (`max_lease`) want
/// a larger budget; smaller ones, keys their callers reach too rarely at
/// the exact path's speed to size a lease above the minimum lease, whose
/// default is one unit where the maximum lease's share of a lifetime is
/// below two (docs/spec.md section 8.5), want a larger minimum lease or
/// a longer lifetime.
pub(super) fn take_off_warning(
    decisions: u64,
    denied: u64,
    stats: &LeaseStats,
    max_lease: u64,
) -> Option<String> {
    let calls = stats.leases.saturating_add(stats.exact);
    if decisions == 0 || calls.saturating_mul(2) <= decisions {
        return None;
    }
    let head = format!(
        "leases did not take off: {:.1} decisions per call to the global limiter",
        decisions_per_call(decisions, stats)
    );
    let mean = stats.mean_lease().unwrap_or(0);
    Some(if denied.saturating_mul(2) > decisions {
        format!(
            "{head}; most were denials at the keys' limit, which the global limiter \
             decides (docs/spec.md section 8.1)"
        )
    } else if mean.saturating_mul(2) >= max_lease {
        format!(
            "{head}, whose leases are at their maximum of {max_lease} units; a larger \
             --lease-budget (or --lease-max) lets them grow"
        )
    } else {
        format!(
            "{head}, whose leases are of {mean} units on average: the keys are asked too \
             rarely at the exact path's speed for larger leases (docs/spec.md section 8.5); \
             a larger --lease-min (or a longer --lease-lifetime) lets them start"
        )
    })
}

/// `part` of `whole` in percent, one decimal.
pub(super) fn percent(part: u64, whole: u64) -> String {
    format!("{:.1}%", part as f64 * 100.0 / whole.max(1) as f64)
}

/// The most units `policy` admits on one key in any `W` (its window), per
/// docs/spec.md section 4: `L` for the fixed window (an aligned window)
/// and the sliding log, `2L` for the sliding counter, and for the buckets
/// their capacity or queue plus `floor(L*(W-1)/W)` in ticks.
pub(super) fn exact_most_in_window(policy: &Policy) -> u64 {
    let limit = policy.limit();
    let refill = |burst: u64| {
        let window = u128::from(policy.window_ticks());
        let more = u128::from(limit) * (window - 1) / window;
        burst.saturating_add(u64::try_from(more).unwrap_or(u64::MAX))
    };
    match policy.algorithm() {
        Algorithm::SlidingCounter => limit.saturating_mul(2),
        Algorithm::TokenBucket => refill(policy.capacity().unwrap_or(limit)),
        Algorithm::LeakyBucket => refill(policy.queue().unwrap_or(limit)),
        // The fixed window (in an aligned window) and the sliding log.
        _ => limit,
    }
}

/// Docs/spec.md section 8's bound for one instance holding at most
/// `max_lease` units of a key: nothing more in a fixed window.
pub(super) fn bound(policy: &Policy, max_lease: u64) -> u64 {
    match policy.algorithm() {
        Algorithm::FixedWindow => 0,
        _ => max_lease,
    }
}

/// Units admitted per key in the current aligned window of `window_us`,
/// and the most any key admitted in one.
#[derive(Debug)]
pub(super) struct WindowCounts {
    window_us: u64,
    /// Per key: the window's index and the units admitted in it.
    keys: Box<[Mutex<(u64, u64)>]>,
    most: AtomicU64,
}

impl WindowCounts {
    pub(super) fn new(keys: usize, window_us: u64) -> Self {
        Self {
            window_us: window_us.max(1),
            keys: (0..keys).map(|_| Mutex::new((u64::MAX, 0))).collect(),
            most: AtomicU64::new(0),
        }
    }

    /// `units` admitted on key `index` at `time_us` (the decision's time).
    pub(super) fn admitted(&self, index: usize, time_us: u64, units: u64) {
        let window = time_us / self.window_us;
        let mut entry = self.keys[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if entry.0 != window {
            *entry = (window, 0);
        }
        entry.1 += units;
        self.most.fetch_max(entry.1, Ordering::Relaxed);
    }

    pub(super) fn most(&self) -> u64 {
        self.most.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_most_in_a_window_is_each_algorithms() {
        let most = |text: &str| exact_most_in_window(&text.parse().unwrap());
        assert_eq!(most("fixed-window:100/10s"), 100);
        assert_eq!(most("sliding-log:100/10s"), 100);
        assert_eq!(most("sliding-counter:100/10s"), 200);
        // Capacity 20, then 100 per 10 s for a window less one tick.
        assert_eq!(most("token-bucket:100/10s,capacity=20"), 20 + 99);
        assert_eq!(most("leaky-bucket:100/10s,queue=5"), 5 + 99);
    }

    #[test]
    fn a_warning_names_the_option_that_lets_leases_take_off() {
        let stats = |leases, leased_units, exact| {
            let mut stats = LeaseStats::default();
            (stats.leases, stats.leased_units, stats.exact) = (leases, leased_units, exact);
            stats
        };
        assert_eq!(take_off_warning(100, 0, &stats(40, 2_000, 10), 100), None);
        assert_eq!(take_off_warning(0, 0, &stats(0, 0, 0), 100), None);
        let denials = take_off_warning(100, 90, &stats(5, 5, 90), 100).unwrap();
        assert!(denials.contains("1.1 decisions per call"), "{denials}");
        assert!(denials.contains("denials"), "{denials}");
        let at_the_maximum = take_off_warning(100, 0, &stats(100, 100, 0), 1).unwrap();
        assert!(
            at_the_maximum.contains("--lease-budget"),
            "{at_the_maximum}"
        );
        let small = take_off_warning(100, 0, &stats(40, 80, 20), 100).unwrap();
        assert!(small.contains("of 2 units on average"), "{small}");
        assert!(small.contains("--lease-min"), "{small}");
    }

    #[test]
    fn window_counts_keep_each_keys_aligned_window() {
        let counts = WindowCounts::new(2, 1_000);
        counts.admitted(0, 10, 1);
        counts.admitted(0, 999, 2);
        counts.admitted(1, 500, 1);
        counts.admitted(0, 1_000, 1);
        assert_eq!(counts.most(), 3);
    }
}

//! What one algorithm did on one scenario: counts, the largest burst, the
//! denials' retry times, speed and state size.

use std::time::Duration;

use limiter_core::backend::{KeyState, SetState};
use limiter_core::{Algorithm, Decision, Policies};

use super::scenarios::{Lane, Requests};
use crate::policy_change::PolicyChange;

/// One admitted request: when it proceeds (`t + wait`) and its units.
pub(crate) type Admission = (u64, u64);

/// Collects the outcome of every request of one run.
#[derive(Debug)]
pub(crate) struct Recorder {
    /// Admissions per key, in the order decided.
    admissions: Vec<Vec<Admission>>,
    admitted: u64,
    /// u128: the sum of u64 costs cannot wrap (at most 2^64 requests).
    admitted_units: u128,
    denied: u64,
    errors: u64,
    retry_sum_us: u128,
    retry_max_us: u64,
}

impl Recorder {
    /// A recorder for a trace with `keys` keys.
    pub(crate) fn new(keys: usize) -> Self {
        Self {
            admissions: vec![Vec::new(); keys],
            admitted: 0,
            admitted_units: 0,
            denied: 0,
            errors: 0,
            retry_sum_us: 0,
            retry_max_us: 0,
        }
    }

    /// Records a decision on `key` for a request of `cost` made at `time_us`.
    pub(crate) fn decided(&mut self, key: u32, time_us: u64, cost: u64, decision: &Decision) {
        if decision.allowed {
            self.admitted += 1;
            self.admitted_units += u128::from(cost);
            let proceeds = time_us.saturating_add(micros(decision.wait));
            self.admissions[key as usize].push((proceeds, cost));
        } else {
            self.denied += 1;
            let retry = micros(decision.retry_after);
            self.retry_sum_us += u128::from(retry);
            self.retry_max_us = self.retry_max_us.max(retry);
        }
    }

    /// Records a request that could not be decided (e.g. cost above the limit).
    pub(crate) fn error(&mut self) {
        self.errors += 1;
    }

    /// The figures of the run, which decided every request in `elapsed`.
    pub(crate) fn finish(
        mut self,
        lane: &Lane,
        windows: &[u64],
        elapsed: Duration,
        bytes_per_key: Option<f64>,
    ) -> AlgorithmResult {
        for admissions in &mut self.admissions {
            if !admissions.is_sorted_by_key(|a| a.0) {
                admissions.sort_by_key(|a| a.0);
            }
        }
        let max_units_in_windows: Vec<(u64, u64)> = windows
            .iter()
            .map(|&window_us| {
                let most = self
                    .admissions
                    .iter()
                    .map(|a| max_units_within(a, window_us))
                    .max()
                    .unwrap_or(0);
                (window_us, most)
            })
            .collect();
        let max_units_in_window = max_units_in_windows.first().map_or(0, |&(_, most)| most);
        let decisions = self.admitted + self.denied + self.errors;
        let seconds = elapsed.as_secs_f64();
        AlgorithmResult {
            algorithm: lane.algorithm,
            label: lane.label.clone(),
            leased: lane.leased,
            max_units_in_windows,
            admitted: self.admitted,
            admitted_units: self.admitted_units,
            denied: self.denied,
            errors: self.errors,
            max_units_in_window,
            retry_after_mean_us: (self.denied > 0)
                .then(|| self.retry_sum_us as f64 / self.denied as f64),
            retry_after_max_us: (self.denied > 0).then_some(self.retry_max_us),
            wall_time: elapsed,
            decisions_per_second: (decisions > 0 && seconds > 0.0)
                .then(|| decisions as f64 / seconds),
            bytes_per_key,
            around_change: None,
            admissions: self.admissions,
        }
    }
}

/// The figures of one algorithm on one scenario.
#[derive(Debug, Clone)]
pub(crate) struct AlgorithmResult {
    /// The lane's algorithm (its first policy's, for a set): its colour.
    pub(crate) algorithm: Algorithm,
    /// The algorithm's name, or the set's policy string (`leased xN` after
    /// it for a leased lane).
    pub(crate) label: String,
    /// The leased limiters that decided the lane, if any.
    pub(crate) leased: Option<u32>,
    /// `(W, the most units proceeding within any W µs on one key)` for each
    /// window of the scenario ([`Scenario::windows`](super::scenarios::Scenario::windows)).
    pub(crate) max_units_in_windows: Vec<(u64, u64)>,
    /// Requests admitted.
    pub(crate) admitted: u64,
    /// Units admitted (the sum of the admitted requests' costs), exact:
    /// it may exceed u64 for very large costs.
    pub(crate) admitted_units: u128,
    /// Requests denied.
    pub(crate) denied: u64,
    /// Requests that could not be decided (cost 0 or above the maximum,
    /// time out of range).
    pub(crate) errors: u64,
    /// The most units proceeding within any interval of the first window on one key.
    pub(crate) max_units_in_window: u64,
    pub(crate) retry_after_mean_us: Option<f64>,
    pub(crate) retry_after_max_us: Option<u64>,
    pub(crate) wall_time: Duration,
    /// `None` when nothing was decided (or too fast to time).
    pub(crate) decisions_per_second: Option<f64>,
    /// Estimated state per key (memory backend only).
    pub(crate) bytes_per_key: Option<f64>,
    /// The burst around the scenario's policy change, if it has one.
    pub(crate) around_change: Option<AroundChange>,
    /// Admissions per key, sorted by the time they proceed.
    pub(crate) admissions: Vec<Vec<Admission>>,
}

/// What a lane admits around a policy change, beside what the new policies
/// admit on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AroundChange {
    /// The longest window of the new policies.
    pub(crate) window_us: u64,
    /// The most units proceeding on one key within any `window_us` that
    /// holds the change's time.
    pub(crate) units: u64,
    /// The limit of the new policy of that window.
    pub(crate) limit: u64,
}

/// The burst of `admissions` (per key, sorted by time) around `change`.
/// Every window of `W` µs within the `2W - 1` µs centred on the change's
/// time holds that time, so the largest sum within that span is exact.
pub(crate) fn around_change(change: &PolicyChange, admissions: &[Vec<Admission>]) -> AroundChange {
    let policy = change
        .policies
        .iter()
        .max_by_key(|policy| policy.window_us())
        .expect("a policy set has a part");
    let window_us = policy.window_us();
    let first = change.at.saturating_sub(window_us - 1);
    let last = change.at.saturating_add(window_us - 1);
    let units = admissions
        .iter()
        .map(|admissions| {
            let from = admissions.partition_point(|a| a.0 < first);
            let to = admissions.partition_point(|a| a.0 <= last);
            max_units_within(&admissions[from..to], window_us)
        })
        .max()
        .unwrap_or(0);
    AroundChange {
        window_us,
        units,
        limit: policy.limit(),
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The most units in `admissions` (sorted by time) that fall within any
/// `window_us` consecutive microseconds `[a, a + window_us - 1]`: a sliding
/// two-pointer, exact.
///
/// Summed in u128, so no trace can wrap it; a sum beyond u64 (which no
/// valid policy admits within a window) is reported as `u64::MAX`.
pub(crate) fn max_units_within(admissions: &[Admission], window_us: u64) -> u64 {
    let mut best = 0u128;
    let mut sum = 0u128;
    let mut first = 0;
    for &(time, units) in admissions {
        sum += u128::from(units);
        while time - admissions[first].0 >= window_us {
            sum -= u128::from(admissions[first].1);
            first += 1;
        }
        best = best.max(sum);
    }
    u64::try_from(best).unwrap_or(u64::MAX)
}

/// Replays `requests` through the core algorithm, as the memory backend
/// does, and returns the estimated state per key at the end: the size of
/// the algorithm's state struct, plus a sliding log's entries
/// ([`KeyState::size_bytes`]), averaged over the keys the backend holds:
/// those with an admission (a key whose every request was an error is
/// never stored).
pub(crate) fn state_bytes_per_key(policies: &Policies, requests: &Requests) -> f64 {
    // Errors (cost above the maximum) change nothing, as on a backend.
    let mut held = vec![false; requests.keys.len()];
    let sizes: Vec<Option<usize>> = match policies.single() {
        Some(policy) => {
            let mut states: Vec<Option<KeyState>> = vec![None; requests.keys.len()];
            for request in &requests.requests {
                let key = request.key as usize;
                let state = states[key].get_or_insert_with(|| KeyState::fresh(policy));
                let decided = state.acquire(policy, request.time_us, request.cost);
                held[key] |= decided.is_ok_and(|d| d.allowed);
            }
            states
                .iter()
                .map(|s| s.as_ref().map(KeyState::size_bytes))
                .collect()
        }
        None => {
            let mut states: Vec<Option<SetState>> = vec![None; requests.keys.len()];
            for request in &requests.requests {
                let key = request.key as usize;
                let state = states[key].get_or_insert_with(|| SetState::fresh(policies));
                let decided = state.acquire(policies, request.time_us, request.cost);
                held[key] |= decided.is_ok_and(|d| d.allowed);
            }
            states
                .iter()
                .map(|s| s.as_ref().map(SetState::size_bytes))
                .collect()
        }
    };
    let sizes = sizes
        .into_iter()
        .zip(held)
        .map(|(size, held)| size.filter(|_| held));
    let (keys, bytes) = sizes
        .flatten()
        .fold((0usize, 0usize), |(keys, bytes), size| {
            (keys + 1, bytes + size)
        });
    if keys == 0 {
        0.0
    } else {
        bytes as f64 / keys as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_window_sum_is_exact_at_the_edges() {
        // 10 at 0, 5 at 9, 7 at 10: a window of 10 µs holds 0..=9 or 1..=10.
        let admissions = [(0, 10), (9, 5), (10, 7)];
        assert_eq!(max_units_within(&admissions, 10), 15);
        assert_eq!(max_units_within(&admissions, 11), 22);
        assert_eq!(max_units_within(&admissions, 1), 10);
        assert_eq!(max_units_within(&[], 10), 0);
    }

    /// A key whose only request was an error is never held: it is not
    /// averaged in.
    #[test]
    fn bytes_per_key_average_only_the_keys_held() {
        use limiter_core::{Policy, Rate};
        let policy = Policy::sliding_log(Rate::per_second(5)).unwrap();
        let requests = |rows: &[(&str, u64)]| {
            let mut requests = Requests::default();
            for &(key, cost) in rows {
                requests.push(0, key, cost);
            }
            requests
        };
        let policies = Policies::from(&policy);
        let with_an_error_key = state_bytes_per_key(&policies, &requests(&[("a", 1), ("b", 0)]));
        let alone = state_bytes_per_key(&policies, &requests(&[("a", 1)]));
        assert_eq!(with_an_error_key, alone);
        assert_eq!(state_bytes_per_key(&policies, &requests(&[("b", 0)])), 0.0);
    }

    #[test]
    fn the_burst_around_a_change_counts_only_windows_that_hold_it() {
        let change = PolicyChange {
            at: 100,
            policies: "sliding-log:5/10us".parse().unwrap(),
        };
        // 4 at 85 (a window with 100 starts at 91 at the earliest), 3 at 91,
        // 2 at 100, 6 at 110 (a window with 100 ends at 109 at the latest).
        let admissions = vec![vec![(85, 4), (91, 3), (100, 2), (110, 6)]];
        assert_eq!(
            around_change(&change, &admissions),
            AroundChange {
                window_us: 10,
                units: 5,
                limit: 5
            }
        );
        assert_eq!(max_units_within(&admissions[0], 10), 7, "away from it");
    }

    #[test]
    fn the_articles_fixed_window_burst_is_two_hundred() {
        let admissions: Vec<Admission> = (0..100)
            .map(|i| (9_000_000 + i, 1))
            .chain((0..100).map(|i| (11_000_000 + i, 1)))
            .collect();
        assert_eq!(max_units_within(&admissions, 10_000_000), 200);
        assert_eq!(max_units_within(&admissions, 2_000_000), 100);
        assert_eq!(max_units_within(&admissions, 2_000_001), 101);
    }
}

//! A key's state when the policy deciding it changes (docs/spec.md
//! section 9): [`KeyState::change_policy`] and
//! [`SetState::change_policies`], the one place that rule is written.
//!
//! Every value formed here stays at or below 2^53 (docs/spec.md section 5):
//! counts and levels are at most `U * W <= 2^51`, times below 2^53.

use crate::algorithm::Algorithm;
use crate::algorithms::{
    effective_tick, FixedWindow, KeyState, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
};
use crate::all_of::SetState;
use crate::charge::{newest_units, rolled};
use crate::policies::Policies;
use crate::policy::{Policy, EXACT_LIMIT};

impl KeyState {
    /// This key's state, made under `from`, as `to` takes it over at
    /// `now_us` (docs/spec.md section 9): the units `from` still counts
    /// stay counted, up to `to`'s maximum cost, and a state `from` has
    /// already reset is fresh. What a backend stores for the key the first
    /// time a request on it is decided under `to`, whatever that decision.
    ///
    /// ```
    /// use limiter_core::backend::KeyState;
    /// use limiter_core::Policy;
    ///
    /// let (free, pro): (Policy, Policy) = ("sliding-log:100/1m".parse()?, "sliding-log:1000/1m".parse()?);
    /// let mut key = KeyState::fresh(&free);
    /// key.acquire(&free, 0, 90)?;
    /// let mut key = key.change_policy(&free, &pro, 1_000);
    /// assert!(key.acquire(&pro, 1_000, 910)?.allowed); // only the difference
    /// assert!(!key.acquire(&pro, 1_000, 1)?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn change_policy(&self, from: &Policy, to: &Policy, now_us: u64) -> KeyState {
        let t = effective_tick(from, self.stamp(), now_us.min(EXACT_LIMIT));
        if self.reset_ticks(from, t) == 0 {
            return Self::fresh(to);
        }
        let same_scale = from.window_ticks() == to.window_ticks() && from.tick_us() == to.tick_us();
        let kept = match (self, to.algorithm()) {
            (Self::SlidingLog(log), Algorithm::SlidingLog) => {
                Some(Self::SlidingLog(kept_log(log, from, t, to)))
            }
            (Self::SlidingCounter(counter), Algorithm::SlidingCounter) if same_scale => {
                kept_counts(counter, from, t, to).map(Self::SlidingCounter)
            }
            (Self::TokenBucket(bucket), Algorithm::TokenBucket) if same_scale => {
                let full = to.max_cost() * to.window_ticks();
                let spent = from.max_cost() * from.window_ticks() - tokens(bucket, from, t);
                Some(Self::TokenBucket(TokenBucket::from_parts(
                    full.saturating_sub(spent),
                    paid_back(to, t, spent.saturating_sub(full)),
                )))
            }
            (Self::LeakyBucket(bucket), Algorithm::LeakyBucket) if same_scale => {
                let (full, queued) = (to.max_cost() * to.window_ticks(), queued(bucket, from, t));
                Some(Self::LeakyBucket(LeakyBucket::from_parts(
                    queued.min(full),
                    paid_back(to, t, queued.saturating_sub(full)),
                )))
            }
            _ => None,
        };
        kept.unwrap_or_else(|| carried(to, self.used(from, t), tick_in(from, t, to)))
    }

    /// The units `policy` counts against this key at tick `t`: its maximum
    /// cost less the `remaining` a request at `t` is told as the state
    /// stands (docs/spec.md section 1), so fractions round up. What a
    /// state of another algorithm or scale carries.
    fn used(&self, policy: &Policy, t: u64) -> u64 {
        let w = policy.window_ticks();
        match self {
            Self::FixedWindow(state) if t - t % w == state.window_start() => state.count(),
            Self::FixedWindow(_) => 0,
            Self::SlidingLog(log) => log.in_window(policy, t).map(|(_, units)| units).sum(),
            Self::SlidingCounter(counter) => {
                let (previous, current) = rolled(counter, w, t);
                (previous * (w - t % w) + current * w)
                    .div_ceil(w)
                    .min(policy.limit())
            }
            Self::TokenBucket(bucket) => {
                (policy.max_cost() * w - tokens(bucket, policy, t)).div_ceil(w)
            }
            Self::LeakyBucket(bucket) => queued(bucket, policy, t).div_ceil(w),
        }
    }
}

impl SetState {
    /// This key's state, made under the set `from`, as the set `to` takes
    /// it over at `now_us` (docs/spec.md section 9): each part of `to` is
    /// [changed](KeyState::change_policy) from the part of `from` whose
    /// window is the nearest at or above its own (of the same algorithm
    /// first, then the first in order), or, when every window of `from`
    /// is shorter, from the one with the longest window. A part of `from`
    /// no part of `to` takes over is dropped.
    ///
    /// ```
    /// use limiter_core::backend::SetState;
    /// use limiter_core::Policies;
    ///
    /// let free: Policies = "sliding-log:5/1s;sliding-log:100/1m".parse()?;
    /// let day: Policies = "sliding-log:5/1s;sliding-log:100/1m;sliding-log:120/1d".parse()?;
    /// let mut key = SetState::fresh(&free);
    /// key.acquire(&free, 0, 5)?;
    /// let mut key = key.change_policies(&free, &day, 1);
    /// // The day counts the minute's 5: 115 remain in it.
    /// assert!(key.acquire(&day, 2_000_000, 5)?.allowed);
    /// assert_eq!(key.peek(&day, 3_000_000, 1)?.parts()[2].remaining, 109);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn change_policies(&self, from: &Policies, to: &Policies, now_us: u64) -> SetState {
        let parts = to
            .iter()
            .map(|policy| {
                let source = source_part(from, policy);
                self.parts()[source].change_policy(&from[source], policy, now_us)
            })
            .collect();
        SetState::from_parts(parts)
    }
}

/// The part of `from` the part `to` takes its state from (see
/// [`SetState::change_policies`]).
fn source_part(from: &Policies, to: &Policy) -> usize {
    let other_algorithm = |policy: &Policy| policy.algorithm() != to.algorithm();
    let nearest_above = from
        .iter()
        .enumerate()
        .filter(|(_, policy)| policy.window_us() >= to.window_us())
        .min_by_key(|&(i, policy)| (policy.window_us(), other_algorithm(policy), i));
    let longest = || {
        from.iter()
            .enumerate()
            .min_by_key(|&(i, policy)| (u64::MAX - policy.window_us(), other_algorithm(policy), i))
    };
    nearest_above.or_else(longest).map_or(0, |(i, _)| i)
}

/// `to`'s tick holding the last microsecond of `from`'s tick `t`: where
/// carried units are placed, never earlier than they were counted.
fn tick_in(from: &Policy, t: u64, to: &Policy) -> u64 {
    ((t + 1) * from.tick_us() - 1) / to.tick_us()
}

/// A token bucket's level (tokens times the window) at tick `t`, refilled.
fn tokens(bucket: &TokenBucket, policy: &Policy, t: u64) -> u64 {
    let full = policy.max_cost() * policy.window_ticks();
    let elapsed = (t - bucket.last()).min(policy.fill_ticks());
    full.min(bucket.scaled_tokens() + elapsed * policy.limit())
}

/// A leaky bucket's queue (units times the window) at tick `t`, drained.
fn queued(bucket: &LeakyBucket, policy: &Policy, t: u64) -> u64 {
    let elapsed = (t - bucket.last()).min(policy.fill_ticks());
    bucket
        .scaled_queued()
        .saturating_sub(elapsed * policy.limit())
}

/// A sliding log's entries in `from`'s window at tick `t`, each at the tick
/// of `to` holding its last microsecond, the oldest units dropped until
/// they fit `to`'s limit: they leave as they would have under `to`.
fn kept_log(log: &SlidingLog, from: &Policy, t: u64, to: &Policy) -> SlidingLog {
    let entries: Vec<(u64, u64)> = log
        .in_window(from, t)
        .map(|(ts, units)| (tick_in(from, ts, to), units))
        .collect();
    SlidingLog::from_entries(newest_units(&entries, to.limit()))
}

/// A sliding counter's counts at tick `t`, kept as they are when both fit
/// `to`'s limit (same window and tick).
fn kept_counts(
    counter: &SlidingCounter,
    from: &Policy,
    t: u64,
    to: &Policy,
) -> Option<SlidingCounter> {
    let w = from.window_ticks();
    let (previous, current) = rolled(counter, w, t);
    (previous <= to.limit() && current <= to.limit())
        .then(|| SlidingCounter::from_parts(t - t % w, previous, current))
}

/// The state of `to` after `used` units are admitted at its tick `at`:
/// fresh when `used` is 0. The units beyond `to`'s maximum cost are
/// dropped from a window algorithm's count (it refuses until the window
/// moves on either way) and owed by a bucket.
fn carried(to: &Policy, used: u64, at: u64) -> KeyState {
    if used == 0 {
        return KeyState::fresh(to);
    }
    let (w, units) = (to.window_ticks(), used.min(to.max_cost()));
    let excess = (used - units).min(to.max_cost()) * w;
    let window_start = at - at % w;
    match to.algorithm() {
        Algorithm::FixedWindow => {
            KeyState::FixedWindow(FixedWindow::from_parts(window_start, units))
        }
        Algorithm::SlidingLog => KeyState::SlidingLog(SlidingLog::from_entries([(at, units)])),
        Algorithm::SlidingCounter => {
            KeyState::SlidingCounter(SlidingCounter::from_parts(window_start, 0, units))
        }
        Algorithm::TokenBucket => KeyState::TokenBucket(TokenBucket::from_parts(
            (to.max_cost() - units) * w,
            paid_back(to, at, excess),
        )),
        Algorithm::LeakyBucket => KeyState::LeakyBucket(LeakyBucket::from_parts(
            units * w,
            paid_back(to, at, excess),
        )),
    }
}

/// The stamp of a bucket of `to` at its tick `at` that owes `excess`
/// (units times the window) beyond its maximum cost: `at` plus the ticks
/// its rate takes to pay back the excess, at most one full bucket, so that
/// nothing is admitted before then (docs/spec.md rule 2.3). At most the
/// last tick of the time range.
fn paid_back(to: &Policy, at: u64, excess: u64) -> u64 {
    let debt = excess.min(to.max_cost() * to.window_ticks());
    let last_tick = EXACT_LIMIT / to.tick_us();
    (at + debt.div_ceil(to.limit())).min(last_tick.max(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> Policies {
        text.parse().unwrap()
    }

    #[test]
    fn a_part_takes_over_the_nearest_window_at_or_above_its_own() {
        let from = set("fixed-window:5/1s;sliding-log:5/1s;token-bucket:9/1m;sliding-log:99/1h");
        let source = |policy: &str| source_part(&from, &policy.parse().unwrap());
        // The same window, of the same algorithm first, then the first.
        assert_eq!(source("sliding-log:7/1s"), 1);
        assert_eq!(source("fixed-window:7/1s"), 0);
        assert_eq!(source("leaky-bucket:7/1s"), 0);
        // The nearest longer window.
        assert_eq!(source("sliding-log:7/10s"), 2);
        assert_eq!(source("sliding-log:7/1ms"), 1);
        // Every window shorter: the longest.
        assert_eq!(source("sliding-log:7/1d"), 3);
    }

    #[test]
    fn a_set_losing_a_part_keeps_the_others_counts() {
        let (from, to) = (
            set("sliding-log:5/1s;sliding-log:100/1m"),
            set("sliding-log:100/1m"),
        );
        let mut key = SetState::fresh(&from);
        key.acquire(&from, 0, 5).unwrap();
        let mut key = key.change_policies(&from, &to, 1);
        assert_eq!(key.parts().len(), 1);
        assert!(key.acquire(&to, 1, 95).unwrap().allowed);
        assert!(!key.acquire(&to, 1, 1).unwrap().allowed);
    }

    /// The fingerprint is pinned: a stored one must keep meaning the same
    /// numbers.
    #[test]
    fn the_fingerprint_is_fnv_1a_of_the_text_form() {
        assert_eq!(
            set("sliding-log:100/1m").fingerprint(),
            0xa084_b940_b8d9_dae2
        );
    }
}

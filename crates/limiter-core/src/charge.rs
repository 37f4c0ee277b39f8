//! A charge after the fact (docs/spec.md section 10): units a key used
//! that are known only once the response is out (tokens generated, bytes
//! sent), counted whatever the key has left. [`KeyState::charge`] and
//! [`SetState::charge`], the one place that rule is written.
//!
//! Every value formed here stays at or below 2^53 (docs/spec.md section 5):
//! a charge counts at most twice the maximum cost (`2 * U * W <= 2^52`
//! scaled), times stay below 2^53.

use crate::algorithms::{
    check_request, effective_tick, FixedWindow, KeyState, LeakyBucket, SlidingCounter, SlidingLog,
    TokenBucket,
};
use crate::all_of::SetState;
use crate::error::Error;
use crate::policies::Policies;
use crate::policy::{Policy, EXACT_LIMIT};

impl KeyState {
    /// Counts `units` against this key at `now_us`, after the fact: never
    /// refused, whatever the key has left (docs/spec.md section 10). A
    /// window algorithm counts them in the window of `now_us` up to its
    /// limit (the key is then refused until the window lets them go); a
    /// bucket goes into debt, at most one full bucket, and refuses every
    /// request until its rate has paid the debt back.
    ///
    /// ```
    /// use limiter_core::backend::KeyState;
    /// use limiter_core::Policy;
    ///
    /// let tokens: Policy = "token-bucket:1000/1s".parse()?; // 1,000 tokens a second
    /// let mut key = KeyState::fresh(&tokens);
    /// assert!(key.acquire(&tokens, 0, 100)?.allowed); // an estimate
    /// key.charge(&tokens, 0, 1_400)?; // the response used 1,500 in all
    /// let refused = key.peek(&tokens, 0, 1)?;
    /// assert!(!refused.allowed);
    /// assert_eq!(refused.retry_after.as_micros(), 501_000); // 500 owed, then 1
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`] for 0 units and [`Error::TimeOutOfRange`] for a
    /// time beyond 2^53 µs; neither changes anything.
    pub fn charge(&mut self, policy: &Policy, now_us: u64, units: u64) -> Result<(), Error> {
        // The checks of a request of one unit, then of the units: any
        // number is counted, up to what the rule keeps.
        check_request(policy, now_us, 1)?;
        if units == 0 {
            return Err(Error::ZeroCost);
        }
        let t = effective_tick(policy, self.stamp(), now_us);
        let (w, limit, max) = (policy.window_ticks(), policy.limit(), policy.max_cost());
        // At most twice the maximum: the rest changes nothing the rule keeps.
        let units = units.min(2 * max);
        let window_start = t - t % w;
        *self = match self {
            Self::FixedWindow(state) => {
                let count = if state.window_start() == window_start {
                    state.count()
                } else {
                    0
                };
                Self::FixedWindow(FixedWindow::from_parts(
                    window_start,
                    (count + units).min(limit),
                ))
            }
            Self::SlidingLog(log) => {
                let entries: Vec<(u64, u64)> =
                    log.in_window(policy, t).chain([(t, units)]).collect();
                Self::SlidingLog(SlidingLog::from_entries(newest_units(&entries, limit)))
            }
            Self::SlidingCounter(counter) => {
                let (previous, current) = rolled(counter, w, t);
                Self::SlidingCounter(SlidingCounter::from_parts(
                    window_start,
                    previous,
                    (current + units).min(limit),
                ))
            }
            Self::TokenBucket(bucket) => {
                let full = max * w;
                let elapsed = (t - bucket.last()).min(policy.fill_ticks());
                let tokens = full.min(bucket.scaled_tokens() + elapsed * limit);
                let need = units * w;
                let owed = need.saturating_sub(tokens);
                Self::TokenBucket(TokenBucket::from_parts(
                    tokens.saturating_sub(need),
                    in_debt(policy, now_us, t, owed),
                ))
            }
            Self::LeakyBucket(bucket) => {
                let full = max * w;
                let elapsed = (t - bucket.last()).min(policy.fill_ticks());
                let queued = bucket.scaled_queued().saturating_sub(elapsed * limit) + units * w;
                Self::LeakyBucket(LeakyBucket::from_parts(
                    queued.min(full),
                    in_debt(policy, now_us, t, queued.saturating_sub(full)),
                ))
            }
        };
        Ok(())
    }
}

impl SetState {
    /// Counts `units` against every part of this key's set at `now_us`,
    /// each by [`KeyState::charge`] (docs/spec.md section 10).
    ///
    /// # Errors
    ///
    /// As [`KeyState::charge`], for the first part that refuses the time;
    /// then nothing is counted.
    pub fn charge(&mut self, policies: &Policies, now_us: u64, units: u64) -> Result<(), Error> {
        for policy in policies.iter() {
            check_request(policy, now_us, 1)?;
        }
        self.parts_mut()
            .iter_mut()
            .zip(policies.iter())
            .try_for_each(|(part, policy)| part.charge(policy, now_us, units))
    }
}

/// The stamp of a bucket at tick `t` that owes `owed` (units times the
/// window) beyond empty (token bucket) or full (leaky bucket): `t` plus
/// the ticks its rate takes to pay it back, so that nothing is admitted
/// before then (docs/spec.md rule 2.3); never past one fill time after the
/// charge's own tick (at most one full bucket owed), nor before `t`.
fn in_debt(policy: &Policy, now_us: u64, t: u64, owed: u64) -> u64 {
    let now = now_us / policy.tick_us();
    let latest = (now + policy.fill_ticks()).min(EXACT_LIMIT / policy.tick_us());
    (t + owed.div_ceil(policy.limit())).min(latest).max(t)
}

/// The newest `limit` units of `entries` (oldest first), the oldest
/// dropped first, in part if need be.
pub(crate) fn newest_units(entries: &[(u64, u64)], limit: u64) -> Vec<(u64, u64)> {
    let mut room = limit;
    let mut kept = Vec::with_capacity(entries.len());
    for &(ts, units) in entries.iter().rev() {
        if room == 0 {
            break;
        }
        let units = units.min(room);
        room -= units;
        kept.push((ts, units));
    }
    kept.reverse();
    kept
}

/// A sliding counter's `(previous, current)` counts rolled forward to tick
/// `t` (docs/spec.md section 3).
pub(crate) fn rolled(counter: &SlidingCounter, w: u64, t: u64) -> (u64, u64) {
    let window_start = t - t % w;
    if window_start == counter.window_start() {
        (counter.previous(), counter.current())
    } else if window_start == counter.window_start() + w {
        (counter.current(), 0)
    } else {
        (0, 0)
    }
}

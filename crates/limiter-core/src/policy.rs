//! [`Policy`]: an algorithm and its numbers, validated once. Its text form
//! is in `policy_text.rs`.

use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::divisor::Divisor;
use crate::error::PolicyError;
use crate::rate::Rate;

/// The exact-arithmetic bound of docs/spec.md section 5: every intermediate value
/// stays below 2^53 so Rust and Redis Lua (doubles) compute the same integers.
pub(crate) const EXACT_LIMIT: u64 = crate::MAX_TIME_US;

/// A validated rate-limiting policy: an algorithm, a limit and a window,
/// plus a capacity (token bucket) or queue (leaky bucket).
///
/// Constructed only through [`Policy::new`] and friends (or parsed from a
/// policy string such as `sliding-log:100/1h`, see [`FromStr`](#impl-FromStr-for-Policy)),
/// which check every field and choose the tick (docs/spec.md section 5); the
/// rest of the code trusts it.
///
/// # One name per number
///
/// - **limit** (`L`, [`limit`](Self::limit)): units admitted per window; for
///   the buckets, the refill or drain rate.
/// - **capacity** (`C`, [`capacity`](Self::capacity)): a token bucket's
///   largest burst, `L` by default.
/// - **queue** (`Q`, [`queue`](Self::queue)): how many units a leaky bucket
///   holds waiting, `L` by default.
/// - **max cost** ([`max_cost`](Self::max_cost)): the most one request may
///   cost: the capacity, the queue, or the limit for the window algorithms.
///   A larger cost is [`Error::CostExceedsCapacity`](crate::Error::CostExceedsCapacity)
///   (its field `max_cost`); every [`Decision`](crate::Decision) reports it
///   in its field `limit`, the name docs/spec.md section 1 and the
///   `RateLimit-Limit` header give it.
///
/// ```
/// use limiter_core::{Algorithm, Policy, Rate};
///
/// let sms = Policy::new(Algorithm::SlidingLog, Rate::per_minute(10))?;
/// let api = Policy::token_bucket("100/1s".parse()?)?.with_capacity(500)?;
/// assert_eq!(api.capacity(), Some(500));
/// assert!(Policy::new(Algorithm::FixedWindow, Rate::per_second(0)).is_err());
/// # let _ = sms;
/// # Ok::<(), limiter_core::PolicyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    algorithm: Algorithm,
    limit: u64,
    window_us: u64,
    capacity: u64,
    queue: u64,
    tick_us: u64,
    /// Derived once by `with_tick`, read on every decision.
    window_ticks: u64,
    max_cost: u64,
    /// Ticks for a bucket to go from empty to full: `ceil(max_cost * W / L)`.
    fill_ticks: u64,
    /// `W` (ticks) and `L` as reciprocals: every decision divides by them.
    window_divisor: Divisor,
    limit_divisor: Divisor,
}

impl Policy {
    /// A policy of `algorithm` at `rate`; a token bucket's capacity and a
    /// leaky bucket's queue default to the limit.
    pub fn new(algorithm: Algorithm, rate: Rate) -> Result<Self, PolicyError> {
        if rate.limit == 0 {
            return Err(PolicyError::ZeroLimit);
        }
        let nanos = rate.window.as_nanos();
        if nanos == 0 {
            return Err(PolicyError::ZeroWindow);
        }
        if !nanos.is_multiple_of(1_000) {
            return Err(PolicyError::WindowNotWholeMicros { nanos });
        }
        let window_us = u64::try_from(nanos / 1_000).map_err(|_| PolicyError::OutOfRange {
            units: rate.limit,
            window_us: u64::MAX,
        })?;
        Self {
            algorithm,
            limit: rate.limit,
            window_us,
            capacity: rate.limit,
            queue: rate.limit,
            tick_us: 1,
            window_ticks: window_us,
            max_cost: rate.limit,
            fill_ticks: window_us,
            window_divisor: Divisor::new(window_us),
            limit_divisor: Divisor::new(rate.limit),
        }
        .with_tick()
    }

    /// A policy from optional parts, as a command line or a config file gives
    /// them: `capacity` and `queue` apply only to their algorithms.
    pub fn from_options(
        algorithm: Algorithm,
        rate: Rate,
        capacity: Option<u64>,
        queue: Option<u64>,
    ) -> Result<Self, PolicyError> {
        let mut policy = Self::new(algorithm, rate)?;
        if let Some(capacity) = capacity {
            policy = policy.with_capacity(capacity)?;
        }
        if let Some(queue) = queue {
            policy = policy.with_queue(queue)?;
        }
        Ok(policy)
    }

    /// A fixed-window policy.
    pub fn fixed_window(rate: Rate) -> Result<Self, PolicyError> {
        Self::new(Algorithm::FixedWindow, rate)
    }
    /// A sliding-log policy.
    pub fn sliding_log(rate: Rate) -> Result<Self, PolicyError> {
        Self::new(Algorithm::SlidingLog, rate)
    }
    /// A sliding-window-counter policy.
    pub fn sliding_counter(rate: Rate) -> Result<Self, PolicyError> {
        Self::new(Algorithm::SlidingCounter, rate)
    }
    /// A token-bucket policy refilling `rate.limit` tokens per window, with
    /// capacity `rate.limit` (change it with [`Policy::with_capacity`]).
    pub fn token_bucket(rate: Rate) -> Result<Self, PolicyError> {
        Self::new(Algorithm::TokenBucket, rate)
    }
    /// A leaky-bucket policy draining `rate.limit` units per window, with
    /// queue `rate.limit` (change it with [`Policy::with_queue`]).
    pub fn leaky_bucket(rate: Rate) -> Result<Self, PolicyError> {
        Self::new(Algorithm::LeakyBucket, rate)
    }

    /// Sets a token bucket's capacity (the largest burst). Defaults to the limit.
    pub fn with_capacity(mut self, capacity: u64) -> Result<Self, PolicyError> {
        if self.algorithm != Algorithm::TokenBucket {
            return Err(PolicyError::NotApplicable {
                option: "capacity",
                algorithm: self.algorithm,
            });
        }
        if capacity == 0 {
            return Err(PolicyError::ZeroCapacity);
        }
        self.capacity = capacity;
        self.with_tick()
    }

    /// Sets a leaky bucket's queue (how many units may wait). Defaults to the limit.
    pub fn with_queue(mut self, queue: u64) -> Result<Self, PolicyError> {
        if self.algorithm != Algorithm::LeakyBucket {
            return Err(PolicyError::NotApplicable {
                option: "queue",
                algorithm: self.algorithm,
            });
        }
        if queue == 0 {
            return Err(PolicyError::ZeroQueue);
        }
        self.queue = queue;
        self.with_tick()
    }

    /// Chooses the smallest power-of-ten tick that divides the window and
    /// keeps `4 * U * (W / q) <= 2^53`, `U` the largest of the limit, the
    /// capacity and the queue (docs/spec.md section 5).
    fn with_tick(mut self) -> Result<Self, PolicyError> {
        let units = self.limit.max(self.capacity).max(self.queue);
        let out_of_range = PolicyError::OutOfRange {
            units,
            window_us: self.window_us,
        };
        let mut tick: u64 = 1;
        loop {
            if !self.window_us.is_multiple_of(tick) {
                return Err(out_of_range);
            }
            // Saturating: units and window near 2^64 overflow even u128.
            let need = u128::from(units)
                .saturating_mul(u128::from(self.window_us / tick))
                .saturating_mul(4);
            if need <= u128::from(EXACT_LIMIT) {
                self.tick_us = tick;
                self.window_ticks = self.window_us / tick;
                self.max_cost = match self.algorithm {
                    Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingCounter => {
                        self.limit
                    }
                    Algorithm::TokenBucket => self.capacity,
                    Algorithm::LeakyBucket => self.queue,
                };
                self.fill_ticks = (self.max_cost * self.window_ticks).div_ceil(self.limit);
                self.window_divisor = Divisor::new(self.window_ticks);
                return Ok(self);
            }
            tick = tick.checked_mul(10).ok_or(out_of_range.clone())?;
        }
    }

    /// The algorithm.
    #[inline]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// Units admitted per window (for the buckets: the refill or drain rate).
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }
    /// The limit and the window, as given.
    pub fn rate(&self) -> Rate {
        Rate::new(self.limit, self.window())
    }
    /// The window.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window_us)
    }
    /// The window in microseconds.
    #[inline]
    pub fn window_us(&self) -> u64 {
        self.window_us
    }
    /// A token bucket's capacity; `None` for other algorithms.
    pub fn capacity(&self) -> Option<u64> {
        (self.algorithm == Algorithm::TokenBucket).then_some(self.capacity)
    }
    /// A leaky bucket's queue; `None` for other algorithms.
    pub fn queue(&self) -> Option<u64> {
        (self.algorithm == Algorithm::LeakyBucket).then_some(self.queue)
    }
    /// The most one request may cost, and the `limit` reported in every
    /// decision: the capacity for a token bucket, the queue for a leaky
    /// bucket, the limit otherwise.
    #[inline]
    pub fn max_cost(&self) -> u64 {
        self.max_cost
    }
    /// The tick in microseconds: 1 for everyday policies, larger when the
    /// numbers would otherwise leave the exact range (docs/spec.md section 5).
    #[inline]
    pub fn tick_us(&self) -> u64 {
        self.tick_us
    }
    /// The window in ticks.
    #[inline]
    pub fn window_ticks(&self) -> u64 {
        self.window_ticks
    }

    /// Divides by the window in ticks (numerators up to 2^53).
    #[inline]
    pub(crate) fn window_divisor(&self) -> Divisor {
        self.window_divisor
    }

    /// Divides by the limit (numerators up to 2^53).
    #[inline]
    pub(crate) fn limit_divisor(&self) -> Divisor {
        self.limit_divisor
    }

    /// Ticks for a bucket to fill (token bucket) or drain (leaky bucket)
    /// completely: `ceil(max_cost * W / L)`. Past it, more elapsed time
    /// changes nothing, which keeps `elapsed * L` in range.
    #[inline]
    pub fn fill_ticks(&self) -> u64 {
        self.fill_ticks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::parse_duration;

    #[test]
    fn everyday_policies_use_a_one_microsecond_tick() {
        let p = Policy::sliding_log(Rate::per_minute(10)).unwrap();
        assert_eq!(p.tick_us(), 1);
        assert_eq!(p.window_ticks(), 60_000_000);
    }

    #[test]
    fn numbers_near_2_pow_64_are_out_of_range_not_an_overflow() {
        let huge = Rate::new(u64::MAX, Duration::from_micros(u64::MAX));
        assert!(matches!(
            Policy::fixed_window(huge),
            Err(PolicyError::OutOfRange { .. })
        ));
    }

    #[test]
    fn a_million_per_day_uses_a_hundred_microsecond_tick() {
        let p = Policy::sliding_counter(Rate::per_day(1_000_000)).unwrap();
        assert_eq!(p.tick_us(), 100);
    }

    #[test]
    fn each_bad_policy_has_its_own_readable_error() {
        let cases = [
            (
                Policy::fixed_window(Rate::per_second(0)).unwrap_err(),
                "limit must be at least 1",
            ),
            (
                Policy::fixed_window(Rate::new(1, Duration::ZERO)).unwrap_err(),
                "window must be at least 1µs",
            ),
            (
                Policy::fixed_window(Rate::new(1, Duration::from_nanos(1500))).unwrap_err(),
                "whole number of microseconds",
            ),
            (
                Policy::token_bucket(Rate::per_second(1))
                    .unwrap()
                    .with_capacity(0)
                    .unwrap_err(),
                "capacity must be at least 1",
            ),
            (
                Policy::leaky_bucket(Rate::per_second(1))
                    .unwrap()
                    .with_queue(0)
                    .unwrap_err(),
                "queue must be at least 1",
            ),
            (
                Policy::sliding_log(Rate::per_second(1))
                    .unwrap()
                    .with_capacity(3)
                    .unwrap_err(),
                "capacity does not apply to sliding-log",
            ),
            (
                Policy::fixed_window(Rate::new(1 << 51, Duration::from_micros(7))).unwrap_err(),
                "out of exact range",
            ),
            (
                Policy::fixed_window(Rate::new(1_000_000_000, Duration::from_micros(123_456_789)))
                    .unwrap_err(),
                "out of exact range",
            ),
            (
                "sliding-logs".parse::<Algorithm>().unwrap_err(),
                "expected one of: fixed-window",
            ),
            (
                "ten/s".parse::<Rate>().unwrap_err(),
                "is not a whole number",
            ),
            (
                "10/5x".parse::<Rate>().unwrap_err(),
                "expected a whole number and a unit",
            ),
            (
                "sliding-log:5/-1s".parse::<Policy>().unwrap_err(),
                "invalid duration \"-1s\"",
            ),
            ("10s".parse::<Rate>().unwrap_err(), "expected LIMIT/WINDOW"),
            (parse_duration("10").unwrap_err(), "missing unit"),
        ];
        let count = cases.len();
        let mut seen = std::collections::HashSet::new();
        for (error, expected) in cases {
            let message = error.to_string();
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
            seen.insert(message);
        }
        assert_eq!(seen.len(), count, "every bad input has its own message");
    }
}

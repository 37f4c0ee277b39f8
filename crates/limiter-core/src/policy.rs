//! [`Policy`]: an algorithm and its numbers, validated once.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::divisor::Divisor;
use crate::error::PolicyError;

/// The five rate-limiting algorithms. See `docs/algorithms.md` for when to
/// pick which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Count per aligned window. Cheapest; admits up to `2L` around a boundary.
    FixedWindow,
    /// Exact log of admissions in the trailing window. No boundary burst.
    SlidingLog,
    /// Weighted current and previous window counts. O(1), small burst.
    SlidingCounter,
    /// Bursts up to a capacity, then a steady refill rate.
    TokenBucket,
    /// A queue that drains at a constant rate: smooth output, no burst.
    LeakyBucket,
}

impl Algorithm {
    /// All five, in the order used by tables and plots.
    pub const ALL: [Algorithm; 5] = [
        Self::FixedWindow,
        Self::SlidingLog,
        Self::SlidingCounter,
        Self::TokenBucket,
        Self::LeakyBucket,
    ];

    /// The kebab-case name used on the command line and in output,
    /// e.g. `"sliding-log"`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed-window",
            Self::SlidingLog => "sliding-log",
            Self::SlidingCounter => "sliding-counter",
            Self::TokenBucket => "token-bucket",
            Self::LeakyBucket => "leaky-bucket",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = PolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Self::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| PolicyError::UnknownAlgorithm {
                input: s.to_owned(),
            })
    }
}

/// `limit` units per `window`: the numbers shared by every algorithm.
///
/// A `Rate` is not validated by itself; [`Policy::new`] validates it.
///
/// ```
/// use limiter_core::Rate;
/// use std::time::Duration;
///
/// let rate: Rate = "100/10s".parse()?;
/// assert_eq!(rate, Rate::new(100, Duration::from_secs(10)));
/// assert_eq!("10/minute".parse::<Rate>()?, Rate::per_minute(10));
/// # Ok::<(), limiter_core::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Units admitted per window.
    pub limit: u64,
    /// The window.
    pub window: Duration,
}

impl Rate {
    /// `limit` units per `window`.
    pub const fn new(limit: u64, window: Duration) -> Self {
        Self { limit, window }
    }
    /// `limit` units per second.
    pub const fn per_second(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }
    /// `limit` units per minute.
    pub const fn per_minute(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(60))
    }
    /// `limit` units per hour.
    pub const fn per_hour(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(3600))
    }
    /// `limit` units per day.
    pub const fn per_day(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(86_400))
    }
}

impl FromStr for Rate {
    type Err = PolicyError;

    /// Parses `LIMIT/DURATION`, where the duration may omit its number:
    /// `100/10s`, `10/minute`, `1000/1d`, `5/s`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: String| PolicyError::InvalidRate {
            input: s.to_owned(),
            reason,
        };
        let (limit, window) = s
            .split_once('/')
            .ok_or_else(|| invalid("expected LIMIT/WINDOW".into()))?;
        let limit = limit.trim();
        let limit: u64 = limit
            .parse()
            .map_err(|_| invalid(format!("limit {limit:?} is not a whole number")))?;
        let window = window.trim();
        let window = if window.starts_with(|c: char| c.is_ascii_digit()) {
            parse_duration(window)
        } else {
            parse_duration(&format!("1{window}"))
        }
        .map_err(|e| invalid(e.to_string()))?;
        Ok(Self::new(limit, window))
    }
}

/// Parses an integer followed by a unit: `us`, `ms`, `s`, `m`, `h`, `d`
/// (also `sec`, `min`, `second(s)`, `minute(s)`, `hour(s)`, `day(s)`).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(limiter_core::parse_duration("250ms")?, Duration::from_millis(250));
/// assert!(limiter_core::parse_duration("10").is_err()); // a unit is required
/// # Ok::<(), limiter_core::PolicyError>(())
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, PolicyError> {
    let invalid = |reason| PolicyError::InvalidDuration {
        input: s.to_owned(),
        reason,
    };
    let trimmed = s.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| invalid("missing unit"))?;
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(invalid("missing number"));
    }
    let number: u64 = number.parse().map_err(|_| invalid("number too large"))?;
    let micros_per_unit: u64 = match unit.trim() {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "s" | "sec" | "second" | "seconds" => 1_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000,
        "h" | "hour" | "hours" => 3_600_000_000,
        "d" | "day" | "days" => 86_400_000_000,
        _ => return Err(invalid("unknown unit (use us, ms, s, m, h or d)")),
    };
    let micros = number
        .checked_mul(micros_per_unit)
        .ok_or_else(|| invalid("duration too large"))?;
    Ok(Duration::from_micros(micros))
}

/// The exact-arithmetic bound of docs/spec.md section 5: every intermediate value
/// stays below 2^53 so Rust and Redis Lua (doubles) compute the same integers.
pub(crate) const EXACT_LIMIT: u64 = crate::MAX_TIME_US;

/// A validated rate-limiting policy: an algorithm, a limit and a window,
/// plus a capacity (token bucket) or queue (leaky bucket).
///
/// Constructed only through [`Policy::new`] and friends, which check every
/// field and choose the tick (docs/spec.md section 5); the rest of the code trusts it.
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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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
        if nanos % 1_000 != 0 {
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
    /// keeps `4 * M * (W / q) <= 2^53` (docs/spec.md section 5).
    fn with_tick(mut self) -> Result<Self, PolicyError> {
        let units = self.limit.max(self.capacity).max(self.queue);
        let out_of_range = PolicyError::OutOfRange {
            units,
            window_us: self.window_us,
        };
        let mut tick: u64 = 1;
        loop {
            if self.window_us % tick != 0 {
                return Err(out_of_range);
            }
            let need = 4 * u128::from(units) * u128::from(self.window_us / tick);
            if need <= u128::from(EXACT_LIMIT) {
                self.tick_us = tick;
                self.window_ticks = self.window_us / tick;
                self.max_cost = match self.algorithm {
                    Algorithm::TokenBucket => self.capacity,
                    Algorithm::LeakyBucket => self.queue,
                    _ => self.limit,
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

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}us", self.algorithm, self.limit, self.window_us)?;
        match self.algorithm {
            Algorithm::TokenBucket => write!(f, " capacity {}", self.capacity),
            Algorithm::LeakyBucket => write!(f, " queue {}", self.queue),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everyday_policies_use_a_one_microsecond_tick() {
        let p = Policy::sliding_log(Rate::per_minute(10)).unwrap();
        assert_eq!(p.tick_us(), 1);
        assert_eq!(p.window_ticks(), 60_000_000);
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
            ("10/5x".parse::<Rate>().unwrap_err(), "unknown unit"),
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

    #[test]
    fn rates_parse_with_and_without_a_number_before_the_unit() {
        assert_eq!(
            "100/10s".parse::<Rate>().unwrap(),
            Rate::new(100, Duration::from_secs(10))
        );
        assert_eq!("10/minute".parse::<Rate>().unwrap(), Rate::per_minute(10));
        assert_eq!("1000/1d".parse::<Rate>().unwrap(), Rate::per_day(1000));
        assert_eq!(" 5 / s ".parse::<Rate>().unwrap(), Rate::per_second(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7us").unwrap(), Duration::from_micros(7));
    }

    #[test]
    fn algorithms_round_trip_through_their_names() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert_eq!(
            "Token_Bucket".parse::<Algorithm>().unwrap(),
            Algorithm::TokenBucket
        );
    }
}

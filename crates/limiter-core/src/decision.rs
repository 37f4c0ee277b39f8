//! [`Decision`]: what a limiter answered, in microsecond durations.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::policy::Policy;

/// The answer to one request (docs/spec.md section 1).
///
/// A denial is a `Decision` with `allowed == false`, not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request was admitted (and, unless peeked, counted).
    pub allowed: bool,
    /// The policy's limit as seen by callers: the limit, or the capacity
    /// (token bucket), or the queue (leaky bucket). Suitable for a
    /// `RateLimit-Limit` header.
    pub limit: u64,
    /// Units a request could still take right now, after this decision.
    pub remaining: u64,
    /// Zero when allowed; when denied, the least time after which the same
    /// request would be allowed if nothing else arrives (exact to the µs).
    pub retry_after: Duration,
    /// Time until the key is back to its initial state (full quota) if
    /// nothing else arrives; zero when it already is.
    pub reset_after: Duration,
    /// Leaky bucket only (zero elsewhere): how long an admitted request must
    /// wait before it proceeds, so that output stays smooth.
    pub wait: Duration,
    /// The request time the decision was made at, in µs since the Unix epoch
    /// (the limiter's clock, or Redis `TIME`).
    pub time_us: u64,
}

impl Decision {
    /// Whether the request was admitted.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The wall-clock instant at which a denied request may be retried
    /// (the decision's own time when allowed).
    pub fn retry_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.time_us) + self.retry_after
    }

    /// The wall-clock instant at which the key is back to full quota.
    pub fn reset_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.time_us) + self.reset_after
    }
}

/// A decision in ticks, as the algorithms (in Rust or in a Redis script)
/// compute it, before conversion to microseconds.
///
/// Backends that evaluate elsewhere (Redis) fill this from their reply and
/// call [`TickDecision::into_decision`], so the µs conversion of
/// docs/spec.md section 5 lives in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TickDecision {
    /// Whether the request was admitted.
    pub allowed: bool,
    /// Units still available after this decision.
    pub remaining: u64,
    /// Ticks until the same request would be allowed (0 when allowed).
    pub retry_after: u64,
    /// Ticks until the key is back to its initial state.
    pub reset_after: u64,
    /// Ticks an admitted leaky-bucket request waits.
    pub wait: u64,
    /// The effective time in ticks: `max(t div tick, T_s)`.
    pub t_eff: u64,
}

impl TickDecision {
    /// Converts to a [`Decision`] for a request made at `time_us`: a duration
    /// of `D` ticks becomes `(t_eff + D) * tick - time_us` µs, and 0 stays 0.
    #[inline]
    pub fn into_decision(self, policy: &Policy, time_us: u64) -> Decision {
        let tick = policy.tick_us();
        let to_micros = |ticks: u64| {
            if ticks == 0 {
                Duration::ZERO
            } else {
                Duration::from_micros((self.t_eff + ticks) * tick - time_us)
            }
        };
        Decision {
            allowed: self.allowed,
            limit: policy.max_cost(),
            remaining: self.remaining,
            retry_after: to_micros(self.retry_after),
            reset_after: to_micros(self.reset_after),
            wait: to_micros(self.wait),
            time_us,
        }
    }
}

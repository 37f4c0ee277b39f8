//! [`Decision`]: what a limiter answered, in microsecond durations.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::policy::Policy;

/// The answer to one request (docs/spec.md section 1).
///
/// A denial is a `Decision` with `allowed == false`, not an error. The
/// fields are public to read; build one with [`Decision::admit`] or
/// [`Decision::deny`] and the `with_*` methods (a fake [`Limiter`](crate::Limiter)
/// in a test does so).
///
/// Read [`source`](Self::source) before reporting the numbers: a decision
/// made while the backend failed ([`DecisionSource::FailOpen`],
/// [`FailClosed`](DecisionSource::FailClosed)) counted nothing, and its
/// `remaining`, `retry_after` and `reset_after` hold no count (see
/// [`DecisionSource`]); one from a [`Fallback`](DecisionSource::Fallback)
/// limiter counts against the fallback's own policy.
///
/// ```
/// use limiter_core::{Decision, DecisionSource};
/// use std::time::Duration;
///
/// let denied = Decision::deny(10, 0, Duration::from_secs(3), 1_000_000)
///     .with_reset_after(Duration::from_secs(60));
/// assert!(!denied.allowed && denied.retry_after == Duration::from_secs(3));
/// assert_eq!(denied.source, DecisionSource::Backend);
/// assert!(!denied.is_degraded());
/// ```
///
/// # Tiered sets
///
/// Under a tiered set of [`Policies`](crate::Policies) (docs/spec.md
/// section 7) the fields are the set's combined decision and
/// [`parts`](Self::parts) holds every part's own, in the set's order, each
/// describing that part **as it stands after the request**:
///
/// - the set admitted: each part's admission, the request counted;
/// - the set denied (nothing counted, docs/spec.md rule 2.1): a part that
///   denied reports its denial; a part that would have admitted reports
///   `allowed == true` with its `remaining` and `reset_after` as they stand,
///   without the request (and no `wait`).
///
/// Under one policy, `parts()` is the decision itself, so a caller reads
/// both the same way (an HTTP layer lists each part in `RateLimit-Policy`).
/// The parts live behind one shared allocation, made only for a set: a
/// single policy's decision is a plain value, cheap to clone.
///
/// ```
/// use limiter_core::Decision;
///
/// let one = Decision::admit(10, 9, 0);
/// assert_eq!(one.parts(), std::slice::from_ref(&one));
/// assert_eq!(one.bound(), &one);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request was admitted (and, unless peeked, counted).
    pub allowed: bool,
    /// The policy's [max cost](crate::Policy::max_cost), under the name
    /// docs/spec.md section 1 gives it: the limit, or the capacity (token
    /// bucket), or the queue (leaky bucket). Suitable for a
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
    /// Who decided: the backend itself, a lease it granted, or a failure
    /// policy while the backend failed.
    pub source: DecisionSource,
    /// Under a tiered set of [`Policies`](crate::Policies), the index of
    /// the part whose `limit` and `remaining` this decision reports: the
    /// part that bound the answer (docs/spec.md section 7). 0 under one
    /// policy. [`parts`](Self::parts) has every part's decision.
    pub bound_by: u8,
    /// Every part's decision under a tiered set; `None` under one policy.
    parts: Option<Arc<[Decision]>>,
}

/// Who made a [`Decision`]: the backend, a lease the backend granted, or
/// a [`FailurePolicy`](crate::FailurePolicy) while the backend failed.
///
/// Headers, metrics and callers tell a degraded answer by it. What the
/// numbers of each decision hold:
///
/// | source | `allowed` | `limit` | `remaining` | `retry_after` | `reset_after`, `wait` |
/// |---|---|---|---|---|---|
/// | `Backend` | the decision | the policy's max cost | counted | exact | exact |
/// | `FailOpen` | `true` | the policy's max cost | 0: nothing counted, not a count | 0 | 0 |
/// | `FailClosed` | `false` | the policy's max cost | 0: nothing counted, not a count | until the backend is tried again | 0 |
/// | `Fallback` | the fallback limiter's decision, counted against the fallback's own policy (its `limit` is the fallback's max cost) ||||
/// | `Lease` | `true` | the policy's max cost | the units left in this instance's lease: counted by the backend, never more than the fleet can still admit | 0 | `reset_after`: the backend's reset as of the lease, a lower bound; `wait`: the lease's queue position (leaky bucket) |
///
/// An HTTP layer should not send `RateLimit` headers for `FailOpen` and
/// `FailClosed` decisions. A `Lease` decision is not degraded: its units
/// were counted by the backend when the lease was granted (docs/spec.md
/// section 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DecisionSource {
    /// The limiter decided, exactly (docs/spec.md section 3).
    #[default]
    Backend,
    /// The backend failed and the request was admitted without counting.
    FailOpen,
    /// The backend failed and the request was denied without counting.
    FailClosed,
    /// The backend failed and the fallback limiter decided.
    Fallback,
    /// Decided in process from a lease: units the backend counted earlier
    /// for this instance (docs/spec.md section 8).
    Lease,
}

impl DecisionSource {
    /// Whether a failure policy answered instead of the backend: any
    /// source but `Backend` and `Lease` (a lease's units were counted by
    /// the backend).
    pub fn is_degraded(self) -> bool {
        !matches!(self, Self::Backend | Self::Lease)
    }

    /// `"backend"`, `"fail-open"`, `"fail-closed"`, `"fallback"` or
    /// `"lease"`: a label for metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Backend => "backend",
            Self::FailOpen => "fail-open",
            Self::FailClosed => "fail-closed",
            Self::Fallback => "fallback",
            Self::Lease => "lease",
        }
    }
}

impl fmt::Display for DecisionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Decision {
    /// An admission with `remaining` units left, made at `time_us` by the
    /// backend; `retry_after`, `reset_after` and `wait` are zero until set.
    pub const fn admit(limit: u64, remaining: u64, time_us: u64) -> Self {
        Self {
            allowed: true,
            limit,
            remaining,
            retry_after: Duration::ZERO,
            reset_after: Duration::ZERO,
            wait: Duration::ZERO,
            time_us,
            source: DecisionSource::Backend,
            bound_by: 0,
            parts: None,
        }
    }

    /// A denial with `remaining` units left (fewer than asked), to be
    /// retried after `retry_after`, made at `time_us` by the backend;
    /// `reset_after` is zero until set.
    pub const fn deny(limit: u64, remaining: u64, retry_after: Duration, time_us: u64) -> Self {
        let mut denial = Self::admit(limit, remaining, time_us);
        denial.allowed = false;
        denial.retry_after = retry_after;
        denial
    }

    /// With `reset_after`: when the key is back to its initial state.
    #[must_use]
    pub const fn with_reset_after(mut self, reset_after: Duration) -> Self {
        self.reset_after = reset_after;
        self
    }

    /// With `wait`: how long an admitted request waits (leaky bucket).
    #[must_use]
    pub const fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// With `source`: who decided.
    #[must_use]
    pub const fn with_source(mut self, source: DecisionSource) -> Self {
        self.source = source;
        self
    }

    /// With `bound_by`: the part of a policy set that bound the answer.
    #[must_use]
    pub const fn with_bound_by(mut self, part: u8) -> Self {
        self.bound_by = part;
        self
    }

    /// With `parts`: every part's decision under a tiered set (see the
    /// type's docs), this decision being the set's combined one
    /// ([`all_of`](crate::backend::all_of) makes both). A single part is
    /// not kept: `parts()` of a one-policy decision is the decision itself.
    #[must_use]
    pub fn with_parts(mut self, parts: &[Decision]) -> Self {
        self.parts = (parts.len() > 1).then(|| parts.iter().map(Self::without_parts).collect());
        self
    }

    /// This decision alone, without its parts.
    fn without_parts(&self) -> Self {
        Self {
            parts: None,
            ..*self
        }
    }

    /// Every part's decision, in the set's order: under a tiered set, one
    /// per part (see the type's docs); under one policy, this decision.
    pub fn parts(&self) -> &[Decision] {
        self.parts.as_deref().unwrap_or(std::slice::from_ref(self))
    }

    /// The decision of the part that bound the answer
    /// ([`bound_by`](Self::bound_by)); this decision under one policy.
    pub fn bound(&self) -> &Decision {
        let parts = self.parts();
        parts.get(usize::from(self.bound_by)).unwrap_or(&parts[0])
    }

    /// Whether a failure policy answered instead of the backend
    /// ([`DecisionSource::is_degraded`]).
    pub fn is_degraded(&self) -> bool {
        self.source.is_degraded()
    }

    /// Whether the request was admitted.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The wall-clock instant at which a denied request may be retried
    /// (the decision's own time when allowed).
    /// A duration too long for `SystemTime` (a saturated one, of a policy
    /// whose window spans centuries) gives the latest instant it holds.
    pub fn retry_at(&self) -> SystemTime {
        wall_clock(self.time_us, self.retry_after)
    }

    /// The wall-clock instant at which the key is back to full quota (the
    /// latest instant `SystemTime` holds, for a duration beyond it).
    pub fn reset_at(&self) -> SystemTime {
        wall_clock(self.time_us, self.reset_after)
    }
}

/// `time_us` plus `after`, saturating at the latest `SystemTime` rather
/// than panicking on overflow.
fn wall_clock(time_us: u64, after: Duration) -> SystemTime {
    let at = UNIX_EPOCH + Duration::from_micros(time_us);
    at.checked_add(after).unwrap_or_else(|| {
        // The largest step the platform's SystemTime takes, halved until
        // it fits.
        let mut step = after;
        let mut latest = at;
        while !step.is_zero() {
            match latest.checked_add(step) {
                Some(later) => latest = later,
                None => step /= 2,
            }
        }
        latest
    })
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
        let tick_us = policy.tick_us();
        let tick = u128::from(tick_us);
        let to_micros = |ticks: u64| {
            if ticks == 0 {
                return Duration::ZERO;
            }
            // Everyday policies have a 1 µs tick: the end, at most 2^53 +
            // ticks, is µs already, and u64 arithmetic spares the hot path
            // a 128-bit division (a call to the compiler's runtime).
            if tick_us == 1 {
                if let Some(end) = self.t_eff.checked_add(ticks) {
                    // t_eff >= time_us under a 1 µs tick.
                    return Duration::from_micros(end.saturating_sub(time_us));
                }
            }
            // In u128: a bucket's refill can outlast u64 µs (a capacity of
            // 10^14 refilled at one a second), and t_eff + ticks can pass
            // 2^64 before the tick multiplies it. Such a duration
            // saturates to Duration::MAX.
            let micros = (u128::from(self.t_eff) + u128::from(ticks)) * tick - u128::from(time_us);
            u64::try_from(micros / 1_000_000).map_or(Duration::MAX, |secs| {
                Duration::new(secs, (micros % 1_000_000) as u32 * 1_000)
            })
        };
        Decision {
            allowed: self.allowed,
            limit: policy.max_cost(),
            remaining: self.remaining,
            retry_after: to_micros(self.retry_after),
            reset_after: to_micros(self.reset_after),
            wait: to_micros(self.wait),
            time_us,
            source: DecisionSource::Backend,
            bound_by: 0,
            parts: None,
        }
    }
}

#[cfg(test)]
mod parts_tests {
    use super::Decision;
    use std::time::Duration;

    /// A decision moves through channels and futures on every request: a
    /// set's parts stay behind one pointer, whatever the set's size.
    #[test]
    fn a_decision_is_small_and_its_parts_are_shared() {
        assert!(std::mem::size_of::<Decision>() <= 96);
        let parts = [
            Decision::admit(5, 4, 7),
            Decision::deny(100, 0, Duration::from_secs(1), 7),
        ];
        let set = Decision::deny(100, 0, Duration::from_secs(1), 7)
            .with_bound_by(1)
            .with_parts(&parts);
        assert_eq!(set.parts(), parts);
        assert_eq!(set.bound(), &parts[1]);
        let copy = set.clone();
        assert!(std::ptr::eq(copy.parts(), set.parts()));
        // One part is no set: the decision is its own part.
        let single = Decision::admit(5, 4, 7).with_parts(&parts[..1]);
        assert_eq!(single.parts(), std::slice::from_ref(&single));
    }
}

#[cfg(test)]
mod source_tests {
    use super::DecisionSource;

    #[test]
    fn only_a_failure_policys_answer_is_degraded() {
        let sources = [
            (DecisionSource::Backend, "backend", false),
            (DecisionSource::Lease, "lease", false),
            (DecisionSource::FailOpen, "fail-open", true),
            (DecisionSource::FailClosed, "fail-closed", true),
            (DecisionSource::Fallback, "fallback", true),
        ];
        for (source, name, degraded) in sources {
            assert_eq!((source.name(), source.to_string()), (name, name.to_owned()));
            assert_eq!(source.is_degraded(), degraded, "{source}");
        }
    }
}

#[cfg(test)]
mod conversion_tests {
    use crate::backend::{AlgorithmState, TokenBucket};
    use crate::{Policy, Rate};

    #[test]
    fn a_saturated_duration_gives_the_latest_instant_not_a_panic() {
        use super::{Decision, UNIX_EPOCH};
        use std::time::Duration;
        let decision = Decision::deny(1, 0, Duration::MAX, 1_700_000_000_000_000)
            .with_reset_after(Duration::MAX);
        let latest = decision.reset_at();
        assert_eq!(decision.retry_at(), latest);
        assert!(latest > UNIX_EPOCH + Duration::from_secs(1 << 40));
        assert!(latest.checked_add(Duration::from_secs(1)).is_none());
    }

    /// A refill longer than u64 µs (7 * 10^13 s) is reported, not an
    /// overflow (found by the fuzz target's reference).
    #[test]
    fn a_refill_longer_than_u64_micros_converts_without_overflow() {
        let capacity = 70_372_992_312_949;
        let policy = Policy::token_bucket(Rate::per_second(1))
            .unwrap()
            .with_capacity(capacity)
            .unwrap();
        let mut bucket = TokenBucket::fresh(&policy);
        let drained = bucket.acquire(&policy, 1_000_000, capacity).unwrap();
        assert!(drained.allowed);
        assert_eq!(drained.reset_after.as_secs(), capacity);
        let denied = bucket.acquire(&policy, 1_000_000, capacity).unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after.as_secs(), capacity);
    }
}

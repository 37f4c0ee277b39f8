//! [`CompactCounter`]: the sliding counter's state in 16 bytes, for limits
//! that fit in 32 bits.

use limiter_core::backend::{AlgorithmState, KeyState, SlidingCounter, TickDecision};
use limiter_core::{Algorithm, Policy};

/// A sliding counter's state `(T_s, prev, curr)` with the two counts in 32
/// bits each: 16 bytes against the core's 24, so that an entry (with its
/// 24-byte key) is 40 bytes, as the other constant-state algorithms' are.
/// Exact, not an approximation: both counts are at most the limit (only an
/// admission with `curr + n <= L` writes them), so under a policy that
/// [`fits`](Self::fits) they never lose a bit. Decisions are the core's,
/// made on the [`SlidingCounter`] this state widens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompactCounter {
    window_start: u64,
    previous: u32,
    current: u32,
}

impl CompactCounter {
    /// Whether `policy` is a sliding counter whose counts fit: a limit
    /// below 2^32 (any larger one keeps the core's 24-byte state).
    pub(crate) fn fits(policy: &Policy) -> bool {
        policy.algorithm() == Algorithm::SlidingCounter && u32::try_from(policy.limit()).is_ok()
    }

    #[inline(always)]
    fn wide(self) -> SlidingCounter {
        SlidingCounter::from_parts(
            self.window_start,
            u64::from(self.previous),
            u64::from(self.current),
        )
    }

    /// `state`, whose counts are at most the limit of a policy that
    /// [`fits`](Self::fits).
    #[inline(always)]
    fn narrow(state: SlidingCounter) -> Self {
        let count = |units: u64| {
            debug_assert!(units <= u64::from(u32::MAX), "a count above the limit");
            units as u32
        };
        Self {
            window_start: state.window_start(),
            previous: count(state.previous()),
            current: count(state.current()),
        }
    }
}

impl From<CompactCounter> for KeyState {
    fn from(state: CompactCounter) -> Self {
        Self::SlidingCounter(state.wide())
    }
}

impl TryFrom<KeyState> for CompactCounter {
    type Error = KeyState;

    /// A sliding counter's state under a policy that [`fits`](Self::fits).
    fn try_from(state: KeyState) -> Result<Self, KeyState> {
        SlidingCounter::try_from(state).map(Self::narrow)
    }
}

impl AlgorithmState for CompactCounter {
    type Update = Self;

    #[inline]
    fn fresh(policy: &Policy) -> Self {
        Self::narrow(SlidingCounter::fresh(policy))
    }

    #[inline]
    fn stamp(&self) -> u64 {
        self.window_start
    }

    #[inline(always)]
    fn evaluate(&self, policy: &Policy, t_eff: u64, cost: u64) -> (TickDecision, Option<Self>) {
        let (decision, update) = self.wide().evaluate(policy, t_eff, cost);
        (decision, update.map(Self::narrow))
    }

    #[inline(always)]
    fn apply(&mut self, update: Self) {
        *self = update;
    }

    fn reset_as_it_stands(&self, policy: &Policy, t_eff: u64) -> u64 {
        self.wide().reset_as_it_stands(policy, t_eff)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use limiter_core::Rate;

    use super::*;

    #[test]
    fn is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<CompactCounter>(), 16);
    }

    #[test]
    fn fits_sliding_counters_with_limits_below_two_to_the_thirty_two() {
        let counter = |limit| Policy::sliding_counter(Rate::new(limit, Duration::from_secs(3_600)));
        assert!(CompactCounter::fits(&counter(u64::from(u32::MAX)).unwrap()));
        assert!(!CompactCounter::fits(&counter(1 << 32).unwrap()));
        let bucket = Policy::token_bucket(Rate::per_second(10)).unwrap();
        assert!(!CompactCounter::fits(&bucket));
    }

    /// The same decisions and the same state as the core's, at the largest
    /// limit that fits, where the counts use all 32 bits.
    #[test]
    fn decides_as_the_core_at_the_largest_limit() {
        let limit = u64::from(u32::MAX);
        let policy = Policy::sliding_counter(Rate::new(limit, Duration::from_secs(3_600))).unwrap();
        let (mut compact, mut core) = (
            CompactCounter::fresh(&policy),
            SlidingCounter::fresh(&policy),
        );
        let window_us = 3_600_000_000u64;
        let steps = [
            (0, limit - 1),
            (1, 1),
            (2, 1),
            (window_us / 3, 7),
            (window_us + 5, limit / 2),
            (window_us + window_us / 2, limit / 2),
            (2 * window_us + 1, limit),
            (5 * window_us, 3),
        ];
        for (t, cost) in steps {
            let expected = core.acquire(&policy, t, cost).unwrap();
            assert_eq!(
                compact.acquire(&policy, t, cost).unwrap(),
                expected,
                "t {t}"
            );
            assert_eq!(compact.wide(), core, "t {t}");
        }
    }
}

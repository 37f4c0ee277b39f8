//! Leaky bucket: a queue that drains at a constant rate.

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::Policy;

/// State `(s, last)`: queued units scaled by `W` (draining `L` per tick) and
/// the time of the last admission (`T_s`). A fresh key is empty.
///
/// An admitted request is told to `wait` until the units ahead of it have
/// drained, so callers that honour it proceed at most one unit every `W/L`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeakyBucket {
    /// Queued units times the window in ticks.
    pub scaled_queued: u64,
    /// Tick of the last admission.
    pub last: u64,
}

impl AlgorithmState for LeakyBucket {
    type Update = Self;

    fn fresh(_: &Policy) -> Self {
        Self::default()
    }

    #[inline]
    fn stamp(&self) -> u64 {
        self.last
    }

    #[inline]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<Self>) {
        let w = policy.window_ticks();
        let (per_window, per_rate) = (policy.window_divisor(), policy.limit_divisor());
        let full = policy.max_cost() * w;
        let elapsed = (t - self.last).min(policy.fill_ticks());
        let s = self.scaled_queued.saturating_sub(elapsed * policy.limit());
        let need = n * w;
        if s + need <= full {
            let wait = per_rate.div_ceil(s);
            let s = s + need;
            let decision = TickDecision {
                allowed: true,
                remaining: per_window.div(full - s),
                reset_after: per_rate.div_ceil(s),
                wait,
                ..TickDecision::default()
            };
            let next = Self {
                scaled_queued: s,
                last: t,
            };
            (decision, Some(next))
        } else {
            let decision = TickDecision {
                allowed: false,
                remaining: per_window.div(full - s),
                retry_after: per_rate.div_ceil(s + need - full),
                reset_after: per_rate.div_ceil(s),
                ..TickDecision::default()
            };
            (decision, None)
        }
    }

    #[inline]
    fn apply(&mut self, update: Self) {
        *self = update;
    }
}

//! Leaky bucket: a queue that drains at a constant rate.

use super::{div_ceil, AlgorithmState};
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

    fn stamp(&self) -> u64 {
        self.last
    }

    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<Self>) {
        let (w, rate) = (policy.window_ticks(), policy.limit());
        let full = policy.max_cost() * w;
        let elapsed = (t - self.last).min(policy.fill_ticks());
        let s = self.scaled_queued.saturating_sub(elapsed * rate);
        let need = n * w;
        if s + need <= full {
            let wait = div_ceil(s, rate);
            let s = s + need;
            let decision = TickDecision {
                allowed: true,
                remaining: (full - s) / w,
                reset_after: div_ceil(s, rate),
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
                remaining: (full - s) / w,
                retry_after: div_ceil(s + need - full, rate),
                reset_after: div_ceil(s, rate),
                ..TickDecision::default()
            };
            (decision, None)
        }
    }

    fn apply(&mut self, update: Self) {
        *self = update;
    }
}

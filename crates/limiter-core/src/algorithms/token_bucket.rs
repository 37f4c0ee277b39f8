//! Token bucket: bursts up to a capacity, then a steady refill.

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::Policy;

/// State `(s, last)`: tokens scaled by `W` (so refill by `L` per tick is
/// exact) and the time of the last admission (`T_s`). A fresh key is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Tokens times the window in ticks.
    pub scaled_tokens: u64,
    /// Tick of the last admission.
    pub last: u64,
}

impl AlgorithmState for TokenBucket {
    type Update = Self;

    fn fresh(policy: &Policy) -> Self {
        Self {
            scaled_tokens: policy.max_cost() * policy.window_ticks(),
            last: 0,
        }
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
        let s = full.min(self.scaled_tokens + elapsed * policy.limit());
        let need = n * w;
        if s >= need {
            let s = s - need;
            let decision = TickDecision {
                allowed: true,
                remaining: per_window.div(s),
                reset_after: per_rate.div_ceil(full - s),
                ..TickDecision::default()
            };
            let next = Self {
                scaled_tokens: s,
                last: t,
            };
            (decision, Some(next))
        } else {
            let decision = TickDecision {
                allowed: false,
                remaining: per_window.div(s),
                retry_after: per_rate.div_ceil(need - s),
                reset_after: per_rate.div_ceil(full - s),
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

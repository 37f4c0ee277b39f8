//! Fixed window: a counter per aligned window.

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::Policy;

/// State `(idx_s, count)`, kept as the start of the window of the last
/// admission (`T_s = idx_s * W`) and the units admitted in it.
///
/// Known flaw: up to `2L` pass within two microseconds around a boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FixedWindow {
    /// `idx_s * W`: start (in ticks) of the window of the last admission.
    pub window_start: u64,
    /// Units admitted in that window.
    pub count: u64,
}

impl AlgorithmState for FixedWindow {
    type Update = Self;

    fn fresh(_: &Policy) -> Self {
        Self::default()
    }

    #[inline]
    fn stamp(&self) -> u64 {
        self.window_start
    }

    #[inline]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<Self>) {
        let (w, limit) = (policy.window_ticks(), policy.limit());
        let window_start = t - policy.window_divisor().rem(t);
        let until_next_window = window_start + w - t;
        let count = if window_start == self.window_start {
            self.count
        } else {
            0
        };
        if count + n <= limit {
            let next = Self {
                window_start,
                count: count + n,
            };
            let decision = TickDecision {
                allowed: true,
                remaining: limit - next.count,
                reset_after: until_next_window,
                ..TickDecision::default()
            };
            (decision, Some(next))
        } else {
            let decision = TickDecision {
                allowed: false,
                remaining: limit - count,
                retry_after: until_next_window,
                reset_after: if count > 0 { until_next_window } else { 0 },
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

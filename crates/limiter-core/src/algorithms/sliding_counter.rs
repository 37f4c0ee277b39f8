//! Sliding window counter: the previous window's count, weighted by how much
//! of it still overlaps the trailing window, plus the current count.

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::Policy;

/// State `(idx_s, prev, curr)`, kept as the start of the current window
/// (`T_s = idx_s * W`) and the units admitted in the previous and current
/// windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingCounter {
    /// `idx_s * W`: start (in ticks) of the current window.
    pub window_start: u64,
    /// Units admitted in the window before it.
    pub previous: u64,
    /// Units admitted in the current window.
    pub current: u64,
}

impl AlgorithmState for SlidingCounter {
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
        let e = policy.window_divisor().rem(t);
        let window_start = t - e;
        let (prev, curr) = if window_start == self.window_start {
            (self.previous, self.current)
        } else if window_start == self.window_start + w {
            (self.current, 0)
        } else {
            (0, 0)
        };
        let weighted_prev = prev * (w - e);
        let per_window = policy.window_divisor();
        let remaining = |curr: u64| {
            per_window
                .div(limit * w - weighted_prev)
                .saturating_sub(curr)
        };
        let reset_after = |curr: u64| match (curr, prev) {
            (0, 0) => 0,
            (0, _) => w - e,
            _ => 2 * w - e,
        };
        if weighted_prev + (curr + n) * w <= limit * w {
            let next = Self {
                window_start,
                previous: prev,
                current: curr + n,
            };
            let decision = TickDecision {
                allowed: true,
                remaining: remaining(next.current),
                reset_after: reset_after(next.current),
                ..TickDecision::default()
            };
            (decision, Some(next))
        } else {
            let retry_after = if curr + n <= limit {
                // Wait, within this window, for the previous window's weight to fall.
                w - ((limit - curr - n) * w) / prev - e
            } else {
                // Wait for the next window, then for this one's weight to fall.
                let e2 = w - ((limit - n) * w) / curr;
                (w - e) + e2.min(w)
            };
            let decision = TickDecision {
                allowed: false,
                remaining: remaining(curr),
                retry_after,
                reset_after: reset_after(curr),
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

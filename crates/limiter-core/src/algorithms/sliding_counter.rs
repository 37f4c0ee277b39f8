//! Sliding window counter: the previous window's count, weighted by how much
//! of it still overlaps the trailing window, plus the current count.
//!
//! Numeric bounds (docs/spec.md section 5: `4*L*W <= 2^53`, `t <= 2^53`,
//! `1 <= n <= L`, and `prev, curr <= L` since only an admission with
//! `curr + n <= L` writes them): each arithmetic site states its bound.
#![warn(clippy::arithmetic_side_effects)]

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::Policy;

/// State `(idx_s, prev, curr)`, kept as the start of the current window
/// (`T_s = idx_s * W`) and the units admitted in the previous and current
/// windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingCounter {
    /// `idx_s * W`: start (in ticks) of the current window.
    window_start: u64,
    /// Units admitted in the window before it.
    previous: u64,
    /// Units admitted in the current window.
    current: u64,
}

impl SlidingCounter {
    /// The state of a key whose current window starts at tick
    /// `window_start` (a multiple of the policy's window), with `previous`
    /// and `current` units admitted (each at most the limit): for a backend
    /// that stores the state in a layout of its own and decides with it
    /// here.
    #[inline]
    pub fn from_parts(window_start: u64, previous: u64, current: u64) -> Self {
        Self {
            window_start,
            previous,
            current,
        }
    }

    /// `idx_s * W`: start (in ticks) of the current window.
    #[inline]
    pub fn window_start(&self) -> u64 {
        self.window_start
    }

    /// Units admitted in the window before it.
    #[inline]
    pub fn previous(&self) -> u64 {
        self.previous
    }

    /// Units admitted in the current window.
    #[inline]
    pub fn current(&self) -> u64 {
        self.current
    }
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

    #[inline(always)]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<Self>) {
        let (w, limit) = (policy.window_ticks(), policy.limit());
        let e = policy.window_divisor().rem(t);
        // e = t mod W <= t; the stored window start is at most 2^53, and W <= 2^51.
        #[allow(clippy::arithmetic_side_effects)]
        let (window_start, next_after_stored) = (t - e, self.window_start + w);
        let (prev, curr) = if window_start == self.window_start {
            (self.previous, self.current)
        } else if window_start == next_after_stored {
            (self.current, 0)
        } else {
            (0, 0)
        };
        // e < W, so weighted_prev = prev*(W - e) <= L*W <= 2^51 (and no
        // underflow in L*W - weighted_prev); 2W - e <= 2^52; the weighted
        // total is at most L*W + 2L*W < 2^53.
        #[allow(clippy::arithmetic_side_effects)]
        let (weighted_prev, allowance, weighted) = {
            let weighted_prev = prev * (w - e);
            (weighted_prev, limit * w, weighted_prev + (curr + n) * w)
        };
        let per_window = policy.window_divisor();
        #[allow(clippy::arithmetic_side_effects)]
        let remaining = |curr: u64| {
            per_window
                .div(allowance - weighted_prev)
                .saturating_sub(curr)
        };
        #[allow(clippy::arithmetic_side_effects)]
        let reset_after = |curr: u64| match (curr, prev) {
            (0, 0) => 0,
            (0, _) => w - e,
            _ => 2 * w - e,
        };
        if weighted <= allowance {
            // At most L: the weighted total fits.
            #[allow(clippy::arithmetic_side_effects)]
            let current = curr + n;
            let next = Self {
                window_start,
                previous: prev,
                current,
            };
            let decision = TickDecision {
                allowed: true,
                remaining: remaining(next.current),
                reset_after: reset_after(next.current),
                ..TickDecision::default()
            };
            (decision, Some(next))
        } else {
            // Denied with curr + n <= L: then prev*(W - e) > (L - curr - n)*W,
            // so prev >= 1 and X = ((L - curr - n)*W) div prev < W - e: the
            // result is in [1, W]. Denied with curr + n > L: curr > L - n >= 0,
            // so curr >= 1 and ((L - n)*W) div curr < W: at most 2W. Every
            // product is at most L*W <= 2^51.
            #[allow(clippy::arithmetic_side_effects)]
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

    #[inline(always)]
    fn apply(&mut self, update: Self) {
        *self = update;
    }

    fn reset_as_it_stands(&self, policy: &Policy, t: u64) -> u64 {
        let w = policy.window_ticks();
        let e = policy.window_divisor().rem(t);
        // As in `evaluate`.
        #[allow(clippy::arithmetic_side_effects)]
        let (window_start, next_after_stored) = (t - e, self.window_start + w);
        let (prev, curr) = if window_start == self.window_start {
            (self.previous, self.current)
        } else if window_start == next_after_stored {
            (self.current, 0)
        } else {
            (0, 0)
        };
        // e < W <= 2^51.
        #[allow(clippy::arithmetic_side_effects)]
        match (curr, prev) {
            (0, 0) => 0,
            (0, _) => w - e,
            _ => 2 * w - e,
        }
    }
}

//! Fixed window: a counter per aligned window.
//!
//! Numeric bounds (docs/spec.md section 5: `4*L*W <= 2^53`, `t <= 2^53`,
//! `1 <= n <= L`, and `count <= L` since only admissions write it): each
//! arithmetic site states its bound.
#![warn(clippy::arithmetic_side_effects)]

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
    window_start: u64,
    /// Units admitted in that window.
    count: u64,
}

impl FixedWindow {
    /// The state of a key whose last admission fell in the window starting
    /// at tick `window_start` (a multiple of the policy's window), with
    /// `count` units (at most the limit) admitted in it: for a backend that
    /// stores the state in a layout of its own and decides with it here.
    #[inline]
    pub fn from_parts(window_start: u64, count: u64) -> Self {
        Self {
            window_start,
            count,
        }
    }

    /// `idx_s * W`: start (in ticks) of the window of the last admission.
    #[inline]
    pub fn window_start(&self) -> u64 {
        self.window_start
    }

    /// Units admitted in that window.
    #[inline]
    pub fn count(&self) -> u64 {
        self.count
    }
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

    #[inline(always)]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<Self>) {
        let (w, limit) = (policy.window_ticks(), policy.limit());
        // t mod W <= t; then window_start <= t < window_start + W <= 2^53 + 2^51.
        #[allow(clippy::arithmetic_side_effects)]
        let (window_start, until_next_window) = {
            let window_start = t - policy.window_divisor().rem(t);
            (window_start, window_start + w - t)
        };
        let count = if window_start == self.window_start {
            self.count
        } else {
            0
        };
        // count <= L and n <= L: at most 2L.
        #[allow(clippy::arithmetic_side_effects)]
        let wanted = count + n;
        if wanted <= limit {
            let next = Self {
                window_start,
                count: wanted,
            };
            // No underflow: wanted <= L.
            #[allow(clippy::arithmetic_side_effects)]
            let remaining = limit - wanted;
            let decision = TickDecision {
                allowed: true,
                remaining,
                reset_after: until_next_window,
                ..TickDecision::default()
            };
            (decision, Some(next))
        } else {
            // No underflow: count <= L.
            #[allow(clippy::arithmetic_side_effects)]
            let remaining = limit - count;
            let decision = TickDecision {
                allowed: false,
                remaining,
                retry_after: until_next_window,
                reset_after: if count > 0 { until_next_window } else { 0 },
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
        // As in `evaluate`: window_start <= t < window_start + W.
        #[allow(clippy::arithmetic_side_effects)]
        let window_start = t - policy.window_divisor().rem(t);
        if window_start == self.window_start && self.count > 0 {
            #[allow(clippy::arithmetic_side_effects)]
            let until_next_window = window_start + policy.window_ticks() - t;
            until_next_window
        } else {
            0
        }
    }
}

//! Leaky bucket: a queue that drains at a constant rate.
//!
//! Numeric bounds (docs/spec.md section 5: `4*max(L, Q)*W <= 2^53`,
//! `t <= 2^53`, `1 <= n <= Q`, and `s <= Q*W` since only an admission that
//! fits writes it): each arithmetic site states its bound.
#![warn(clippy::arithmetic_side_effects)]

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
    scaled_queued: u64,
    /// Tick of the last admission.
    last: u64,
}

impl LeakyBucket {
    /// The state holding `scaled_queued` (queued units times the window
    /// in ticks, at most the queue times it) after an admission at tick
    /// `last`: for a backend that stores the state in a layout of its own
    /// and decides with it here.
    #[inline]
    pub fn from_parts(scaled_queued: u64, last: u64) -> Self {
        Self {
            scaled_queued,
            last,
        }
    }

    /// Queued units times the window in ticks.
    #[inline]
    pub fn scaled_queued(&self) -> u64 {
        self.scaled_queued
    }

    /// Tick of the last admission.
    #[inline]
    pub fn last(&self) -> u64 {
        self.last
    }
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

    #[inline(always)]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<Self>) {
        let w = policy.window_ticks();
        let (per_window, per_rate) = (policy.window_divisor(), policy.limit_divisor());
        // full = Q*W <= 2^51; t >= last (t is t_eff >= T_s); elapsed <=
        // ceil(Q*W / L), so elapsed*L < Q*W + L <= 2^52; n*W <= Q*W, so
        // queued = s + n*W <= 2*Q*W <= 2^52.
        #[allow(clippy::arithmetic_side_effects)]
        let (full, s, queued) = {
            let full = policy.max_cost() * w;
            let elapsed = (t - self.last).min(policy.fill_ticks());
            let s = self.scaled_queued.saturating_sub(elapsed * policy.limit());
            (full, s, s + n * w)
        };
        if queued <= full {
            let wait = per_rate.div_ceil(s);
            let s = queued;
            // No underflow: s <= full.
            #[allow(clippy::arithmetic_side_effects)]
            let room = full - s;
            let decision = TickDecision {
                allowed: true,
                remaining: per_window.div(room),
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
            // No underflow: s <= full (the stored s is, and draining lowers
            // it) and queued > full.
            #[allow(clippy::arithmetic_side_effects)]
            let (room, excess) = (full - s, queued - full);
            let decision = TickDecision {
                allowed: false,
                remaining: per_window.div(room),
                retry_after: per_rate.div_ceil(excess),
                reset_after: per_rate.div_ceil(s),
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
        // The bounds of `evaluate`.
        #[allow(clippy::arithmetic_side_effects)]
        let s = {
            let elapsed = (t - self.last).min(policy.fill_ticks());
            self.scaled_queued.saturating_sub(elapsed * policy.limit())
        };
        policy.limit_divisor().div_ceil(s)
    }
}

//! Token bucket: bursts up to a capacity, then a steady refill.
//!
//! Numeric bounds (docs/spec.md section 5: `4*max(L, C)*W <= 2^53`,
//! `t <= 2^53`, `1 <= n <= C`, and `s <= C*W` since every write is
//! clamped to it): each arithmetic site states its bound.
#![warn(clippy::arithmetic_side_effects)]

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::Policy;

/// State `(s, last)`: tokens scaled by `W` (so refill by `L` per tick is
/// exact) and the time of the last admission (`T_s`). A fresh key is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// Tokens times the window in ticks.
    scaled_tokens: u64,
    /// Tick of the last admission.
    last: u64,
}

impl TokenBucket {
    /// The state holding `scaled_tokens` (tokens times the window in
    /// ticks, at most the capacity times it) after an admission at tick
    /// `last`: for a backend that stores the state in a layout of its own
    /// and decides with it here.
    #[inline]
    pub fn from_parts(scaled_tokens: u64, last: u64) -> Self {
        Self {
            scaled_tokens,
            last,
        }
    }

    /// Tokens times the window in ticks.
    #[inline]
    pub fn scaled_tokens(&self) -> u64 {
        self.scaled_tokens
    }

    /// Tick of the last admission.
    #[inline]
    pub fn last(&self) -> u64 {
        self.last
    }
}

impl AlgorithmState for TokenBucket {
    type Update = Self;

    fn fresh(policy: &Policy) -> Self {
        // C*W <= 2^51.
        #[allow(clippy::arithmetic_side_effects)]
        let full = policy.max_cost() * policy.window_ticks();
        Self {
            scaled_tokens: full,
            last: 0,
        }
    }

    #[inline]
    fn stamp(&self) -> u64 {
        self.last
    }

    #[inline(always)]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<Self>) {
        let w = policy.window_ticks();
        let (per_window, per_rate) = (policy.window_divisor(), policy.limit_divisor());
        // full = C*W <= 2^51; t >= last (t is t_eff >= T_s); elapsed <=
        // ceil(C*W / L), so elapsed*L < C*W + L <= 2^52; s + that < 2^53;
        // need = n*W <= C*W.
        #[allow(clippy::arithmetic_side_effects)]
        let (full, s, need) = {
            let full = policy.max_cost() * w;
            let elapsed = (t - self.last).min(policy.fill_ticks());
            (
                full,
                full.min(self.scaled_tokens + elapsed * policy.limit()),
                n * w,
            )
        };
        if s >= need {
            // No underflow: s >= need, and s <= full.
            #[allow(clippy::arithmetic_side_effects)]
            let (s, empty) = (s - need, full - s + need);
            let decision = TickDecision {
                allowed: true,
                remaining: per_window.div(s),
                reset_after: per_rate.div_ceil(empty),
                ..TickDecision::default()
            };
            let next = Self {
                scaled_tokens: s,
                last: t,
            };
            (decision, Some(next))
        } else {
            // No underflow: need > s, and s <= full.
            #[allow(clippy::arithmetic_side_effects)]
            let (missing, empty) = (need - s, full - s);
            let decision = TickDecision {
                allowed: false,
                remaining: per_window.div(s),
                retry_after: per_rate.div_ceil(missing),
                reset_after: per_rate.div_ceil(empty),
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
        // The bounds of `evaluate`; s <= full.
        #[allow(clippy::arithmetic_side_effects)]
        let empty = {
            let full = policy.max_cost() * policy.window_ticks();
            let elapsed = (t - self.last).min(policy.fill_ticks());
            full - full.min(self.scaled_tokens + elapsed * policy.limit())
        };
        policy.limit_divisor().div_ceil(empty)
    }
}

//! The five algorithms of docs/spec.md section 3 as exact state machines.
//!
//! Each algorithm is a small state value implementing [`AlgorithmState`]:
//! [`evaluate`](AlgorithmState::evaluate) is a pure function of the state,
//! the effective time and the cost, returning the decision and, when the
//! request is admitted, the write to [`apply`](AlgorithmState::apply).
//! [`AlgorithmState::acquire`] and [`AlgorithmState::peek`] wrap that with
//! the rules every algorithm shares (cost checks, ticks, `t_eff`).
//!
//! Every file here warns on `clippy::arithmetic_side_effects`: each
//! arithmetic site that may not overflow is allowed one by one, with the
//! bound that proves it (from the policy limits of docs/spec.md section 5).
#![warn(clippy::arithmetic_side_effects)]

mod fixed_window;
mod key_state;
mod leaky_bucket;
mod sliding_counter;
mod sliding_log;
mod token_bucket;

pub(crate) use self::key_state::KeyUpdate;
pub use self::{
    fixed_window::FixedWindow,
    key_state::KeyState,
    leaky_bucket::LeakyBucket,
    sliding_counter::SlidingCounter,
    sliding_log::{LogUpdate, SlidingLog},
    token_bucket::TokenBucket,
};

use std::fmt;

use crate::decision::{Decision, TickDecision};
use crate::error::Error;
use crate::policy::{Policy, EXACT_LIMIT};

/// One algorithm's per-key state.
///
/// All quantities are in ticks (see [`Policy::tick_us`]).
pub trait AlgorithmState: Clone + fmt::Debug + Send + Sync + 'static {
    /// The write an admitted request commits.
    type Update;

    /// The state of a key that has seen nothing (or whose state expired).
    fn fresh(policy: &Policy) -> Self;

    /// `T_s`: the stamp before which time may not run inside this key (docs/spec.md rule 2.3).
    fn stamp(&self) -> u64;

    /// Decides a request of `cost` units at effective time `t_eff` (ticks,
    /// already `>= stamp()`), without writing. The returned decision's
    /// `t_eff` is filled in by the caller. The update is `Some` iff allowed.
    fn evaluate(
        &self,
        policy: &Policy,
        t_eff: u64,
        cost: u64,
    ) -> (TickDecision, Option<Self::Update>);

    /// Commits an admitted request's update.
    fn apply(&mut self, update: Self::Update);

    /// Ticks until this state, as it stands, is back to the initial state
    /// at effective time `t_eff` (`>= stamp()`): the `reset_after` a denial
    /// at `t_eff` would report. A policy set needs it for the parts that
    /// would have admitted a request the set denied (docs/spec.md section 7).
    fn reset_as_it_stands(&self, policy: &Policy, t_eff: u64) -> u64;

    /// Decides a request at `now_us` and commits it if admitted.
    #[inline]
    fn acquire(&mut self, policy: &Policy, now_us: u64, cost: u64) -> Result<Decision, Error> {
        let t_eff = effective_time(policy, self.stamp(), now_us, cost)?;
        let (mut decision, update) = self.evaluate(policy, t_eff, cost);
        if let Some(update) = update {
            self.apply(update);
        }
        decision.t_eff = t_eff;
        Ok(decision.into_decision(policy, now_us))
    }

    /// Decides a request at `now_us` exactly as [`acquire`](Self::acquire)
    /// would, but writes nothing (docs/spec.md rule 2.6).
    #[inline]
    fn peek(&self, policy: &Policy, now_us: u64, cost: u64) -> Result<Decision, Error> {
        let t_eff = effective_time(policy, self.stamp(), now_us, cost)?;
        let (mut decision, _) = self.evaluate(policy, t_eff, cost);
        decision.t_eff = t_eff;
        Ok(decision.into_decision(policy, now_us))
    }
}

/// Checks the cost and time (docs/spec.md rules 2.2 and 2.4) and returns
/// `t_eff = max(now_us div tick, stamp)` in ticks (docs/spec.md rule 2.3).
#[inline]
pub fn effective_time(policy: &Policy, stamp: u64, now_us: u64, cost: u64) -> Result<u64, Error> {
    check_request(policy, now_us, cost)?;
    Ok(effective_tick(policy, stamp, now_us))
}

/// `t_eff = max(now_us div tick, stamp)` in ticks (docs/spec.md rule 2.3),
/// for a request [`check_request`] has passed: [`effective_time`] without
/// the check, for a backend that checks before it takes a key's lock (so
/// that nothing fallible runs under it).
#[inline]
pub fn effective_tick(policy: &Policy, stamp: u64, now_us: u64) -> u64 {
    // Everyday policies have a 1 µs tick: spare the hot path a division.
    // The tick is at least 1 (a power of ten chosen by the policy).
    #[allow(clippy::arithmetic_side_effects)]
    let t = match policy.tick_us() {
        1 => now_us,
        tick => now_us / tick,
    };
    t.max(stamp)
}

/// Checks a request's cost and time against the policy, before any state is
/// read: cost 0, cost above the maximum and time beyond 2^53 µs are errors.
#[inline]
pub fn check_request(policy: &Policy, now_us: u64, cost: u64) -> Result<(), Error> {
    // One comparison for both ends of the cost: 0 wraps to u64::MAX, and
    // the max cost is at least 1.
    if cost.wrapping_sub(1) >= policy.max_cost() || now_us > EXACT_LIMIT {
        return Err(request_error(policy, now_us, cost));
    }
    Ok(())
}

/// Which rule a request [`check_request`] refused breaks, in the order
/// the rules are checked: cost 0, cost above the max cost, time.
#[cold]
#[inline(never)]
fn request_error(policy: &Policy, now_us: u64, cost: u64) -> Error {
    if cost == 0 {
        Error::ZeroCost
    } else if cost > policy.max_cost() {
        Error::CostExceedsCapacity {
            cost,
            max_cost: policy.max_cost(),
        }
    } else {
        Error::TimeOutOfRange { time_us: now_us }
    }
}

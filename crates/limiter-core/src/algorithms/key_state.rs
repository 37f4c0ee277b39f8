//! [`KeyState`]: one key's state under any of the five algorithms.

use std::time::Duration;

use super::{
    effective_time, AlgorithmState, FixedWindow, LeakyBucket, LogUpdate, SlidingCounter,
    SlidingLog, TokenBucket,
};
use crate::algorithm::Algorithm;
use crate::decision::{Decision, TickDecision};
use crate::error::Error;
use crate::policy::Policy;

/// One key's state, for whichever algorithm the policy names: what a keyed
/// backend stores per key when the algorithm is chosen at run time.
///
/// ```
/// use limiter_core::backend::KeyState;
/// use limiter_core::{Policy, Rate};
///
/// let policy = Policy::sliding_log(Rate::per_second(2))?;
/// let mut key = KeyState::fresh(&policy);
/// assert!(key.acquire(&policy, 0, 1)?.allowed);
/// assert!(key.acquire(&policy, 1, 1)?.allowed);
/// let denied = key.acquire(&policy, 2, 1)?;
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after.as_micros(), 999_998); // the first leaves at 1s
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // each variant is its algorithm's state, documented there
pub enum KeyState {
    FixedWindow(FixedWindow),
    SlidingLog(SlidingLog),
    SlidingCounter(SlidingCounter),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
}

/// Runs `$body` with `$state` bound to the algorithm's state, whatever it is.
macro_rules! dispatch {
    ($self:expr, $state:ident => $body:expr) => {
        match $self {
            KeyState::FixedWindow($state) => $body,
            KeyState::SlidingLog($state) => $body,
            KeyState::SlidingCounter($state) => $body,
            KeyState::TokenBucket($state) => $body,
            KeyState::LeakyBucket($state) => $body,
        }
    };
}

impl KeyState {
    /// The state of a key that has seen nothing, under `policy`.
    pub fn fresh(policy: &Policy) -> Self {
        match policy.algorithm() {
            Algorithm::FixedWindow => Self::FixedWindow(FixedWindow::fresh(policy)),
            Algorithm::SlidingLog => Self::SlidingLog(SlidingLog::fresh(policy)),
            Algorithm::SlidingCounter => Self::SlidingCounter(SlidingCounter::fresh(policy)),
            Algorithm::TokenBucket => Self::TokenBucket(TokenBucket::fresh(policy)),
            Algorithm::LeakyBucket => Self::LeakyBucket(LeakyBucket::fresh(policy)),
        }
    }

    /// Decides a request of `cost` at `now_us` and commits it if admitted.
    ///
    /// The state must have been made for an algorithm equal to `policy`'s.
    pub fn acquire(&mut self, policy: &Policy, now_us: u64, cost: u64) -> Result<Decision, Error> {
        dispatch!(self, state => state.acquire(policy, now_us, cost))
    }

    /// Decides a request of `cost` at `now_us` without writing.
    pub fn peek(&self, policy: &Policy, now_us: u64, cost: u64) -> Result<Decision, Error> {
        dispatch!(self, state => state.peek(policy, now_us, cost))
    }

    /// `T_s` in ticks: time never runs backwards before it inside this key.
    pub fn stamp(&self) -> u64 {
        dispatch!(self, state => state.stamp())
    }

    /// Decides without writing, as [`peek`](Self::peek), and also returns
    /// the effective time (ticks) and, if admitted, the update to
    /// [`apply`](Self::apply): one part of a policy set (docs/spec.md
    /// section 7), which commits only once every part admits.
    pub(crate) fn evaluate(
        &self,
        policy: &Policy,
        now_us: u64,
        cost: u64,
    ) -> Result<(Decision, u64, Option<KeyUpdate>), Error> {
        macro_rules! part {
            ($state:expr, $variant:ident) => {{
                let t_eff = effective_time(policy, $state.stamp(), now_us, cost)?;
                let (mut ticks, update) = $state.evaluate(policy, t_eff, cost);
                ticks.t_eff = t_eff;
                let decision = ticks.into_decision(policy, now_us);
                Ok((decision, t_eff, update.map(KeyUpdate::$variant)))
            }};
        }
        match self {
            Self::FixedWindow(state) => part!(state, FixedWindow),
            Self::SlidingLog(state) => part!(state, SlidingLog),
            Self::SlidingCounter(state) => part!(state, SlidingCounter),
            Self::TokenBucket(state) => part!(state, TokenBucket),
            Self::LeakyBucket(state) => part!(state, LeakyBucket),
        }
    }

    /// Commits an update [`evaluate`](Self::evaluate) returned for this state.
    pub(crate) fn apply(&mut self, update: KeyUpdate) {
        match (self, update) {
            (Self::FixedWindow(state), KeyUpdate::FixedWindow(update)) => state.apply(update),
            (Self::SlidingLog(state), KeyUpdate::SlidingLog(update)) => state.apply(update),
            (Self::SlidingCounter(state), KeyUpdate::SlidingCounter(update)) => {
                state.apply(update);
            }
            (Self::TokenBucket(state), KeyUpdate::TokenBucket(update)) => state.apply(update),
            (Self::LeakyBucket(state), KeyUpdate::LeakyBucket(update)) => state.apply(update),
            // `evaluate` makes each state's update of its own algorithm.
            (state, update) => debug_assert!(false, "{update:?} does not fit {state:?}"),
        }
    }

    /// Ticks until this state is back to its initial state, at `t_eff`
    /// (`>= stamp()`).
    pub(crate) fn reset_ticks(&self, policy: &Policy, t_eff: u64) -> u64 {
        dispatch!(self, state => state.reset_as_it_stands(policy, t_eff))
    }

    /// The time (µs since the epoch) this state, as it stands, is back to
    /// its initial state if nothing arrives: its stamp plus the ticks to
    /// its reset from there (see [`SetState::reset_at_us`](crate::backend::SetState::reset_at_us)).
    pub(crate) fn reset_at_us(&self, policy: &Policy) -> u64 {
        let stamp = self.stamp();
        stamp
            .saturating_add(self.reset_ticks(policy, stamp))
            .saturating_mul(policy.tick_us())
    }

    /// `reset_after` of this state as it stands, for a request at `now_us`
    /// whose effective time is `t_eff` ([`evaluate`](Self::evaluate)'s).
    pub(crate) fn reset_as_it_stands(&self, policy: &Policy, t_eff: u64, now_us: u64) -> Duration {
        let ticks = self.reset_ticks(policy, t_eff);
        TickDecision {
            reset_after: ticks,
            t_eff,
            ..TickDecision::default()
        }
        .into_decision(policy, now_us)
        .reset_after
    }
}

/// Each algorithm's state is a [`KeyState`], and a [`KeyState`] of its
/// algorithm is that state: for a backend that stores the states typed by
/// algorithm and takes one over from another policy
/// ([`KeyState::change_policy`]).
macro_rules! key_state_of {
    ($($variant:ident),*) => {$(
        impl From<$variant> for KeyState {
            fn from(state: $variant) -> Self {
                Self::$variant(state)
            }
        }

        impl TryFrom<KeyState> for $variant {
            type Error = KeyState;

            /// The state, or the [`KeyState`] back if it is another algorithm's.
            fn try_from(state: KeyState) -> Result<Self, KeyState> {
                match state {
                    KeyState::$variant(state) => Ok(state),
                    other => Err(other),
                }
            }
        }
    )*};
}

key_state_of!(
    FixedWindow,
    SlidingLog,
    SlidingCounter,
    TokenBucket,
    LeakyBucket
);

/// What an admitted part of a policy set commits, for its algorithm.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyUpdate {
    FixedWindow(FixedWindow),
    SlidingLog(LogUpdate),
    SlidingCounter(SlidingCounter),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
}

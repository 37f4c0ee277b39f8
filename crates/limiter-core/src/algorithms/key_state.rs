//! [`KeyState`]: one key's state under any of the five algorithms.

use super::{AlgorithmState, FixedWindow, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
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
}

//! [`ModelLimiter`]: the core's algorithms behind the [`Limiter`] trait with
//! nothing else — no eviction, no I/O — as a reference backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use limiter_core::backend::KeyState;
use limiter_core::{Clock, Decision, Error, Limiter, ManualClock, Policy};

use crate::Harness;

/// The reference backend: one [`KeyState`] per key in a locked `HashMap`,
/// never evicted. It is what docs/spec.md sections 2 and 3 mean; the conformance suite runs
/// against it in this crate's own tests, so a failing case points at the
/// backend, not at the case.
#[derive(Debug)]
pub struct ModelLimiter {
    policy: Policy,
    clock: Box<dyn Clock>,
    keys: Mutex<HashMap<String, KeyState>>,
}

impl ModelLimiter {
    /// A model limiter for `policy` reading time from `clock`.
    pub fn new(policy: Policy, clock: impl Clock + 'static) -> Self {
        Self {
            policy,
            clock: Box::new(clock),
            keys: Mutex::new(HashMap::new()),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeyState>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Limiter for ModelLimiter {
    fn policy(&self) -> &Policy {
        &self.policy
    }

    async fn acquire(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        let now_us = self.clock.now_us();
        let mut keys = self.keys();
        match keys.get_mut(key) {
            Some(state) => state.acquire(&self.policy, now_us, cost),
            None => {
                let mut state = KeyState::fresh(&self.policy);
                let decision = state.acquire(&self.policy, now_us, cost)?;
                if decision.allowed {
                    keys.insert(key.to_owned(), state);
                }
                Ok(decision)
            }
        }
    }

    async fn peek(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        let now_us = self.clock.now_us();
        match self.keys().get(key) {
            Some(state) => state.peek(&self.policy, now_us, cost),
            None => KeyState::fresh(&self.policy).peek(&self.policy, now_us, cost),
        }
    }

    async fn reset(&self, key: &str) -> Result<(), Error> {
        self.keys().remove(key);
        Ok(())
    }
}

/// A [`Harness`] of [`ModelLimiter`]s: `conformance_suite!(ModelHarness)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelHarness;

#[async_trait]
impl Harness for ModelHarness {
    async fn limiter(&self, policy: Policy, clock: ManualClock) -> Arc<dyn Limiter> {
        Arc::new(ModelLimiter::new(policy, clock))
    }
}

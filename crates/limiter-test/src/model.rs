//! [`ModelLimiter`]: the core's algorithms behind the [`Limiter`] trait with
//! nothing else — no eviction, no I/O — as a reference backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use limiter_core::backend::SetState;
use limiter_core::{Clock, Decision, Error, Limiter, ManualClock, Policies, Policy};

use crate::Harness;

/// The reference backend: one [`SetState`] per key (a set of one under one
/// policy) in a locked `HashMap`, never evicted. It is what docs/spec.md
/// sections 2, 3 and 7 mean; the conformance suite runs against it in this
/// crate's own tests, so a failing case points at the backend, not at the
/// case.
#[derive(Debug)]
pub struct ModelLimiter {
    policies: Policies,
    clock: Box<dyn Clock>,
    keys: Mutex<HashMap<Box<[u8]>, SetState>>,
}

impl ModelLimiter {
    /// A model limiter for `policies` (a [`Policy`] or a tiered set)
    /// reading time from `clock`.
    pub fn new(policies: impl Into<Policies>, clock: impl Clock + 'static) -> Self {
        Self {
            policies: policies.into(),
            clock: Box::new(clock),
            keys: Mutex::new(HashMap::new()),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<Box<[u8]>, SetState>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Limiter for ModelLimiter {
    fn policies(&self) -> &Policies {
        &self.policies
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        let now_us = self.clock.now_us();
        let mut keys = self.keys();
        match keys.get_mut(key) {
            Some(state) => state.acquire(&self.policies, now_us, cost),
            None => {
                let mut state = SetState::fresh(&self.policies);
                let decision = state.acquire(&self.policies, now_us, cost)?;
                if decision.allowed {
                    keys.insert(key.into(), state);
                }
                Ok(decision)
            }
        }
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        let now_us = self.clock.now_us();
        match self.keys().get(key) {
            Some(state) => state.peek(&self.policies, now_us, cost),
            None => SetState::fresh(&self.policies).peek(&self.policies, now_us, cost),
        }
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
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

    async fn set_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter> {
        Arc::new(ModelLimiter::new(policies, clock))
    }
}

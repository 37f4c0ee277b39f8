//! [`Harness`]: how the conformance suite gets a limiter from a backend.

use std::sync::Arc;

use async_trait::async_trait;
use limiter_core::{Limiter, ManualClock, Policies, Policy};

/// A backend under test.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A fresh limiter for `policy` that reads its time from `clock`.
    ///
    /// Its keys must not collide with those of any other limiter this
    /// harness made (Redis: a fresh key prefix per call), so cases can run in
    /// parallel against one server.
    async fn limiter(&self, policy: Policy, clock: ManualClock) -> Arc<dyn Limiter>;

    /// A fresh limiter for a policy set (docs/spec.md section 7), as
    /// [`limiter`](Self::limiter) for one policy. Every backend decides by
    /// sets: no case is skipped.
    async fn set_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter>;
}

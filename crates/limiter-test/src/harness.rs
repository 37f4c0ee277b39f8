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
    /// [`limiter`](Self::limiter) for one policy; `None` if this backend
    /// does not decide by sets, and then the cases that need a set of two
    /// or more are skipped, saying so on stderr.
    ///
    /// The default builds a set of one with [`limiter`](Self::limiter) and
    /// answers `None` for larger sets: a backend that decides by sets
    /// overrides it.
    async fn set_limiter(
        &self,
        policies: Policies,
        clock: ManualClock,
    ) -> Option<Arc<dyn Limiter>> {
        match policies.single() {
            Some(policy) => Some(self.limiter(policy.clone(), clock).await),
            None => None,
        }
    }
}

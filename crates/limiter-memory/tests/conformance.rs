//! The shared conformance suite (`limiter-test`) on the in-memory backend.

use std::sync::Arc;

use async_trait::async_trait;
use limiter_core::{Limiter, ManualClock, Policies, Policy};
use limiter_memory::MemoryLimiter;
use limiter_test::Harness;

/// A fresh `MemoryLimiter` per case, on the case's manual clock. Each
/// limiter has its own map, so no key prefix is needed.
struct MemoryHarness;

#[async_trait]
impl Harness for MemoryHarness {
    async fn limiter(&self, policy: Policy, clock: ManualClock) -> Arc<dyn Limiter> {
        Arc::new(MemoryLimiter::builder(policy).clock(clock).build())
    }

    async fn set_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter> {
        Arc::new(MemoryLimiter::builder(policies).clock(clock).build())
    }
}

limiter_test::conformance_suite!(MemoryHarness);

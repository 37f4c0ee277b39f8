//! Test support for limiter (unpublished): the conformance suite that every
//! backend runs unchanged, a real `redis-server` harness, and fake Redis
//! Cluster nodes in front of one ([`fake_cluster`]).
//!
//! A backend's `tests/` implements [`Harness`] and expands
//! [`conformance_suite!`] into one `#[tokio::test]` per case:
//!
//! ```
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use limiter_core::{Limiter, ManualClock, Policies, Policy};
//! use limiter_test::{Harness, ModelLimiter};
//!
//! struct MyHarness;
//!
//! #[async_trait]
//! impl Harness for MyHarness {
//!     async fn limiter(&self, policy: Policy, clock: ManualClock) -> Arc<dyn Limiter> {
//!         // A backend builds its own limiter here, reading time from `clock`.
//!         Arc::new(ModelLimiter::new(policy, clock))
//!     }
//!
//!     async fn set_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter> {
//!         // The same for a tiered set (docs/spec.md section 7).
//!         Arc::new(ModelLimiter::new(policies, clock))
//!     }
//! }
//!
//! limiter_test::conformance_suite!(MyHarness);
//! # fn main() {}
//! ```
//!
//! The cases themselves are in [`cases`], each written once as a generic
//! async function over a [`Harness`]. [`ModelHarness`] runs them against
//! the core alone, which is how this crate tests its own cases.

pub mod cases;
pub mod certificates;
mod example_binary;
mod example_server;
pub mod fake_cluster;
mod flaky;
mod harness;
pub mod lease_bound;
mod model;
pub mod redis_cluster;
pub mod redis_server;
mod resp;
mod suite;

pub use self::cases::Rng;
pub use self::example_binary::example_binary;
pub use self::example_server::ExampleServer;
pub use self::flaky::Flaky;
pub use self::harness::Harness;
pub use self::model::{ModelHarness, ModelLimiter};

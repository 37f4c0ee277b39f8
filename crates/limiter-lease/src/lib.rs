//! Leased quota: decisions in process against a fleet-wide limit.
//!
//! [`Leased`] wraps any [`Limiter`](limiter_core::Limiter) (Redis, shared
//! by every instance of a service) and takes quota from it in leases: a
//! lease is an ordinary acquire of several units, which this instance then
//! admits locally, at memory speed, for at most a lease lifetime. The
//! over-admission this costs is bounded, per algorithm, in docs/spec.md
//! section 8, and checked by this crate's property tests; docs/lease.md
//! says when to use it and how to set it.
//!
//! ```
//! use limiter_core::{Limiter, Policy, Rate};
//! use limiter_lease::Leased;
//! use limiter_memory::MemoryLimiter;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! // In production the global limiter is Redis; any limiter will do.
//! let global = MemoryLimiter::new(Policy::token_bucket(Rate::per_second(10_000))?);
//! let leased = Leased::new(global);
//! assert!(leased.acquire(b"tenant:42", 1).await?.allowed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod builder;
mod in_flight;
mod key_lease;
mod landing;
mod leased;
mod leases;
mod memory_bound;
mod stats;

pub use self::{builder::LeasedBuilder, leased::Leased, stats::LeaseStats};

//! Exact rate-limiting algorithms as pure state machines, and the types every
//! limiter backend shares: [`Policy`], [`Decision`], [`Clock`] and the
//! [`Limiter`] trait.
//!
//! The five algorithms (fixed window, sliding log, sliding window counter,
//! token bucket, leaky bucket) decide in exact integer arithmetic, the same
//! way in Rust as in the Redis backend's Lua scripts, so a trace gives the
//! same decisions on every backend. This crate has no runtime, no Redis and
//! no map: backends (`limiter-memory`, `limiter-redis`) keep the state.
//!
//! ```
//! use limiter_core::{AlgorithmState, Policy, Rate, SlidingLog};
//!
//! let policy = Policy::sliding_log(Rate::per_minute(10))?; // 10 SMS codes a minute
//! let mut key = SlidingLog::default();
//! let admitted = (0..20).filter(|i| key.acquire(&policy, i * 1_000_000, 1).unwrap().allowed);
//! assert_eq!(admitted.count(), 10);
//! # Ok::<(), limiter_core::PolicyError>(())
//! ```
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]

mod algorithms;
mod clock;
mod decision;
mod divisor;
mod error;
mod limiter;
mod policy;
pub mod trace;

pub use self::{
    algorithms::{
        check_request, effective_time, AlgorithmState, FixedWindow, KeyState, LeakyBucket,
        LogUpdate, SlidingCounter, SlidingLog, TokenBucket,
    },
    clock::{Clock, ManualClock, SystemClock},
    decision::{Decision, TickDecision},
    error::{Error, PolicyError},
    limiter::{Limiter, LimiterExt},
    policy::{parse_duration, Algorithm, Policy, Rate},
};

/// The largest time (µs since the epoch) and the bound on every intermediate
/// value: 2^53, exact in both Rust integers and Lua doubles (docs/spec.md section 5).
pub const MAX_TIME_US: u64 = 1 << 53;

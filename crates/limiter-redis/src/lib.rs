//! A distributed rate limiter on Redis: one atomic Lua script per algorithm,
//! deciding exactly as [`limiter_core`] does, so a service tested on the
//! in-memory backend behaves the same on Redis.
//!
//! ```no_run
//! use limiter_core::{Limiter, Policy, Rate};
//! use limiter_redis::RedisLimiter;
//!
//! # async fn run() -> Result<(), limiter_core::Error> {
//! let policy = Policy::sliding_log(Rate::per_minute(10))?; // 10 SMS codes a minute
//! let limiter = RedisLimiter::builder("redis://127.0.0.1:6379/", policy).build().await?;
//! let decision = limiter.acquire("phone:+15550100", 1).await?;
//! if !decision.allowed {
//!     println!("try again in {:?}", decision.retry_after);
//! }
//! # Ok(()) }
//! ```
//!
//! Each decision is one `EVALSHA` of the policy's script (loaded again
//! automatically after a server restart or `SCRIPT FLUSH`) on a pooled
//! connection. Times come from Redis `TIME` unless a
//! [`Clock`](limiter_core::Clock) is given ([`RedisLimiterBuilder::clock`]).
//! A user key `k` lives at `{prefix}:{k}:{algorithm}` with a TTL equal to its
//! `reset_after`; see `docs/backends.md` for the key layout, the memory per
//! key, and the failure policies ([`FailurePolicy`]).
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![forbid(unsafe_code)]

mod builder;
mod error;
mod keys;
mod limiter;
mod pool;
mod scripts;

pub use self::{
    builder::{FailurePolicy, RedisLimiterBuilder},
    error::{BackendError, BackendErrorKind},
    limiter::RedisLimiter,
};

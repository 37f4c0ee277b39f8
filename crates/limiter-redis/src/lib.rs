//! A distributed rate limiter on Redis: one atomic Lua function per algorithm,
//! deciding exactly as [`limiter_core`] does, so a service tested on the
//! in-memory backend behaves the same on Redis.
//!
//! ```no_run
//! use limiter_core::{Limiter, Policy, Rate};
//! use limiter_redis::{RedisBackend, RedisLimiter};
//!
//! # async fn run() -> Result<(), limiter_core::Error> {
//! // Once per application: every limiter shares its connections.
//! let redis = RedisBackend::builder("redis://127.0.0.1:6379/").build().await?;
//! let policy = Policy::sliding_log(Rate::per_minute(10))?; // 10 SMS codes a minute
//! let limiter = RedisLimiter::builder(&redis, policy).build().await?;
//! let decision = limiter.acquire(b"phone:+15550100", 1).await?;
//! if !decision.allowed {
//!     println!("try again in {:?}", decision.retry_after);
//! }
//! # Ok(()) }
//! ```
//!
//! Each decision is one `FCALL` of the policy's function (Redis Functions:
//! Redis 7.0 or later), or, on a server that loaded limiter-redis-module,
//! one `LIMITER.DECIDE` of the same keys and arguments (see [`Engine`]),
//! on one of the backend's multiplexed connections,
//! which pipeline any number of concurrent decisions; under load, on one
//! server, the decisions that arrive while two calls of a limiter are in
//! flight share its next call, decided in order (see `docs/backends.md`,
//! "Batches"). Function libraries
//! are loaded on every new connection (and again after a `FUNCTION
//! FLUSH`). Times come from Redis `TIME` unless a
//! [`Clock`](limiter_core::Clock) is given ([`RedisLimiterBuilder::clock`]).
//! A user key `k` lives at `{prefix}:{k}:{policy}` with a TTL of at least
//! its `reset_after` (and at most about twice it plus a second: a write
//! grants a margin, so a key written steadily sets its TTL rarely). While Redis is down, decisions fail at once (no caller
//! waits out a timeout) and one background probe checks the server. See
//! `docs/backends.md` for the key layout, the memory per key and failures.
//! What a decision answers while Redis fails is chosen by wrapping the
//! limiter in core's [`Resilient`](limiter_core::Resilient)
//! (`limiter.on_failure(FailurePolicy::FailOpen)`, from
//! [`LimiterExt`](limiter_core::LimiterExt)).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod connection;
mod engine;
mod error;
mod limiter;
mod protocol;

/// Redis URLs as logs and errors show them: without their password.
pub mod url {
    pub use crate::connection::backend_builder::redact_url;
}

pub use self::{
    builder::RedisLimiterBuilder,
    connection::backend::RedisBackend,
    connection::backend_builder::RedisBackendBuilder,
    engine::Engine,
    error::{BackendError, BackendErrorKind},
    limiter::RedisLimiter,
};

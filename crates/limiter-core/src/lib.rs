//! Exact rate limiting: the [`Policy`], [`Decision`] and [`Error`] types,
//! the [`Limiter`] trait every backend implements, and the algorithms as
//! pure state machines.
//!
//! The algorithms ([`Algorithm`]: fixed window, sliding log, sliding window
//! counter, token bucket, leaky bucket) decide in exact integer arithmetic,
//! the same way in Rust as in the Redis backend's Lua scripts, so a trace
//! gives the same decisions on every backend (docs/spec.md section 3). This
//! crate has no runtime, no Redis and no map: backends (`limiter-memory`,
//! `limiter-redis`) keep the state.
//!
//! # Two APIs
//!
//! The crate root is what an application uses: a [`Policy`] (also written
//! as a string, `sliding-log:100/1h`), a [`Limiter`] to ask, the
//! [`Decision`] it answers, and [`FailurePolicy`] / [`Resilient`] for what
//! to answer while a backend fails. The [`backend`] module is for those who
//! write a backend: the algorithms' states, the request checks and the
//! dispatch over algorithms.
//!
//! ```
//! use limiter_core::{Policy, Rate};
//!
//! let sms: Policy = "sliding-log:10/1m".parse()?; // 10 SMS codes a minute
//! assert_eq!(sms, Policy::sliding_log(Rate::per_minute(10))?);
//! assert_eq!(sms.max_cost(), 10);
//! # Ok::<(), limiter_core::PolicyError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithm;
mod algorithms;
mod all_of;
mod anchored_clock;
pub mod backend;
mod backend_failure;
mod charge;
mod clock;
mod clock_source;
mod cluster_slot;
mod decision;
mod divisor;
mod error;
mod failure;
mod fnv;
mod inline_key;
mod key_limit;
mod limiter;
mod overloaded;
mod policies;
mod policy;
mod policy_change;
mod policy_history;
mod policy_text;
mod rate;
mod stored_key;
#[cfg(feature = "trace")]
pub mod trace;
mod whole_double;

pub use self::{
    algorithm::Algorithm,
    anchored_clock::AnchoredClock,
    backend_failure::{BackendFailure, FailureReach},
    clock::{Clock, ManualClock, SystemClock},
    decision::{Decision, DecisionSource},
    error::{Error, ErrorChain, ErrorKind, PolicyError},
    failure::{FailurePolicy, Resilient},
    key_limit::KeyLimitReached,
    limiter::{Limiter, LimiterExt},
    overloaded::Overloaded,
    policies::Policies,
    policy::Policy,
    rate::{parse_duration, Rate},
};

/// The largest time (µs since the epoch) and the bound on every intermediate
/// value: 2^53, exact in both Rust integers and Lua doubles (docs/spec.md section 5).
pub const MAX_TIME_US: u64 = 1 << 53;

//! [`Resilient`]: what any [`Limiter`](crate::Limiter) answers while its
//! backend fails, per a [`FailurePolicy`].
//!
//! `policy` holds the [`FailurePolicy`], `resilient` the wrapper, `outage`
//! its bookkeeping of a failing backend, and `mode` what a call asks of
//! the backend.

mod mode;
mod outage;
mod policy;
mod resilient;

pub use self::{policy::FailurePolicy, resilient::Resilient};

//! [`Resilient`]: what any [`Limiter`](crate::Limiter) answers while its
//! backend fails, per a [`FailurePolicy`].

mod answer;
mod outage;
mod policy;
mod resilient;

pub use self::{policy::FailurePolicy, resilient::Resilient};

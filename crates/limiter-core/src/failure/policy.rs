//! [`FailurePolicy`]: what a [`Resilient`](super::Resilient) limiter
//! answers while its backend fails.

use std::sync::Arc;

use crate::limiter::Limiter;

/// What a [`Resilient`] limiter answers while its backend fails with
/// [`Error::Backend`].
///
/// Only backend failures are handled. Request errors (cost 0, cost above
/// the max cost, time out of range) and configuration errors are returned
/// as they are, whatever the policy; so is a failed
/// [`reset`](Limiter::reset).
///
/// [`Resilient`]: super::Resilient
/// [`Error::Backend`]: crate::Error::Backend
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Return the [`Error::Backend`]: the caller decides. The default.
    ///
    /// [`Error::Backend`]: crate::Error::Backend
    #[default]
    ReturnError,
    /// Admit the request without counting it: an outage of the limiter does
    /// not become an outage of the service. The decision's source is
    /// [`DecisionSource::FailOpen`] and its `remaining` is 0, not a count.
    ///
    /// [`DecisionSource::FailOpen`]: crate::DecisionSource::FailOpen
    FailOpen,
    /// Deny the request: nothing passes unlimited. The decision's source is
    /// [`DecisionSource::FailClosed`]; `retry_after` is the time until the
    /// backend is tried again.
    ///
    /// [`DecisionSource::FailClosed`]: crate::DecisionSource::FailClosed
    FailClosed,
    /// Ask another limiter (say a [`MemoryLimiter`] with this instance's
    /// share of the limit), whose decisions have the source
    /// [`DecisionSource::Fallback`] (a fallback's own degraded answer, fail
    /// open or closed, keeps its source). Its errors, request errors included
    /// (its max cost may be smaller), are returned as they are.
    ///
    /// [`MemoryLimiter`]: https://docs.rs/limiter-memory
    /// [`DecisionSource::Fallback`]: crate::DecisionSource::Fallback
    Fallback(Arc<dyn Limiter>),
}

impl FailurePolicy {
    /// [`FailurePolicy::Fallback`] to `limiter`.
    pub fn fallback(limiter: impl Limiter + 'static) -> Self {
        Self::Fallback(Arc::new(limiter))
    }

    /// `"return-error"`, `"fail-open"`, `"fail-closed"` or `"fallback"`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ReturnError => "return-error",
            Self::FailOpen => "fail-open",
            Self::FailClosed => "fail-closed",
            Self::Fallback(_) => "fallback",
        }
    }
}

//! What a layer reports of each request: a `tracing` event with the policy
//! name and the outcome, and (feature `metrics`) a counter per outcome and
//! a histogram of how long the decision took.

use std::sync::Arc;

use limiter_core::{DecisionSource, Error};

use crate::decided::Decided;

/// Requests, by `policy` (the layer's [name](crate::RateLimitLayer::name))
/// and `outcome`: `allowed`, `denied`, `banned`, `allowlisted`,
/// `failed_open`, `failed_closed`, `error`, `missing_key` or `skipped`.
pub const METRIC_REQUESTS: &str = "limiter_http_requests_total";
/// Seconds from a request's arrival to the layer's answer (the ban check
/// and the limiter; not a shaped request's wait, nor the inner service),
/// by `policy`.
pub const METRIC_DECISION_SECONDS: &str = "limiter_http_decision_seconds";
/// Ban checks that failed (the ban store unreachable; the request then
/// goes on to the limiter), by `policy`.
pub const METRIC_BAN_CHECK_ERRORS: &str = "limiter_http_ban_check_errors_total";

/// What became of a request, the `outcome` label of [`METRIC_REQUESTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Admitted by the limiter (or its fallback).
    Allowed,
    /// Denied by the limiter (or its fallback), or shaped past the
    /// maximum wait: 429.
    Denied,
    /// Refused by the ban list.
    Banned,
    /// On the allowlist: not limited.
    Allowlisted,
    /// Passed unlimited while the backend failed.
    FailedOpen,
    /// Refused while the backend failed: 503.
    FailedClosed,
    /// The limiter answered an error: 503.
    Error,
    /// No key (401) or no peer address (500).
    MissingKey,
    /// No key, passed unlimited by [`Fallback::Skip`](crate::Fallback::Skip).
    Skipped,
}

impl Outcome {
    /// The label: `allowed`, `denied`, `banned`, `allowlisted`,
    /// `failed_open`, `failed_closed`, `error`, `missing_key`, `skipped`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::Banned => "banned",
            Self::Allowlisted => "allowlisted",
            Self::FailedOpen => "failed_open",
            Self::FailedClosed => "failed_closed",
            Self::Error => "error",
            Self::MissingKey => "missing_key",
            Self::Skipped => "skipped",
        }
    }

    /// The outcome of a limiter's answer.
    pub(crate) fn of(result: &Result<impl Decided, Error>) -> Self {
        match result {
            Err(_) => Self::Error,
            Ok(answer) => match answer.decision().source {
                DecisionSource::FailOpen => Self::FailedOpen,
                DecisionSource::FailClosed => Self::FailedClosed,
                _ if answer.decision().allowed => Self::Allowed,
                _ => Self::Denied,
            },
        }
    }
}

/// When a request arrived (only kept for the latency histogram).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timer {
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Timer {
    pub(crate) fn start() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }
}

/// Reports a layer's requests under its policy name.
#[derive(Debug, Clone)]
pub(crate) struct Observer {
    policy: Arc<str>,
}

impl Observer {
    pub(crate) fn new(policy: impl Into<Arc<str>>) -> Self {
        Self {
            policy: policy.into(),
        }
    }

    pub(crate) fn policy(&self) -> &str {
        &self.policy
    }

    /// One request's outcome, `timer` after it arrived.
    pub(crate) fn record(&self, outcome: Outcome, timer: Timer) {
        tracing::debug!(
            target: "limiter_tower",
            policy = &*self.policy,
            outcome = outcome.name(),
            "rate limit decision"
        );
        #[cfg(feature = "metrics")]
        {
            let policy = metrics::SharedString::from(Arc::clone(&self.policy));
            metrics::counter!(METRIC_REQUESTS, "policy" => policy.clone(), "outcome" => outcome.name())
                .increment(1);
            metrics::histogram!(METRIC_DECISION_SECONDS, "policy" => policy)
                .record(timer.started.elapsed().as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = timer;
    }

    /// The limiter failed (no failure policy answered): the request is
    /// refused as unavailable. Per request, so at debug level: an outage
    /// is counted as `error` outcomes, and a `Resilient` limiter warns of
    /// it itself.
    pub(crate) fn decision_failed(&self, error: &Error) {
        tracing::debug!(
            target: "limiter_tower",
            policy = &*self.policy,
            error = %error.chain(),
            "rate limit decision failed: the request is refused as unavailable"
        );
    }

    /// A ban check failed; the limiter decides alone.
    pub(crate) fn ban_check_failed(&self, error: &Error) {
        tracing::debug!(
            target: "limiter_tower",
            policy = &*self.policy,
            error = %error.chain(),
            "ban check failed: the limiter decides alone"
        );
        #[cfg(feature = "metrics")]
        metrics::counter!(METRIC_BAN_CHECK_ERRORS, "policy" => metrics::SharedString::from(Arc::clone(&self.policy)))
            .increment(1);
    }
}

//! What a layer reports of each request: a `tracing` event with the policy
//! name and the outcome, and (feature `metrics`) a counter per outcome and
//! a histogram of how long the decision took.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use limiter_core::{Decision, DecisionSource, Error};

use crate::client::ip_key::is_ip_key;

#[cfg(feature = "metrics")]
use crate::metrics::{
    METRIC_BAN_CHECK_ERRORS, METRIC_CHARGE_ERRORS, METRIC_DECISION_SECONDS, METRIC_REQUESTS,
};

/// What became of a request, the `outcome` label of
/// [`METRIC_REQUESTS`](crate::metrics::METRIC_REQUESTS).
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
    /// A cost the request states wrongly or above the most a request may
    /// cost (400, 411, 413; see [`Cost`](crate::Cost)): not counted.
    InvalidCost,
}

impl Outcome {
    /// The label: `allowed`, `denied`, `banned`, `allowlisted`,
    /// `failed_open`, `failed_closed`, `error`, `missing_key`, `skipped`,
    /// `invalid_cost`.
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
            Self::InvalidCost => "invalid_cost",
        }
    }

    /// The outcome of a limiter's answer.
    pub(crate) fn of(result: &Result<Decision, Error>) -> Self {
        match result {
            Err(_) => Self::Error,
            Ok(answer) => match answer.source {
                DecisionSource::FailOpen => Self::FailedOpen,
                DecisionSource::FailClosed => Self::FailedClosed,
                _ if answer.allowed => Self::Allowed,
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
    /// Whether the missing peer address was logged: once per layer.
    missing_peer_logged: Arc<AtomicBool>,
}

impl Observer {
    pub(crate) fn new(policy: impl Into<Arc<str>>) -> Self {
        Self {
            policy: policy.into(),
            missing_peer_logged: Arc::default(),
        }
    }

    /// The key a request is limited under, at debug level: its kind (the
    /// key's prefix: `ip`, `header`, `route`, …, which shows a header key
    /// falling back to the address) and the client address the layer
    /// resolved behind its trusted proxies, masked to its network if
    /// `mask` (see [`Masked`]).
    #[inline]
    pub(crate) fn keyed(&self, key: &[u8], client: Option<IpAddr>, mask: bool) {
        tracing::debug!(
            target: "limiter_tower",
            policy = &*self.policy,
            key_kind = key_kind(key),
            client = %Masked { client, mask },
            "rate limit key"
        );
    }

    /// A request without a peer address met a key by address: logged at
    /// `error` once per layer, with the fix; each such request is answered
    /// 500 (and counted as `missing_key`).
    pub(crate) fn missing_peer_address(&self) {
        if self.missing_peer_logged.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::error!(
            target: "limiter_tower",
            policy = &*self.policy,
            "no peer address to rate limit by: every request this layer keys by address is \
             answered 500 until the server records it. axum: serve \
             `app.into_make_service_with_connect_info::<SocketAddr>()`; hyper or tower: insert \
             the connection's `SocketAddr` in each request's extensions (logged once per layer)"
        );
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

    /// A charge of `units` after a response, made or failed (`error`):
    /// a failure at `warn`, as the key goes uncharged, and counted in
    /// [`METRIC_CHARGE_ERRORS`](crate::metrics::METRIC_CHARGE_ERRORS).
    pub(crate) fn charged(&self, units: u64, error: Option<&Error>) {
        let Some(error) = error else {
            tracing::debug!(
                target: "limiter_tower",
                policy = &*self.policy,
                units,
                "charged after the response"
            );
            return;
        };
        tracing::warn!(
            target: "limiter_tower",
            policy = &*self.policy,
            units,
            error = %error.chain(),
            "a charge after the response failed: the key is not charged"
        );
        #[cfg(feature = "metrics")]
        metrics::counter!(METRIC_CHARGE_ERRORS, "policy" => metrics::SharedString::from(Arc::clone(&self.policy)))
            .increment(1);
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

/// The kind of `key`, as its text form starts: `ip`, `header`,
/// `header-bytes`, `route`, `custom` or `global`.
fn key_kind(key: &[u8]) -> &str {
    if is_ip_key(key) {
        return "ip";
    }
    let kind = key.split(|&byte| byte == b':').next().unwrap_or(key);
    std::str::from_utf8(kind).unwrap_or("?")
}

/// A client address as logged: whole, or masked to its network (an IPv4
/// address to its /24, an IPv6 one to its /48) where logs may not hold
/// whole addresses; `none` without one.
struct Masked {
    client: Option<IpAddr>,
    mask: bool,
}

impl fmt::Display for Masked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.client, self.mask) {
            (None, _) => f.write_str("none"),
            (Some(ip), false) => write!(f, "{ip}"),
            (Some(IpAddr::V4(ip)), true) => {
                let [a, b, c, _] = ip.octets();
                write!(f, "{a}.{b}.{c}.0/24")
            }
            (Some(IpAddr::V6(ip)), true) => {
                let network = u128::from(ip) & !(u128::MAX >> 48);
                write!(f, "{}/48", std::net::Ipv6Addr::from(network))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masked_address_is_its_network() {
        let shown = |ip: &str, mask| {
            Masked {
                client: Some(ip.parse().unwrap()),
                mask,
            }
            .to_string()
        };
        assert_eq!(shown("203.0.113.7", true), "203.0.113.0/24");
        assert_eq!(shown("203.0.113.7", false), "203.0.113.7");
        assert_eq!(shown("2001:db8:1:2::7", true), "2001:db8:1::/48");
        assert_eq!(
            Masked {
                client: None,
                mask: true
            }
            .to_string(),
            "none"
        );
    }
}

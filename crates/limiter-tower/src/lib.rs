//! HTTP rate limiting for [`limiter`](limiter_core) as a [`tower::Layer`]:
//! one line protects a route of an axum, hyper or tonic service.
//!
//! ```
//! use std::sync::Arc;
//! use limiter_core::Policies;
//! use limiter_memory::MemoryLimiter;
//! use limiter_tower::{KeyExtractor, LimiterLayer};
//!
//! let tiers: Policies = "sliding-log:5/1s;sliding-log:100/1m".parse()?;
//! let layer = LimiterLayer::new(MemoryLimiter::new(tiers)).key(KeyExtractor::ip());
//! // Router::new().route("/login", post(login)).route_layer(layer)
//! # let _ = layer;
//! # Ok::<(), limiter_core::PolicyError>(())
//! ```
//!
//! # What a request gets
//!
//! - Admitted: the inner service's response, with the rate-limit headers
//!   ([`HeaderStyle`]): `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
//!   `X-RateLimit-Reset` (seconds, rounded up, until the binding policy is
//!   back to full), `RateLimit-Policy` (every policy of the set) and
//!   `RateLimit` (the binding one).
//! - Denied: `429 Too Many Requests` with `Retry-After` (whole seconds,
//!   rounded up, never 0, at most 2^31 - 1) and the same headers; the body is
//!   `{"error":"rate_limited","retry_after_ms":…}` when the request's
//!   `Accept` includes `application/json`, plain text otherwise.
//! - The backend failed, under [`FailurePolicy`](limiter_core::FailurePolicy):
//!   fail-open passes with `X-RateLimit-Degraded: fail-open` and no counted
//!   headers (nothing was counted); fail-closed answers `503` with
//!   `Retry-After` and `X-RateLimit-Degraded: fail-closed`; a fallback's
//!   decision is reported with the legacy headers (its own numbers) and
//!   `X-RateLimit-Degraded: fallback`; an error (`ReturnError`) answers `503`.
//! - Allowlisted ([`LimiterLayer::allow_ips`], [`allow_keys`](LimiterLayer::allow_keys)):
//!   the inner service's response, no rate-limit headers, nothing counted.
//! - Banned ([`BanList`](ban::BanList), in memory or, with the `redis`
//!   feature, in Redis for every instance; [`Penalty`](ban::Penalty) bans a key denied too often):
//!   `403` (or `429`) with `Retry-After` until the ban ends, before the
//!   limiter counts anything.
//! - Admitted by a leaky bucket with a `wait`: the inner service runs once
//!   the wait is over, so output is smooth ([`Shaping`]; a wait beyond
//!   [`Shaping::WaitAtMost`] answers `429`).
//! - A cost it states wrongly, or one it can never pay ([`Cost`]: a
//!   weight, the body's length, a gateway's header, a function): `400`,
//!   `411` or `413` with a body saying why, never counted. An admitted or
//!   denied request's headers count its units.
//! - A cost known only after the response ([`ChargeAfter`]: the
//!   [`ActualCost`] its handler wrote, or its body's bytes): charged above
//!   the estimate its [`Cost`] reserved once the response is complete
//!   ([`LimiterLayer::charge_after`]), never refunded; a key in debt is
//!   denied until time has paid it back.
//! - No key: a request without its header (or custom key) answers `401`
//!   unless the key falls back to the address, or passes unlimited where
//!   you chose so ([`Fallback::Skip`]); a request without a peer address
//!   (the server does not record it) answers `500`: never unlimited.
//!
//! Every refusal (denied, banned, unavailable) can be answered by a
//! function of yours instead, in your API's error format or as a gRPC
//! status ([`LimiterLayer::on_limited`], seeing a [`LimitedContext`]);
//! the layer's `Retry-After` and rate-limit headers are kept unless it sets
//! them.
//!
//! A gRPC call (`content-type: application/grpc…`, e.g. through tonic's
//! `Server::builder().layer(..)`) is refused in gRPC's terms instead: HTTP
//! 200 with headers only, `grpc-status` 8 (`RESOURCE_EXHAUSTED`) for a
//! denial or a ban, 14 (`UNAVAILABLE`) for fail-closed or a limiter error,
//! a `grpc-message` saying when to retry, and the same `Retry-After` and
//! rate-limit headers. With the `tonic` feature the IP key reads tonic's
//! `TcpConnectInfo`.
//!
//! Each request is reported under the layer's [name](LimiterLayer::name):
//! a `tracing` event (target `limiter_tower`) with the outcome and, with the
//! `metrics` feature, the counter
//! [`METRIC_REQUESTS`](metrics::METRIC_REQUESTS) by `policy` and `outcome`
//! and the histogram
//! [`METRIC_DECISION_SECONDS`](metrics::METRIC_DECISION_SECONDS).
//!
//! # Named policies
//!
//! With the `config` feature, a TOML file names policies
//! (`[policies.login] limits = ["sliding-log:10/5m"]`, a key, trusted
//! proxies) and a `Registry` builds one layer per name on the memory
//! backend or (feature `redis`) on Redis: `route_layer(registry.layer("login")?)`. Every
//! entry is checked at startup; a `ConfigError` names the file, the
//! entry and the reason.
//!
//! # Where things are
//!
//! As in tower's own middleware: the [`LimiterLayer`] and its builder
//! methods, the [`LimiterService`] it wraps a route in, and the service's
//! [`future::ResponseFuture`]. The rest of the common path is at the root
//! ([`KeyExtractor`], [`Cost`], [`ChargeAfter`], [`ActualCost`], [`IpNet`],
//! [`HeaderStyle`], [`Shaping`], [`LimitedContext`]); the less central
//! parts have modules of their own: [`ban`] (bans and penalties), [`cost`]
//! (its errors), [`client_address`] (the client behind trusted proxies),
//! [`cidr`], [`key`], [`headers`] (the header names), [`metrics`] (the
//! metric names), [`body`] (the bodies the layer answers in, and meters for
//! a charge after the response) and, with the `config` feature, `config`.
//!
//! See docs/http.md for the setup with each framework and the proxy trust
//! model.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod answer;
mod bans;
mod client;
#[cfg(feature = "config")]
mod configuration;
mod costs;
pub mod metrics;
mod middleware;

#[cfg(feature = "config")]
pub use self::configuration::config;
pub use self::{
    answer::headers,
    bans::ban,
    client::{cidr, client_address, key},
    costs::cost,
    middleware::{body, future},
};

pub use self::{
    answer::headers::HeaderStyle,
    answer::limited::{LimitedContext, Refusal},
    client::cidr::IpNet,
    client::key::{Fallback, KeyExtractor, RequestView},
    costs::charge_after::{ActualCost, ChargeAfter},
    costs::cost::Cost,
    middleware::layer::LimiterLayer,
    middleware::plans::{Plan, Plans},
    middleware::service::LimiterService,
    middleware::shaping::Shaping,
};

#[cfg(feature = "config")]
pub use self::configuration::{
    config::{Config, ConfigError},
    registry::Registry,
};

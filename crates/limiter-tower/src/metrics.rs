//! The names of the metrics a layer records (feature `metrics`), through
//! the [`metrics`](https://docs.rs/metrics) facade.

/// Requests, by `policy` (the layer's [name](crate::LimiterLayer::name))
/// and `outcome`: `allowed`, `denied`, `banned`, `allowlisted`,
/// `failed_open`, `failed_closed`, `error`, `missing_key`, `skipped` or
/// `invalid_cost`.
pub const METRIC_REQUESTS: &str = "limiter_http_requests_total";
/// Seconds from a request's arrival to the layer's answer (the ban check
/// and the limiter; not a shaped request's wait, nor the inner service),
/// by `policy`.
pub const METRIC_DECISION_SECONDS: &str = "limiter_http_decision_seconds";
/// Ban checks that failed (the ban store unreachable; the request then
/// goes on to the limiter), by `policy`.
pub const METRIC_BAN_CHECK_ERRORS: &str = "limiter_http_ban_check_errors_total";
/// Charges after the response that failed (the backend unreachable; the
/// response is out, so nothing else changes), by `policy`. See
/// [`LimiterLayer::charge_after`](crate::LimiterLayer::charge_after).
pub const METRIC_CHARGE_ERRORS: &str = "limiter_http_charge_errors_total";
/// Reloads of a configuration (`Registry::reload`), by `outcome`:
/// `applied`, or `refused` (the configuration in force kept).
pub const METRIC_CONFIG_RELOADS: &str = "limiter_config_reloads_total";

//! The rate-limit headers the layer writes, by name, and [`HeaderStyle`],
//! which of them a response carries.

use http::header::HeaderName;

/// `X-RateLimit-Limit`: the binding policy's max cost.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`: units left under the binding policy.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: seconds (rounded up) until the binding policy is
/// back to full (the `RateLimit` field's `t` is until its next unit).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers): every policy
/// that applied, of the set and of the layers stacked on the route.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers): the binding policy's
/// state, `r` units left and `t` seconds until the next one.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Degraded`: set to the decision's source (`fail-open`,
/// `fail-closed`, `fallback`) when the backend did not decide.
pub const X_RATELIMIT_DEGRADED: HeaderName = HeaderName::from_static("x-ratelimit-degraded");

/// Which rate-limit headers responses carry. `Retry-After` is sent on
/// every 429 and 503 whatever the style.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// No rate-limit headers. A degraded answer still carries its
    /// `X-RateLimit-Degraded` marker, and a refusal its `Retry-After`: they
    /// say how to read the answer, not how much is left.
    None,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    Legacy,
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
    Ietf,
    /// Both the legacy and the IETF headers. The default.
    #[default]
    Both,
}

impl HeaderStyle {
    /// Whether the `X-RateLimit-*` headers are sent.
    pub(crate) fn legacy(self) -> bool {
        matches!(self, Self::Legacy | Self::Both)
    }

    /// Whether the IETF `RateLimit` and `RateLimit-Policy` are sent.
    pub(crate) fn ietf(self) -> bool {
        matches!(self, Self::Ietf | Self::Both)
    }
}

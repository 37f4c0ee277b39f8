//! [`LimiterLayer::on_limited`](crate::LimiterLayer::on_limited): a
//! function of the user's that answers the requests the layer refuses.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{Request, Response, StatusCode};
use limiter_core::Decision;

/// Why the layer refused a request (see [`LimitedContext`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Denied by the limiter (or its fallback), or admitted with a wait
    /// longer than [`Shaping::WaitAtMost`](crate::Shaping::WaitAtMost)
    /// allows: the layer answers 429.
    Denied,
    /// The key is banned: the layer answers its
    /// [`ban_status`](crate::LimiterLayer::ban_status).
    Banned,
    /// The limiter could not decide: fail-closed or an error, 503.
    Unavailable,
}

/// What an [`on_limited`](crate::LimiterLayer::on_limited) function sees
/// of a refused request.
#[derive(Debug)]
#[non_exhaustive]
pub struct LimitedContext<'a> {
    /// Why it was refused.
    pub refusal: Refusal,
    /// The status of the layer's own answer: 429, the ban status, or 503.
    pub status: StatusCode,
    /// When a retry may succeed (`Retry-After` is these seconds rounded up).
    pub retry_after: Duration,
    /// The limiter's decision, every part of a tiered set in
    /// [`parts`](Decision::parts): for a denial and a fail-closed answer
    /// (its `source` says which); `None` for a ban and a limiter error.
    pub decision: Option<&'a Decision>,
    /// The refused request's head: method, URI, headers, extensions.
    pub request: &'a Parts,
}

/// The function of [`on_limited`](crate::LimiterLayer::on_limited).
pub(crate) type OnLimited = Arc<dyn Fn(&LimitedContext<'_>) -> Response<Bytes> + Send + Sync>;

/// A refusal to be answered by the user's function, once the request is
/// at hand.
pub(crate) struct Limited {
    pub(crate) refusal: Refusal,
    pub(crate) retry_after: Duration,
    pub(crate) decision: Option<Decision>,
    /// The layer's own answer: its status, and the headers the replacement
    /// gets where it sets none.
    pub(crate) own: Response<Bytes>,
    pub(crate) on_limited: OnLimited,
}

impl fmt::Debug for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limited")
            .field("refusal", &self.refusal)
            .field("retry_after", &self.retry_after)
            .field("own", &self.own)
            .finish_non_exhaustive()
    }
}

impl Limited {
    /// The user's answer to `req`, with the layer's `Retry-After` and
    /// rate-limit headers where it set none (so a replaced body keeps
    /// them without copying); the layer's `Content-Type` describes its own
    /// body only and is never added.
    pub(crate) fn respond<B>(self, req: Request<B>) -> Response<Bytes> {
        let (request, _) = req.into_parts();
        let context = LimitedContext {
            refusal: self.refusal,
            status: self.own.status(),
            retry_after: self.retry_after,
            decision: self.decision.as_ref(),
            request: &request,
        };
        let mut response = (self.on_limited)(&context);
        for (name, value) in self.own.headers() {
            if name != CONTENT_TYPE && !response.headers().contains_key(name) {
                response.headers_mut().insert(name.clone(), value.clone());
            }
        }
        response
    }
}

//! What a decision becomes: the [`Verdict`], and the layer's own answers
//! (429, 503, 403, 401, 500).

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use limiter_core::{Decision, DecisionSource, Error};

use crate::answer::headers::HeaderStyle;
use crate::answer::limited::Limited;
use crate::answer::rate_headers::{degraded, rate_headers, PolicyHeaders, RateHeaders};
use crate::answer::seconds::{ceil_millis, retry_after_secs};

/// How long a limiter error's 503 asks the client to wait.
pub(crate) const ERROR_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the layer does with a request.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Call the inner service and add these headers to its response.
    Pass(RateHeaders),
    /// Answer this instead (boxed: a refusal is rarer than a pass, and a
    /// `Verdict` is moved on every request).
    Respond(Box<Response<Bytes>>),
    /// Answer with the layer's `on_limited` function.
    Limited(Box<Limited>),
}

fn number(value: u64) -> HeaderValue {
    HeaderValue::from(value)
}

/// Whether the request's `Accept` includes `application/json`.
pub(crate) fn accepts_json(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().any(|value| {
        value.to_str().is_ok_and(|value| {
            value.split(',').any(|range| {
                let mut parts = range.split(';');
                let media = parts.next().unwrap_or("").trim();
                // `q=0` is "not acceptable" (RFC 9110 section 12.4.2).
                let refused = parts.any(|parameter| {
                    parameter.trim().split_once('=').is_some_and(|(name, q)| {
                        name.trim().eq_ignore_ascii_case("q")
                            && q.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
                    })
                });
                media.eq_ignore_ascii_case("application/json") && !refused
            })
        })
    })
}

/// A response of the layer's own: `error` as JSON or as `text`.
fn answer(
    status: StatusCode,
    json: bool,
    error: &str,
    retry_after: Option<Duration>,
    text: &str,
) -> Response<Bytes> {
    let body = if json {
        match retry_after {
            Some(retry) => format!(
                "{{\"error\":\"{error}\",\"retry_after_ms\":{}}}",
                ceil_millis(retry)
            ),
            None => format!("{{\"error\":\"{error}\"}}"),
        }
    } else {
        format!("{text}\n")
    };
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    let content_type = if json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(retry) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, number(retry_after_secs(retry)));
    }
    response
}

/// The layer's answer to a decision (or a limiter error).
#[inline]
pub(crate) fn verdict(
    result: &Result<Decision, Error>,
    json: impl Fn() -> bool,
    style: HeaderStyle,
    policy_headers: &PolicyHeaders,
) -> Verdict {
    if let Ok(set) = result {
        let decision = set;
        if decision.allowed && !decision.source.is_degraded() && style == HeaderStyle::None {
            // The most common answer, with nothing to write: inline.
            return Verdict::Pass(RateHeaders::default());
        }
    }
    written_verdict(result, json, style, policy_headers)
}

/// [`verdict`] for an answer with something to write.
fn written_verdict(
    result: &Result<Decision, Error>,
    json: impl Fn() -> bool,
    style: HeaderStyle,
    policy_headers: &PolicyHeaders,
) -> Verdict {
    let set = match result {
        Ok(set) => set,
        Err(_) => {
            // A backend failure under ReturnError (or any other error): the
            // limiter cannot say, so the request is not let through.
            return Verdict::Respond(Box::new(answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json(),
                "rate_limiter_unavailable",
                Some(ERROR_RETRY_AFTER),
                "Service Unavailable: the rate limiter failed",
            )));
        }
    };
    let decision: &Decision = set;
    match decision.source {
        DecisionSource::FailOpen => {
            // Nothing was counted: no counted headers, only the marker.
            let mut headers = RateHeaders::default();
            degraded(&mut headers, decision.source);
            Verdict::Pass(headers)
        }
        DecisionSource::FailClosed => {
            let mut response = answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json(),
                "rate_limiter_unavailable",
                Some(decision.retry_after),
                &format!(
                    "Service Unavailable: the rate limiter failed; retry after {} s",
                    retry_after_secs(decision.retry_after)
                ),
            );
            let mut marker = RateHeaders::default();
            degraded(&mut marker, decision.source);
            marker.insert_into(response.headers_mut());
            Verdict::Respond(Box::new(response))
        }
        _ => {
            let mut headers = RateHeaders::default();
            rate_headers(&mut headers, set, style, policy_headers);
            degraded(&mut headers, decision.source);
            if decision.allowed {
                Verdict::Pass(headers)
            } else {
                let mut response = answer(
                    StatusCode::TOO_MANY_REQUESTS,
                    json(),
                    "rate_limited",
                    Some(decision.retry_after),
                    &format!(
                        "Too Many Requests: retry after {} s",
                        retry_after_secs(decision.retry_after)
                    ),
                );
                headers.insert_into(response.headers_mut());
                Verdict::Respond(Box::new(response))
            }
        }
    }
}

/// `status` (403 or 429) for a banned request, retried after `left`.
pub(crate) fn banned(status: StatusCode, json: bool, left: Duration) -> Response<Bytes> {
    answer(
        status,
        json,
        "banned",
        Some(left),
        &format!(
            "{}: banned; retry after {} s",
            status.canonical_reason().unwrap_or("Banned"),
            retry_after_secs(left)
        ),
    )
}

/// 401 for a request without its key, with the challenge RFC 9110
/// requires of a 401 (`WWW-Authenticate`, from
/// [`KeyExtractor::challenge`](crate::KeyExtractor)).
pub(crate) fn missing_key(json: bool, challenge: HeaderValue) -> Response<Bytes> {
    let mut response = answer(
        StatusCode::UNAUTHORIZED,
        json,
        "missing_rate_limit_key",
        None,
        "Unauthorized: the request lacks the key it is rate limited by",
    );
    response.headers_mut().insert(WWW_AUTHENTICATE, challenge);
    response
}

/// 500 for a request without a peer address (the server was not set up
/// to record it).
pub(crate) fn missing_peer(json: bool) -> Response<Bytes> {
    answer(
        StatusCode::INTERNAL_SERVER_ERROR,
        json,
        "no_peer_address",
        None,
        "Internal Server Error: no peer address to rate limit by (serve with \
         ConnectInfo<SocketAddr> or insert a SocketAddr extension)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_chosen_by_its_media_range_not_a_substring() {
        let accepts = |accept: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(ACCEPT, HeaderValue::from_static(accept));
            accepts_json(&headers)
        };
        assert!(accepts("application/json"));
        assert!(accepts("text/html, Application/JSON;q=0.9"));
        assert!(!accepts("application/jsonp"));
        assert!(!accepts("application/json;q=0, text/plain"));
        assert!(!accepts("application/json; q=0.0"));
        assert!(!accepts("text/html"));
        assert!(!accepts_json(&HeaderMap::new()));
    }

    #[test]
    fn retry_after_is_at_most_two_to_the_thirty_one_less_one_seconds() {
        let max = (1 << 31) - 1;
        assert_eq!(retry_after_secs(Duration::from_secs(max)), max);
        assert_eq!(
            retry_after_secs(Duration::from_millis(max * 1_000 - 1)),
            max
        );
        assert_eq!(
            retry_after_secs(Duration::from_millis(max * 1_000 + 1)),
            max
        );
        assert_eq!(retry_after_secs(Duration::from_secs(1 << 31)), max);
        assert_eq!(retry_after_secs(Duration::MAX), max);
        let response = banned(StatusCode::FORBIDDEN, false, Duration::MAX);
        assert_eq!(response.headers()[RETRY_AFTER], "2147483647");
        assert_eq!(
            std::str::from_utf8(response.body()).unwrap(),
            "Forbidden: banned; retry after 2147483647 s\n"
        );
    }
}

//! gRPC-native refusals. A gRPC client reads a call's outcome from
//! `grpc-status`, not from the HTTP status: the layer's 429 or 503 would
//! reach it as a bare `UNAVAILABLE` (gRPC's mapping of those statuses)
//! without the reason, so a gRPC call is refused with a trailers-only
//! response instead: HTTP 200, headers only, the status in them.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::answer::limited::Refusal;
use crate::answer::seconds::retry_after_secs;

/// `grpc-status`: the call's status code.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: the status message, percent-encoded.
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// Whether the request is a gRPC call: its `content-type` is
/// `application/grpc` or one of its subtypes (`application/grpc+proto`),
/// parameters allowed. Not gRPC-Web (`application/grpc-web`), whose
/// responses carry its own content type: it gets the HTTP refusal.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|value| {
        value
            .as_bytes()
            .strip_prefix(b"application/grpc")
            .is_some_and(|rest| matches!(rest.first(), None | Some(b'+' | b';' | b' ')))
    })
}

/// `own`, the layer's HTTP refusal, as a gRPC trailers-only response:
/// `RESOURCE_EXHAUSTED` (8) for a denial or a ban, `UNAVAILABLE` (14) when
/// the limiter could not decide, with a message saying when to retry. The
/// HTTP answer's `Retry-After`, rate-limit headers and degraded marker are
/// kept (a client may read them as metadata); its body is dropped.
pub(crate) fn refusal(
    own: Response<Bytes>,
    refusal: Refusal,
    retry_after: Duration,
) -> Response<Bytes> {
    let (code, what) = match refusal {
        Refusal::Denied => (8, "rate limited"),
        Refusal::Banned => (8, "banned"),
        Refusal::Unavailable => (14, "rate limiter unavailable"),
    };
    let message = format!("{what}, retry after {} s", retry_after_secs(retry_after));
    let (mut parts, _) = own.into_parts();
    parts.status = StatusCode::OK;
    let headers = &mut parts.headers;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(code));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(&message)) {
        headers.insert(GRPC_MESSAGE, value);
    }
    Response::from_parts(parts, Bytes::new())
}

/// `message` as the gRPC spec writes `grpc-message`: every byte of its
/// UTF-8 outside printable ASCII (0x20 to 0x7E), and `%` itself, as `%XX`.
fn percent_encode(message: &str) -> String {
    let mut encoded = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_is_percent_encoded_as_the_spec_says() {
        assert_eq!(
            percent_encode("rate limited, retry after 2 s"),
            "rate limited, retry after 2 s"
        );
        assert_eq!(percent_encode("100% über\n"), "100%25 %C3%BCber%0A");
    }

    #[test]
    fn only_grpc_content_types_are_grpc() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            is_grpc(&headers)
        };
        assert!(with("application/grpc"));
        assert!(with("application/grpc+proto"));
        assert!(with("application/grpc; charset=utf-8"));
        assert!(!with("application/grpc-web"));
        assert!(!with("application/grpc-web+proto"));
        assert!(!with("application/json"));
        assert!(!is_grpc(&HeaderMap::new()));
    }
}

//! What the layer logs of its requests, read by a subscriber of the
//! tests' own: a missing peer address once at `error`, with the fix, and
//! at `debug` the key kind and the client address each request is limited
//! by, masked to its network on request; never a key itself, not even in
//! a backend outage's warnings.

mod support;

use std::net::SocketAddr;

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use axum::routing;
use axum::Router;
use http::{Request, StatusCode};
use limiter_core::{Decision, Error, FailurePolicy, FailureReach, Limiter, LimiterExt, Policies};
use limiter_memory::MemoryLimiter;
use limiter_tower::{KeyExtractor, LimiterLayer};
use support::events::Events;
use tower::ServiceExt;
use tracing::Level;

/// `GET /` (200 "ok") behind `layer`.
fn app(layer: LimiterLayer) -> Router {
    Router::new()
        .route("/", routing::get(|| async { "ok" }))
        .layer(layer)
}

fn layer(policy: &str) -> LimiterLayer {
    LimiterLayer::new(MemoryLimiter::new(
        policy.parse::<limiter_core::Policy>().unwrap(),
    ))
}

/// `GET /` from peer `peer` (none: a server that records no peer
/// address), with `headers`.
fn request(peer: Option<&str>, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::get("/");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Body::empty()).unwrap();
    if let Some(peer) = peer {
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
    }
    request
}

#[tokio::test]
async fn a_missing_peer_address_is_logged_once_at_error_with_the_fix() {
    let events = Events::at(Level::WARN);
    let _default = tracing::subscriber::set_default(events.clone());
    let by_address = app(layer("sliding-log:100/10s").name("default"));
    for _ in 0..3 {
        let response = by_address
            .clone()
            .oneshot(request(None, &[]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let lines = events.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("no peer address to rate limit by"),
        "{lines:?}"
    );
    assert!(
        lines[0].contains("into_make_service_with_connect_info::<SocketAddr>()")
            && lines[0].ends_with("policy=default"),
        "{lines:?}"
    );
    // A header key needs no address: nothing more is logged.
    let by_user = app(layer("sliding-log:100/10s").key(KeyExtractor::header("x-user-id")));
    let response = by_user
        .oneshot(request(None, &[("x-user-id", "alice")]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(events.lines().len(), 1);
}

#[tokio::test]
async fn the_key_kind_and_client_address_are_logged_at_debug_masked_on_request() {
    let events = Events::at(Level::DEBUG);
    let _default = tracing::subscriber::set_default(events.clone());
    let behind_proxy = |mask: bool| {
        app(layer("sliding-log:100/10s")
            .name(if mask { "masked" } else { "whole" })
            .trusted_proxies(["127.0.0.1".parse().unwrap()])
            .mask_addresses(mask))
    };
    let forwarded = [("x-forwarded-for", "203.0.113.7")];
    for mask in [false, true] {
        let response = behind_proxy(mask)
            .oneshot(request(Some("127.0.0.1:40000"), &forwarded))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // A header key that falls back to the address says so.
    let by_user = app(layer("sliding-log:100/10s")
        .name("user")
        .key(KeyExtractor::header("x-user-id").or_ip()));
    by_user
        .oneshot(request(Some("[2001:db8::7]:40000"), &[]))
        .await
        .unwrap();
    let keyed: Vec<String> = events
        .lines()
        .into_iter()
        .filter(|line| line.starts_with("rate limit key"))
        .collect();
    assert_eq!(
        keyed,
        [
            "rate limit key policy=whole key_kind=ip client=203.0.113.7",
            "rate limit key policy=masked key_kind=ip client=203.0.113.0/24",
            "rate limit key policy=user key_kind=ip client=2001:db8::7",
        ]
    );
}

/// A backend that fails every call: the whole backend down, or this one
/// request.
#[derive(Debug)]
struct Failing {
    policies: Policies,
    reach: FailureReach,
}

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("down")
    }
}

impl std::error::Error for Down {}

impl Failing {
    fn fail(&self) -> Error {
        Error::backend(self.reach, Down)
    }
}

#[async_trait]
impl Limiter for Failing {
    fn policies(&self) -> &Policies {
        &self.policies
    }

    async fn acquire(&self, _: &[u8], _: u64) -> Result<Decision, Error> {
        Err(self.fail())
    }

    async fn peek(&self, _: &[u8], _: u64) -> Result<Decision, Error> {
        Err(self.fail())
    }

    async fn reset(&self, _: &[u8]) -> Result<(), Error> {
        Err(self.fail())
    }
}

#[tokio::test]
async fn an_outages_warnings_name_no_key() {
    const SECRET: &str = "sk-live-4242";
    let events = Events::at(Level::DEBUG);
    let _default = tracing::subscriber::set_default(events.clone());
    for reach in [FailureReach::Backend, FailureReach::Request] {
        let failing = Arc::new(Failing {
            policies: "sliding-log:100/10s".parse::<Policies>().unwrap(),
            reach,
        });
        let layer = LimiterLayer::new(failing.on_failure(FailurePolicy::FailOpen))
            .key(KeyExtractor::header("x-api-key"));
        let response = app(layer)
            .oneshot(request(Some("127.0.0.1:40000"), &[("x-api-key", SECRET)]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "failed open");
    }
    let lines = events.lines();
    let warned: Vec<_> = lines
        .iter()
        .filter(|line| line.starts_with("rate limiter backend failed"))
        .collect();
    assert_eq!(warned.len(), 2, "{lines:?}");
    assert!(
        warned.iter().all(|line| line.contains("key_bytes=")),
        "{warned:?}"
    );
    assert!(
        lines.iter().all(|line| !line.contains(SECRET)),
        "a key reached the logs: {lines:?}"
    );
}

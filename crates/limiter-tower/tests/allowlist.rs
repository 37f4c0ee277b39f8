//! The allowlist over HTTP: addresses (with the peer's port, behind a
//! trusted proxy with and without ports, IPv4-mapped, IPv6, blocks of
//! both) and keys skip limiting; everyone else is limited, a trusted proxy
//! standing in for a client nobody named included (by address or by key).

mod support;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::{routing, Router};
use http::StatusCode;
use limiter_core::ManualClock;
use limiter_tower::{KeyExtractor, LimiterLayer};
use support::{client, get_with_bytes, limiter, serve, serve_router_on, Backend, HttpClient};

/// One request a minute per key: a second request is denied unless allowlisted.
async fn once_a_minute() -> LimiterLayer {
    let clock = ManualClock::new(1_700_000_000_000_000);
    LimiterLayer::from_arc(limiter(Backend::Memory, "fixed-window:1/1m", &clock).await)
}

/// What three requests with `headers` got: `skipped` (200 without
/// rate-limit headers: allowlisted), `counted` (200 with them) or `denied`.
async fn three(
    client: &HttpClient,
    addr: SocketAddr,
    headers: &[(&str, &str)],
) -> Vec<&'static str> {
    let bytes: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(name, value)| (*name, value.as_bytes()))
        .collect();
    three_bytes(client, addr, &bytes).await
}

/// [`three`] with header values as bytes.
async fn three_bytes(
    client: &HttpClient,
    addr: SocketAddr,
    headers: &[(&str, &[u8])],
) -> Vec<&'static str> {
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let reply = get_with_bytes(client, addr, headers).await;
        outcomes.push(match (reply.status, reply.header("x-ratelimit-limit")) {
            (StatusCode::OK, None) => "skipped",
            (StatusCode::OK, Some(_)) => "counted",
            (StatusCode::TOO_MANY_REQUESTS, Some(_)) => "denied",
            _ => panic!("{reply:?}"),
        });
    }
    outcomes
}

const SKIPPED: [&str; 3] = ["skipped"; 3];
const LIMITED: [&str; 3] = ["counted", "denied", "denied"];

#[tokio::test]
async fn the_peer_address_is_allowlisted_whatever_its_port() {
    // Every request comes from 127.0.0.1 on some ephemeral port: the
    // allowlist holds the address alone (the article's whitelist was lost to
    // `10.0.0.15:53214`).
    let addr = serve(
        once_a_minute()
            .await
            .allow_ips(["127.0.0.1".parse().unwrap()]),
    )
    .await;
    let client = client();
    assert_eq!(three(&client, addr, &[]).await, SKIPPED);
}

#[tokio::test]
async fn a_v6_peer_is_allowlisted_by_its_block() {
    let router = |layer| {
        Router::new()
            .route("/", routing::get(|| async { "ok" }))
            .layer(layer)
    };
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let allowed = serve_router_on(
        v6,
        router(once_a_minute().await.allow_ips(["::/64".parse().unwrap()])),
    )
    .await;
    let limited = serve_router_on(
        v6,
        router(
            once_a_minute()
                .await
                .allow_ips(["::2/128".parse().unwrap()]),
        ),
    )
    .await;
    let client = client();
    assert_eq!(three(&client, allowed, &[]).await, SKIPPED);
    assert_eq!(three(&client, limited, &[]).await, LIMITED);
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_client_address_is_matched_normalized() {
    let layer = once_a_minute()
        .await
        .trusted_proxies(["127.0.0.1".parse().unwrap()])
        .allow_ips([
            "10.0.0.0/8".parse().unwrap(),
            "2001:db8::/32".parse().unwrap(),
        ]);
    let addr = serve(layer).await;
    let client = client();
    for client_addr in [
        "10.0.0.15",
        "10.0.0.15:53214",
        "::ffff:10.0.0.15",
        "[::ffff:10.1.2.3]:443",
        "2001:db8::7",
        "[2001:db8:ffff::1]:8443",
    ] {
        let xff = [("x-forwarded-for", client_addr)];
        assert_eq!(three(&client, addr, &xff).await, SKIPPED, "{client_addr}");
    }
    for client_addr in [
        "11.0.0.1",
        "203.0.113.9:4000",
        "::ffff:11.0.0.2",
        "2001:db9::1",
    ] {
        let xff = [("x-forwarded-for", client_addr)];
        assert_eq!(three(&client, addr, &xff).await, LIMITED, "{client_addr}");
    }
}

#[tokio::test]
async fn allowlisted_keys_skip_limiting_and_others_are_limited() {
    let layer = once_a_minute()
        .await
        .key(KeyExtractor::header("x-api-key"))
        .allow_keys(["header:partner"]);
    let addr = serve(layer).await;
    let client = client();
    assert_eq!(
        three(&client, addr, &[("x-api-key", "partner")]).await,
        SKIPPED
    );
    assert_eq!(
        three(&client, addr, &[("x-api-key", "someone")]).await,
        LIMITED
    );
    // A value that is only a part of the allowlisted key is not it.
    assert_eq!(
        three(&client, addr, &[("x-api-key", "header:partner")]).await,
        LIMITED
    );
}

#[tokio::test]
async fn an_allowlisted_address_passes_without_the_key() {
    // A health checker on an allowlisted address sends no API key: it is
    // not answered 401 (other addresses without the key still are, in
    // tests/http/keys.rs).
    let layer = once_a_minute()
        .await
        .key(KeyExtractor::header("x-api-key"))
        .allow_ips(["127.0.0.1".parse().unwrap()]);
    let addr = serve(layer).await;
    let client = client();
    assert_eq!(three(&client, addr, &[]).await, SKIPPED);
    assert_eq!(
        three(&client, addr, &[("x-api-key", "someone")]).await,
        SKIPPED
    );
}

/// A layer behind a trusted proxy (127.0.0.1, the test's client) that is
/// allowlisted itself: its own requests pass only when a header names it.
async fn behind_an_allowlisted_proxy() -> SocketAddr {
    let proxy = "127.0.0.1".parse().unwrap();
    serve(
        once_a_minute()
            .await
            .trusted_proxies([proxy])
            .allow_ips([proxy]),
    )
    .await
}

#[tokio::test]
async fn a_forwarded_for_byte_that_is_not_ascii_does_not_hide_the_proxys_entry() {
    let addr = behind_an_allowlisted_proxy().await;
    let client = client();
    // The client wrote `\xff`; the proxy appended the client's address.
    let forged: &[(&str, &[u8])] = &[("x-forwarded-for", b"\xff, 203.0.113.9")];
    assert_eq!(three_bytes(&client, addr, forged).await, LIMITED);
    // Limited as 203.0.113.9, the address the proxy appended.
    let honest = [("x-forwarded-for", "203.0.113.9")];
    assert_eq!(three(&client, addr, &honest).await, ["denied"; 3]);
}

#[tokio::test]
async fn an_unclosed_quote_in_forwarded_does_not_hide_the_proxys_element() {
    let addr = behind_an_allowlisted_proxy().await;
    let client = client();
    // The client wrote `for="6.6.6.6`; the proxy appended its element.
    let forged = [("forwarded", "for=\"6.6.6.6, for=203.0.113.9")];
    assert_eq!(three(&client, addr, &forged).await, LIMITED);
    let honest = [("forwarded", "for=203.0.113.9")];
    assert_eq!(three(&client, addr, &honest).await, ["denied"; 3]);
}

#[tokio::test]
async fn a_forged_second_header_limits_the_request_as_the_proxys() {
    let addr = behind_an_allowlisted_proxy().await;
    let client = client();
    // The proxy wrote X-Forwarded-For, the client a Forwarded that
    // disagrees: the request is keyed by the proxy, and limited.
    let forged = [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=198.51.100.7"),
    ];
    assert_eq!(three(&client, addr, &forged).await, LIMITED);
    // So is a request naming no client at all: nobody vouched for it.
    assert_eq!(three(&client, addr, &[]).await, ["denied"; 3]);
}

#[tokio::test]
async fn a_proxy_allowlisted_by_its_key_does_not_pass_a_client_nobody_named() {
    let proxy = "127.0.0.1".parse().unwrap();
    let layer = once_a_minute()
        .await
        .trusted_proxies([proxy])
        .allow_keys(["ip:127.0.0.1"]);
    let addr = serve(layer).await;
    let client = client();
    // The proxy's own request, named by its own header: allowlisted.
    let named = [("x-forwarded-for", "127.0.0.1")];
    assert_eq!(three(&client, addr, &named).await, SKIPPED);
    // A client behind it that sends headers that disagree: keyed by the
    // proxy (ip:127.0.0.1), and limited all the same.
    let forged = [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=198.51.100.7"),
    ];
    assert_eq!(three(&client, addr, &forged).await, LIMITED);
}

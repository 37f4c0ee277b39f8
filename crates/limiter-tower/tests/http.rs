//! The layer behind a real HTTP server (axum on an ephemeral loopback
//! port) and a real client (hyper-util's). Limiters run on a
//! [`ManualClock`] that does not move unless a test moves it, so the counts
//! do not depend on how fast this machine runs the requests. The load tests
//! run once on memory and once on a real `redis-server` (same body).

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use limiter_core::{Algorithm, Decision, FailurePolicy, Limiter, ManualClock, Policies, Resilient};
use limiter_memory::MemoryLimiter;
use limiter_test::Flaky;
use limiter_tower::{HeaderStyle, KeyExtractor, LimiterLayer, Shaping};
use support::{
    client, get, get_path, get_with, limiter, load, request_path, serve, serve_router, Backend,
    HttpClient, Reply,
};

/// A request time far from the epoch, in µs.
const T0: u64 = 1_700_000_000_000_000;

/// A memory limiter of `policies` on `clock`.
fn memory(policies: &str, clock: &ManualClock) -> MemoryLimiter {
    let policies: Policies = policies.parse().unwrap();
    MemoryLimiter::builder(policies)
        .clock(clock.clone())
        .build()
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// The legacy headers and `Retry-After` of `reply` equal `decision`'s.
fn assert_headers_match(reply: &Reply, decision: &Decision) {
    assert_eq!(
        reply.number("x-ratelimit-limit"),
        decision.limit,
        "{reply:?}"
    );
    assert_eq!(
        reply.number("x-ratelimit-remaining"),
        decision.remaining,
        "{reply:?}"
    );
    assert_eq!(
        reply.number("x-ratelimit-reset"),
        ceil_secs(decision.reset_after),
        "{reply:?}"
    );
    if decision.allowed {
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.header("retry-after"), None);
    } else {
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
        assert_eq!(
            reply.number("retry-after"),
            ceil_secs(decision.retry_after).max(1)
        );
    }
}

/// `total` requests from `concurrency` tasks against `policy` on `backend`:
/// the count of each status.
async fn load_on(
    backend: Backend,
    policy: &str,
    total: usize,
    concurrency: usize,
) -> BTreeMap<u16, usize> {
    let clock = ManualClock::new(T0);
    let addr = serve(LimiterLayer::from_arc(
        limiter(backend, policy, &clock).await,
    ))
    .await;
    load(addr, total, concurrency).await
}

/// The article's load test: 500 requests at concurrency 50 against 100 per 10 s.
async fn the_articles_load_test(backend: Backend) {
    let counts = load_on(backend, "sliding-log:100/10s", 500, 50).await;
    assert_eq!(
        counts,
        BTreeMap::from([(200, 100), (429, 400)]),
        "{backend:?}"
    );
}

/// The gin case: 20 concurrent requests against 5 per 10 s.
async fn the_gin_case(backend: Backend) {
    let counts = load_on(backend, "sliding-log:5/10s", 20, 20).await;
    assert_eq!(counts, BTreeMap::from([(200, 5), (429, 15)]), "{backend:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_articles_load_test_admits_exactly_100_of_500_on_memory() {
    the_articles_load_test(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_articles_load_test_admits_exactly_100_of_500_on_redis() {
    the_articles_load_test(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gin_case_admits_exactly_5_of_20_concurrent_on_memory() {
    the_gin_case(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gin_case_admits_exactly_5_of_20_concurrent_on_redis() {
    the_gin_case(Backend::Redis).await;
}

#[tokio::test]
async fn sliding_log_headers_equal_the_decision() {
    let clock = ManualClock::new(T0);
    let addr = serve(LimiterLayer::new(memory("sliding-log:2/10s", &clock))).await;
    // A twin limiter on the same clock decides the same requests.
    let twin = memory("sliding-log:2/10s", &clock);
    let client = client();

    let first = get(&client, addr).await;
    assert_headers_match(&first, &twin.try_acquire(b"k", 1).unwrap());
    assert_eq!(first.number("x-ratelimit-remaining"), 1);
    assert_eq!(first.number("x-ratelimit-reset"), 10);
    assert_eq!(
        first.header("ratelimit"),
        Some("\"sliding-log:2/10s\";r=1;t=10")
    );
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"sliding-log:2/10s\";q=2;w=10")
    );
    assert_eq!(first.body, "ok");

    clock.advance(Duration::from_millis(500));
    let second = get(&client, addr).await;
    assert_headers_match(&second, &twin.try_acquire(b"k", 1).unwrap());
    assert_eq!(second.number("x-ratelimit-remaining"), 0);

    // 1.2 s after the first: it leaves the window 8.8 s from now.
    clock.advance(Duration::from_millis(700));
    let denied = get(&client, addr).await;
    let decision = twin.try_acquire(b"k", 1).unwrap();
    assert!(!decision.allowed);
    assert_headers_match(&denied, &decision);
    assert_eq!(denied.number("retry-after"), 9); // 8.8 s rounded up
    assert_eq!(denied.number("x-ratelimit-reset"), 10); // 9.3 s rounded up
                                                        // The draft's `t`: until the next unit, the refusal's Retry-After.
    assert_eq!(
        denied.header("ratelimit"),
        Some("\"sliding-log:2/10s\";r=0;t=9")
    );
    assert!(denied
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    assert_eq!(denied.body, "Too Many Requests: retry after 9 s\n");

    // 0.1 s before the first request leaves the window: still denied, and
    // Retry-After is 1, never 0.
    clock.advance(Duration::from_millis(8_700));
    let last = get(&client, addr).await;
    let decision = twin.try_acquire(b"k", 1).unwrap();
    assert_eq!(decision.retry_after, Duration::from_millis(100));
    assert_headers_match(&last, &decision);
    assert_eq!(last.number("retry-after"), 1);
}

/// A decision taken from a lease was counted by the fleet-wide limiter: it
/// gets the IETF headers like the backend's own, and no degraded marker.
#[tokio::test]
async fn a_leased_decision_has_the_ietf_headers_and_no_degraded_marker() {
    let clock = ManualClock::new(T0);
    let leased = limiter_lease::Leased::builder(memory("sliding-log:100/10s", &clock))
        .min_lease(10)
        .build();
    let leased = Arc::new(leased);
    let addr = serve(LimiterLayer::from_arc(leased.clone())).await;
    let client = client();
    let first = get(&client, addr).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(
        leased.held(&limiter_tower::key::bytes_of("ip:127.0.0.1")) > 0,
        "the first request took a lease"
    );
    let second = get(&client, addr).await;
    assert_eq!(second.status, StatusCode::OK);
    assert!(
        second
            .header("ratelimit")
            .is_some_and(|v| v.starts_with("\"sliding-log:100/10s\";r=")),
        "{:?}",
        second.header("ratelimit")
    );
    assert_eq!(second.header("x-ratelimit-degraded"), None);
}

/// Every algorithm: each response's headers equal what a twin limiter (in
/// memory) on the same clock decides for the same requests, admitted and
/// denied, with the layer's limiter on `backend`.
async fn every_algorithms_headers_equal_the_decision(backend: Backend) {
    let client = client();
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(T0);
        let policy = format!("{}:3/10s", algorithm.name());
        // Headers, not shaping: a leaky bucket's admissions pass at once.
        let layer = LimiterLayer::from_arc(limiter(backend, &policy, &clock).await)
            .shaping(Shaping::PassAtOnce);
        let addr = serve(layer).await;
        let twin = memory(&policy, &clock);
        let mut denied = 0;
        for step_ms in [0, 1_300, 200, 50, 2_900, 50, 7_000, 10, 10_000] {
            clock.advance(Duration::from_millis(step_ms));
            let reply = get(&client, addr).await;
            let decision = twin.try_acquire(b"k", 1).unwrap();
            denied += u32::from(!decision.allowed);
            assert_headers_match(&reply, &decision);
        }
        assert!(denied > 0, "{policy}: the sequence reaches a denial");
    }
}

#[tokio::test]
async fn every_algorithms_headers_equal_the_decision_on_memory() {
    every_algorithms_headers_equal_the_decision(Backend::Memory).await;
}

#[tokio::test]
async fn every_algorithms_headers_equal_the_decision_on_redis() {
    every_algorithms_headers_equal_the_decision(Backend::Redis).await;
}

#[tokio::test]
async fn token_bucket_headers_equal_the_decision_and_json_is_answered_as_json() {
    let clock = ManualClock::new(T0);
    let policy = "token-bucket:1/2s,capacity=2";
    let addr = serve(LimiterLayer::new(memory(policy, &clock))).await;
    let twin = memory(policy, &clock);
    let client = client();

    let first = get(&client, addr).await;
    assert_headers_match(&first, &twin.try_acquire(b"k", 1).unwrap());
    assert_eq!(
        (
            first.number("x-ratelimit-limit"),
            first.number("x-ratelimit-remaining")
        ),
        (2, 1)
    );
    assert_eq!(first.number("x-ratelimit-reset"), 2);
    let second = get(&client, addr).await;
    assert_headers_match(&second, &twin.try_acquire(b"k", 1).unwrap());
    assert_eq!(second.number("x-ratelimit-reset"), 4);
    // Back to full in 4 s, its next token in 2 s: the draft's `t`.
    assert_eq!(
        second.header("ratelimit"),
        Some("\"token-bucket:1/2s,capacity=2\";r=0;t=2")
    );

    clock.advance(Duration::from_millis(500));
    let json = [("accept", "text/html, application/json;q=0.9")];
    let denied = get_with(&client, addr, &json).await;
    let decision = twin.try_acquire(b"k", 1).unwrap();
    assert_eq!(decision.retry_after, Duration::from_millis(1_500));
    assert_headers_match(&denied, &decision);
    assert_eq!(denied.number("retry-after"), 2);
    assert_eq!(denied.number("x-ratelimit-reset"), 4); // 3.5 s rounded up
    assert_eq!(denied.header("content-type"), Some("application/json"));
    assert_eq!(
        denied.body,
        r#"{"error":"rate_limited","retry_after_ms":1500}"#
    );
}

#[tokio::test]
async fn a_tiered_set_lists_both_policies_and_names_the_binding_one() {
    let clock = ManualClock::new(T0);
    let addr = serve(LimiterLayer::new(memory(
        "sliding-log:2/1s;sliding-log:3/1m",
        &clock,
    )))
    .await;
    let client = client();
    let policy = "\"sliding-log:2/1s\";q=2;w=1, \"sliding-log:3/1m\";q=3;w=60";

    let first = get(&client, addr).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("ratelimit-policy"), Some(policy));
    assert_eq!(
        first.header("ratelimit"),
        Some("\"sliding-log:2/1s\";r=1;t=1")
    );
    let second = get(&client, addr).await;
    assert_eq!(
        second.header("ratelimit"),
        Some("\"sliding-log:2/1s\";r=0;t=1")
    );

    // The per-second part has room again; the per-minute part binds.
    clock.advance(Duration::from_millis(1_500));
    let third = get(&client, addr).await;
    assert_eq!(third.status, StatusCode::OK);
    assert_eq!(third.header("ratelimit-policy"), Some(policy));
    assert_eq!(
        third.header("ratelimit"),
        Some("\"sliding-log:3/1m\";r=0;t=60")
    );
    assert_eq!(third.number("x-ratelimit-limit"), 3);

    let denied = get(&client, addr).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("ratelimit-policy"), Some(policy));
    assert_eq!(denied.number("x-ratelimit-limit"), 3);
    // The first request leaves the minute 58.5 s from now.
    assert_eq!(denied.number("retry-after"), 59);
}

#[tokio::test]
async fn header_styles_select_the_headers() {
    let clock = ManualClock::new(T0);
    let cases = [
        (HeaderStyle::None, false, false),
        (HeaderStyle::Legacy, true, false),
        (HeaderStyle::Ietf, false, true),
        (HeaderStyle::Both, true, true),
    ];
    let client = client();
    for (style, legacy, ietf) in cases {
        let layer = LimiterLayer::new(memory("fixed-window:1/1m", &clock)).headers(style);
        let addr = serve(layer).await;
        for expected in [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
            let reply = get(&client, addr).await;
            assert_eq!(reply.status, expected, "{style:?}");
            assert_eq!(
                reply.header("x-ratelimit-remaining").is_some(),
                legacy,
                "{style:?}"
            );
            assert_eq!(
                reply.header("x-ratelimit-limit").is_some(),
                legacy,
                "{style:?}"
            );
            assert_eq!(reply.header("ratelimit").is_some(), ietf, "{style:?}");
            assert_eq!(
                reply.header("ratelimit-policy").is_some(),
                ietf,
                "{style:?}"
            );
            let retry = reply.header("retry-after").is_some();
            assert_eq!(
                retry,
                expected == StatusCode::TOO_MANY_REQUESTS,
                "{style:?}"
            );
        }
    }
}

#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let clock = ManualClock::new(T0);
    let addr = serve(LimiterLayer::new(memory("sliding-log:2/10s", &clock))).await;
    let client = client();
    // Each claims another address; all are 127.0.0.1, which trusts no proxy.
    let mut statuses = Vec::new();
    for claimed in ["1.2.3.4", "5.6.7.8", "9.9.9.9, 8.8.8.8"] {
        let reply = get_with(&client, addr, &[("x-forwarded-for", claimed)]).await;
        statuses.push(reply.status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

/// The status of `GET /` on `addr` with `X-Forwarded-For: claimed`.
async fn forwarded_for(client: &HttpClient, addr: SocketAddr, claimed: &str) -> StatusCode {
    get_with(client, addr, &[("x-forwarded-for", claimed)])
        .await
        .status
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_right_most_untrusted_address_is_the_key() {
    let clock = ManualClock::new(T0);
    let layer = LimiterLayer::new(memory("sliding-log:2/10s", &clock))
        .trusted_proxies(["127.0.0.1".parse().unwrap(), "10.0.0.0/8".parse().unwrap()]);
    let addr = serve(layer).await;
    let client = client();
    let status = |claimed: &'static str| forwarded_for(&client, addr, claimed);
    assert_eq!(status("1.2.3.4").await, StatusCode::OK);
    assert_eq!(status("1.2.3.4, 10.0.0.7").await, StatusCode::OK);
    // A forged left-most entry does not give 1.2.3.4 a new budget.
    assert_eq!(
        status("6.6.6.6, 1.2.3.4").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status("7.7.7.7, 1.2.3.4:4444").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another client behind the proxy has its own.
    assert_eq!(status("1.2.3.4, 5.6.7.8").await, StatusCode::OK);
    // Without the header the key is the proxy itself.
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
}

#[tokio::test]
async fn rfc_7239_forwarded_is_ignored_from_an_untrusted_peer_and_walked_behind_a_trusted_one() {
    let clock = ManualClock::new(T0);
    let direct = serve(LimiterLayer::new(memory("sliding-log:2/10s", &clock))).await;
    let client = client();
    let status = async |addr, headers| get_with(&client, addr, headers).await.status;
    // 127.0.0.1 trusts no proxy: every claim is 127.0.0.1's.
    assert_eq!(
        status(direct, &[("forwarded", "for=1.2.3.4")]).await,
        StatusCode::OK
    );
    assert_eq!(
        status(direct, &[("forwarded", "for=\"[2001:db8::1]:80\"")]).await,
        StatusCode::OK
    );
    assert_eq!(
        status(direct, &[("forwarded", "for=5.6.7.8;proto=https")]).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    let layer = LimiterLayer::new(memory("sliding-log:2/10s", &clock))
        .trusted_proxies(["127.0.0.1".parse().unwrap(), "10.0.0.0/8".parse().unwrap()]);
    let proxied = serve(layer).await;
    assert_eq!(
        status(
            proxied,
            &[("forwarded", "for=1.2.3.4;proto=https, for=10.0.0.7")]
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        status(proxied, &[("forwarded", "for=\"1.2.3.4:4444\"")]).await,
        StatusCode::OK
    );
    // A forged left-most element does not give 1.2.3.4 a new budget.
    assert_eq!(
        status(proxied, &[("forwarded", "for=6.6.6.6, for=1.2.3.4")]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The proxy wrote X-Forwarded-For, the client a Forwarded that
    // disagrees: the request is the proxy's (127.0.0.1), twice, then denied.
    let forged = &[("x-forwarded-for", "5.6.7.8"), ("forwarded", "for=9.9.9.9")];
    assert_eq!(status(proxied, forged).await, StatusCode::OK);
    assert_eq!(status(proxied, forged).await, StatusCode::OK);
    assert_eq!(
        status(proxied, &[("forwarded", "for=unknown")]).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // 5.6.7.8 itself, seen through one header, still has its own budget.
    assert_eq!(
        status(proxied, &[("x-forwarded-for", "5.6.7.8")]).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn with_ipv6_prefix_64_the_addresses_of_one_network_share_a_budget() {
    let clock = ManualClock::new(T0);
    let layer = LimiterLayer::new(memory("sliding-log:2/10s", &clock))
        .key(KeyExtractor::ip().ipv6_prefix(64))
        .trusted_proxies(["127.0.0.1".parse().unwrap()]);
    let addr = serve(layer).await;
    let client = client();
    let status = |client_ip: &'static str| forwarded_for(&client, addr, client_ip);
    assert_eq!(status("2001:db8:1:2::1").await, StatusCode::OK);
    assert_eq!(status("2001:db8:1:2:ffff::2").await, StatusCode::OK);
    assert_eq!(
        status("2001:db8:1:2:aaaa:bbbb:cccc:dddd").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status("2001:db8:1:3::1").await, StatusCode::OK);
}

#[tokio::test]
async fn the_route_key_is_the_method_and_the_matched_route() {
    let clock = ManualClock::new(T0);
    let layer = LimiterLayer::new(memory("sliding-log:2/10s", &clock)).key(KeyExtractor::route());
    let addr = serve_router(
        Router::new()
            .route("/users/{id}", routing::get(|| async { "user" }))
            .route("/items/{id}", routing::get(|| async { "item" }))
            .route("/any", routing::any(|| async { "any" }))
            .layer(layer),
    )
    .await;
    let client = client();
    let status = |method: &'static str, path: &'static str| {
        let client = client.clone();
        async move { request_path(&client, addr, method, path).await.status }
    };
    assert_eq!(status("GET", "/users/1").await, StatusCode::OK);
    assert_eq!(status("GET", "/users/2").await, StatusCode::OK);
    // Every user id is one route, `GET /users/{id}`; `HEAD`, which the
    // `GET` handler answers, is no budget of its own.
    assert_eq!(
        status("GET", "/users/3").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status("HEAD", "/users/4").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status("GET", "/items/1").await, StatusCode::OK);
    // Extension methods share one budget, `OTHER /any`.
    assert_eq!(status("X1", "/any").await, StatusCode::OK);
    assert_eq!(status("X2", "/any").await, StatusCode::OK);
    assert_eq!(status("X3", "/any").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status("POST", "/any").await, StatusCode::OK);
}

#[tokio::test]
async fn a_header_key_rejects_or_falls_back_to_the_address() {
    let clock = ManualClock::new(T0);
    let strict = LimiterLayer::new(memory("sliding-log:1/10s", &clock))
        .key(KeyExtractor::header("x-api-key"));
    let addr = serve(strict).await;
    let client = client();
    let missing = get(&client, addr).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    // RFC 9110: a 401 carries a challenge; this one names the header.
    assert_eq!(
        missing.header("www-authenticate"),
        Some("ApiKey header=\"x-api-key\"")
    );
    assert_eq!(missing.header("x-ratelimit-remaining"), None);
    let key = |value: &'static str| [("x-api-key", value)];
    assert_eq!(
        get_with(&client, addr, &key("a")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_with(&client, addr, &key("a")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get_with(&client, addr, &key("b")).await.status,
        StatusCode::OK
    );

    let lenient = LimiterLayer::new(memory("sliding-log:1/10s", &clock))
        .key(KeyExtractor::header("x-api-key").or_ip());
    let addr = serve(lenient).await;
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    assert_eq!(
        get(&client, addr).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get_with(&client, addr, &key("a")).await.status,
        StatusCode::OK
    );

    // Skip, by choice only: without the header nothing is limited or
    // reported; with it, the header's limit holds.
    let skipping = LimiterLayer::new(memory("sliding-log:1/10s", &clock))
        .key(KeyExtractor::header("x-api-key").or_skip());
    let addr = serve(skipping).await;
    for _ in 0..3 {
        let answer = get(&client, addr).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert!(answer.headers.get("x-ratelimit-limit").is_none());
    }
    assert_eq!(
        get_with(&client, addr, &key("a")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_with(&client, addr, &key("a")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_custom_key_and_the_global_key() {
    let clock = ManualClock::new(T0);
    let by_path = LimiterLayer::new(memory("sliding-log:1/10s", &clock))
        .key(KeyExtractor::custom(|req| Some(req.uri.path().to_owned())));
    let addr = serve(by_path).await;
    let client = client();
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    assert_eq!(
        get(&client, addr).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    let global = LimiterLayer::new(memory("sliding-log:1/10s", &clock)).key(KeyExtractor::global());
    let addr = serve(global).await;
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    let spoof = [("x-forwarded-for", "1.2.3.4")];
    assert_eq!(
        get_with(&client, addr, &spoof).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn without_a_peer_address_the_ip_key_answers_500_not_unlimited() {
    let clock = ManualClock::new(T0);
    let router = Router::new()
        .route("/", routing::get(|| async { "ok" }))
        .layer(LimiterLayer::new(memory("sliding-log:1/10s", &clock)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // No ConnectInfo: the peer address is not recorded.
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let reply = get(&client(), addr).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
}

/// A server limited by `flaky` (sliding-log:5/10s) under `policy`.
async fn flaky_server(policy: Option<FailurePolicy>) -> (Arc<Flaky>, SocketAddr) {
    let clock = ManualClock::new(T0);
    let flaky = Arc::new(Flaky::new(Arc::new(memory("sliding-log:5/10s", &clock))));
    let limiter: Arc<dyn Limiter> = match policy {
        Some(policy) => {
            Arc::new(Resilient::new(Arc::clone(&flaky), policy).probe_interval(Duration::ZERO))
        }
        None => Arc::clone(&flaky) as Arc<dyn Limiter>,
    };
    (flaky, serve(LimiterLayer::from_arc(limiter)).await)
}

#[tokio::test]
async fn fail_open_passes_marked_without_a_remaining_count() {
    let (flaky, addr) = flaky_server(Some(FailurePolicy::FailOpen)).await;
    let client = client();
    let healthy = get(&client, addr).await;
    assert_eq!(healthy.status, StatusCode::OK);
    assert_eq!(healthy.number("x-ratelimit-remaining"), 4);
    assert_eq!(healthy.header("x-ratelimit-degraded"), None);

    flaky.set_failing(true);
    for _ in 0..10 {
        let open = get(&client, addr).await;
        assert_eq!(open.status, StatusCode::OK, "{open:?}");
        assert_eq!(open.body, "ok");
        assert_eq!(open.header("x-ratelimit-degraded"), Some("fail-open"));
        for counted in [
            "x-ratelimit-remaining",
            "x-ratelimit-limit",
            "ratelimit",
            "retry-after",
        ] {
            assert_eq!(open.header(counted), None, "{counted} on {open:?}");
        }
    }

    flaky.set_failing(false);
    let recovered = get(&client, addr).await;
    assert_eq!(recovered.status, StatusCode::OK);
    assert_eq!(recovered.number("x-ratelimit-remaining"), 3);
    assert_eq!(recovered.header("x-ratelimit-degraded"), None);
}

#[tokio::test]
async fn fail_closed_answers_503_with_retry_after() {
    let (flaky, addr) = flaky_server(Some(FailurePolicy::FailClosed)).await;
    let client = client();
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);

    flaky.set_failing(true);
    let closed = get_with(&client, addr, &[("accept", "application/json")]).await;
    assert_eq!(closed.status, StatusCode::SERVICE_UNAVAILABLE, "{closed:?}");
    assert!(closed.number("retry-after") >= 1);
    assert_eq!(closed.header("x-ratelimit-degraded"), Some("fail-closed"));
    assert_eq!(closed.header("x-ratelimit-remaining"), None);
    assert!(
        closed
            .body
            .starts_with(r#"{"error":"rate_limiter_unavailable","retry_after_ms":"#),
        "{}",
        closed.body
    );

    flaky.set_failing(false);
    let recovered = get(&client, addr).await;
    assert_eq!(recovered.status, StatusCode::OK);
    assert_eq!(recovered.number("x-ratelimit-remaining"), 3);
}

#[tokio::test]
async fn a_limiter_error_answers_503() {
    let (flaky, addr) = flaky_server(None).await;
    let client = client();
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    flaky.set_failing(true);
    let failed = get(&client, addr).await;
    assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(failed.number("retry-after"), 1);
    assert_eq!(failed.header("x-ratelimit-remaining"), None);
    flaky.set_failing(false);
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_router_default_and_a_stricter_route_layer_both_apply() {
    let clock = ManualClock::new(T0);
    let router = Router::new()
        .route(
            "/login",
            routing::get(|| async { "login" })
                .route_layer(LimiterLayer::new(memory("sliding-log:1/10s", &clock))),
        )
        .route("/", routing::get(|| async { "ok" }))
        .layer(LimiterLayer::new(memory("sliding-log:3/10s", &clock)));
    let addr = serve_router(router).await;
    let client = client();
    let login = |client: HttpClient| async move { get_path(&client, addr, "/login", &[]).await };
    let first = login(client.clone()).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "login")
    );
    // The login limit binds: its numbers stand over the default's 2 left.
    assert_eq!(first.number("x-ratelimit-limit"), 1);
    assert_eq!(first.number("x-ratelimit-remaining"), 0);
    assert!(first.header("ratelimit").unwrap().contains(";r=0;"));
    // The stricter limit denies the second login; the default counted it.
    // The refusal's headers are the login limit's, not the default's
    // (which admitted it, one left).
    let second = login(client.clone()).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.number("x-ratelimit-limit"), 1);
    assert_eq!(second.number("x-ratelimit-remaining"), 0);
    assert_eq!(second.number("retry-after"), 10);
    assert!(second.header("ratelimit").unwrap().contains(";r=0;"));
    assert!(second.header("ratelimit-policy").unwrap().contains(";q=1;"));
    let third = get(&client, addr).await;
    assert_eq!(third.status, StatusCode::OK);
    assert_eq!(third.number("x-ratelimit-remaining"), 0);
    assert_eq!(third.number("x-ratelimit-limit"), 3);
    assert_eq!(
        get(&client, addr).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Stacked layers: where the outer layer reports fewer units left than
/// the inner, its numbers replace the inner's, all of them (the other
/// header style too), and an inner degraded marker goes with them.
#[tokio::test]
async fn stacked_layers_show_the_numbers_of_the_one_that_binds() {
    let clock = ManualClock::new(T0);
    let inner_limiter = Arc::new(Flaky::new(Arc::new(memory("sliding-log:5/10s", &clock))));
    let inner = Resilient::new(Arc::clone(&inner_limiter), FailurePolicy::FailOpen)
        .probe_interval(Duration::ZERO);
    let router = Router::new()
        .route(
            "/",
            routing::get(|| async { "ok" })
                .route_layer(LimiterLayer::new(inner).headers(HeaderStyle::Legacy)),
        )
        .layer(LimiterLayer::new(memory("sliding-log:2/10s", &clock)).headers(HeaderStyle::Ietf));
    let addr = serve_router(router).await;
    let client = client();
    // The outer limit, 2 per 10 s, binds: its IETF headers, not the
    // inner's legacy ones (4 left).
    let first = get(&client, addr).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.header("ratelimit").unwrap().contains(";r=1;"));
    assert_eq!(first.header("x-ratelimit-remaining"), None);
    assert_eq!(first.header("x-ratelimit-limit"), None);
    // The inner limiter fails open: its marker goes with its (absent)
    // numbers; the outer's count stands alone.
    inner_limiter.set_failing(true);
    let second = get(&client, addr).await;
    assert_eq!(second.status, StatusCode::OK);
    assert!(second.header("ratelimit").unwrap().contains(";r=0;"));
    assert_eq!(second.header("x-ratelimit-degraded"), None);
}

/// A per-address default over a per-user limit on one route: every
/// response's `RateLimit-Policy` lists both (each once), `RateLimit` and
/// the legacy headers are the binding one's, admitted or refused.
#[tokio::test]
async fn stacked_layers_list_every_policy_that_applied_and_the_binding_state() {
    let clock = ManualClock::new(T0);
    let per_user = LimiterLayer::new(memory("fixed-window:3/1m", &clock))
        .key(KeyExtractor::header("x-user-id"));
    let router = Router::new()
        .route(
            "/me",
            routing::get(|| async { "you" }).route_layer(per_user),
        )
        .route("/", routing::get(|| async { "ok" }))
        .layer(LimiterLayer::new(memory("sliding-log:4/10s", &clock)));
    let addr = serve_router(router).await;
    let client = client();
    let me = |client: HttpClient| async move {
        get_path(&client, addr, "/me", &[("x-user-id", "alice")]).await
    };
    // Both policies, the binding layer's first.
    let listed = |reply: &Reply| {
        let mut policy = parse_sf_list(reply.header("ratelimit-policy").unwrap());
        let state = parse_sf_list(reply.header("ratelimit").unwrap());
        assert_eq!(policy[0].0, state[0].0, "{reply:?}");
        policy.sort();
        policy
    };
    let expected = vec![
        (
            "fixed-window:3/1m".to_owned(),
            vec![("q".to_owned(), 3), ("w".to_owned(), 60)],
        ),
        (
            "sliding-log:4/10s".to_owned(),
            vec![("q".to_owned(), 4), ("w".to_owned(), 10)],
        ),
    ];
    // The user has 2 left, the address 3: the per-user limit binds.
    let first = me(client.clone()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(listed(&first), expected);
    assert!(first
        .header("ratelimit")
        .unwrap()
        .starts_with("\"fixed-window:3/1m\";r=2;"));
    assert_eq!(first.number("x-ratelimit-limit"), 3);
    assert_eq!(first.number("x-ratelimit-remaining"), 2);
    // Another route has the per-address default alone.
    for _ in 0..2 {
        let other = get(&client, addr).await;
        assert_eq!(
            other.header("ratelimit-policy"),
            Some("\"sliding-log:4/10s\";q=4;w=10")
        );
    }
    // The address has no unit left, the user one: the default binds.
    let second = me(client.clone()).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(listed(&second), expected);
    assert_eq!(
        second.header("ratelimit"),
        Some("\"sliding-log:4/10s\";r=0;t=10")
    );
    assert_eq!(second.number("x-ratelimit-limit"), 4);
    assert_eq!(second.number("x-ratelimit-remaining"), 0);
    // The address's units are back; the user's last one, then its refusal,
    // listing both.
    clock.advance(Duration::from_secs(11));
    let third = me(client.clone()).await;
    assert_eq!(third.status, StatusCode::OK);
    assert_eq!(listed(&third), expected);
    let refused = me(client.clone()).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(listed(&refused), expected);
    assert_eq!(refused.number("x-ratelimit-limit"), 3);
    assert!(refused
        .header("ratelimit")
        .unwrap()
        .starts_with("\"fixed-window:3/1m\";r=0;"));
    assert_eq!(ietf_t(&refused), refused.number("retry-after"));
}

/// A plain tower service answering 200 "hello".
#[derive(Debug, Clone)]
struct Hello;

impl tower::Service<Request<hyper::body::Incoming>> for Hello {
    type Response = http::Response<http_body_util::Full<Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<hyper::body::Incoming>) -> Self::Future {
        std::future::ready(Ok(http::Response::new(Bytes::from("hello").into())))
    }
}

#[tokio::test]
async fn the_same_layer_on_a_hyper_server_with_a_socket_addr_extension() {
    use tower::{Layer, Service};

    let clock = ManualClock::new(T0);
    let limited = LimiterLayer::new(memory("sliding-log:2/10s", &clock)).layer(Hello);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let limited = limited.clone();
            let service =
                hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer);
                    let mut limited = limited.clone();
                    async move {
                        std::future::poll_fn(|cx| limited.poll_ready(cx)).await?;
                        limited.call(req).await
                    }
                });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    let client = client();
    let first = get(&client, addr).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "hello")
    );
    assert_eq!(first.number("x-ratelimit-remaining"), 1);
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);
    let denied = get(&client, addr).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.number("retry-after"), 10);
}

/// An inner body the layer cannot write its answers in (not a
/// `RefusalBody`) is mapped into `ResponseBody` under the layer: an
/// admitted response keeps the inner body, a refusal is the layer's own.
#[tokio::test]
async fn an_inner_body_of_another_type_goes_through_response_body() {
    use http_body_util::{BodyExt, Empty};
    use limiter_tower::body::ResponseBody;
    use tower::{ServiceBuilder, ServiceExt};

    let clock = ManualClock::new(T0);
    let service = ServiceBuilder::new()
        .layer(LimiterLayer::new(memory("fixed-window:1/10s", &clock)))
        .map_response(|response: http::Response<Empty<Bytes>>| response.map(ResponseBody::inner))
        .service_fn(|_: Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Empty::<Bytes>::new()))
        });
    let request = || {
        let mut request = Request::new(());
        request
            .extensions_mut()
            .insert(SocketAddr::from(([203, 0, 113, 7], 40_000)));
        request
    };
    let admitted = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(admitted.status(), StatusCode::OK);
    let body = admitted.into_body().collect().await.unwrap().to_bytes();
    assert!(body.is_empty(), "{body:?}");
    let denied = service.oneshot(request()).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = denied.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "Too Many Requests: retry after 10 s\n");
}

#[tokio::test]
async fn a_fallback_decision_is_reported_with_its_own_numbers_and_marked() {
    let clock = ManualClock::new(T0);
    let flaky = Arc::new(Flaky::new(Arc::new(memory("sliding-log:5/10s", &clock))));
    let share: Arc<dyn Limiter> = Arc::new(memory("sliding-log:1/10s", &clock));
    let limiter = Resilient::new(Arc::clone(&flaky), FailurePolicy::Fallback(share))
        .probe_interval(Duration::ZERO);
    let addr = serve(LimiterLayer::new(limiter)).await;
    let client = client();
    flaky.set_failing(true);
    let admitted = get(&client, addr).await;
    assert_eq!(admitted.status, StatusCode::OK);
    assert_eq!(admitted.header("x-ratelimit-degraded"), Some("fallback"));
    assert_eq!(admitted.number("x-ratelimit-limit"), 1);
    assert_eq!(admitted.number("x-ratelimit-remaining"), 0);
    // The IETF headers would name the primary's policies: left out.
    assert_eq!(admitted.header("ratelimit-policy"), None);
    assert_eq!(admitted.header("ratelimit"), None);
    let denied = get(&client, addr).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("x-ratelimit-degraded"), Some("fallback"));
    assert_eq!(denied.number("retry-after"), 10);
}

/// Parses `value` as an RFC 8941 List with the `sfv` crate (a full
/// structured-field parser) and checks it is what the draft's headers
/// use: Items, each an sf-string with integer parameters (`"name";q=5;w=1,
/// "other";q=9;w=60`); answers each item's name and parameters.
fn parse_sf_list(value: &str) -> Vec<(String, Vec<(String, u64)>)> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not an RFC 8941 List: {e}"));
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("an inner list in {value:?}")
            };
            let name = item
                .bare_item
                .as_string()
                .unwrap_or_else(|| panic!("an item that is not an sf-string in {value:?}"))
                .as_str()
                .to_owned();
            let params = item
                .params
                .iter()
                .map(|(key, value)| {
                    let number = value
                        .as_integer()
                        .unwrap_or_else(|| panic!("parameter {key:?} is not an sf-integer"));
                    (
                        key.as_str().to_owned(),
                        u64::try_from(i64::from(number)).unwrap(),
                    )
                })
                .collect();
            (name, params)
        })
        .collect()
}

/// The IETF headers of a tiered set on `backend` parse as RFC 8941 Lists
/// of what the draft says.
async fn the_ietf_headers_follow_the_structured_field_grammar(backend: Backend) {
    let clock = ManualClock::new(T0);
    let set = "token-bucket:3/250ms,capacity=6;sliding-log:10/1m;leaky-bucket:5/1s,queue=10";
    let addr = serve(LimiterLayer::from_arc(limiter(backend, set, &clock).await)).await;
    let reply = get(&client(), addr).await;
    let policy = parse_sf_list(reply.header("ratelimit-policy").unwrap());
    let expected: Vec<(String, Vec<(String, u64)>)> = [
        // A bucket's q is its capacity or queue, w its time to fill.
        ("token-bucket:3/250ms,capacity=6", 6, 1),
        ("sliding-log:10/1m", 10, 60),
        ("leaky-bucket:5/1s,queue=10", 10, 2),
    ]
    .into_iter()
    .map(|(name, q, w)| {
        (
            name.to_owned(),
            vec![("q".to_owned(), q), ("w".to_owned(), w)],
        )
    })
    .collect();
    assert_eq!(policy, expected);
    let state = parse_sf_list(reply.header("ratelimit").unwrap());
    assert_eq!(state.len(), 1);
    assert!(expected.iter().any(|(name, _)| *name == state[0].0));
    let keys: Vec<&str> = state[0].1.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["r", "t"]);
}

#[tokio::test]
async fn the_ietf_headers_follow_the_structured_field_grammar_on_memory() {
    the_ietf_headers_follow_the_structured_field_grammar(Backend::Memory).await;
}

#[tokio::test]
async fn the_ietf_headers_follow_the_structured_field_grammar_on_redis() {
    the_ietf_headers_follow_the_structured_field_grammar(Backend::Redis).await;
}

/// The `t` of `reply`'s `RateLimit` field, read with `sfv`; every item of
/// its `RateLimit-Policy` parsed too, and the binding one named there.
fn ietf_t(reply: &Reply) -> u64 {
    let policy = parse_sf_list(reply.header("ratelimit-policy").unwrap());
    let state = parse_sf_list(reply.header("ratelimit").unwrap());
    assert_eq!(state.len(), 1, "{reply:?}");
    let (name, params) = &state[0];
    assert!(policy.iter().any(|(listed, _)| listed == name), "{reply:?}");
    let keys: Vec<&str> = params.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["r", "t"], "{reply:?}");
    params[1].1
}

/// Every algorithm alone and a tiered set: on every 429 the draft's `t`
/// (until the next unit) is at most `Retry-After`, which the draft says
/// should not point earlier than `t`; and `t` never exceeds the legacy
/// `X-RateLimit-Reset` (back to full).
async fn retry_after_never_points_earlier_than_t(backend: Backend) {
    let client = client();
    let mut sets: Vec<String> = Algorithm::ALL
        .iter()
        .map(|algorithm| format!("{}:3/10s", algorithm.name()))
        .collect();
    sets.push("token-bucket:2/1s,capacity=4;sliding-log:5/10s;fixed-window:8/1m".to_owned());
    for set in sets {
        let clock = ManualClock::new(T0);
        let layer = LimiterLayer::from_arc(limiter(backend, &set, &clock).await)
            .shaping(Shaping::PassAtOnce);
        let addr = serve(layer).await;
        let mut refusals = 0;
        for step_ms in [
            0, 0, 0, 0, 1_300, 0, 200, 50, 2_900, 0, 0, 50, 7_000, 0, 0, 10, 900,
        ] {
            clock.advance(Duration::from_millis(step_ms));
            let reply = get(&client, addr).await;
            let t = ietf_t(&reply);
            assert!(t <= reply.number("x-ratelimit-reset"), "{set}: {reply:?}");
            if reply.status == StatusCode::TOO_MANY_REQUESTS {
                refusals += 1;
                assert!(reply.number("retry-after") >= t, "{set}: {reply:?}");
                assert!(t > 0, "{set}: {reply:?}");
            }
        }
        assert!(refusals > 0, "{set}: the sequence reaches a refusal");
    }
}

#[tokio::test]
async fn retry_after_never_points_earlier_than_t_on_memory() {
    retry_after_never_points_earlier_than_t(Backend::Memory).await;
}

#[tokio::test]
async fn retry_after_never_points_earlier_than_t_on_redis() {
    retry_after_never_points_earlier_than_t(Backend::Redis).await;
}

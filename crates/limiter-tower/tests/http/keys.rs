//! What a request is keyed by: the client address behind untrusted and
//! trusted proxies (`X-Forwarded-For`, RFC 7239 `Forwarded`), an IPv6
//! network, the route, a header, a custom key, and no peer address.

use super::*;

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

/// A request no route matches has no route of its own: every unmatched
/// path shares one budget per method, so a client cannot open a fresh
/// budget, nor fill the limiter's keys, by asking paths that do not exist.
#[tokio::test]
async fn unmatched_paths_share_one_route_key_per_method() {
    let clock = ManualClock::new(T0);
    let layer = LimiterLayer::new(memory("sliding-log:2/10s", &clock)).key(KeyExtractor::route());
    let addr = serve_router(
        Router::new()
            .route("/users/{id}", routing::get(|| async { "user" }))
            .layer(layer),
    )
    .await;
    let client = client();
    let status = |method: &'static str, path: &'static str| {
        let client = client.clone();
        async move { request_path(&client, addr, method, path).await.status }
    };
    assert_eq!(status("GET", "/nothing/1").await, StatusCode::NOT_FOUND);
    assert_eq!(status("GET", "/nothing/2").await, StatusCode::NOT_FOUND);
    assert_eq!(status("GET", "/else").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        status("HEAD", "/else/again").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another method, another budget; a route keeps its own.
    assert_eq!(status("POST", "/nothing/1").await, StatusCode::NOT_FOUND);
    assert_eq!(status("GET", "/users/1").await, StatusCode::OK);
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

//! A newcomer's service, whole, as the docs lead one to write it: a
//! per-address default, a stricter `/login`, a per-user limit by header,
//! one trusted reverse proxy (simulated: `X-Forwarded-For` sent from
//! loopback), an allowlisted health checker, two instances on one real
//! `redis-server`, a fail-open route (`/`) and fail-closed ones (`/login`,
//! `/me`). Its rate-limiting setup is `LIMITS` and `instance`: 27 lines
//! that are not blank, the routes included.

mod support;

use std::net::SocketAddr;

use axum::routing::{get, post};
use axum::Router;
use http::StatusCode;
use limiter_redis::RedisBackend;
use limiter_test::redis_server::RedisServer;
use limiter_tower::{Config, Registry};
use support::{client, fresh_prefix, redis_backend, request_with, serve_router, HttpClient, Reply};

const LIMITS: &str = r#"
[defaults]
trusted_proxies = ["127.0.0.1"]
allow_ips = ["192.0.2.10"]
on_failure = "fail-closed"

[policies.default]
limits = ["sliding-log:5/1m"]
on_failure = "fail-open"

[policies.login]
limits = ["sliding-log:2/1m"]

[policies.user]
limits = ["sliding-log:3/1h"]
key = "header:x-user-id"
fallback = "ip"
"#;

async fn instance(backend: &RedisBackend, prefix: &str) -> SocketAddr {
    let config = Config::from_toml("limits.toml", LIMITS).unwrap();
    let registry = Registry::redis(&config, backend, prefix).await.unwrap();
    let login = registry.layer("login").unwrap();
    let user = registry.layer("user").unwrap();
    let app = Router::new()
        .route("/login", post(|| async { "welcome" }).route_layer(login))
        .route("/me", get(|| async { "you" }).route_layer(user))
        .route("/", get(|| async { "ok" }))
        .layer(registry.layer("default").unwrap());
    serve_router(app).await
}

/// `method path` on `addr` through the proxy, for client `client_ip`.
async fn through_proxy(
    client: &HttpClient,
    addr: SocketAddr,
    method: &str,
    path: &str,
    client_ip: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut all = vec![("x-forwarded-for", client_ip)];
    all.extend_from_slice(headers);
    request_with(client, addr, method, path, &all).await
}

#[tokio::test]
async fn the_newcomers_service_on_two_instances_behind_a_proxy() {
    // Its own server: the test stops it.
    let mut server = RedisServer::start();
    let prefix = fresh_prefix("service");
    let instances = [
        instance(&redis_backend(&server.url()), &prefix).await,
        instance(&redis_backend(&server.url()), &prefix).await,
    ];
    let http = client();
    let on = |index: usize| instances[index % 2];

    // Six clients behind the proxy log in once each, on either instance:
    // each has a login budget of its own.
    for n in 1..=6 {
        let ip = format!("203.0.113.{n}");
        let reply = through_proxy(&http, on(n), "POST", "/login", &ip, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "client {n}: {reply:?}");
    }
    // One client's budget is shared by both instances: its third login in
    // the minute is refused, with the login limit's headers.
    let client_one = "203.0.113.1";
    let second = through_proxy(&http, on(0), "POST", "/login", client_one, &[]).await;
    assert_eq!(second.status, StatusCode::OK);
    let third = through_proxy(&http, on(1), "POST", "/login", client_one, &[]).await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS, "{third:?}");
    assert_eq!(third.number("x-ratelimit-limit"), 2);
    assert!(third.number("retry-after") > 0);
    // The health checker is never limited, nor given rate-limit headers.
    for n in 0..8 {
        let reply = through_proxy(&http, on(n), "POST", "/login", "192.0.2.10", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit"), None);
    }
    // A user's limit follows the user across addresses and instances; the
    // headers list both limits that applied.
    for n in 0..3 {
        let ip = format!("198.51.100.{n}");
        let reply = through_proxy(&http, on(n), "GET", "/me", &ip, &[("x-user-id", "alice")]).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        let policy = reply.header("ratelimit-policy").unwrap();
        assert!(
            policy.contains("\"sliding-log:3/1h\"") && policy.contains("\"sliding-log:5/1m\""),
            "{policy}"
        );
    }
    let user_refused = through_proxy(
        &http,
        on(1),
        "GET",
        "/me",
        "198.51.100.9",
        &[("x-user-id", "alice")],
    )
    .await;
    assert_eq!(user_refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(user_refused.number("x-ratelimit-limit"), 3);
    // The per-address default, shared by both instances.
    for n in 0..5 {
        let reply = through_proxy(&http, on(n), "GET", "/", "203.0.113.50", &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    }
    let default_refused = through_proxy(&http, on(5), "GET", "/", "203.0.113.50", &[]).await;
    assert_eq!(default_refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(default_refused.number("x-ratelimit-limit"), 5);

    // Redis down: `/` fails open (passes, marked), `/login` and `/me`
    // fail closed (503 with Retry-After), on both instances.
    server.stop();
    for index in 0..2 {
        let open = through_proxy(&http, on(index), "GET", "/", "203.0.113.60", &[]).await;
        assert_eq!(open.status, StatusCode::OK, "{open:?}");
        assert_eq!(open.header("x-ratelimit-degraded"), Some("fail-open"));
        let closed = through_proxy(&http, on(index), "POST", "/login", "203.0.113.60", &[]).await;
        assert_eq!(closed.status, StatusCode::SERVICE_UNAVAILABLE, "{closed:?}");
        assert_eq!(closed.header("x-ratelimit-degraded"), Some("fail-closed"));
        assert!(closed.number("retry-after") > 0);
        let me = through_proxy(
            &http,
            on(index),
            "GET",
            "/me",
            "203.0.113.60",
            &[("x-user-id", "bob")],
        )
        .await;
        assert_eq!(me.status, StatusCode::SERVICE_UNAVAILABLE, "{me:?}");
    }
}

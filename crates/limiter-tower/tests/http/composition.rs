//! The layer among others: a router's default and a route's layer,
//! stacked layers' headers, a plain hyper server, and an inner body of
//! another type.

use super::*;

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

/// A `Retry-After` a service sends itself (a 503 for maintenance) is not
/// a refusal: the layer's headers go beside it. One on a limiter-tower
/// layer's own answer (a ban's 403 without rate-limit headers) or on a
/// 429 is, and an outer layer then says no units are left by adding none.
#[tokio::test]
async fn only_a_refusals_retry_after_keeps_an_outer_layers_headers_off() {
    let clock = ManualClock::new(T0);
    // On the manual clock: a ban's 60 s are all left when read.
    let bans = limiter_tower::ban::BanList::memory_with_clock(clock.clone());
    let maintenance = || async {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "120")],
            "down for maintenance",
        )
    };
    let router = Router::new()
        .route("/maintenance", routing::get(maintenance))
        .route(
            "/banned",
            routing::get(|| async { "ok" }).route_layer(
                LimiterLayer::new(memory("sliding-log:100/10s", &clock))
                    .headers(HeaderStyle::None)
                    .bans(bans.clone()),
            ),
        )
        .route(
            "/limited",
            routing::get(|| async { "ok" }).route_layer(
                LimiterLayer::new(memory("sliding-log:1/10s", &clock)).headers(HeaderStyle::None),
            ),
        )
        .layer(LimiterLayer::new(memory("sliding-log:10/10s", &clock)));
    let addr = serve_router(router).await;
    let client = client();

    let down = get_path(&client, addr, "/maintenance", &[]).await;
    assert_eq!(down.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(down.number("retry-after"), 120);
    assert_eq!(down.number("x-ratelimit-remaining"), 9, "{down:?}");
    assert!(down.header("ratelimit").unwrap().contains(";r=9;"));

    bans.ban(
        &limiter_tower::key::bytes_from_text("ip:127.0.0.1"),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let banned = get_path(&client, addr, "/banned", &[]).await;
    assert_eq!(banned.status, StatusCode::FORBIDDEN);
    assert_eq!(banned.number("retry-after"), 60);
    assert_eq!(banned.header("x-ratelimit-remaining"), None, "{banned:?}");
    assert_eq!(banned.header("ratelimit"), None);
    bans.unban(&limiter_tower::key::bytes_from_text("ip:127.0.0.1"))
        .await
        .unwrap();

    assert_eq!(
        get_path(&client, addr, "/limited", &[]).await.status,
        StatusCode::OK
    );
    let limited = get_path(&client, addr, "/limited", &[]).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.number("retry-after"), 10);
    assert_eq!(limited.header("x-ratelimit-remaining"), None, "{limited:?}");
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

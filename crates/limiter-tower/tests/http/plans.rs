//! Plans (`LimiterLayer::plans`): each request decided under the plan its
//! key's contract, its authentication or its gateway names, the default
//! plan otherwise; a client moving between plans keeps what it used; the
//! headers name the plan in force.

use axum::extract::Request as AxumRequest;
use axum::middleware::{self, Next};
use axum::response::Response as AxumResponse;
use limiter_tower::{Plan, Plans};

use super::*;

/// Stands in for the application's authentication layer: the plan its
/// `x-auth` header names goes into the request's extensions.
async fn authenticate(mut request: AxumRequest, next: Next) -> AxumResponse {
    let plan = (request.headers().get("x-auth"))
        .map(|value| Plan::new(value.to_str().unwrap().to_owned()));
    if let Some(plan) = plan {
        request.extensions_mut().insert(plan);
    }
    next.run(request).await
}

/// Free (3 a minute), pro (10) and acme's contract (20), keyed by
/// `x-api-key`, plans from authentication or the `x-plan` header; the
/// key `acme` is on its contract whatever the request says.
async fn serve_plans(clock: &ManualClock) -> SocketAddr {
    let free = memory("fixed-window:3/1m", clock);
    let pro = free.plan("fixed-window:10/1m".parse::<Policies>().unwrap());
    let acme = free.plan("fixed-window:20/1m".parse::<Policies>().unwrap());
    let layer = LimiterLayer::new(free)
        .key(KeyExtractor::header("x-api-key"))
        .headers(HeaderStyle::Both)
        .plans(
            Plans::new("free")
                .plan("pro", pro)
                .plan("acme", acme)
                .from_header("x-plan".parse().unwrap())
                .key_plan("header:acme", "acme"),
        );
    serve_router(
        Router::new()
            .route("/", routing::get(|| async { "ok" }))
            .layer(layer)
            .layer(middleware::from_fn(authenticate)),
    )
    .await
}

#[tokio::test]
async fn each_request_is_decided_under_the_plan_it_is_on() {
    let clock = ManualClock::new(T0);
    let addr = serve_plans(&clock).await;
    let client = client();
    let reply = get_with(&client, addr, &[("x-api-key", "a")]).await;
    assert_eq!(reply.number("x-ratelimit-limit"), 3, "no plan: the default");
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some("\"free/fixed-window:3/1m\";q=3;w=60")
    );
    let reply = get_with(&client, addr, &[("x-api-key", "b"), ("x-auth", "pro")]).await;
    assert_eq!(reply.number("x-ratelimit-limit"), 10, "from authentication");
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some("\"pro/fixed-window:10/1m\";q=10;w=60")
    );
    let reply = get_with(&client, addr, &[("x-api-key", "c"), ("x-plan", "pro")]).await;
    assert_eq!(reply.number("x-ratelimit-limit"), 10, "from the gateway");
    // Authentication comes before the gateway's header, a key's contract
    // before both.
    let both = [("x-api-key", "d"), ("x-auth", "free"), ("x-plan", "pro")];
    assert_eq!(
        get_with(&client, addr, &both)
            .await
            .number("x-ratelimit-limit"),
        3
    );
    let contract = [("x-api-key", "acme"), ("x-auth", "free"), ("x-plan", "pro")];
    assert_eq!(
        get_with(&client, addr, &contract)
            .await
            .number("x-ratelimit-limit"),
        20
    );
}

#[tokio::test]
async fn an_unknown_plan_is_decided_under_the_default_and_logged_once() {
    let events = support::events::Events::at(tracing::Level::WARN);
    // The server runs on this test's one thread: its events come here.
    let _default = tracing::subscriber::set_default(events.clone());
    let clock = ManualClock::new(T0);
    let addr = serve_plans(&clock).await;
    let client = client();
    for key in ["a", "b", "c"] {
        let reply = get_with(&client, addr, &[("x-api-key", key), ("x-auth", "gold")]).await;
        assert_eq!(reply.number("x-ratelimit-limit"), 3);
    }
    let unknown: Vec<String> = (events.lines().into_iter())
        .filter(|line| line.starts_with("a request names a plan no plan has"))
        .collect();
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert!(
        unknown[0].contains("plan=gold default_plan=free"),
        "{unknown:?}"
    );
}

/// 3 used on free, then moved to pro, the client has 7 left, not 10;
/// moved back, it is refused until the window ends.
#[tokio::test]
async fn a_client_moved_between_plans_keeps_what_it_used() {
    let clock = ManualClock::new(T0);
    let addr = serve_plans(&clock).await;
    let client = client();
    let free = [("x-api-key", "k")];
    let pro = [("x-api-key", "k"), ("x-auth", "pro")];
    for _ in 0..3 {
        assert_eq!(get_with(&client, addr, &free).await.status, StatusCode::OK);
    }
    assert_eq!(
        get_with(&client, addr, &free).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let mut admitted = 0;
    for _ in 0..10 {
        if get_with(&client, addr, &pro).await.status == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 7, "pro gives only the difference");
    assert_eq!(
        get_with(&client, addr, &free).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(get_with(&client, addr, &free).await.status, StatusCode::OK);
}

/// A key's contract in the text form `allow_keys` takes: an address's key
/// as `ip:` and the address.
#[tokio::test]
async fn a_contract_names_an_address_key_in_its_text_form() {
    let clock = ManualClock::new(T0);
    let free = memory("fixed-window:3/1m", &clock);
    let acme = free.plan("fixed-window:20/1m".parse::<Policies>().unwrap());
    let layer = LimiterLayer::new(free).plans(
        Plans::new("free")
            .plan("acme", acme)
            .key_plan("ip:127.0.0.1", "acme"),
    );
    let addr = serve(layer).await;
    let reply = get(&client(), addr).await;
    assert_eq!(reply.number("x-ratelimit-limit"), 20, "{reply:?}");
}

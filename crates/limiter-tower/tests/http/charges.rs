//! A cost known only after the response (`LimiterLayer::charge_after`):
//! the handler's `ActualCost` or the body's bytes, charged above the
//! estimate the request reserved once the response is complete; a debt
//! refusing the key until time pays it back; nothing charged for what the
//! layer refuses or lets through unlimited. Through axum's router with
//! `oneshot`, so that each test holds the response body and decides when
//! it ends; on memory, on a `ManualClock`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response as AxumResponse;
use http::Response;
use http_body::Frame;
use http_body_util::BodyExt;
use limiter_tower::body::ResponseBody;
use limiter_tower::{ActualCost, ChargeAfter, Config, Cost, Registry};
use tower::ServiceExt;

use super::*;

fn units(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

/// A body streamed in the chunks given, one frame each.
struct Chunks(VecDeque<Bytes>);

impl Chunks {
    /// `count` chunks of `size` bytes.
    fn new(count: usize, size: usize) -> Self {
        Self((0..count).map(|_| Bytes::from(vec![b'x'; size])).collect())
    }

    /// [`new`](Self::new), as axum's body.
    fn of(count: usize, size: usize) -> Body {
        Body::new(Self::new(count, size))
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

/// `GET /tokens?n` answers "done" with `ActualCost(n)`; `GET /bytes`
/// streams 3 chunks of 25 bytes; `GET /empty` answers an empty body.
fn app(layer: LimiterLayer) -> Router {
    Router::new()
        .route(
            "/tokens",
            routing::get(|uri: http::Uri| async move {
                let used: u64 = uri.query().unwrap().parse().unwrap();
                (ActualCost(used), "done")
            }),
        )
        .route("/bytes", routing::get(|| async { Chunks::of(3, 25) }))
        .route("/empty", routing::get(|| async {}))
        .layer(layer)
}

/// `GET path` from `user` through `app`: the response, its body not read.
async fn send(app: &Router, path: &str, user: &str) -> AxumResponse {
    let request = Request::get(path)
        .header("x-user", user)
        .body(Body::empty())
        .unwrap();
    app.clone().oneshot(request).await.unwrap()
}

/// `GET path` from `user`, its body read to its end: the status, the
/// `X-RateLimit-Remaining` and the `Retry-After` (each `None` when the
/// response has none).
async fn call(app: &Router, path: &str, user: &str) -> (StatusCode, Option<u64>, Option<u64>) {
    let response = send(app, path, user).await;
    let status = response.status();
    let number = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().unwrap().parse::<u64>().unwrap())
    };
    let (remaining, retry_after) = (number("x-ratelimit-remaining"), number("retry-after"));
    response.into_body().collect().await.unwrap();
    (status, remaining, retry_after)
}

fn by_user(limiter: MemoryLimiter) -> LimiterLayer {
    LimiterLayer::new(limiter).key(KeyExtractor::header("x-user"))
}

#[tokio::test]
async fn an_estimate_is_reserved_and_the_true_cost_charged_above_it_never_refunded() {
    let clock = ManualClock::new(T0);
    let layer = by_user(memory("fixed-window:1000/1m", &clock))
        .cost(Cost::weight(units(100)))
        .charge_after(ChargeAfter::actual_cost());
    let app = app(layer);
    // 100 reserved, 250 used: 150 more charged once the response is out.
    assert_eq!(
        call(&app, "/tokens?250", "ann").await,
        (StatusCode::OK, Some(900), None)
    );
    assert_eq!(
        call(&app, "/tokens?40", "ann").await,
        (StatusCode::OK, Some(650), None)
    );
    // 40 of the 100 reserved were used: nothing is refunded.
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(550), None)
    );
    // A response without `ActualCost` keeps its estimate.
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(450), None)
    );
    // Another key is not charged for ann's.
    assert_eq!(
        call(&app, "/empty", "bob").await,
        (StatusCode::OK, Some(900), None)
    );
}

/// A tiered set is decided in a future (the path of every limiter that
/// does not decide in process): its charge is made on every part.
#[tokio::test]
async fn every_part_of_a_tiered_set_is_charged() {
    let clock = ManualClock::new(T0);
    let layer = by_user(memory("fixed-window:100/1m;fixed-window:150/1h", &clock))
        .charge_after(ChargeAfter::actual_cost());
    let app = app(layer);
    // 1 reserved, 120 used: 119 charged; the minute's window is full.
    assert_eq!(
        call(&app, "/tokens?120", "ann").await,
        (StatusCode::OK, Some(99), None)
    );
    assert_eq!(
        call(&app, "/empty", "ann").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // A minute on, the hour binds: 150 less the 120 counted and this one.
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(29), None)
    );
}

#[tokio::test]
async fn a_charge_past_what_is_left_is_a_debt_refusing_the_key_until_time_pays_it() {
    let clock = ManualClock::new(T0);
    // One token a second, ten at most.
    let layer =
        by_user(memory("token-bucket:10/10s", &clock)).charge_after(ChargeAfter::actual_cost());
    let app = app(layer);
    // 10 tokens, 1 reserved, 15 used: 14 charged on the 9 left, 5 owed.
    assert_eq!(
        call(&app, "/tokens?15", "ann").await,
        (StatusCode::OK, Some(9), None)
    );
    // 5 s to pay the debt back, 1 more for the request's own token.
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::TOO_MANY_REQUESTS, Some(0), Some(6))
    );
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::TOO_MANY_REQUESTS, Some(0), Some(1))
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(0), None)
    );
}

#[tokio::test]
async fn the_bytes_of_a_streamed_body_are_charged_when_it_ends() {
    let clock = ManualClock::new(T0);
    let layer = by_user(memory("fixed-window:100/1m", &clock))
        .charge_after(ChargeAfter::response_bytes(units(10)));
    let app = app(layer);
    // 75 bytes are 8 units of 10 bytes, rounded up: 1 reserved, 7 charged.
    assert_eq!(
        call(&app, "/bytes", "ann").await,
        (StatusCode::OK, Some(99), None)
    );
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(91), None)
    );
    // An empty body is 0 units, within the 1 reserved: nothing charged.
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(90), None)
    );
}

#[tokio::test]
async fn a_body_dropped_mid_way_is_charged_what_was_sent() {
    let clock = ManualClock::new(T0);
    let layer = by_user(memory("fixed-window:100/1m", &clock))
        .charge_after(ChargeAfter::response_bytes(units(10)));
    let app = app(layer);
    let streaming = send(&app, "/bytes", "ann").await;
    assert_eq!(streaming.headers()["x-ratelimit-remaining"], "99");
    let mut body = streaming.into_body();
    for _ in 0..2 {
        let chunk = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(chunk.len(), 25);
    }
    // Nothing charged while the body is under way.
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(98), None)
    );
    // The client is gone after 50 bytes: 5 units, 4 above the reserved 1.
    drop(body);
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(93), None)
    );
}

#[tokio::test]
async fn refused_and_allowlisted_requests_are_not_charged() {
    let clock = ManualClock::new(T0);
    let limiter = Arc::new(memory("token-bucket:4/4s", &clock));
    let layer = LimiterLayer::from_arc(limiter.clone())
        .key(KeyExtractor::header("x-user"))
        .allow_keys(["header:robot"])
        .charge_after(ChargeAfter::response_bytes(units(1)));
    let app = app(layer);
    // "done", 4 bytes: 1 unit reserved, 3 charged; the bucket is empty.
    assert_eq!(
        call(&app, "/tokens?0", "ann").await,
        (StatusCode::OK, Some(3), None)
    );
    // Refused, each for the 1 s its token takes: were a refusal's own
    // body (dozens of bytes) charged, the key would owe a full bucket,
    // and wait 5 s.
    for _ in 0..3 {
        assert_eq!(
            call(&app, "/bytes", "ann").await,
            (StatusCode::TOO_MANY_REQUESTS, Some(0), Some(1))
        );
    }
    // An allowlisted key is not limited, so not charged.
    for _ in 0..3 {
        assert_eq!(
            call(&app, "/bytes", "robot").await,
            (StatusCode::OK, None, None)
        );
    }
    let robot = limiter.peek(b"header:robot", 4).await.unwrap();
    assert!(robot.allowed, "{robot:?}");
}

#[tokio::test]
async fn a_configured_charge_after_is_inherited_from_the_defaults() {
    let config = Config::from_toml(
        "limits.toml",
        r#"
        [defaults]
        charge_after = "response-bytes:10"
        key = "header:x-user"

        [policies.downloads]
        limits = ["sliding-log:1000/1d"]
        "#,
    )
    .unwrap();
    let registry = Registry::memory(&config);
    let app = app(registry.layer("downloads").unwrap());
    // The sliding log's units leave it a day after they came: nothing
    // leaves during the test.
    assert_eq!(
        call(&app, "/bytes", "ann").await,
        (StatusCode::OK, Some(999), None)
    );
    assert_eq!(
        call(&app, "/empty", "ann").await,
        (StatusCode::OK, Some(991), None)
    );
}

/// A `Full` body cannot hold the metered body: it is charged at once,
/// with the length it states.
#[tokio::test]
async fn a_full_body_is_charged_its_length_at_once() {
    let clock = ManualClock::new(T0);
    let layer = by_user(memory("fixed-window:100/1m", &clock))
        .charge_after(ChargeAfter::response_bytes(units(10)));
    let service = tower::ServiceBuilder::new()
        .layer(layer)
        .service(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from(
                vec![b'x'; 45],
            ))))
        }));
    let request = || Request::get("/").header("x-user", "ann").body(()).unwrap();
    let first = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(first.headers()["x-ratelimit-remaining"], "99");
    // 45 bytes, 5 units: 4 charged before the body is read.
    let second = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(second.headers()["x-ratelimit-remaining"], "94");
}

/// A body of any type, under the layer in a `ResponseBody`, is metered as
/// it streams.
#[tokio::test]
async fn a_response_body_of_any_inner_body_is_metered() {
    let clock = ManualClock::new(T0);
    let layer = by_user(memory("fixed-window:100/1m", &clock))
        .charge_after(ChargeAfter::response_bytes(units(10)));
    let service = tower::ServiceBuilder::new()
        .layer(layer)
        .map_response(|response: Response<Chunks>| response.map(ResponseBody::inner))
        .service(tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Chunks::new(3, 25)))
        }));
    let request = || Request::get("/").header("x-user", "ann").body(()).unwrap();
    let first = service.clone().oneshot(request()).await.unwrap();
    let mut body = first.into_body();
    let second = service.clone().oneshot(request()).await.unwrap();
    // Not charged while the body is under way.
    assert_eq!(second.headers()["x-ratelimit-remaining"], "98");
    while body.frame().await.is_some() {}
    // 75 bytes, 8 units: 7 charged once the body ended.
    let third = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(third.headers()["x-ratelimit-remaining"], "90");
}

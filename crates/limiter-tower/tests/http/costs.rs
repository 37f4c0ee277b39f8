//! What a request costs (`LimiterLayer::cost`): uploads by their
//! `Content-Length`, a weight per route, a header a gateway sets, a
//! function; the exact counts on memory and on a real `redis-server`, the
//! headers in units, and each bad cost's answer, never counted.

use std::convert::Infallible;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request as AxumRequest;
use axum::middleware::{self, Next};
use axum::response::Response as AxumResponse;
use http_body::Frame;
use http_body_util::{BodyExt, Either, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use limiter_tower::cost::CostError;
use limiter_tower::Cost;

use super::*;

const KIB: usize = 1024;

/// A body the client does not know the length of ahead: sent chunked.
struct Chunked(Option<Bytes>);

impl http_body::Body for Chunked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.take().map(|bytes| Ok(Frame::data(bytes))))
    }
}

type UploadClient = Client<HttpConnector, Either<Full<Bytes>, Chunked>>;

fn upload_client() -> UploadClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Reads the whole request body before the layer sees the request, so
/// that the server has read every byte the client sent whatever the
/// layer answers (a connection closed on unread bytes can lose the
/// answer to a reset).
async fn read_whole_body(request: AxumRequest, next: Next) -> AxumResponse {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    next.run(AxumRequest::from_parts(parts, bytes.into())).await
}

/// Serves `POST /upload` (answering the length of the body it got)
/// behind `layer`.
async fn serve_uploads(layer: LimiterLayer) -> SocketAddr {
    serve_router(
        Router::new()
            .route(
                "/upload",
                routing::post(|body: Bytes| async move { body.len().to_string() }),
            )
            .layer(layer)
            .layer(middleware::from_fn(read_whole_body)),
    )
    .await
}

/// `POST /upload` of `bytes` bytes with `Content-Length` (or chunked,
/// without one), and `headers`.
async fn upload(
    client: &UploadClient,
    addr: SocketAddr,
    bytes: usize,
    chunked: bool,
    headers: &[(&str, &str)],
) -> Reply {
    let data = Bytes::from(vec![b'x'; bytes]);
    let body = if chunked {
        Either::Right(Chunked(Some(data)))
    } else {
        Either::Left(Full::new(data))
    };
    let mut request = Request::post(format!("http://{addr}/upload"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client.request(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

fn units(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

/// The legacy `Remaining` and the IETF `r` of `reply`, which must agree.
fn remaining(reply: &Reply) -> u64 {
    let legacy = reply.number("x-ratelimit-remaining");
    let ietf = reply.header("ratelimit").unwrap();
    assert!(ietf.contains(&format!(";r={legacy};")), "{reply:?}");
    legacy
}

/// 1,000 units a minute, one per KiB: uploads of known sizes take exactly
/// their units, the headers report units, a denial takes none.
async fn uploads_take_their_units(backend: Backend) {
    let clock = ManualClock::new(T0);
    let limiter = limiter(backend, "fixed-window:1000/1m", &clock).await;
    let layer = LimiterLayer::from_arc(limiter).cost(Cost::content_length(units(1024)));
    let addr = serve_uploads(layer).await;
    let client = upload_client();
    let mut left = Vec::new();
    for bytes in [300 * KIB, 300 * KIB + 1, 0, 358 * KIB] {
        let reply = upload(&client, addr, bytes, false, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{backend:?} {reply:?}");
        assert_eq!(reply.body, bytes.to_string());
        assert_eq!(reply.number("x-ratelimit-limit"), 1000);
        left.push(remaining(&reply));
    }
    // 300, 301 (a byte past 300 KiB), 1 (no body), 358.
    assert_eq!(left, [700, 399, 398, 40], "{backend:?}");
    let denied = upload(&client, addr, 41 * KIB, false, &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS, "{denied:?}");
    assert_eq!(
        remaining(&denied),
        40,
        "{backend:?}: a denial takes nothing"
    );
    let last = upload(&client, addr, 40 * KIB, false, &[]).await;
    assert_eq!(last.status, StatusCode::OK, "{backend:?} {last:?}");
    assert_eq!(remaining(&last), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_take_their_units_on_memory() {
    uploads_take_their_units(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_take_their_units_on_redis() {
    uploads_take_their_units(Backend::Redis).await;
}

/// 50 concurrent uploads of 64 KiB against 1,000 units: exactly 15 fit.
async fn concurrent_uploads(backend: Backend) {
    let clock = ManualClock::new(T0);
    let limiter = limiter(backend, "fixed-window:1000/1m", &clock).await;
    let layer = LimiterLayer::from_arc(limiter).cost(Cost::content_length(units(1024)));
    let addr = serve_uploads(layer).await;
    let client = upload_client();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { upload(&client, addr, 64 * KIB, false, &[]).await.status })
        })
        .collect();
    let mut counts = BTreeMap::new();
    for task in tasks {
        *counts.entry(task.await.unwrap().as_u16()).or_insert(0) += 1;
    }
    assert_eq!(
        counts,
        BTreeMap::from([(200, 15), (429, 35)]),
        "{backend:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_uploads_of_64_kib_admit_exactly_15_in_1000_units_on_memory() {
    concurrent_uploads(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_uploads_of_64_kib_admit_exactly_15_in_1000_units_on_redis() {
    concurrent_uploads(Backend::Redis).await;
}

#[tokio::test]
async fn a_body_above_the_maximum_is_413_and_one_of_unknown_length_411_never_counted() {
    let clock = ManualClock::new(T0);
    // 10 units of 100 bytes.
    let layer = LimiterLayer::new(memory("fixed-window:10/1m", &clock))
        .cost(Cost::content_length(units(100)));
    let addr = serve_uploads(layer).await;
    let client = upload_client();

    let too_large = upload(&client, addr, 1001, false, &[]).await;
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        too_large.body,
        "Content Too Large: the body costs 11 units, above the most a request may cost, 10: it \
         can never be admitted\n"
    );
    assert_eq!(too_large.header("retry-after"), None);
    let json = upload(
        &client,
        addr,
        1001,
        false,
        &[("accept", "application/json")],
    )
    .await;
    assert_eq!(
        json.body,
        r#"{"error":"content_too_large","message":"the body costs 11 units, above the most a request may cost, 10: it can never be admitted"}"#
    );

    let chunked = upload(&client, addr, 10, true, &[]).await;
    assert_eq!(chunked.status, StatusCode::LENGTH_REQUIRED);
    assert_eq!(
        chunked.body,
        "Length Required: the request's cost is its body's length, and it sends no \
         Content-Length\n"
    );

    // None of them was counted: the whole budget is left.
    let whole = upload(&client, addr, 1000, false, &[]).await;
    assert_eq!(whole.status, StatusCode::OK, "{whole:?}");
    assert_eq!(remaining(&whole), 0);
}

#[tokio::test]
async fn a_body_of_unknown_length_costs_the_fallback_weight() {
    let clock = ManualClock::new(T0);
    let layer = LimiterLayer::new(memory("fixed-window:10/1m", &clock))
        .cost(Cost::content_length(units(100)).or_weight(units(4)));
    let addr = serve_uploads(layer).await;
    let reply = upload(&upload_client(), addr, 5000, true, &[]).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "5000");
    assert_eq!(remaining(&reply), 6);
}

#[tokio::test]
async fn a_stated_cost_that_is_not_a_whole_number_from_one_is_400_saying_why() {
    let clock = ManualClock::new(T0);
    let layer =
        LimiterLayer::new(memory("fixed-window:10/1m", &clock)).cost(Cost::header("x-cost"));
    let addr = serve(layer).await;
    let client = client();
    let bad = |value: &'static str| {
        let client = client.clone();
        async move { get_with(&client, addr, &[("x-cost", value)]).await }
    };
    for (value, why) in [
        ("-3", "the x-cost header's value \"-3\" is negative"),
        (
            "ten",
            "the x-cost header's value \"ten\" is not a whole number",
        ),
        (
            "0",
            "the x-cost header's value \"0\" is 0, and a request costs at least 1 unit",
        ),
    ] {
        let reply = bad(value).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");
        assert_eq!(
            reply.body,
            format!("Bad Request: {why}: a cost is a whole number from 1\n")
        );
        assert_eq!(reply.header("x-ratelimit-remaining"), None);
    }
    let above = bad("11").await;
    assert_eq!(above.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        above.body,
        "Bad Request: the request costs 11 units, above the most a request may cost, 10: it can \
         never be admitted\n"
    );
    let missing = get(&client, addr).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        missing.body,
        "Bad Request: the request lacks the x-cost header that states its cost\n"
    );
    let json = get_with(
        &client,
        addr,
        &[("x-cost", "-3"), ("accept", "application/json")],
    )
    .await;
    assert_eq!(
        json.body,
        r#"{"error":"invalid_cost","message":"the x-cost header's value \"-3\" is negative: a cost is a whole number from 1"}"#
    );

    // Nothing counted: 10 units are left, 7 then 3.
    let seven = bad("7").await;
    assert_eq!((seven.status, remaining(&seven)), (StatusCode::OK, 3));
    let four = bad("4").await;
    assert_eq!(four.status, StatusCode::TOO_MANY_REQUESTS, "{four:?}");
    assert_eq!(remaining(&four), 3);
}

#[tokio::test]
async fn a_weight_per_route_over_one_limiter_takes_each_routes_units() {
    let clock = ManualClock::new(T0);
    let base = LimiterLayer::new(memory("fixed-window:10/1m", &clock));
    let search = base.clone().cost(Cost::weight(units(5)));
    let addr = serve_router(
        Router::new()
            .route("/", routing::get(|| async { "ok" }))
            .route_layer(base)
            .merge(
                Router::new()
                    .route("/search", routing::get(|| async { "found" }))
                    .route_layer(search),
            ),
    )
    .await;
    let client = client();
    let at = |path: &'static str| {
        let client = client.clone();
        async move { get_path(&client, addr, path, &[]).await }
    };
    let statuses_and_left = [
        at("/").await,
        at("/search").await,
        at("/search").await,
        at("/").await,
    ]
    .map(|reply| (reply.status.as_u16(), remaining(&reply)));
    assert_eq!(statuses_and_left, [(200, 9), (200, 4), (429, 4), (200, 3)]);
}

#[test]
#[should_panic(expected = "a request weight of 11 is above the limiter's max cost of 10")]
fn a_weight_above_the_max_cost_is_refused_when_the_layer_is_built() {
    let clock = ManualClock::new(T0);
    let _ = LimiterLayer::new(memory("fixed-window:10/1m", &clock)).cost(Cost::weight(units(11)));
}

#[tokio::test]
async fn a_function_weighs_a_request_by_its_head() {
    let clock = ManualClock::new(T0);
    let layer = LimiterLayer::new(memory("fixed-window:10/1m", &clock)).cost(Cost::custom(
        |head| match head.uri.query() {
            None => Ok(1),
            Some("expand=all") => Ok(6),
            Some("free") => Ok(0),
            Some(_) => Err(CostError::bad_request("expand takes `all` or nothing")),
        },
    ));
    let addr = serve(layer).await;
    let client = client();
    let at = |path: &'static str| {
        let client = client.clone();
        async move { get_path(&client, addr, path, &[]).await }
    };
    let bad = at("/?expand=some").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.body, "Bad Request: expand takes `all` or nothing\n");
    let zero = at("/?free").await;
    assert_eq!(zero.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        zero.body,
        "Internal Server Error: the request's cost function answered 0; a request costs at least \
         1 unit\n"
    );
    let expanded = at("/?expand=all").await;
    assert_eq!((expanded.status, remaining(&expanded)), (StatusCode::OK, 4));
    let plain = at("/").await;
    assert_eq!((plain.status, remaining(&plain)), (StatusCode::OK, 3));
}

#[tokio::test]
async fn an_inner_layers_429_keeps_its_own_numbers_though_units_are_left() {
    let clock = ManualClock::new(T0);
    // A per-address default of 10 requests around a route of 100 units
    // whose requests cost 60.
    let heavy =
        LimiterLayer::new(memory("fixed-window:100/1m", &clock)).cost(Cost::weight(units(60)));
    let router = Router::new()
        .route("/heavy", routing::get(|| async { "ok" }))
        .route_layer(heavy)
        .layer(LimiterLayer::new(memory("fixed-window:10/1m", &clock)));
    let addr = serve_router(router).await;
    let client = client();
    let first = get_path(&client, addr, "/heavy", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    // The default binds: 9 left of 10, fewer than the route's 40 of 100.
    assert_eq!(
        (first.number("x-ratelimit-limit"), remaining(&first)),
        (10, 9)
    );
    let denied = get_path(&client, addr, "/heavy", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    // The route refused with 40 units left, fewer than 60: its numbers
    // stand beside its Retry-After, though the default has only 8 left.
    assert_eq!(
        (denied.number("x-ratelimit-limit"), remaining(&denied)),
        (100, 40)
    );
    assert!(denied.number("retry-after") >= 1);
    let policies = denied.header("ratelimit-policy").unwrap();
    assert!(policies.contains("fixed-window:100/1m") && policies.contains("fixed-window:10/1m"));
}

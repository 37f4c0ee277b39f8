//! `LimiterLayer::on_limited` over HTTP: a user function answers every
//! refusal (denied, banned, unavailable) with what it sees of the decision
//! and the request, keeps the layer's `Retry-After` and rate-limit headers
//! unless it sets them, and is never called for an admitted request.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use limiter_core::{FailurePolicy, Limiter, ManualClock, Resilient};
use limiter_test::Flaky;
use limiter_tower::ban::BanList;
use limiter_tower::key::bytes_from_text;
use limiter_tower::{LimitedContext, LimiterLayer, Refusal};
use support::{client, get, get_path, get_with, limiter, serve, Backend};

/// A request time far from the epoch, in µs.
const T0: u64 = 1_700_000_000_000_000;

/// An API's own error format: problem+json with what the context says.
fn problem(ctx: &LimitedContext<'_>) -> Response<Bytes> {
    let refusal = match ctx.refusal {
        Refusal::Denied => "denied",
        Refusal::Banned => "banned",
        Refusal::Unavailable => "unavailable",
        _ => "other",
    };
    let parts = ctx.decision.map_or(0, |set| set.parts().len());
    let bound_by = ctx.decision.map_or(-1, |set| i64::from(set.bound_by));
    let body = format!(
        r#"{{"refusal":"{refusal}","status":{},"retry_after_ms":{},"parts":{parts},"bound_by":{bound_by},"path":"{}"}}"#,
        ctx.status.as_u16(),
        ctx.retry_after.as_millis(),
        ctx.request.uri.path(),
    );
    Response::builder()
        .status(ctx.status)
        .header("content-type", "application/problem+json")
        .body(Bytes::from(body))
        .unwrap()
}

/// `layer` answering refusals with [`problem`], counting its calls.
fn counted(layer: LimiterLayer, calls: &Arc<AtomicUsize>) -> LimiterLayer {
    let calls = Arc::clone(calls);
    layer.on_limited(move |ctx| {
        calls.fetch_add(1, Ordering::SeqCst);
        problem(ctx)
    })
}

#[tokio::test]
async fn a_denial_is_answered_by_the_function_with_the_layers_headers() {
    let clock = ManualClock::new(T0);
    let calls = Arc::new(AtomicUsize::new(0));
    let tiers = "sliding-log:2/10s;sliding-log:100/1m";
    let layer = counted(
        LimiterLayer::from_arc(limiter(Backend::Memory, tiers, &clock).await),
        &calls,
    );
    let addr = serve(layer).await;
    let client = client();
    for _ in 0..2 {
        let admitted = get(&client, addr).await;
        assert_eq!(admitted.status, StatusCode::OK);
        assert_eq!(admitted.body, "ok");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "admitted requests never call it"
    );

    clock.advance(Duration::from_millis(1_200));
    let denied = get_path(&client, addr, "/?page=3", &[]).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        denied.header("content-type"),
        Some("application/problem+json")
    );
    // The first admission leaves the window 8.8 s from now.
    assert_eq!(
        denied.body,
        r#"{"refusal":"denied","status":429,"retry_after_ms":8800,"parts":2,"bound_by":0,"path":"/"}"#
    );
    // The layer's headers, which the function did not set, are kept.
    assert_eq!(denied.number("retry-after"), 9);
    assert_eq!(denied.number("x-ratelimit-remaining"), 0);
    assert_eq!(denied.number("x-ratelimit-limit"), 2);
    assert_eq!(
        denied.header("ratelimit"),
        Some("\"sliding-log:2/10s\";r=0;t=9")
    );
}

#[tokio::test]
async fn the_functions_own_headers_and_status_win() {
    let clock = ManualClock::new(T0);
    let limiter = limiter(Backend::Memory, "sliding-log:1/1m", &clock).await;
    // A gRPC-style answer: HTTP 200 with grpc-status 8 (RESOURCE_EXHAUSTED)
    // for gRPC calls, the layer's own status for the others.
    let layer = LimiterLayer::from_arc(limiter).on_limited(|ctx| {
        let grpc = ctx
            .request
            .headers
            .get("content-type")
            .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"));
        let mut response = Response::builder();
        if grpc {
            response = response
                .status(StatusCode::OK)
                .header("content-type", "application/grpc")
                .header("grpc-status", "8")
                .header("grpc-message", "rate limited");
        } else {
            response = response.status(ctx.status).header("retry-after", "120");
        }
        response.body(Bytes::new()).unwrap()
    });
    let addr = serve(layer).await;
    let client = client();
    assert_eq!(get(&client, addr).await.status, StatusCode::OK);

    let grpc = get_with(&client, addr, &[("content-type", "application/grpc")]).await;
    assert_eq!(grpc.status, StatusCode::OK);
    assert_eq!(grpc.header("grpc-status"), Some("8"));
    assert_eq!(grpc.header("content-type"), Some("application/grpc"));
    assert_eq!(grpc.body, "");
    assert_eq!(grpc.number("retry-after"), 60);

    let plain = get(&client, addr).await;
    assert_eq!(plain.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(plain.number("retry-after"), 120, "the function's own value");
    // The layer's content type described its own body: never added.
    assert_eq!(plain.header("content-type"), None);
    assert_eq!(plain.number("x-ratelimit-remaining"), 0);
}

#[tokio::test]
async fn a_ban_is_answered_by_the_function_without_a_decision() {
    let clock = ManualClock::new(T0);
    let calls = Arc::new(AtomicUsize::new(0));
    let bans = BanList::memory();
    let layer = counted(
        LimiterLayer::from_arc(limiter(Backend::Memory, "sliding-log:100/10s", &clock).await)
            .bans(bans.clone()),
        &calls,
    );
    let addr = serve(layer).await;
    let client = client();
    bans.ban(&bytes_from_text("ip:127.0.0.1"), Duration::from_secs(600))
        .await
        .unwrap();
    let refused = get(&client, addr).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let body: &str = &refused.body;
    assert!(
        body.starts_with(r#"{"refusal":"banned","status":403,"retry_after_ms":"#),
        "{body}"
    );
    assert!(
        body.ends_with(r#","parts":0,"bound_by":-1,"path":"/"}"#),
        "{body}"
    );
    assert!(refused.number("retry-after") >= 599, "{refused:?}");
    assert_eq!(refused.header("x-ratelimit-remaining"), None);
}

#[tokio::test]
async fn fail_closed_and_errors_are_answered_by_the_function() {
    let clock = ManualClock::new(T0);
    let calls = Arc::new(AtomicUsize::new(0));
    let memory = limiter(Backend::Memory, "sliding-log:5/10s", &clock).await;
    let flaky = Arc::new(Flaky::new(memory));
    let closed: Arc<dyn Limiter> = Arc::new(
        Resilient::new(Arc::clone(&flaky), FailurePolicy::FailClosed)
            .probe_interval(Duration::ZERO),
    );
    let closed_addr = serve(counted(LimiterLayer::from_arc(closed), &calls)).await;
    let error_addr = serve(counted(
        LimiterLayer::from_arc(Arc::clone(&flaky) as Arc<dyn Limiter>),
        &calls,
    ))
    .await;
    let client = client();
    flaky.set_failing(true);

    let closed = get(&client, closed_addr).await;
    assert_eq!(closed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        closed
            .body
            .starts_with(r#"{"refusal":"unavailable","status":503,"#),
        "{}",
        closed.body
    );
    // A fail-closed answer is a decision (its source says so).
    assert!(closed.body.contains(r#""parts":1,"#), "{}", closed.body);
    assert_eq!(closed.header("x-ratelimit-degraded"), Some("fail-closed"));
    assert!(closed.number("retry-after") >= 1);

    let error = get(&client, error_addr).await;
    assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        error.body,
        r#"{"refusal":"unavailable","status":503,"retry_after_ms":1000,"parts":0,"bound_by":-1,"path":"/"}"#
    );
    assert_eq!(error.number("retry-after"), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

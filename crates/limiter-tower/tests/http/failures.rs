//! A limiter that fails: each failure policy's answer, and 503 for an
//! error.

use super::*;

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

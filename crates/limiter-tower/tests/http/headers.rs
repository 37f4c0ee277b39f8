//! The rate-limit headers a response carries: equal to the decision on
//! every algorithm and backend, by style, for a tiered set, a leased or a
//! fallback decision, and in the structured-field grammar.

use super::*;

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
        .max_lease(10)
        .min_lease(10)
        .build();
    let leased = Arc::new(leased);
    let addr = serve(LimiterLayer::from_arc(leased.clone())).await;
    let client = client();
    let first = get(&client, addr).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(
        leased.held(&limiter_tower::key::bytes_from_text("ip:127.0.0.1")) > 0,
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

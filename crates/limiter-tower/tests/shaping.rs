//! Shaping over HTTP: requests admitted by a leaky bucket reach the inner
//! service one interval apart however they arrive (on memory and on a real
//! redis-server), and one that would wait longer than the layer's maximum
//! is answered 429, with a `Retry-After` after which it is admitted.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::{routing, Router};
use limiter_core::{Limiter, ManualClock, Policy};
use limiter_memory::MemoryLimiter;
use limiter_redis::RedisLimiter;
use limiter_tower::{KeyExtractor, LimiterLayer, Shaping};
use support::{
    client, fresh_prefix, get_with, load, redis_backend, redis_server, serve, serve_router,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_requests_reach_the_service_100_ms_apart() {
    let limiter = MemoryLimiter::new(shaping_policy());
    twenty_requests_100_ms_apart(Arc::new(limiter)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_redis_twenty_concurrent_requests_reach_the_service_100_ms_apart() {
    let backend = redis_backend(&redis_server().url());
    let limiter = RedisLimiter::builder(&backend, shaping_policy())
        .key_prefix(fresh_prefix("shaping"))
        .build()
        .await
        .unwrap();
    // Each wait is counted from its decision's time (Redis TIME), read
    // before the layer gets the answer and starts to sleep: a later answer
    // only makes its request later.
    twenty_requests_100_ms_apart(Arc::new(limiter)).await;
}

/// 10 per second on the system clock (or Redis's), with room in the queue
/// for all 20.
fn shaping_policy() -> Policy {
    "leaky-bucket:10/1s,queue=20".parse().unwrap()
}

/// 20 concurrent requests through a layer on `limiter` reach the service
/// no sooner than 100 ms apart: the k-th (in order of arrival) no sooner
/// than k x 100 ms after the load started.
async fn twenty_requests_100_ms_apart(limiter: Arc<dyn Limiter>) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&arrivals);
    let router = Router::new()
        .route(
            "/",
            routing::get(move || {
                record.lock().unwrap().push(Instant::now());
                async { "ok" }
            }),
        )
        .layer(LimiterLayer::from_arc(limiter).key(KeyExtractor::global()));
    let addr = serve_router(router).await;

    let start = Instant::now();
    let counts = load(addr, 20, 20).await;
    assert_eq!(counts.get(&200), Some(&20), "{counts:?}");
    let mut arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(
        arrivals.len(),
        20,
        "each admitted request reached the service once"
    );
    arrivals.sort();
    // The first decision is taken at some t0 after `start`; the request
    // given the bucket's k-th departure is told to wait until t0 + k x 100
    // ms (rounded up to the µs) and sleeps from after its decision; a sleep
    // never ends early (Tokio rounds deadlines up to its 1 ms tick), so it
    // arrives no sooner than t0 + k x 100 ms, however late the machine wakes
    // it. The k+1 earliest arrivals hold k+1 distinct departures, one of
    // them k or later: the k-th in order arrives no sooner than start + k x
    // 100 ms. No slack for scheduling delay, which only makes a request
    // later. 1 ms covers the rest: t0 is read in whole µs (up to 1 µs
    // before the instant it stands for), and the time between decisions
    // (ms, a second at most on a loaded machine) is read on the limiter's
    // clock (the CPU counter for memory, Redis's wall clock), whose rate may
    // differ from `Instant`'s by NTP's slew, 500 ppm at most. A layer that
    // did not shape would show all 20 within a few ms of `start`.
    let tolerance = Duration::from_millis(1);
    for (k, arrival) in (0u32..).zip(&arrivals) {
        let due = start + Duration::from_millis(100) * k;
        assert!(
            *arrival + tolerance >= due,
            "arrival {k} at {:?}, due no sooner than {:?}",
            *arrival - start,
            due - start
        );
    }
}

#[tokio::test]
async fn a_wait_beyond_the_maximum_is_denied() {
    // The clock does not move: the waits are exactly 0, 100, 200, … ms.
    let clock = ManualClock::new(1_700_000_000_000_000);
    let policy: Policy = "leaky-bucket:10/1s,queue=20".parse().unwrap();
    let limiter = MemoryLimiter::builder(policy).clock(clock).build();
    let layer = LimiterLayer::new(limiter)
        .key(KeyExtractor::global())
        .shaping(Shaping::WaitAtMost(Duration::from_millis(250)));
    let addr = serve(layer).await;
    let counts = load(addr, 10, 10).await;
    // Waits of 0, 100 and 200 ms pass; 300 ms and more are denied.
    assert_eq!(counts, [(200, 3), (429, 7)].into_iter().collect());
}

#[tokio::test]
async fn a_client_that_waits_the_retry_after_of_a_wait_too_long_is_admitted() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let policy: Policy = "leaky-bucket:1/1s,queue=10".parse().unwrap();
    let limiter = MemoryLimiter::builder(policy).clock(clock.clone()).build();
    let max = Duration::from_millis(500);
    let layer = LimiterLayer::new(limiter)
        .key(KeyExtractor::global())
        .shaping(Shaping::WaitAtMost(max));
    let addr = serve(layer).await;
    let client = client();
    let json = [("accept", "application/json")];
    assert_eq!(get_with(&client, addr, &json).await.status, 200);
    // A wait of 1 s: refused, its unit queued all the same. The queue is
    // empty at 2 s, so a retry at 1.5 s waits the 500 ms allowed.
    let denied = get_with(&client, addr, &json).await;
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.body,
        r#"{"error":"rate_limited","retry_after_ms":1500}"#
    );
    assert_eq!(denied.number("retry-after"), 2);
    assert_eq!(denied.number("x-ratelimit-remaining"), 0);
    assert_eq!(
        denied.header("ratelimit"),
        Some("\"leaky-bucket:1/1s,queue=10\";r=0;t=2")
    );
    clock.advance(Duration::from_millis(1_500));
    let started = Instant::now();
    assert_eq!(get_with(&client, addr, &json).await.status, 200);
    // Shaped: it waited the most the layer holds a request.
    assert!(started.elapsed() >= max);
}

#[tokio::test]
async fn passing_at_once_does_not_wait() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    // Shaped, the k-th request would wait k hours.
    let policy: Policy = "leaky-bucket:1/1h,queue=5".parse().unwrap();
    let limiter = MemoryLimiter::builder(policy).clock(clock).build();
    let layer = LimiterLayer::new(limiter)
        .key(KeyExtractor::global())
        .shaping(Shaping::PassAtOnce);
    let addr = serve(layer).await;
    // A minute: far more than five requests take on a loaded host, far
    // less than the hours a shaped one waits.
    let counts = tokio::time::timeout(Duration::from_secs(60), load(addr, 5, 5))
        .await
        .expect("passed at once, not held for hours");
    assert_eq!(counts, [(200, 5)].into_iter().collect());
}

//! docs/spec.md section 8.1's wait for the lease in flight, on a real
//! redis-server that hangs (`SIGSTOP`) while one key's lease is asked:
//! the requests that claimed units of that lease are answered once it
//! fails, within about one command timeout (the backend is then down, so
//! their own requests fail at once), every answer the failure policy's
//! and marked degraded, nothing admitted by a lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{DecisionSource, FailurePolicy, Limiter, LimiterExt, Policy, Rate};
use limiter_lease::Leased;
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_server::{fresh_prefix, RedisServer};

const TIMEOUT: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_lease_on_a_hung_server_get_the_failure_policy_once() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder(server.url())
        .command_timeout(TIMEOUT)
        .build()
        .await
        .expect("a backend");
    let redis = RedisLimiter::builder(
        &backend,
        Policy::token_bucket(Rate::per_second(1_000)).unwrap(),
    )
    .key_prefix(fresh_prefix("lease-hung"))
    .build()
    .await
    .expect("a limiter");
    let leased = Arc::new(
        Leased::builder(redis.on_failure(FailurePolicy::FailClosed))
            .min_lease(10)
            .max_lease(10)
            .build(),
    );
    // A first lease, given up: the next request asks for another.
    assert!(leased.acquire(b"hot", 1).await.unwrap().allowed);
    assert!(leased.release().await > 0);
    assert_eq!(leased.held(b"hot"), 0);
    server.pause();
    let started = Instant::now();
    // One request asks the lease; the other 8 claim its units and wait.
    let callers: Vec<_> = (0..9)
        .map(|_| {
            let leased = Arc::clone(&leased);
            tokio::spawn(async move {
                let decision = leased.acquire(b"hot", 1).await;
                (decision, started.elapsed())
            })
        })
        .collect();
    for caller in callers {
        // A waiter never woken would hang here: fail instead.
        let (decision, took) = tokio::time::timeout(TIMEOUT * 10, caller)
            .await
            .expect("every caller answered")
            .expect("a caller");
        let decision = decision.expect("the failure policy answers");
        assert!(!decision.allowed, "fail closed: {decision:?}");
        assert_eq!(decision.source, DecisionSource::FailClosed);
        assert!(decision.is_degraded());
        // One command timeout, not one for the lease and one more for
        // each request after it; generous for a loaded host.
        assert!(took < TIMEOUT * 3, "answered after {took:?}");
    }
    assert_eq!(leased.held(b"hot"), 0, "nothing leased while it hung");
    server.resume();
}

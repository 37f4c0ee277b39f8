//! docs/spec.md section 8.1's wait for the lease in flight, on a real
//! redis-server that hangs (`SIGSTOP`) while one key's lease is asked:
//! the requests that claimed units of that lease are answered once it
//! fails, after the one command timeout of the lease: their own requests
//! then find the backend down and fail at once, without a round trip.
//! Every answer is the failure policy's and marked degraded, nothing
//! admitted by a lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use limiter_core::{
    Decision, DecisionSource, Error, FailurePolicy, Limiter, LimiterExt, Policies, Policy, Rate,
};
use limiter_lease::Leased;
use limiter_redis::{BackendError, BackendErrorKind, RedisBackend, RedisLimiter};
use limiter_test::redis_server::{fresh_prefix, RedisServer};

const TIMEOUT: Duration = Duration::from_millis(300);

/// A limiter that keeps how each of its calls to Redis failed, before a
/// failure policy hides it.
#[derive(Debug)]
struct Recorded {
    redis: RedisLimiter,
    failures: Mutex<Vec<BackendErrorKind>>,
}

impl Recorded {
    fn record(&self, decided: Result<Decision, Error>) -> Result<Decision, Error> {
        if let Err(Error::Backend(failure)) = &decided {
            let kind = failure
                .downcast_ref::<BackendError>()
                .expect("a Redis backend error")
                .kind();
            self.failures.lock().unwrap().push(kind);
        }
        decided
    }
}

#[async_trait]
impl Limiter for Recorded {
    fn policies(&self) -> &Policies {
        self.redis.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.record(self.redis.acquire(key, cost).await)
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.record(self.redis.peek(key, cost).await)
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.redis.reset(key).await
    }
}

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
    let recorded = Arc::new(Recorded {
        redis,
        failures: Mutex::default(),
    });
    let leased = Arc::new(
        Leased::builder(Arc::clone(&recorded).on_failure(FailurePolicy::FailClosed))
            .min_lease(10)
            .max_lease(10)
            .build(),
    );
    // A first lease, given up: the next request asks for another.
    assert!(leased.acquire(b"hot", 1).await.unwrap().allowed);
    assert!(leased.release().await > 0);
    assert_eq!(leased.held(b"hot"), 0);
    server.pause();
    // One request asks the lease; the other 8 claim its units and wait.
    let callers: Vec<_> = (0..9)
        .map(|_| {
            let leased = Arc::clone(&leased);
            tokio::spawn(async move { leased.acquire(b"hot", 1).await })
        })
        .collect();
    for caller in callers {
        // A waiter never woken would hang here: fail instead, after a
        // hundred command timeouts, far more than a loaded host adds.
        let decision = tokio::time::timeout(TIMEOUT * 100, caller)
            .await
            .expect("every caller answered")
            .expect("a caller")
            .expect("the failure policy answers");
        assert!(!decision.allowed, "fail closed: {decision:?}");
        assert_eq!(decision.source, DecisionSource::FailClosed);
        assert!(decision.is_degraded());
    }
    // One command timeout, the lease's, not one for each request after
    // it: the others found the backend down.
    let failures = recorded.failures.lock().unwrap().clone();
    assert_eq!(
        failures
            .iter()
            .filter(|&&kind| kind == BackendErrorKind::Timeout)
            .count(),
        1,
        "{failures:?}"
    );
    assert!(
        failures
            .iter()
            .all(|&kind| kind == BackendErrorKind::Timeout || kind == BackendErrorKind::Unavailable),
        "{failures:?}"
    );
    assert_eq!(leased.held(b"hot"), 0, "nothing leased while it hung");
    server.resume();
}

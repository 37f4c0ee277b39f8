//! Scripts survive `SCRIPT FLUSH` and server restarts (NOSCRIPT recovery);
//! an unreachable or killed server gives the configured failure policy's
//! answer, quickly, never a panic or a hang.

mod common;

use std::net::TcpListener;
use std::time::Duration;

use limiter_core::{Error, Limiter, ManualClock, Policy, Rate};
use limiter_redis::{BackendError, BackendErrorKind, FailurePolicy, RedisBackend, RedisLimiter};
use limiter_test::redis_server::RedisServer;

fn policy() -> Policy {
    Policy::sliding_log(Rate::new(3, Duration::from_secs(60))).unwrap()
}

/// A loopback URL nothing listens on.
fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("redis://127.0.0.1:{port}/")
}

fn backend_kind(error: &Error) -> BackendErrorKind {
    match error {
        Error::Backend(e) => e
            .downcast_ref::<BackendError>()
            .expect("backend errors are BackendError")
            .kind(),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

/// A limiter with short timeouts, as an application would configure one.
fn short_timeouts(url: &str, on_failure: FailurePolicy) -> limiter_redis::RedisLimiterBuilder {
    let backend = RedisBackend::builder(url)
        .connection_timeout(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(300))
        .build_lazy()
        .unwrap();
    RedisLimiter::builder(&backend, policy())
        .key_prefix(common::fresh_prefix("r"))
        .on_failure(on_failure)
}

#[tokio::test]
async fn script_flush_between_calls_is_recovered_with_state_intact() {
    let limiter = common::builder(policy()).build().await.unwrap();
    let mut conn = common::connection().await;
    for expected_remaining in [2, 1, 0] {
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        let decision = limiter.acquire("k", 1).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.remaining, expected_remaining);
    }
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!limiter.peek("k", 1).await.unwrap().allowed);
    assert!(!limiter.acquire("k", 1).await.unwrap().allowed);
}

#[tokio::test]
async fn a_restarted_server_is_reconnected_and_scripts_reloaded() {
    let mut server = RedisServer::start();
    let limiter = common::builder_at(&server.url(), policy())
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.acquire("k", 1).await.unwrap().remaining, 2);
    server.restart(); // same port, empty: no keys, no scripts
                      // The pooled connection died with the old server: the first call may
                      // report it; the next reconnects, gets NOSCRIPT, loads and runs.
    let mut failures = 0;
    let decision = loop {
        match limiter.acquire("k", 1).await {
            Ok(decision) => break decision,
            Err(e) => {
                assert_eq!(backend_kind(&e), BackendErrorKind::Connect, "{e}");
                failures += 1;
                assert!(failures <= 1, "more than one failure after a restart: {e}");
                // Past the fast-fail interval, the next call probes again.
                tokio::time::sleep(Duration::from_millis(1100)).await;
            }
        }
    };
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 2, "the restarted server started empty");
}

#[tokio::test]
async fn an_unreachable_server_fails_the_build_with_a_clear_error() {
    let url = closed_port_url();
    let error = short_timeouts(&url, FailurePolicy::ReturnError)
        .build()
        .await
        .unwrap_err();
    assert_eq!(backend_kind(&error), BackendErrorKind::Connect);
    let message = error.to_string();
    assert!(message.contains(&url), "{message}");
    assert!(message.to_lowercase().contains("refused"), "{message}");
}

#[tokio::test]
async fn an_unreachable_server_follows_the_failure_policy() {
    let url = closed_port_url();
    let clock = ManualClock::new(5_000_000);

    let open = short_timeouts(&url, FailurePolicy::FailOpen)
        .clock(clock.clone())
        .build()
        .await
        .expect("fail-open builds while Redis is down");
    let closed = short_timeouts(&url, FailurePolicy::FailClosed)
        .build()
        .await
        .expect("fail-closed builds while Redis is down");
    for _ in 0..3 {
        let admitted = open.acquire("k", 1).await.unwrap();
        assert!(admitted.allowed);
        assert_eq!((admitted.remaining, admitted.time_us), (0, 5_000_000));
        assert!(open.peek("k", 3).await.unwrap().allowed);

        let denied = closed.acquire("k", 1).await.unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after, Duration::from_secs(1));
        assert!(!closed.peek("k", 1).await.unwrap().allowed);
    }
    // Request errors stay errors, decided before any round trip.
    assert!(matches!(open.acquire("k", 0).await, Err(Error::ZeroCost)));
    assert!(matches!(
        closed.acquire("k", 4).await,
        Err(Error::CostExceedsCapacity { cost: 4, max: 3 })
    ));
    // A reset cannot be faked: it fails whatever the policy.
    assert_eq!(
        backend_kind(&open.reset("k").await.unwrap_err()),
        BackendErrorKind::Connect
    );
    assert_eq!(
        backend_kind(&closed.reset("k").await.unwrap_err()),
        BackendErrorKind::Connect
    );
    assert!(open.backend().ping().await.is_err());
}

#[tokio::test]
async fn a_server_killed_mid_run_follows_the_failure_policy_then_recovers() {
    let mut server = RedisServer::start();
    let url = server.url();
    let limiters = [
        short_timeouts(&url, FailurePolicy::ReturnError)
            .build()
            .await
            .unwrap(),
        short_timeouts(&url, FailurePolicy::FailOpen)
            .build()
            .await
            .unwrap(),
        short_timeouts(&url, FailurePolicy::FailClosed)
            .build()
            .await
            .unwrap(),
    ];
    for limiter in &limiters {
        assert!(limiter.acquire("k", 1).await.unwrap().allowed);
    }
    server.stop();
    for _ in 0..3 {
        let [error, open, closed] = &limiters;
        let e = error.acquire("k", 1).await.unwrap_err();
        assert_eq!(backend_kind(&e), BackendErrorKind::Connect, "{e}");
        assert!(open.acquire("k", 1).await.unwrap().allowed);
        assert!(!closed.acquire("k", 1).await.unwrap().allowed);
    }
    server.restart();
    tokio::time::sleep(Duration::from_millis(1100)).await; // past the fast-fail interval
    for limiter in &limiters {
        let decision = limiter.acquire("k", 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.remaining),
            (true, 2),
            "{limiter:?}"
        );
        limiter.backend().ping().await.unwrap();
    }
}

#[tokio::test]
async fn a_limiter_built_while_redis_is_down_connects_when_it_comes_up() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.stop();
    let limiter = short_timeouts(&url, FailurePolicy::FailClosed)
        .build()
        .await
        .unwrap();
    assert!(!limiter.acquire("k", 1).await.unwrap().allowed);
    server.restart();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let decision = limiter.acquire("k", 1).await.unwrap();
    assert_eq!((decision.allowed, decision.remaining), (true, 2));
}

/// A server that accepts connections but never answers: every call gives
/// up within its timeouts.
#[tokio::test]
async fn a_silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    let error = short_timeouts(&url, FailurePolicy::ReturnError)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            backend_kind(&error),
            BackendErrorKind::Connect | BackendErrorKind::Timeout
        ),
        "{error}"
    );
    let limiter = short_timeouts(&url, FailurePolicy::FailOpen)
        .build()
        .await
        .unwrap();
    assert!(limiter.acquire("k", 1).await.unwrap().allowed);
    drop(listener);
}

#[tokio::test]
async fn errors_name_the_server_without_its_password() {
    let url = closed_port_url().replace("redis://", "redis://app:s3cret@");
    let error = short_timeouts(&url, FailurePolicy::ReturnError)
        .build()
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("app:***@127.0.0.1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    let debug = format!("{:?}", RedisBackend::builder(url));
    assert!(!debug.contains("s3cret"), "{debug}");
}

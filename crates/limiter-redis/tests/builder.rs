//! What `build()` refuses, before any round trip: a sliding log above the
//! guard, bad options; and what every decision refuses before its round
//! trip: bad costs and times.

mod common;

use std::time::Duration;

use limiter_core::{Algorithm, Error, Limiter, LimiterExt, ManualClock, Policy, PolicyError, Rate};
use limiter_redis::{BackendError, BackendErrorKind, RedisBackend, RedisLimiter};

/// Nothing listens here: any round trip would fail as a connection error.
const NOWHERE: &str = "redis://127.0.0.1:1/";

fn config_error(error: Error) -> String {
    match error {
        Error::InvalidConfig(e) => {
            let e = e.downcast::<BackendError>().expect("a BackendError");
            assert_eq!(e.kind(), BackendErrorKind::Config, "{e}");
            e.to_string()
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_sliding_log_above_the_guard_is_refused_as_unsupported() {
    let policy = Policy::sliding_log(Rate::per_hour(10_001)).unwrap();
    let error = common::builder_at(NOWHERE, policy.clone())
        .build()
        .await
        .unwrap_err();
    match error {
        Error::InvalidPolicy(PolicyError::Unsupported { reason }) => {
            assert!(
                reason.contains("10001") && reason.contains("10000"),
                "{reason}"
            );
            assert!(reason.contains("max_sliding_log_limit"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // Raising the guard lets it through (to the real server).
    let limiter = common::builder(policy)
        .max_sliding_log_limit(20_000)
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.acquire(b"k", 10_001).await.unwrap().remaining, 0);
    // At the guard itself, and for the other algorithms, no limit applies.
    let at_guard = Policy::sliding_log(Rate::per_hour(10_000)).unwrap();
    common::builder(at_guard).build().await.unwrap();
    for algorithm in Algorithm::ALL
        .into_iter()
        .filter(|a| *a != Algorithm::SlidingLog)
    {
        let policy = Policy::new(algorithm, Rate::per_day(1_000_000)).unwrap();
        common::builder(policy).build().await.unwrap();
    }
}

#[tokio::test]
async fn bad_options_are_refused_before_connecting() {
    let backend = |builder: limiter_redis::RedisBackendBuilder| async {
        config_error(builder.build().await.unwrap_err())
    };
    let message = backend(RedisBackend::builder(NOWHERE).connections(0)).await;
    assert!(
        message.contains("connections must be at least 1"),
        "{message}"
    );
    for builder in [
        RedisBackend::builder(NOWHERE).command_timeout(Duration::ZERO),
        RedisBackend::builder(NOWHERE).connection_timeout(Duration::ZERO),
        RedisBackend::builder(NOWHERE).probe_interval(Duration::ZERO),
    ] {
        let message = backend(builder).await;
        assert!(message.contains("timeouts"), "{message}");
    }
    let message = backend(RedisBackend::builder("http://example")).await;
    assert!(message.contains("invalid Redis URL"), "{message}");
    assert!(!message.contains("no scheme"), "{message}");
    for builder in [
        RedisBackend::builder("127.0.0.1:6379"),
        RedisBackend::cluster(["127.0.0.1:7000"]),
    ] {
        let message = backend(builder).await;
        assert!(
            message.contains("no scheme: write redis://127.0.0.1:6379")
                || message.contains("no scheme: write redis://127.0.0.1:7000"),
            "{message}"
        );
    }
    let policy = Policy::token_bucket(Rate::per_second(5)).unwrap();
    let message = config_error(
        common::builder_at(NOWHERE, policy)
            .key_prefix("a{b}")
            .build()
            .await
            .unwrap_err(),
    );
    assert!(message.contains("brace"), "{message}");
}

#[tokio::test]
async fn bad_requests_are_errors_before_any_round_trip() {
    let policy = Policy::leaky_bucket(Rate::per_second(5))
        .unwrap()
        .with_queue(8)
        .unwrap();
    let clock = ManualClock::new(0);
    // Fail-open would admit anything that reached the backend.
    let backend = RedisBackend::builder(NOWHERE)
        .connection_timeout(Duration::from_millis(200))
        .build_lazy()
        .unwrap();
    let limiter = RedisLimiter::builder(&backend, policy)
        .clock(clock.clone())
        .build()
        .await
        .unwrap()
        .on_failure(limiter_core::FailurePolicy::FailOpen);
    assert!(matches!(
        limiter.acquire(b"k", 0).await,
        Err(Error::ZeroCost)
    ));
    assert!(matches!(limiter.peek(b"k", 0).await, Err(Error::ZeroCost)));
    assert!(matches!(
        limiter.acquire(b"k", 9).await,
        Err(Error::CostExceedsCapacity {
            cost: 9,
            max_cost: 8
        })
    ));
    clock.set(limiter_core::MAX_TIME_US + 1);
    assert!(matches!(
        limiter.acquire(b"k", 1).await,
        Err(Error::TimeOutOfRange { .. })
    ));
}

#[tokio::test]
async fn the_defaults_are_as_documented() {
    use limiter_redis::{RedisBackendBuilder as C, RedisLimiterBuilder as B};
    assert_eq!(B::DEFAULT_KEY_PREFIX, "limiter");
    assert_eq!(B::DEFAULT_MAX_SLIDING_LOG_LIMIT, 10_000);
    assert_eq!(B::DEFAULT_TTL_FLOOR, Duration::from_secs(60));
    assert_eq!(C::DEFAULT_CONNECTIONS, 1);
    assert_eq!(C::DEFAULT_CONNECTION_TIMEOUT, Duration::from_secs(1));
    assert_eq!(C::DEFAULT_COMMAND_TIMEOUT, Duration::from_secs(1));
    assert_eq!(C::DEFAULT_PROBE_INTERVAL, Duration::from_millis(500));
    let policy = Policy::fixed_window(Rate::per_second(5)).unwrap();
    let backend = RedisBackend::builder(common::server().url())
        .build()
        .await
        .unwrap();
    let limiter = RedisLimiter::builder(&backend, policy)
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.key_prefix(), "limiter");
    let key = common::text(limiter.redis_key(b"u"));
    assert_eq!(key, "limiter:{u}:0");
    assert_eq!(limiter.policies().parts()[0].limit(), 5);
    backend.ping().await.unwrap();
}

#[tokio::test]
async fn a_huge_ttl_floor_is_capped_not_an_error() {
    let policy = Policy::fixed_window(Rate::per_second(5)).unwrap();
    let limiter = common::builder(policy)
        .clock(ManualClock::new(1_000))
        .ttl_floor(Duration::MAX)
        .build()
        .await
        .unwrap();
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    let ttl = common::pttl(&common::text(limiter.redis_key(b"k"))).await;
    assert!(ttl > 1_000_000_000, "PTTL {ttl}");
}

/// `username`, `password` and `db` against a server that requires a
/// password (`--requirepass`) and has an ACL user: each option reaches the
/// server, overrides the URL's, and a wrong or missing password, or a
/// wrong user, is a configuration error (no failure policy answers it)
/// that says what to fix and never shows the password: from `build()`,
/// and from a lazy backend's first call (a limiter's build).
#[tokio::test]
async fn username_password_and_db_options_reach_the_server() {
    use limiter_test::redis_server::RedisServer;

    let server = RedisServer::start_with_args(&[
        "--requirepass",
        "s3cret",
        "--user",
        "app",
        "on",
        ">app-pw",
        "~*",
        "&*",
        "+@all",
    ]);
    let url = server.url();
    let policy = Policy::fixed_window(Rate::per_minute(5)).unwrap();
    let quick = |builder: limiter_redis::RedisBackendBuilder| {
        builder
            .connection_timeout(Duration::from_secs(5))
            .command_timeout(Duration::from_secs(5))
    };
    let chain = |error: &Error| {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    };

    // No password, or a wrong one: refused, without the password in sight.
    let refused = |name: &str, error: Error| {
        let message = chain(&error);
        match &error {
            Error::InvalidConfig(e) => {
                let kind = e.downcast_ref::<BackendError>().map(BackendError::kind);
                assert_eq!(kind, Some(BackendErrorKind::Config), "{name}: {message}");
            }
            other => panic!("{name}: expected a configuration error, got {other:?}"),
        }
        assert!(
            message.contains("refuses the backend's credentials")
                && message.contains(".username() and .password()"),
            "{name}: the error says what to fix: {message}"
        );
        assert!(!message.contains("wr0ng-pw"), "{name}: {message}");
    };
    let credentials = |name: &str| {
        let builder = RedisBackend::builder(url.as_str());
        quick(match name {
            "no password" => builder,
            "wrong password" => builder.password("wr0ng-pw"),
            _ => builder.username("nobody").password("s3cret"),
        })
    };
    for name in ["no password", "wrong password", "wrong user"] {
        refused(name, credentials(name).build().await.unwrap_err());
        let lazy = credentials(name).build_lazy().unwrap();
        let first_call = RedisLimiter::builder(&lazy, policy.clone()).build().await;
        refused(name, first_call.unwrap_err());
        refused(name, lazy.ping().await.unwrap_err());
        assert!(!lazy.is_available(), "{name}");
    }

    // The default user's password, overriding a wrong one in the URL.
    let wrong_in_url = url.replace("redis://", "redis://:wr0ng-pw@");
    let backend = quick(RedisBackend::builder(wrong_in_url).password("s3cret"))
        .build()
        .await
        .unwrap();
    backend.ping().await.unwrap();

    // An ACL user and a database: the state lands in db 3, as user `app`.
    let backend = quick(
        RedisBackend::builder(url.as_str())
            .username("app")
            .password("app-pw")
            .db(3),
    )
    .build()
    .await
    .unwrap();
    let limiter = RedisLimiter::builder(&backend, policy)
        .key_prefix(common::fresh_prefix("acl"))
        .build()
        .await
        .unwrap();
    for remaining in [4, 3] {
        assert_eq!(limiter.acquire(b"u", 1).await.unwrap().remaining, remaining);
    }
    let inspect = |db: i64| {
        let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
        let settings = info
            .redis_settings()
            .clone()
            .set_password("s3cret")
            .set_db(db);
        redis::Client::open(info.set_redis_settings(settings)).unwrap()
    };
    let key = common::text(limiter.redis_key(b"u"));
    let mut db3 = inspect(3).get_multiplexed_async_connection().await.unwrap();
    let mut db0 = inspect(0).get_multiplexed_async_connection().await.unwrap();
    let in_db3: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut db3)
        .await
        .unwrap();
    let in_db0: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(&mut db0)
        .await
        .unwrap();
    assert!(
        in_db3 && !in_db0,
        "{key}: in db 3 {in_db3}, in db 0 {in_db0}"
    );
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut db0)
        .await
        .unwrap();
    assert!(
        clients
            .lines()
            .any(|line| line.contains(" user=app ") && line.contains(" db=3 ")),
        "{clients}"
    );
}

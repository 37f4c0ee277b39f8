//! Each failure policy's answer on a refused port, a killed server, a
//! demoted primary, a full server and a flushed library, and the errors
//! callers read; credentials the server refuses, which no policy answers.

use super::*;

fn short_timeouts(url: &str) -> limiter_redis::RedisLimiterBuilder {
    let backend = backend_builder(url).build_lazy().unwrap();
    RedisLimiter::builder(&backend, Policy::sliding_log(Rate::per_minute(3)).unwrap())
        .key_prefix(common::fresh_prefix("r"))
}

/// Asserts that `limiter`'s backend fails without waiting on a timeout
/// (a refused connection, or the open circuit): what lets its failure
/// policy answer at once.
async fn fails_at_once(limiter: &Guarded) {
    let error = limiter.inner().acquire(b"k", 1).await.unwrap_err();
    assert_refusal_or_circuit(&error);
}

/// Asserts that `error` is a refused connection or the open circuit's.
fn assert_refusal_or_circuit(error: &Error) {
    let (kind, message) = (common::backend_kind(error), error.chain().to_string());
    assert!(
        kind == BackendErrorKind::Unavailable
            || (kind == BackendErrorKind::Connect && message.to_lowercase().contains("refused")),
        "{kind:?}: {message}"
    );
}

/// A limiter on `url` under `on_failure`, built while Redis may be down.
async fn guarded(url: &str, on_failure: FailurePolicy) -> Guarded {
    short_timeouts(url)
        .build()
        .await
        .expect("an outage does not fail the build")
        .on_failure(on_failure)
        .probe_interval(Duration::ZERO)
}

#[tokio::test]
async fn an_unreachable_server_fails_the_backends_build_with_a_clear_error() {
    let _serial = one_at_a_time().await;
    let url = closed_port_url();
    let error = backend_builder(&url).build().await.unwrap_err();
    assert_eq!(common::backend_kind(&error), BackendErrorKind::Connect);
    let message = error.chain().to_string();
    assert!(message.contains(&url), "{message}");
    // Refused at once, not left to the connection timeout.
    assert!(message.to_lowercase().contains("refused"), "{message}");
    assert!(!message.contains("no connection within"), "{message}");
    // A limiter on a lazy backend builds: its library waits for the
    // connection that ends the outage.
    short_timeouts(&url).build().await.unwrap();
}

#[tokio::test]
async fn a_refused_port_gives_the_failure_policys_answer_at_once() {
    let _serial = one_at_a_time().await;
    let url = closed_port_url();
    let clock = ManualClock::new(5_000_000);
    let open = short_timeouts(&url)
        .clock(clock.clone())
        .build()
        .await
        .expect("an outage does not fail the build")
        .on_failure(FailurePolicy::FailOpen)
        .clock(clock.clone());
    let closed = guarded(&url, FailurePolicy::FailClosed).await;
    for _ in 0..3 {
        let admitted = open.acquire(b"k", 1).await.unwrap();
        assert!(admitted.allowed);
        assert_eq!(admitted.source, DecisionSource::FailOpen, "marked degraded");
        assert_eq!((admitted.remaining, admitted.time_us), (0, 5_000_000));
        assert!(open.peek(b"k", 3).await.unwrap().allowed);

        let denied = closed.acquire(b"k", 1).await.unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.source, DecisionSource::FailClosed, "marked degraded");
        assert!(!closed.peek(b"k", 1).await.unwrap().allowed);
        fails_at_once(&open).await;
        fails_at_once(&closed).await;
    }
    // Request errors stay errors, decided before any round trip.
    assert!(matches!(open.acquire(b"k", 0).await, Err(Error::ZeroCost)));
    assert!(matches!(
        closed.acquire(b"k", 4).await,
        Err(Error::CostExceedsCapacity {
            cost: 4,
            max_cost: 3
        })
    ));
    // A reset cannot be faked: it fails whatever the policy.
    for limiter in [&open, &closed] {
        let kind = common::backend_kind(&limiter.reset(b"k").await.unwrap_err());
        assert!(
            matches!(
                kind,
                BackendErrorKind::Connect | BackendErrorKind::Unavailable
            ),
            "{kind:?}"
        );
    }
    assert!(open.inner().backend().ping().await.is_err());
}

#[tokio::test]
async fn a_killed_server_gives_the_failure_policys_answer_at_once_then_recovers() {
    let _serial = one_at_a_time().await;
    let mut server = RedisServer::start();
    let url = server.url();
    let limiters = [
        guarded(&url, FailurePolicy::ReturnError).await,
        guarded(&url, FailurePolicy::FailOpen).await,
        guarded(&url, FailurePolicy::FailClosed).await,
    ];
    for limiter in &limiters {
        assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    }
    server.kill();
    for _ in 0..3 {
        let [error, open, closed] = &limiters;
        assert_refusal_or_circuit(&error.acquire(b"k", 1).await.unwrap_err());
        assert!(open.acquire(b"k", 1).await.unwrap().allowed);
        assert!(!closed.acquire(b"k", 1).await.unwrap().allowed);
        fails_at_once(open).await;
        fails_at_once(closed).await;
    }
    server.restart();
    let back = Instant::now();
    for limiter in &limiters {
        let backend = limiter.inner().backend();
        wait_until("the probe to reconnect", || backend.is_available()).await;
        let decision = limiter.acquire(b"k", 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.remaining, decision.source),
            (true, 2, DecisionSource::Backend),
            "{limiter:?}"
        );
        backend.ping().await.unwrap();
    }
    assert!(back.elapsed() <= RECOVERY_BOUND, "{:?}", back.elapsed());
}

#[tokio::test]
async fn a_limiter_built_while_redis_is_down_connects_when_it_comes_up() {
    let _serial = one_at_a_time().await;
    let mut server = RedisServer::start();
    let url = server.url();
    server.stop();
    let limiter = guarded(&url, FailurePolicy::FailClosed).await;
    assert!(!limiter.acquire(b"k", 1).await.unwrap().allowed);
    server.restart();
    let backend = limiter.inner().backend();
    wait_until("the probe to connect", || backend.is_available()).await;
    let decision = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!((decision.allowed, decision.remaining), (true, 2));
}

/// Every decision of each limiter is a configuration error, told at once:
/// the server refuses the credentials, which no failure policy answers
/// (fail-open admits nothing uncounted); and its backend is down.
async fn every_policy_refused(limiters: &[Guarded]) {
    for limiter in limiters {
        for _ in 0..3 {
            let error = limiter
                .acquire(b"k", 1)
                .await
                .expect_err("no failure policy answers refused credentials");
            let chain = error.chain().to_string();
            match &error {
                Error::InvalidConfig(e) => assert_eq!(
                    e.downcast_ref::<limiter_redis::BackendError>()
                        .map(|e| e.kind()),
                    Some(BackendErrorKind::Config),
                    "{chain}"
                ),
                other => panic!("expected a configuration error, got {other:?}"),
            }
            assert!(
                chain.contains("refuses the backend's credentials"),
                "{chain}"
            );
        }
        assert!(!limiter.inner().backend().is_available(), "{limiter:?}");
    }
}

/// A limiter built while Redis is down, on a lazy backend whose password
/// the server turns out to refuse when it comes up: the probe's refusal is
/// every decision's configuration error, under every failure policy.
#[tokio::test]
async fn a_server_that_comes_up_refusing_the_password_is_a_configuration_error() {
    let _serial = one_at_a_time().await;
    let mut server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
    let url = server.url().replace("redis://", "redis://:wr0ng-pw@");
    server.stop();
    let limiters = [
        guarded(&url, FailurePolicy::ReturnError).await,
        guarded(&url, FailurePolicy::FailOpen).await,
        guarded(&url, FailurePolicy::FailClosed).await,
    ];
    let [_, open, _] = &limiters;
    let degraded = open.acquire(b"k", 1).await.unwrap();
    assert_eq!(degraded.source, DecisionSource::FailOpen, "down: an outage");
    server.restart();
    // The backends tell an outage until their probe meets the password
    // check.
    let deadline = Instant::now() + POLL_LIMIT;
    for limiter in &limiters {
        loop {
            match limiter.inner().acquire(b"k", 1).await {
                Err(Error::InvalidConfig(_)) => break,
                Err(_) => assert!(Instant::now() < deadline, "the probe never met it"),
                Ok(decision) => panic!("decided without the password: {decision:?}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    every_policy_refused(&limiters).await;
}

/// A password rotated on the server but not in the backend (the backend's
/// connection then lost): every decision is a configuration error under
/// every failure policy, counted nowhere, while the backend is down; once
/// the server takes the backend's password again, the probe reconnects and
/// decisions go on, exactly, where they left off.
#[tokio::test]
async fn a_password_rotated_under_a_running_backend_is_a_configuration_error() {
    let _serial = one_at_a_time().await;
    let server = RedisServer::start();
    assert_eq!(server.command("ACL SETUSER app on >old-pw ~* +@all"), "+OK");
    let url = server.url().replace("redis://", "redis://app:old-pw@");
    let limiters = [
        guarded(&url, FailurePolicy::ReturnError).await,
        guarded(&url, FailurePolicy::FailOpen).await,
        guarded(&url, FailurePolicy::FailClosed).await,
    ];
    for limiter in &limiters {
        assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, 2);
    }
    assert_eq!(server.command("ACL SETUSER app resetpass >new-pw"), "+OK");
    assert_eq!(server.command("CLIENT KILL USER app"), ":3");
    every_policy_refused(&limiters).await;

    assert_eq!(server.command("ACL SETUSER app resetpass >old-pw"), "+OK");
    for limiter in &limiters {
        let backend = limiter.inner().backend();
        wait_until("the probe to reconnect", || backend.is_available()).await;
        let decision = limiter.acquire(b"k", 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.remaining, decision.source),
            (true, 1, DecisionSource::Backend),
            "nothing counted while refused: {limiter:?}"
        );
    }
}

/// A failover that demotes the primary the backend points at (`REPLICAOF`
/// the promoted replica: every write answered `READONLY`) is an outage of
/// the server: the backend is down, and each failure policy's answer is
/// marked degraded. Once it is promoted back (`REPLICAOF NO ONE`), the
/// probe's new connection finds it writable and decisions go on exactly
/// where they left off (the replica held the same state).
#[tokio::test]
async fn a_demoted_primary_is_the_failure_policys_until_promoted_back() {
    let _serial = one_at_a_time().await;
    // Its replica syncs at once, not after the default 5 s wait for more.
    let server = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
    let replica = RedisServer::start();
    let url = server.url();
    let limiters = [
        guarded(&url, FailurePolicy::FailOpen).await,
        guarded(&url, FailurePolicy::FailClosed).await,
    ];
    for limiter in &limiters {
        assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, 2);
    }
    let follow = |port: u16| format!("REPLICAOF 127.0.0.1 {port}");
    assert_eq!(replica.command(&follow(server.port())), "+OK");
    wait_until("the replica to sync", || {
        replica
            .query("INFO replication")
            .contains("master_link_status:up")
    })
    .await;
    assert_eq!(replica.command("REPLICAOF NO ONE"), "+OK");
    assert_eq!(server.command(&follow(replica.port())), "+OK");

    let [open, closed] = &limiters;
    for _ in 0..3 {
        let admitted = open.acquire(b"k", 1).await.unwrap();
        assert_eq!(
            (admitted.allowed, admitted.source),
            (true, DecisionSource::FailOpen)
        );
        let denied = closed.acquire(b"k", 1).await.unwrap();
        assert_eq!(
            (denied.allowed, denied.source),
            (false, DecisionSource::FailClosed)
        );
    }
    for limiter in &limiters {
        assert!(!limiter.inner().backend().is_available(), "{limiter:?}");
    }

    assert_eq!(server.command("REPLICAOF NO ONE"), "+OK");
    for limiter in &limiters {
        let backend = limiter.inner().backend();
        wait_until("the probe to reconnect", || backend.is_available()).await;
        let decision = limiter.acquire(b"k", 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.remaining, decision.source),
            (true, 1, DecisionSource::Backend),
            "nothing counted while demoted: {limiter:?}"
        );
    }
}

#[tokio::test]
async fn a_function_flush_between_calls_is_recovered_with_state_intact() {
    let _serial = one_at_a_time().await;
    let limiter = common::builder(Policy::sliding_log(Rate::per_minute(3)).unwrap())
        .build()
        .await
        .unwrap();
    let server = common::server();
    for expected_remaining in [2, 1, 0] {
        assert_eq!(server.command("FUNCTION FLUSH"), "+OK");
        let decision = limiter.acquire(b"k", 1).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.remaining, expected_remaining);
    }
    assert_eq!(server.command("FUNCTION FLUSH"), "+OK");
    assert!(!limiter.peek(b"k", 1).await.unwrap().allowed);
    assert!(!limiter.acquire(b"k", 1).await.unwrap().allowed);
}

/// A full Redis (`maxmemory` reached, `noeviction`, as docs/backends.md
/// asks) refuses a function that may write before it runs: every decision,
/// admission or denial, is an error of kind `Redis` (the backend stays up:
/// the server answers), `FailClosed` denies them, nothing is counted
/// meanwhile, and decisions go on where they left off once memory is free.
/// A peek still answers, exactly: it runs the library's no-writes function.
#[tokio::test]
async fn a_full_redis_refuses_every_decision_and_counts_nothing() {
    let _serial = one_at_a_time().await;
    let server = RedisServer::start_with_args(&["--maxmemory-policy", "noeviction"]);
    let backend = backend_builder(&server.url()).build().await.unwrap();
    let limiter = RedisLimiter::builder(&backend, Policy::sliding_log(Rate::per_hour(3)).unwrap())
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, 2);
    assert_eq!(server.command("CONFIG SET maxmemory 1"), "+OK");
    for _ in 0..3 {
        let error = limiter.acquire(b"k", 1).await.unwrap_err();
        assert_eq!(common::backend_kind(&error), BackendErrorKind::Redis);
        assert!(
            error.chain().to_string().contains("OOM"),
            "{}",
            error.chain()
        );
    }
    assert!(backend.is_available(), "a full server still answers");
    let peeked = || async {
        let peek = limiter.peek(b"k", 1).await.unwrap();
        assert!(
            peek.allowed && peek.remaining == 1 && !peek.is_degraded(),
            "a full server answers a peek, as the one admission left it: {peek:?}"
        );
    };
    peeked().await;
    // A new connection while full: FUNCTION LOAD is refused too (OOM), yet
    // the server answers, so the backend stays up, and a limiter can be
    // built (its function is loaded once there is room).
    let killed = server.command("CLIENT KILL TYPE normal SKIPME yes");
    assert_eq!(killed, ":1", "the backend's one connection is killed");
    let error = limiter.acquire(b"k", 1).await.unwrap_err();
    assert_eq!(
        common::backend_kind(&error),
        BackendErrorKind::Redis,
        "{}",
        error.chain()
    );
    assert!(
        backend.is_available(),
        "a full server still answers a new connection"
    );
    peeked().await;
    let second = RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
        .build()
        .await
        .expect("a limiter builds on a full server");
    let closed = limiter.on_failure(FailurePolicy::FailClosed);
    let decision = closed.acquire(b"k", 1).await.unwrap();
    assert!(!decision.allowed);
    assert_eq!(decision.source, DecisionSource::FailClosed);
    assert_eq!(server.command("CONFIG SET maxmemory 0"), "+OK");
    // (The wrapper itself retries the backend after its probe interval.)
    let decision = closed.inner().acquire(b"k", 1).await.unwrap();
    assert!(decision.allowed && decision.remaining == 1, "{decision:?}");
    assert!(second.acquire(b"k", 1).await.unwrap().allowed);
}

/// A reload Redis refuses (an ACL that denies `FUNCTION` to the
/// limiter's user, after `FUNCTION FLUSH`): the decision fails as Redis's
/// refusal, told as a reload, and the backend stays up; once the ACL allows
/// it again, the next decision reloads the library and is decided.
#[tokio::test]
async fn a_refused_reload_is_redis_s_refusal_not_an_outage() {
    let _serial = one_at_a_time().await;
    let server = RedisServer::start();
    let user = "ACL SETUSER app on >pw ~* +@all";
    assert_eq!(server.command(user), "+OK");
    let url = server.url().replace("redis://", "redis://app:pw@");
    let backend = backend_builder(&url).build().await.unwrap();
    let limiter = RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, 2);
    assert_eq!(server.command("ACL SETUSER app -function"), "+OK");
    assert_eq!(server.command("FUNCTION FLUSH"), "+OK");
    let error = limiter.acquire(b"k", 1).await.unwrap_err();
    let chain = error.chain().to_string();
    assert_eq!(
        common::backend_kind(&error),
        BackendErrorKind::Redis,
        "{chain}"
    );
    assert!(chain.contains("reloading the function failed"), "{chain}");
    assert_eq!(chain.matches("NoPerm").count(), 1, "{chain}");
    assert!(backend.is_available(), "a refusal is no outage");
    assert_eq!(server.command("ACL SETUSER app +function"), "+OK");
    let decision = limiter.acquire(b"k", 1).await.unwrap();
    assert!(decision.allowed && decision.remaining == 1, "{decision:?}");
}

#[tokio::test]
async fn errors_name_the_server_without_its_password() {
    let _serial = one_at_a_time().await;
    let url = closed_port_url().replace("redis://", "redis://app:s3cret@");
    let error = backend_builder(&url).build().await.unwrap_err();
    let message = error.chain().to_string();
    assert!(message.contains("app:***@127.0.0.1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    let debug = format!("{:?}", RedisBackend::builder(url));
    assert!(!debug.contains("s3cret"), "{debug}");
}

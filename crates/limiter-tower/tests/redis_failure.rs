//! Redis killed under load, behind a real HTTP server: under fail-open
//! every request passes and is marked `X-RateLimit-Degraded: fail-open`,
//! under fail-closed every request is answered 503, none waits for Redis
//! (the ban check on the same Redis included), and both recover when Redis
//! is back. Each phase is a fixed number of requests from four clients at
//! once.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::StatusCode;
use limiter_core::{FailurePolicy, LimiterExt, Policy};
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_server::RedisServer;
use limiter_tower::ban::BanList;
use limiter_tower::LimiterLayer;
use support::{client, fresh_prefix, get, serve, HttpClient};

/// The backend's command and connection timeouts: what a caller held by
/// Redis would wait.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Answers slower than this were held by Redis. An answer without a round
/// trip to Redis costs one loopback HTTP exchange, milliseconds; a loaded
/// 2-core host delays a task by a second or two at worst, far below this
/// third of [`TIMEOUT`].
const HELD: Duration = Duration::from_secs(10);

/// Requests each of the four clients sends in a phase.
const PER_CLIENT: usize = 25;

/// One answered request: how long it took, its status and its
/// `X-RateLimit-Degraded`.
#[derive(Debug)]
struct Answer {
    took: Duration,
    status: StatusCode,
    degraded: Option<String>,
}

impl Answer {
    fn healthy(&self) -> bool {
        self.status == StatusCode::OK && self.degraded.is_none()
    }
}

/// One request to `addr`, timed.
async fn answer(client: &HttpClient, addr: SocketAddr) -> Answer {
    let started = Instant::now();
    let reply = get(client, addr).await;
    Answer {
        took: started.elapsed(),
        status: reply.status,
        degraded: reply.header("x-ratelimit-degraded").map(str::to_owned),
    }
}

/// [`PER_CLIENT`] requests from each of four clients at once.
async fn phase(addr: SocketAddr) -> Vec<Answer> {
    let clients: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                let client = client();
                let mut answers = Vec::with_capacity(PER_CLIENT);
                for _ in 0..PER_CLIENT {
                    answers.push(answer(&client, addr).await);
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for client in clients {
        answers.extend(client.await.unwrap());
    }
    answers
}

/// Kills Redis, restarts it, and checks the answers: healthy ones before,
/// `degraded` with `status`, none held, while Redis is down, healthy ones
/// again once it is back.
async fn redis_killed_during_load(policy: FailurePolicy, status: StatusCode, degraded: &str) {
    // Its own server: this test kills it.
    let mut server = RedisServer::start();
    let backend = RedisBackend::builder(server.url())
        .connection_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
        .build_lazy()
        .unwrap();
    // Far above what the load sends: a healthy answer is always 200.
    let policy_of_limits: Policy = "token-bucket:100000/1s".parse().unwrap();
    let limiter = RedisLimiter::builder(&backend, policy_of_limits)
        .key_prefix(fresh_prefix("limit"))
        .build()
        .await
        .unwrap()
        .on_failure(policy)
        .probe_interval(Duration::from_millis(100));
    let layer = LimiterLayer::new(limiter).bans(BanList::redis(&backend, fresh_prefix("ban")));
    let addr = serve(layer).await;

    let before = phase(addr).await;
    assert!(before.iter().all(Answer::healthy), "{before:?}");

    server.kill();
    // Answered at once, not after a timeout: a killed server's port
    // refuses a connection at once and, once the circuit is open, the
    // limit and the ban check answer without a round trip to Redis.
    let during = phase(addr).await;
    for answer in &during {
        assert!(answer.took < HELD, "held: {answer:?}");
        assert_eq!(answer.status, status, "{answer:?}");
        assert_eq!(answer.degraded.as_deref(), Some(degraded), "{answer:?}");
    }

    server.restart();
    // Back once a probe (every 100 ms) finds the new server; a minute is a
    // bound on hanging, not on how fast that is.
    let client = client();
    let recovering = Instant::now();
    while !answer(&client, addr).await.healthy() {
        assert!(
            recovering.elapsed() < Duration::from_secs(60),
            "no healthy answer a minute after the restart"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = phase(addr).await;
    assert!(after.iter().all(Answer::healthy), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fail_open_passes_marked_while_redis_is_down_and_recovers() {
    redis_killed_during_load(FailurePolicy::FailOpen, StatusCode::OK, "fail-open").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fail_closed_answers_503_while_redis_is_down_and_recovers() {
    redis_killed_during_load(
        FailurePolicy::FailClosed,
        StatusCode::SERVICE_UNAVAILABLE,
        "fail-closed",
    )
    .await;
}

//! Batches (`batch.rs`): concurrent decisions of one limiter share Redis
//! calls, and decide exactly as the same requests one at a time, on one
//! server and on a cluster (where one call decides keys of several slots
//! of its node); a caller that gives up on its decision fails no one
//! else's; and requests queued behind a call to a hung server are
//! answered by the circuit that call opens, never sent. Each test runs its own server or cluster, so that its
//! `INFO commandstats` counts only its calls.

use std::sync::Arc;
use std::time::Duration;

use limiter_core::{Algorithm, Decision, Limiter, ManualClock, Policies, Policy, Rate};
use limiter_memory::MemoryLimiter;
use limiter_redis::{BackendError, BackendErrorKind, RedisBackend, RedisLimiter};
use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::{fresh_prefix, RedisServer};

const TASKS: usize = 32;
const ROUNDS: usize = 3;
const STEPS: usize = 12;

/// Calls of `command` (lower case) a node has run (none before the
/// first), from its `INFO commandstats`.
fn calls_in(stats: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    let Some(rest) = stats.lines().find_map(|l| l.strip_prefix(&prefix)) else {
        return 0;
    };
    rest.split(',')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable cmdstat_{command}: {rest}"))
}

/// Where the batches go: one server, or a cluster of three primaries.
enum Deployment {
    Server(RedisServer),
    Cluster(RedisCluster),
}

impl Deployment {
    async fn backend(&self) -> RedisBackend {
        let builder = match self {
            Self::Server(server) => RedisBackend::builder(server.url()),
            Self::Cluster(cluster) => RedisBackend::cluster(cluster.seed_urls()),
        };
        builder.build().await.unwrap()
    }

    /// `FCALL`s run so far, on every primary.
    fn fcalls(&self) -> u64 {
        match self {
            Self::Server(server) => calls_in(&server.query("INFO commandstats"), "fcall"),
            Self::Cluster(cluster) => cluster
                .primaries()
                .iter()
                .map(|p| {
                    calls_in(
                        &cluster.command(p, &["INFO", "commandstats"]).text(),
                        "fcall",
                    )
                })
                .sum(),
        }
    }
}

/// Task `task`'s `step`-th request: acquire or peek, of cost 1 to 3.
fn request(task: usize, step: usize) -> (bool, u64) {
    let mix = task * 7 + step * 3;
    (!mix.is_multiple_of(5), 1 + (mix % 3) as u64)
}

async fn run(limiter: &dyn Limiter, key: &str, task: usize, round: usize) -> Vec<Decision> {
    let mut decisions = Vec::new();
    for step in 0..STEPS {
        let (acquire, cost) = request(task, round * STEPS + step);
        let decision = if acquire {
            limiter.acquire(key.as_bytes(), cost).await
        } else {
            limiter.peek(key.as_bytes(), cost).await
        };
        decisions.push(decision.unwrap());
    }
    decisions
}

/// Every algorithm, and a tiered set of three.
fn policy_sets() -> Vec<Policies> {
    let rate = Rate::new(10, Duration::from_secs(1));
    let mut sets: Vec<Policies> = Algorithm::ALL
        .iter()
        .map(|&a| Policy::new(a, rate).unwrap().into())
        .collect();
    sets.push(
        Policies::new([
            Policy::token_bucket(Rate::new(8, Duration::from_secs(1))).unwrap(),
            Policy::sliding_log(Rate::new(20, Duration::from_secs(60))).unwrap(),
            Policy::fixed_window(Rate::new(30, Duration::from_secs(10))).unwrap(),
        ])
        .unwrap(),
    );
    sets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_share_calls_and_decide_as_one_at_a_time() {
    decide_concurrently(Deployment::Server(RedisServer::start())).await;
}

/// On a cluster, each primary's decisions share calls, across slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_on_a_cluster_share_calls_and_decide_as_one_at_a_time() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    decide_concurrently(Deployment::Cluster(cluster)).await;
}

/// Every policy set of [`policy_sets`], 32 tasks on keys of their own
/// at once: the same decisions as the in-memory backend's, in fewer
/// calls than decisions.
async fn decide_concurrently(deployment: Deployment) {
    let backend = deployment.backend().await;
    for policies in policy_sets() {
        let clock = ManualClock::new(1_750_000_000_000_000);
        let redis = Arc::new(
            RedisLimiter::builder(&backend, policies.clone())
                .key_prefix(fresh_prefix("batch"))
                .clock(clock.clone())
                .build()
                .await
                .unwrap(),
        );
        let memory = MemoryLimiter::builder(policies.clone())
            .clock(clock.clone())
            .build();
        let calls_before = deployment.fcalls();
        for round in 0..ROUNDS {
            // Every task on its own key, all at once: their decisions
            // share calls; each key's sequence is deterministic.
            let tasks: Vec<_> = (0..TASKS)
                .map(|task: usize| {
                    let redis = Arc::clone(&redis);
                    tokio::spawn(
                        async move { run(&*redis, &format!("user:{task}"), task, round).await },
                    )
                })
                .collect();
            for (task, handle) in tasks.into_iter().enumerate() {
                let on_redis = handle.await.unwrap();
                let on_memory = run(&memory, &format!("user:{task}"), task, round).await;
                assert_eq!(
                    on_redis, on_memory,
                    "{policies}: task {task}, round {round}"
                );
            }
            clock.advance(Duration::from_millis(350));
        }
        let decisions = (TASKS * ROUNDS * STEPS) as u64;
        let calls = deployment.fcalls() - calls_before;
        assert!(
            calls < decisions,
            "{policies}: {decisions} concurrent decisions took {calls} calls: none shared"
        );
        println!("{policies}: {decisions} decisions in {calls} calls");
    }
}

/// 64 tasks on one key: a call deciding the key several times writes (and
/// replicates) its state once, at the call's end, for every algorithm
/// that keeps a string; the key keeps a TTL; and with a caller's clock its
/// decisions, in the order the key saw them, and its state are the
/// in-memory backend's (such a batch sends the key once, see `start` in
/// prelude.lua). With Redis `TIME` the end-of-call
/// write keeps the key's TTL in place (`SETRANGE`), with a caller's clock
/// it sets it (`SET … PX`): both are run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_is_written_once_per_call() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder(server.url()).build().await.unwrap();
    let rate = Rate::new(1_000_000, Duration::from_secs(1));
    let string_states = [
        Algorithm::FixedWindow,
        Algorithm::SlidingCounter,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ];
    let policies = string_states
        .map(|algorithm| Policy::new(algorithm, rate).unwrap())
        .into_iter()
        // A sliding log of a small limit is a string too (a large one, a
        // sorted set, writes as it decides); its decisions past 100 are
        // denials, which write nothing.
        .chain([Policy::sliding_log(Rate::new(100, Duration::from_secs(60))).unwrap()]);
    for policy in policies {
        for clock in [Some(ManualClock::new(1_750_000_000_000_000)), None] {
            let time = if clock.is_some() {
                "a caller's clock"
            } else {
                "Redis TIME"
            };
            let case = format!("{policy}, {time}");
            assert_eq!(server.command("FLUSHDB"), "+OK");
            let mut builder =
                RedisLimiter::builder(&backend, policy.clone()).key_prefix(fresh_prefix("hot"));
            if let Some(clock) = &clock {
                builder = builder.clock(clock.clone());
            }
            let limiter = Arc::new(builder.build().await.unwrap());
            let stats = || server.query("INFO commandstats");
            let writes = |s: &str| calls_in(s, "set") + calls_in(s, "setrange");
            let before = stats();
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let limiter = Arc::clone(&limiter);
                    tokio::spawn(async move {
                        let mut decisions = Vec::new();
                        for _ in 0..8 {
                            decisions.push(limiter.acquire(b"hot", 1).await.unwrap());
                        }
                        decisions
                    })
                })
                .collect();
            let mut decisions = Vec::new();
            for task in tasks {
                decisions.extend(task.await.unwrap());
            }
            let after = stats();
            let calls = calls_in(&after, "fcall") - calls_in(&before, "fcall");
            let written = writes(&after) - writes(&before);
            assert!(calls < 512, "{case}: 512 decisions in {calls} calls");
            // The record of the key's policies is written once, by the
            // first call (docs/backends.md, "Key layout").
            assert!(
                written <= calls + 1,
                "{case}: {written} writes for {calls} calls of 512 decisions on one key"
            );
            // A write at the call's end that dropped the TTL would leave
            // the key forever; the record lives as long.
            for key in [limiter.redis_key(b"hot"), limiter.redis_record_key(b"hot")] {
                let key = String::from_utf8(key).unwrap();
                let ttl = server.command(&format!("PTTL {key}"));
                let ms: i64 = ttl.trim_start_matches(':').parse().unwrap();
                assert!(ms > 0, "{case}: {key} has PTTL {ttl}");
            }
            if let Some(clock) = clock {
                let memory = MemoryLimiter::builder(policy.clone()).clock(clock).build();
                let in_order: Vec<_> = (0..512)
                    .map(|_| memory.try_acquire(b"hot", 1).unwrap())
                    .collect();
                // At one time what is left only falls, an admission before
                // a denial (the sliding log's after 100, alike): the order
                // the key saw the decisions in is theirs sorted so.
                decisions.sort_by_key(|d| (std::cmp::Reverse(d.remaining), !d.allowed));
                assert_eq!(decisions, in_order, "{case}: the decisions");
                assert_eq!(
                    limiter.peek(b"hot", 1).await.unwrap(),
                    memory.try_peek(b"hot", 1).unwrap(),
                    "{case}: the state after 512 decisions"
                );
            }
            println!("{case}: 512 decisions in {calls} calls, {written} writes");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_fails_no_one_else() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder(server.url()).build().await.unwrap();
    let policy = Policy::sliding_log(Rate::per_hour(10_000)).unwrap();
    let limiter = Arc::new(
        RedisLimiter::builder(&backend, policy)
            .key_prefix(fresh_prefix("give-up"))
            .build()
            .await
            .unwrap(),
    );
    for round in 0..10 {
        // Half the callers drop their decision at its first await: some of
        // them were sending a batch with others' requests in it.
        let tasks: Vec<_> = (0..64)
            .map(|task: usize| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move {
                    let key = format!("k{}", task % 8);
                    let decision = limiter.acquire(key.as_bytes(), 1);
                    if task.is_multiple_of(2) {
                        let _ = tokio::time::timeout(Duration::ZERO, decision).await;
                        None
                    } else {
                        // Bounded: a turn not handed on would leave it
                        // waiting forever.
                        Some(tokio::time::timeout(Duration::from_secs(5), decision).await)
                    }
                })
            })
            .collect();
        for task in tasks {
            if let Some(decision) = task.await.unwrap() {
                let decision = decision
                    .unwrap_or_else(|_| panic!("round {round}: a decision was never answered"))
                    .unwrap_or_else(|e| panic!("round {round}: {e}"));
                assert!(decision.allowed, "round {round}: {decision:?}");
            }
        }
    }
    // The calls' turns were all handed on: a lone decision is answered.
    let decision = tokio::time::timeout(Duration::from_secs(5), limiter.acquire(b"after", 1))
        .await
        .expect("a decision after the dropped ones is answered")
        .unwrap();
    assert!(decision.allowed);
}

/// Requests queued in a lane behind calls to a hung server are answered,
/// once the first call's timeout opens the circuit, as the open circuit
/// answers (`Unavailable`, "not sent"), at once and never sent; the calls
/// in flight fail with their own timeout, and only their requests count
/// once the server resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_behind_a_hung_call_hear_the_open_circuit_and_count_nothing() {
    const COMMAND: Duration = Duration::from_secs(1);
    /// Long enough, however loaded the machine, for a call's task to send
    /// its one request before the next request arrives.
    const APART: Duration = Duration::from_millis(200);
    const LIMIT: u64 = 100;
    let server = RedisServer::start();
    let backend = RedisBackend::builder(server.url())
        .command_timeout(COMMAND)
        .probe_interval(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let limiter = Arc::new(
        RedisLimiter::builder(
            &backend,
            Policy::fixed_window(Rate::per_hour(LIMIT)).unwrap(),
        )
        .key_prefix(fresh_prefix("behind"))
        .build()
        .await
        .unwrap(),
    );
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, LIMIT - 1);

    server.pause();
    let decide = || {
        let limiter = Arc::clone(&limiter);
        tokio::spawn(async move { limiter.acquire(b"k", 1).await })
    };
    // Two calls in flight (the lane's most), a request each, then eight
    // requests that queue behind them.
    let first = decide();
    tokio::time::sleep(APART).await;
    let second = decide();
    tokio::time::sleep(APART).await;
    let queued: Vec<_> = (0..8).map(|_| decide()).collect();
    let mut sent = 0;
    for call in [first, second] {
        let error = call.await.unwrap().expect_err("the server hangs");
        assert_eq!(kind(&error), BackendErrorKind::Timeout, "{error}");
        sent += 1;
    }
    for request in queued {
        let error = request.await.unwrap().expect_err("the server hangs");
        let told = limiter_core::ErrorChain(&error).to_string();
        assert_eq!(kind(&error), BackendErrorKind::Unavailable, "{told}");
        assert!(told.contains("not sent, nothing counted"), "{told}");
    }
    assert!(
        !backend.is_available(),
        "the first timeout opened the circuit"
    );

    // Back: the two requests sent count, the queued ones do not.
    server.resume();
    let started = std::time::Instant::now();
    while !backend.is_available() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the probe closes the circuit"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A peek tells what one more would leave.
    let peek = limiter.peek(b"k", 1).await.unwrap();
    assert_eq!(peek.remaining, LIMIT - 1 - sent - 1, "{peek:?}");
}

/// The kind of a backend error (panics on any other error).
fn kind(error: &limiter_core::Error) -> BackendErrorKind {
    match error {
        limiter_core::Error::Backend(e) => e
            .downcast_ref::<BackendError>()
            .expect("backend errors are BackendError")
            .kind(),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

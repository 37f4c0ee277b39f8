//! How far one fault reaches, under a fail-open `Resilient` limiter: an
//! error Redis answers for one request (a key of the wrong type, `OOM`
//! under `noeviction`) or one cluster node down degrades those requests
//! alone; every other key is decided by Redis, exactly, and nothing is
//! admitted uncounted on it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{
    Decision, DecisionSource, FailurePolicy, FailureReach, Limiter, LimiterExt, Policies, Policy,
    Rate, Resilient,
};
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::{fresh_prefix, RedisServer};

/// Long enough that an outage, once started, would outlast every test:
/// a degraded answer on a healthy key can only come from one.
const NEVER_PROBE: Duration = Duration::from_secs(3600);

/// Per key: admissions by Redis, admissions uncounted (fail open), and
/// denials by Redis.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    admitted: u64,
    uncounted: u64,
    denied: u64,
}

impl Tally {
    fn add(&mut self, decision: &Decision) {
        match (decision.source, decision.allowed) {
            (DecisionSource::Backend, true) => self.admitted += 1,
            (DecisionSource::Backend, false) => self.denied += 1,
            (DecisionSource::FailOpen, _) => self.uncounted += 1,
            (other, _) => panic!("unexpected source {other:?}"),
        }
    }
}

/// `per_key` decisions on each key, from `tasks` tasks per key at once.
async fn decide_all(
    limiter: &Arc<Resilient<RedisLimiter>>,
    keys: &[String],
    per_key: u64,
    tasks: u64,
) -> Vec<Tally> {
    let mut handles = Vec::new();
    for key in keys {
        for _ in 0..tasks {
            let (limiter, key) = (Arc::clone(limiter), key.clone());
            handles.push(tokio::spawn(async move {
                let mut tally = Tally::default();
                for _ in 0..per_key / tasks {
                    tally.add(&limiter.acquire(key.as_bytes(), 1).await.unwrap());
                }
                tally
            }));
        }
    }
    let mut tallies = vec![Tally::default(); keys.len()];
    for (i, handle) in handles.into_iter().enumerate() {
        let tally = handle.await.unwrap();
        let sum = &mut tallies[i / tasks as usize];
        sum.admitted += tally.admitted;
        sum.uncounted += tally.uncounted;
        sum.denied += tally.denied;
    }
    tallies
}

async fn fail_open(backend: &RedisBackend, policies: Policies) -> Arc<Resilient<RedisLimiter>> {
    let limiter = RedisLimiter::builder(backend, policies)
        .key_prefix(fresh_prefix("blast"))
        .build()
        .await
        .unwrap();
    Arc::new(
        limiter
            .on_failure(FailurePolicy::FailOpen)
            .probe_interval(NEVER_PROBE),
    )
}

fn connection(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// A sliding log above 128 keeps a sorted set; a string at its key makes
/// every call on it fail with `WRONGTYPE`. Eight healthy keys decided at
/// the same time, on the same limiter, are decided by Redis, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_key_degrades_its_own_requests_alone() {
    const LIMIT: u64 = 200;
    let server = RedisServer::start();
    let backend = RedisBackend::builder(server.url()).build().await.unwrap();
    let limiter = fail_open(
        &backend,
        Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap().into(),
    )
    .await;
    let poisoned = "poisoned";
    let _: () = redis::cmd("SET")
        .arg(limiter.inner().redis_key(poisoned.as_bytes()))
        .arg("not a sorted set")
        .query(&mut connection(&server.url()))
        .unwrap();
    let error = limiter
        .inner()
        .acquire(poisoned.as_bytes(), 1)
        .await
        .unwrap_err();
    assert_eq!(error.reach(), Some(FailureReach::Request), "{error:?}");
    assert!(
        error.chain().to_string().contains("WRONGTYPE"),
        "{}",
        error.chain()
    );

    let mut keys: Vec<String> = (0..8).map(|i| format!("healthy-{i}")).collect();
    keys.push(poisoned.to_owned());
    let tallies = decide_all(&limiter, &keys, 2 * LIMIT, 4).await;
    for (key, tally) in keys.iter().zip(&tallies).take(8) {
        assert_eq!(
            *tally,
            Tally {
                admitted: LIMIT,
                uncounted: 0,
                denied: LIMIT
            },
            "{key}: decided by Redis, exactly"
        );
    }
    assert_eq!(
        tallies[8],
        Tally {
            admitted: 0,
            uncounted: 2 * LIMIT,
            denied: 0
        },
        "the poisoned key fails open on every request"
    );
    assert!(!limiter.is_failing(), "no outage started");
}

/// `OOM` under `noeviction` refuses each decision; each refusal is
/// answered by the policy alone, and the first decision after memory is
/// freed is Redis's, without waiting for a probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_refusal_is_answered_per_request_and_the_next_is_decided() {
    let server = RedisServer::start_with_args(&["--maxmemory-policy", "noeviction"]);
    let backend = RedisBackend::builder(server.url()).build().await.unwrap();
    let limiter = fail_open(
        &backend,
        Policy::fixed_window(Rate::per_hour(10)).unwrap().into(),
    )
    .await;
    let decision = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(
        (decision.source, decision.remaining),
        (DecisionSource::Backend, 9)
    );
    assert_eq!(server.command("CONFIG SET maxmemory 1"), "+OK");
    let error = limiter.inner().acquire(b"k", 1).await.unwrap_err();
    assert_eq!(
        error.reach(),
        Some(FailureReach::Request),
        "{}",
        error.chain()
    );
    for _ in 0..5 {
        let decision = limiter.acquire(b"k", 1).await.unwrap();
        assert_eq!(
            decision.source,
            DecisionSource::FailOpen,
            "refused: {decision:?}"
        );
    }
    assert!(!limiter.is_failing(), "a full server answers: no outage");
    assert_eq!(server.command("CONFIG SET maxmemory 0"), "+OK");
    let decision = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(
        (decision.source, decision.remaining),
        (DecisionSource::Backend, 8),
        "decided by Redis at once, nothing counted while full"
    );
}

/// A cluster primary killed under load: its keys fail (open) until its
/// replica takes over; the other primaries' keys are decided by Redis on
/// every request, exactly (the wrapper starts no outage for one node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_degrades_its_own_keys_alone() {
    const LIMIT: u64 = 300;
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .command_timeout(Duration::from_millis(500))
        .probe_interval(Duration::from_millis(100))
        .build_lazy()
        .unwrap();
    let limiter = fail_open(
        &backend,
        Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap().into(),
    )
    .await;
    let primaries = cluster.primaries();
    let victim = primaries[0].clone();
    // Two keys on each primary.
    let mut keys = Vec::new();
    for primary in &primaries {
        let mut found = 0;
        for i in 0.. {
            let key = format!("user-{i}");
            if cluster.node_for_key(limiter.inner().redis_key(key.as_bytes())) == *primary {
                keys.push(key);
                found += 1;
                if found == 2 {
                    break;
                }
            }
        }
    }
    let on_victim: Vec<bool> = keys
        .iter()
        .map(|k| cluster.node_for_key(limiter.inner().redis_key(k.as_bytes())) == victim)
        .collect();
    // Half the limit on every key, then the kill, then the rest while the
    // replica takes over.
    let before = decide_all(&limiter, &keys, LIMIT / 2, 2).await;
    for tally in &before {
        assert_eq!(tally.admitted, LIMIT / 2, "{before:?}");
    }
    let killer = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || killer.kill_primary(0))
        .await
        .unwrap();
    let started = Instant::now();
    let after = decide_all(&limiter, &keys, LIMIT, 2).await;
    let took = started.elapsed();
    let mut degraded_on_victim = 0;
    for ((key, tally), victim) in keys.iter().zip(&after).zip(&on_victim) {
        if *victim {
            degraded_on_victim += tally.uncounted;
            continue;
        }
        assert_eq!(
            *tally,
            Tally {
                admitted: LIMIT / 2,
                uncounted: 0,
                denied: LIMIT / 2
            },
            "{key}, on a surviving primary: decided by Redis, exactly (after {took:?})"
        );
    }
    assert!(
        degraded_on_victim > 0,
        "the killed primary's keys failed open while it was down: {after:?}"
    );
    assert!(!limiter.is_failing(), "no outage for one node");
}

/// A whole shard lost (a primary and its replica), under Redis's default
/// `cluster-require-full-coverage yes`: once the cluster refuses every key
/// (`CLUSTERDOWN`), the failure reaches the whole backend, so the wrapper
/// starts an outage and answers every caller at once, without sending
/// anything to Redis, rather than each waiting out a command timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_refuses_every_key_is_an_outage() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .command_timeout(TIMEOUT)
        .build_lazy()
        .unwrap();
    let limiter = fail_open(
        &backend,
        Policy::fixed_window(Rate::per_hour(1_000_000))
            .unwrap()
            .into(),
    )
    .await;
    let survivor = cluster.primaries()[1].clone();
    let key = (0..)
        .map(|i| format!("user-{i}"))
        .find(|key| cluster.node_for_key(limiter.inner().redis_key(key.as_bytes())) == survivor)
        .unwrap();
    assert_eq!(
        limiter.acquire(key.as_bytes(), 1).await.unwrap().source,
        DecisionSource::Backend
    );
    let killer = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || killer.kill_shard(0))
        .await
        .unwrap();
    // The survivors declare the cluster down within a node timeout or two.
    let sent_before = fcalls(&cluster);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !limiter.is_failing() {
        assert!(
            Instant::now() < deadline,
            "no outage after the shard was lost"
        );
        limiter.acquire(key.as_bytes(), 1).await.unwrap();
    }
    let error = limiter
        .inner()
        .acquire(key.as_bytes(), 1)
        .await
        .unwrap_err();
    assert_eq!(
        error.reach(),
        Some(FailureReach::Backend),
        "{}",
        error.chain()
    );
    let sent_in_outage = fcalls(&cluster);
    assert!(
        sent_in_outage > sent_before,
        "the refused calls are counted: {sent_before} then {sent_in_outage}"
    );
    for _ in 0..20 {
        let decision = limiter.acquire(key.as_bytes(), 1).await.unwrap();
        assert_eq!(decision.source, DecisionSource::FailOpen);
    }
    assert_eq!(
        fcalls(&cluster),
        sent_in_outage,
        "answered in an outage without a call to Redis"
    );
}

/// `FCALL`s the live nodes of `cluster` ran or refused (`INFO
/// commandstats`: `calls` and `rejected_calls`).
fn fcalls(cluster: &RedisCluster) -> u64 {
    let mut total = 0;
    for node in cluster.live_nodes() {
        let stats = cluster.command(&node, &["INFO", "commandstats"]).text();
        let Some(fields) = stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_fcall:"))
        else {
            continue;
        };
        for field in fields.trim().split(',') {
            if let Some(("calls" | "rejected_calls", n)) = field.split_once('=') {
                total += n.parse::<u64>().expect("a count");
            }
        }
    }
    total
}

/// A string of another length at a string state's key (written by hand,
/// or by something else under the prefix) reads as no state, as a key of
/// another type does, and is written over: it fails no request, neither
/// its own nor another of its call.
#[tokio::test(flavor = "current_thread")]
async fn a_foreign_string_at_a_state_key_reads_as_none_and_fails_no_request() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder(server.url()).build().await.unwrap();
    for algorithm in limiter_core::Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::per_hour(10)).unwrap();
        let limiter = Arc::new(
            RedisLimiter::builder(&backend, policy)
                .key_prefix(fresh_prefix("foreign"))
                .build()
                .await
                .unwrap(),
        );
        for (key, foreign) in [("short", "abc"), ("odd", "seventeen bytes!!")] {
            let _: () = redis::cmd("SET")
                .arg(limiter.redis_key(key.as_bytes()))
                .arg(foreign)
                .query(&mut connection(&server.url()))
                .unwrap();
        }
        // The first goes alone; the others share one call.
        let keys = ["warm", "healthy", "short", "odd"];
        let calls = keys.iter().map(|key| {
            let limiter = Arc::clone(&limiter);
            async move { limiter.acquire(key.as_bytes(), 1).await }
        });
        let results = futures_util::future::join_all(calls).await;
        for (key, result) in keys.iter().zip(&results) {
            let decision = result
                .as_ref()
                .unwrap_or_else(|e| panic!("{algorithm:?} {key}: {}", e.chain()));
            assert!(decision.allowed, "{algorithm:?} {key}");
            assert_eq!(decision.remaining, 9, "{algorithm:?} {key}: as a fresh key");
        }
    }
}

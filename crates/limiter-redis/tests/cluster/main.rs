//! limiter-redis on a real Redis Cluster (three primaries, three replicas,
//! `limiter_test::redis_cluster`): here the whole conformance suite and
//! every shared vector (single and tiered) and the fixtures; in the
//! modules, decisions sharing calls (`batches`), where decisions go
//! (`routing`), the cluster changing shape under load (`topology`), nodes
//! that hang (`hung_nodes`), refuse or go (`lost_nodes`), a failover
//! (`failover`), the load those tests run (`load`), limiter-redis-module
//! on every node (`module`), policies changing while keys spread over
//! the primaries (`policy_change`), and redirects in scripted orders on
//! fake nodes in front of one real server (`redirects`).
//!
//! The tests that change or break the topology each run on a cluster of
//! their own; the others share the binary's cluster (started on first
//! use, stopped when the process exits).

#[path = "../common/mod.rs"]
mod common;

mod batches;
mod failover;
mod hung_nodes;
mod load;
mod lost_nodes;
mod module;
mod policy_change;
mod redirects;
mod routing;
mod topology;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use limiter_core::{Algorithm, Limiter, ManualClock, Policies, Policy, Rate};
use limiter_redis::{BackendErrorKind, Engine, RedisBackend, RedisLimiter};
use limiter_test::redis_cluster::{ClusterNode, RedisCluster, Reply, NODE_TIMEOUT_MS};
use limiter_test::Harness;

/// The binary's cluster, started on first use.
fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    // Starting takes a couple of seconds of blocking work: off the
    // runtime's worker (every test here runs on a multi-threaded runtime).
    tokio::task::block_in_place(|| {
        CLUSTER.get_or_init(|| {
            let started = Instant::now();
            let cluster = RedisCluster::start();
            eprintln!("cluster started in {:?}", started.elapsed());
            cluster
        })
    })
}

/// The connection and command timeouts of the tests' backends: generous
/// enough for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A backend on `cluster`, seeded by every node, connecting on first use,
/// with [`TIMEOUT`]s.
fn backend(cluster: &RedisCluster) -> RedisBackend {
    RedisBackend::cluster(cluster.seed_urls())
        .connection_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .build_lazy()
        .unwrap()
}

/// A backend on `cluster` with the default timeouts and probe interval:
/// what a deployment waits for and recovers with.
fn default_backend(cluster: &RedisCluster) -> RedisBackend {
    RedisBackend::cluster(cluster.seed_urls())
        .build_lazy()
        .unwrap()
}

/// [`backend`] with `timeout` for connecting and for commands, and a node
/// down probed every 100 ms: for tests that watch a node fail and return.
fn probing_backend(cluster: &RedisCluster, timeout: Duration) -> RedisBackend {
    RedisBackend::cluster(cluster.seed_urls())
        .connection_timeout(timeout)
        .command_timeout(timeout)
        .probe_interval(Duration::from_millis(100))
        .build_lazy()
        .unwrap()
}

async fn limiter(backend: &RedisBackend, policy: Policy, name: &str) -> Arc<RedisLimiter> {
    let limiter = RedisLimiter::builder(backend, policy)
        .key_prefix(common::fresh_prefix(name))
        .build()
        .await
        .unwrap_or_else(|e| panic!("building a limiter on the cluster: {e}"));
    Arc::new(limiter)
}

/// A cluster of the test's own, for a test that changes or breaks its
/// topology: started off the runtime's worker.
async fn cluster_of_its_own() -> Arc<RedisCluster> {
    cluster_of_its_own_for(Engine::Lua).await
}

/// [`cluster_of_its_own`] for `engine`: for the module, every node loads
/// it.
async fn cluster_of_its_own_for(engine: Engine) -> Arc<RedisCluster> {
    Arc::new(
        tokio::task::spawn_blocking(move || match engine {
            Engine::Module => RedisCluster::start_with_module(),
            _ => RedisCluster::start(),
        })
        .await
        .unwrap(),
    )
}

/// Raises every node's `cluster-node-timeout` far above
/// [`NODE_TIMEOUT_MS`], for a test that hangs a node (`SIGSTOP`) for
/// seconds: command timeouts long enough for a loaded machine, and the
/// hangs longer still, start no failover.
fn hold_off_failover(cluster: &RedisCluster) {
    for node in cluster.nodes() {
        let set = ["CONFIG", "SET", "cluster-node-timeout", "60000"];
        assert_eq!(cluster.command(&node, &set).text(), "OK");
    }
}

/// The conformance suite's view of the cluster: one backend per test (its
/// connections run on the test's runtime), a fresh key prefix per limiter.
struct ClusterHarness {
    backend: RedisBackend,
}

impl ClusterHarness {
    async fn start() -> Self {
        Self {
            backend: backend(cluster()),
        }
    }
}

#[async_trait]
impl Harness for ClusterHarness {
    async fn limiter(&self, policy: Policy, clock: ManualClock) -> Arc<dyn Limiter> {
        self.suite_limiter(policy.into(), clock).await
    }

    async fn set_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter> {
        self.suite_limiter(policies, clock).await
    }
}

impl ClusterHarness {
    /// A limiter of `policies` on `clock`, under a fresh key prefix.
    async fn suite_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter> {
        let limiter = RedisLimiter::builder(&self.backend, policies)
            .key_prefix(common::fresh_prefix("suite"))
            .clock(clock)
            .build()
            .await
            .unwrap();
        Arc::new(limiter)
    }
}

// Every case of the suite, the shared vectors included: single-policy
// (`conformance::shared_vectors_replay_byte_for_byte`) and tiered
// (`conformance::all_of_vectors_replay_byte_for_byte`).
limiter_test::conformance_suite!(setup = ClusterHarness::start());

/// User keys whose slots the cluster's primaries serve: `per_primary` for
/// each of `primaries`, named `{name}:{n}` (the user key is the hash tag).
fn keys_on(
    cluster: &RedisCluster,
    limiter: &RedisLimiter,
    name: &str,
    primaries: &[ClusterNode],
    per_primary: usize,
) -> Vec<String> {
    let mut found: BTreeMap<&ClusterNode, Vec<String>> = BTreeMap::new();
    for n in 0.. {
        if primaries
            .iter()
            .all(|p| found.get(p).is_some_and(|k| k.len() >= per_primary))
        {
            break;
        }
        let key = format!("{name}:{n}");
        let owner = cluster.node_for_key(limiter.redis_key(key.as_bytes()));
        if let Some(primary) = primaries.iter().find(|p| **p == owner) {
            let keys = found.entry(primary).or_default();
            if keys.len() < per_primary {
                keys.push(key);
            }
        }
    }
    found.into_values().flatten().collect()
}
/// An error and its sources, `a: b: c`.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
/// How many units each target's state counts in its window, by `peek`
/// (which writes nothing, and answers what an acquire would: an admitting
/// peek's `remaining` leaves out the unit it would take).
async fn counted(targets: &[(Arc<RedisLimiter>, String)]) -> Vec<u64> {
    let mut counted = Vec::new();
    for (limiter, key) in targets {
        let decision = limiter
            .peek(key.as_bytes(), 1)
            .await
            .unwrap_or_else(|e| panic!("peek({key}): {e:#}"));
        counted.push(decision.limit - decision.remaining - u64::from(decision.allowed));
    }
    counted
}

/// The count of an error in a node's `INFO errorstats` (e.g. `ERR`).
fn error_count(cluster: &RedisCluster, node: &ClusterNode, error: &str) -> u64 {
    let info = cluster.command(node, &["INFO", "errorstats"]).text();
    let prefix = format!("errorstat_{error}:count=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

/// How many times a node ran a command (`INFO commandstats`, e.g. `fcall`).
fn command_calls(cluster: &RedisCluster, node: &ClusterNode, command: &str) -> u64 {
    let stats = cluster.command(node, &["INFO", "commandstats"]).text();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// A cluster of the test's own (its `INFO` counts only the test's
/// commands, and it may change the topology), and a limiter of `policy`
/// on it.
async fn own_cluster(policy: Policy, name: &str) -> (Arc<RedisCluster>, Arc<RedisLimiter>) {
    own_cluster_on(Engine::Lua, policy, name).await
}

/// [`own_cluster`] on `engine`: for the module, every node loads it and
/// the limiter finds it.
async fn own_cluster_on(
    engine: Engine,
    policy: Policy,
    name: &str,
) -> (Arc<RedisCluster>, Arc<RedisLimiter>) {
    let cluster = cluster_of_its_own_for(engine).await;
    let limiter = limiter(&backend(&cluster), policy, name).await;
    assert_eq!(limiter.engine(), engine);
    (cluster, limiter)
}

/// Both engines, for a test that runs on each.
const ENGINES: [Engine; 2] = [Engine::Lua, Engine::Module];

/// How many calls deciding requests a node ran on `engine` (`FCALL`s, or
/// the module's commands that decide).
fn decide_calls(cluster: &RedisCluster, node: &ClusterNode, engine: Engine) -> u64 {
    match engine {
        Engine::Module => ["limiter.decide", "limiter.decide_across"]
            .iter()
            .map(|command| command_calls(cluster, node, command))
            .sum(),
        _ => command_calls(cluster, node, "fcall"),
    }
}

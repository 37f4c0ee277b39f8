//! limiter-redis on a real Redis Cluster (three primaries, three replicas,
//! `limiter_test::redis_cluster`): the whole conformance suite and every
//! shared vector (single and tiered), keys spread over every primary, live resharding and a
//! failover under load, a reshard whose nodes disagree for a moment, a
//! lost shard, `FUNCTION FLUSH` on one node, a slot covered only after the
//! slot map was read, a single-server backend pointed at a cluster node,
//! and the article's load test.
//!
//! The resharding and failover tests change the topology, so each runs on a
//! cluster of its own; the others share the binary's cluster (started on
//! first use, stopped when the process exits).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use limiter_core::{Algorithm, Limiter, ManualClock, Policies, Policy, Rate};
use limiter_redis::{RedisBackend, RedisLimiter};
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
        let limiter = RedisLimiter::builder(&self.backend, policy)
            .key_prefix(common::fresh_prefix("suite"))
            .clock(clock)
            .build()
            .await
            .unwrap();
        Arc::new(limiter)
    }

    async fn set_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter> {
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

/// Load spread over every primary: a sliding log of 10,000 an hour on
/// `backend`, `per_primary` keys of each primary, whether each key is the
/// first primary's (the one a test then takes down), and each key with
/// the limiter, for [`Load::start`].
#[allow(clippy::type_complexity)] // the three views a fault test reads
async fn spread_over_primaries(
    cluster: &RedisCluster,
    backend: &RedisBackend,
    name: &str,
    per_primary: usize,
) -> (Vec<String>, Vec<bool>, Vec<(Arc<RedisLimiter>, String)>) {
    let limiter = limiter(
        backend,
        Policy::sliding_log(Rate::per_hour(10_000)).unwrap(),
        name,
    )
    .await;
    let primaries = cluster.primaries();
    let keys = keys_on(cluster, &limiter, name, &primaries, per_primary);
    let on_first: Vec<bool> = keys
        .iter()
        .map(|k| cluster.node_for_key(limiter.redis_key(k.as_bytes())) == primaries[0])
        .collect();
    let targets = keys
        .iter()
        .map(|k| (Arc::clone(&limiter), k.clone()))
        .collect();
    (keys, on_first, targets)
}

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

/// Decisions from many tasks over a set of (limiter, key) targets until
/// stopped, with each target's figures as they happen.
struct Load {
    stats: Arc<Vec<Stats>>,
    decisions: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<Errors>>,
}

/// One target's figures: admissions, errors (and when, in µs since the
/// load started), and its slowest decision (µs).
struct Stats {
    admitted: AtomicU64,
    errors: AtomicU64,
    first_error_us: AtomicU64,
    last_error_us: AtomicU64,
    slowest_us: AtomicU64,
    /// Decisions that took at least [`SLOW`].
    slow: AtomicU64,
}

/// What counts as a slow decision in [`Report::slow`].
const SLOW: Duration = Duration::from_millis(100);

impl Default for Stats {
    fn default() -> Self {
        Self {
            admitted: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error_us: AtomicU64::new(u64::MAX),
            last_error_us: AtomicU64::new(0),
            slowest_us: AtomicU64::new(0),
            slow: AtomicU64::new(0),
        }
    }
}

/// The errors the tasks saw: how many, when (since the load started), and
/// a few distinct messages (with their causes).
#[derive(Debug, Default)]
struct Errors {
    count: u64,
    first: Option<Duration>,
    last: Option<Duration>,
    samples: Vec<String>,
}

impl Errors {
    fn merge(&mut self, other: Self) {
        self.count += other.count;
        self.first = self.first.into_iter().chain(other.first).min();
        self.last = self.last.into_iter().chain(other.last).max();
        for sample in other.samples {
            if self.samples.len() < 8 && !self.samples.contains(&sample) {
                self.samples.push(sample);
            }
        }
    }
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

/// What a load did, per target and in all.
#[derive(Debug)]
struct Report {
    admitted: Vec<u64>,
    errors_per_target: Vec<u64>,
    /// Per target: its first and last error, since the load started.
    error_span: Vec<Option<(Duration, Duration)>>,
    slowest: Vec<Duration>,
    /// Per target: decisions that took at least [`SLOW`].
    slow: Vec<u64>,
    decisions: u64,
    errors: Errors,
}

impl Load {
    /// Starts `tasks` tasks, task `t`'s `n`th decision on target
    /// `(t + n) % targets`. A task that gets an error waits a millisecond
    /// before its next decision (a failing backend answers at once).
    fn start(targets: Vec<(Arc<RedisLimiter>, String)>, tasks: usize) -> Self {
        let targets = Arc::new(targets);
        let stats: Arc<Vec<Stats>> = Arc::new(targets.iter().map(|_| Stats::default()).collect());
        let decisions = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let tasks = (0..tasks)
            .map(|task| {
                let (targets, stats, decisions, stop) = (
                    Arc::clone(&targets),
                    Arc::clone(&stats),
                    Arc::clone(&decisions),
                    Arc::clone(&stop),
                );
                tokio::spawn(async move {
                    let mut errors = Errors::default();
                    let mut n = task;
                    while !stop.load(Ordering::Relaxed) {
                        let i = n % targets.len();
                        n += 1;
                        let (limiter, key) = &targets[i];
                        let sent = Instant::now();
                        let result = limiter.acquire(key.as_bytes(), 1).await;
                        let took = sent.elapsed().as_micros() as u64;
                        stats[i].slowest_us.fetch_max(took, Ordering::Relaxed);
                        if took >= SLOW.as_micros() as u64 {
                            stats[i].slow.fetch_add(1, Ordering::Relaxed);
                        }
                        match result {
                            Ok(decision) => {
                                decisions.fetch_add(1, Ordering::Relaxed);
                                if decision.allowed {
                                    stats[i].admitted.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(e) => {
                                let at = started.elapsed();
                                let at_us = at.as_micros() as u64;
                                stats[i].errors.fetch_add(1, Ordering::Relaxed);
                                stats[i].first_error_us.fetch_min(at_us, Ordering::Relaxed);
                                stats[i].last_error_us.fetch_max(at_us, Ordering::Relaxed);
                                errors.count += 1;
                                errors.first.get_or_insert(at);
                                errors.last = Some(at);
                                let message = chain(&e);
                                if errors.samples.len() < 3 && !errors.samples.contains(&message) {
                                    errors.samples.push(message);
                                }
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                        }
                    }
                    errors
                })
            })
            .collect();
        Self {
            stats,
            decisions,
            stop,
            started,
            tasks,
        }
    }

    /// Each target's admissions so far.
    fn admitted(&self) -> Vec<u64> {
        self.stats
            .iter()
            .map(|s| s.admitted.load(Ordering::Relaxed))
            .collect()
    }

    /// Stops every task and reports.
    async fn stop(mut self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut errors = Errors::default();
        for task in std::mem::take(&mut self.tasks) {
            errors.merge(task.await.expect("a load task panicked"));
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Report {
            admitted: self.admitted(),
            errors_per_target: self.stats.iter().map(|s| load(&s.errors)).collect(),
            error_span: self
                .stats
                .iter()
                .map(|s| {
                    (load(&s.errors) > 0).then(|| {
                        (
                            Duration::from_micros(load(&s.first_error_us)),
                            Duration::from_micros(load(&s.last_error_us)),
                        )
                    })
                })
                .collect(),
            slowest: self
                .stats
                .iter()
                .map(|s| Duration::from_micros(load(&s.slowest_us)))
                .collect(),
            slow: self.stats.iter().map(|s| load(&s.slow)).collect(),
            decisions: load(&self.decisions),
            errors,
        }
    }
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
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let limiter = limiter(&backend(&cluster), policy, name).await;
    (cluster, limiter)
}

/// What a test of a slot migration starts from: a cluster of its own
/// ([`own_cluster`]), a limiter on it, and `keys` all on the first
/// primary (`source`), whose slots the test moves to the second
/// (`target`).
struct Migration {
    cluster: Arc<RedisCluster>,
    limiter: Arc<RedisLimiter>,
    source: ClusterNode,
    target: ClusterNode,
    keys: Vec<String>,
}

/// A [`Migration`] of `count` keys named after `name`, under `policy`.
async fn migration(policy: Policy, name: &str, count: usize) -> Migration {
    let (cluster, limiter) = own_cluster(policy, name).await;
    let primaries = cluster.primaries();
    let (source, target) = (primaries[0].clone(), primaries[1].clone());
    let keys = keys_on(
        &cluster,
        &limiter,
        name,
        std::slice::from_ref(&source),
        count,
    );
    Migration {
        cluster,
        limiter,
        source,
        target,
        keys,
    }
}

impl Migration {
    /// Leaves `key`'s slot half-way through a migration from `source` to
    /// `target` (`IMPORTING` on the target, `MIGRATING` on the source),
    /// none of its keys moved.
    fn start(&self, key: &str) {
        let slot = self
            .cluster
            .slot_of(self.limiter.redis_key(key.as_bytes()))
            .to_string();
        let (from, to) = (&self.source, &self.target);
        let importing = ["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from.id];
        let migrating = ["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to.id];
        assert_eq!(self.cluster.command(to, &importing).text(), "OK");
        assert_eq!(self.cluster.command(from, &migrating).text(), "OK");
    }
}

/// 64 tasks acquiring over `keys` (each task 24 of them in turn, so each
/// key gets 16 acquires); each key's admissions.
async fn acquire_over(limiter: &Arc<RedisLimiter>, keys: &[String]) -> BTreeMap<String, u64> {
    const TASKS: usize = 64;
    const EACH: usize = 24;
    let keys = Arc::new(keys.to_vec());
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (limiter, keys) = (Arc::clone(limiter), Arc::clone(&keys));
            tokio::spawn(async move {
                let mut admitted = Vec::new();
                for j in 0..EACH {
                    let key = &keys[(task * EACH + j) % keys.len()];
                    let decision = limiter
                        .acquire(key.as_bytes(), 1)
                        .await
                        .unwrap_or_else(|e| panic!("acquire({key}): {}", chain(&e)));
                    if decision.allowed {
                        admitted.push(key.clone());
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted: BTreeMap<String, u64> = keys.iter().map(|k| (k.clone(), 0)).collect();
    for task in tasks {
        for key in task.await.unwrap() {
            *admitted.get_mut(&key).unwrap() += 1;
        }
    }
    admitted
}

/// Decisions spread over many keys share calls on each primary (its lane,
/// see `batch.rs`: one call decides keys of several slots), exactly: 64
/// tasks over 96 keys (32 per primary, 16 acquires each, limit 10) admit
/// 10 on every key, and every primary runs fewer `FCALL`s than it got
/// decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_over_many_keys_share_calls_on_each_primary_and_stay_exact() {
    const LIMIT: u64 = 10;
    let policy = Policy::fixed_window(Rate::per_hour(LIMIT)).unwrap();
    let (cluster, limiter) = own_cluster(policy, "spread").await;
    let primaries = cluster.primaries();
    let keys = keys_on(&cluster, &limiter, "spread", &primaries, 32);
    let before: Vec<u64> = primaries
        .iter()
        .map(|p| command_calls(&cluster, p, "fcall"))
        .collect();
    let admitted = acquire_over(&limiter, &keys).await;
    for (primary, before) in primaries.iter().zip(before) {
        let calls = command_calls(&cluster, primary, "fcall") - before;
        let decisions = 32 * 16;
        eprintln!(
            "primary {}: {decisions} decisions in {calls} calls",
            primary.port
        );
        assert!(
            calls < decisions,
            "primary {}: {decisions} concurrent decisions took {calls} calls: none shared",
            primary.port
        );
    }
    let wrong: Vec<_> = admitted.iter().filter(|(_, &n)| n != LIMIT).collect();
    assert!(
        wrong.is_empty(),
        "keys admitting other than {LIMIT}: {wrong:?}"
    );
}

/// A call across slots that meets a key its node does not serve now (a
/// slot half-way through a migration, the key not yet created: `ASK`)
/// writes nothing, and each of its requests is decided alone, following
/// the redirect: no error, every key of the primary (the moving slot's
/// among them) admits exactly its limit, and the moving slot's key went
/// to the importing node (`ASKING` there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_meeting_a_moving_slot_is_decided_request_by_request() {
    const LIMIT: u64 = 10;
    let policy = Policy::token_bucket(Rate::per_hour(LIMIT)).unwrap();
    let m = migration(policy, "moving", 48).await;
    let moving = &m.keys[0];
    m.start(moving);
    let asking = command_calls(&m.cluster, &m.target, "asking");
    let admitted = acquire_over(&m.limiter, &m.keys).await;
    let wrong: Vec<_> = admitted.iter().filter(|(_, &n)| n != LIMIT).collect();
    assert!(
        wrong.is_empty(),
        "keys admitting other than {LIMIT}: {wrong:?}"
    );
    assert!(
        command_calls(&m.cluster, &m.target, "asking") > asking,
        "the moving slot's key was never sent to the importing node"
    );
    assert_eq!(
        m.cluster
            .keys_matching(&m.target, m.limiter.redis_key(moving.as_bytes()))
            .len(),
        1,
        "the moving slot's new key lives on the importing node"
    );
}

/// A batch across slots never follows an `ASK`: after `ASKING`, the node
/// a slot migrates to would serve a missing key of any slot it imports,
/// while that key still lives on the old node. Two slots of one primary
/// migrate to another, neither key moved yet: one key new (its requests
/// are `ASK`ed to the new node, where it is made), one already at its
/// limit on the old node. Under 64 tasks alternating the two, the full key
/// admits nothing more, the new one exactly its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_never_follows_an_ask_into_another_importing_slot() {
    const LIMIT: u64 = 10;
    let policy = Policy::fixed_window(Rate::per_hour(LIMIT)).unwrap();
    let m = migration(policy, "asking", 2).await;
    let (new, full) = (&m.keys[0], &m.keys[1]);
    for _ in 0..LIMIT {
        assert!(m.limiter.acquire(full.as_bytes(), 1).await.unwrap().allowed);
    }
    for key in [new, full] {
        m.start(key);
    }
    let admitted = acquire_over(&m.limiter, &m.keys).await;
    assert_eq!(admitted[full], 0, "the key at its limit admitted more");
    assert_eq!(admitted[new], LIMIT, "the new key");
}

/// Many user keys under every algorithm: each primary holds some of them,
/// and each limiter key sits on the primary of its user key's hash tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_every_primary() {
    const USERS: usize = 120;
    let cluster = cluster();
    let backend = backend(cluster);
    let mut per_primary: BTreeMap<u16, usize> = BTreeMap::new();
    for algorithm in Algorithm::ALL {
        let limiter = limiter(
            &backend,
            Policy::new(algorithm, Rate::per_minute(5)).unwrap(),
            "spread",
        )
        .await;
        for user in 0..USERS {
            let decision = limiter
                .acquire(format!("user:{user}").as_bytes(), 1)
                .await
                .unwrap();
            assert!(decision.allowed, "{algorithm}: {decision:?}");
        }
        let pattern = format!("{}:*", limiter.key_prefix());
        let mut total = 0;
        for primary in cluster.primaries() {
            let keys = cluster.keys_matching(&primary, &pattern);
            for key in &keys {
                let user = key
                    .split_once('{')
                    .and_then(|(_, rest)| rest.split_once('}'))
                    .expect("a hash tag")
                    .0;
                assert_eq!(
                    cluster.slot_of(key),
                    cluster.slot_of(format!("{{{user}}}")),
                    "{key}: the key's slot is its user key's"
                );
            }
            *per_primary.entry(primary.port).or_default() += keys.len();
            assert!(
                !keys.is_empty(),
                "{algorithm}: no key on primary {}",
                primary.port
            );
            total += keys.len();
        }
        assert_eq!(total, USERS, "{algorithm}: one Redis key per user key");
    }
    eprintln!("limiter keys per primary (port: keys): {per_primary:?}");
}

/// A user key that is empty or starts with `}` has no hash tag of its own
/// (`{}` would make Redis hash each whole key): a tiered set on it still
/// decides in one slot — exactly, not with a `CROSSSLOT` error that a
/// fail-open limiter would turn into unlimited admissions — and resets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_set_on_a_key_without_a_hash_tag_decides_in_one_slot() {
    let cluster = cluster();
    let backend = backend(cluster);
    let policies: Policies = "sliding-log:5/1m;token-bucket:100/1h".parse().unwrap();
    let limiter = RedisLimiter::builder(&backend, policies)
        .key_prefix(common::fresh_prefix("tagless"))
        .build()
        .await
        .unwrap();
    for user_key in ["", "}", "}x"] {
        let mut admitted = 0;
        for _ in 0..8 {
            let decision = limiter
                .acquire(user_key.as_bytes(), 1)
                .await
                .unwrap_or_else(|e| {
                    panic!("{user_key:?}: {}", chain(&e));
                });
            assert!(!decision.is_degraded(), "{user_key:?}: {decision:?}");
            admitted += u64::from(decision.allowed);
        }
        assert_eq!(admitted, 5, "{user_key:?}");
        limiter.reset(user_key.as_bytes()).await.unwrap();
        assert!(
            limiter
                .acquire(user_key.as_bytes(), 1)
                .await
                .unwrap()
                .allowed,
            "{user_key:?} after reset"
        );
        let slots: Vec<u16> = limiter
            .redis_keys(user_key.as_bytes())
            .iter()
            .map(|key| cluster.slot_of(key))
            .collect();
        assert!(
            slots.windows(2).all(|w| w[0] == w[1]),
            "{user_key:?}: {slots:?}"
        );
    }
}

/// The article's load test on the cluster, on a key of each primary: 500
/// acquires at concurrency 50 against 100 per 10 s (sliding log, Redis
/// `TIME`) admit exactly 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn article_load_test_admits_exactly_one_hundred_on_every_primary() {
    let cluster = cluster();
    let backend = backend(cluster);
    let policy = Policy::sliding_log(Rate::new(100, Duration::from_secs(10))).unwrap();
    let limiter = limiter(&backend, policy, "article").await;
    let keys = keys_on(cluster, &limiter, "article", &cluster.primaries(), 1);
    assert_eq!(keys.len(), 3);
    for key in keys {
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (limiter, key) = (Arc::clone(&limiter), key.clone());
                tokio::spawn(async move {
                    let mut admitted = 0;
                    for _ in 0..10 {
                        let decision = limiter.acquire(key.as_bytes(), 1).await.unwrap();
                        admitted += usize::from(decision.allowed);
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        assert_eq!(
            admitted,
            100,
            "{key} on node {}",
            cluster.node_for_key(limiter.redis_key(key.as_bytes())).port
        );
    }
}

/// `FUNCTION FLUSH` on one primary, then on every primary, while 16 tasks
/// decide on keys of every primary: no error reaches a caller, and each
/// key's state is exact afterwards (the reloaded function decided as the
/// first did).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush_on_a_node_recovers_without_an_error() {
    const LIMIT: u64 = 5_000;
    let cluster = cluster();
    let backend = backend(cluster);
    let limiter = limiter(
        &backend,
        Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap(),
        "flush",
    )
    .await;
    let primaries = cluster.primaries();
    let keys = keys_on(cluster, &limiter, "flush", &primaries, 3);

    // Quiet: a flushed node's first decision reloads the library.
    let first = &keys[0];
    let owner = cluster.node_for_key(limiter.redis_key(first.as_bytes()));
    limiter.acquire(first.as_bytes(), 1).await.unwrap();
    let reply = cluster.command(&owner, &["FUNCTION", "FLUSH"]);
    assert_eq!(reply, Reply::Status("OK".into()));
    let decision = limiter
        .acquire(first.as_bytes(), 1)
        .await
        .unwrap_or_else(|e| panic!("the first decision after FUNCTION FLUSH failed: {e:#}"));
    assert!(decision.allowed && decision.remaining == LIMIT - 2);

    // Under load: each primary flushed, then all at once.
    let targets: Vec<_> = keys
        .iter()
        .map(|k| (Arc::clone(&limiter), k.clone()))
        .collect();
    let load = Load::start(targets.clone(), 16);
    let flushes = tokio::task::spawn_blocking(move || {
        let flush = |node: &ClusterNode| {
            let reply = cluster.command(node, &["FUNCTION", "FLUSH"]);
            assert_eq!(reply, Reply::Status("OK".into()), "node {}", node.port);
        };
        let mut flushes = 0;
        for round in 0..3 {
            for primary in &primaries {
                std::thread::sleep(Duration::from_millis(100));
                flush(primary);
                flushes += 1;
            }
            if round > 0 {
                primaries.iter().for_each(flush);
                flushes += primaries.len();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        flushes
    })
    .await
    .unwrap();
    let Report {
        admitted,
        decisions,
        errors,
        slowest,
        ..
    } = load.stop().await;
    eprintln!(
        "FUNCTION FLUSH x{flushes} under load: {decisions} decisions, {} errors, slowest {:?}",
        errors.count,
        slowest.iter().max()
    );
    assert_eq!(errors.count, 0, "errors reached callers: {errors:?}");
    assert!(decisions > 100, "only {decisions} decisions");
    let mut admitted = admitted;
    admitted[0] += 2; // the quiet part's
    let counted = counted(&targets).await;
    for ((key, admitted), counted) in keys.iter().zip(&admitted).zip(&counted) {
        assert!(*admitted <= LIMIT, "{key} admitted {admitted} of {LIMIT}");
        assert_eq!(
            counted, admitted,
            "{key}: the state counts exactly what was admitted"
        );
    }
}

/// A full primary (`maxmemory` under `noeviction`): its decisions fail with
/// Redis's OOM, counting nothing, while the other primaries' keys are
/// served and its peeks still answer (the no-writes function); it is not
/// marked down, even once its connection is lost and the
/// new one's `FUNCTION LOAD` is refused (OOM) too; a limiter whose library
/// is new still builds; and once there is room, both limiters decide on
/// its keys again (the library loaded by the first call that misses it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_primary_refuses_its_decisions_and_serves_again_with_room() {
    let (cluster, limiter) =
        own_cluster(Policy::sliding_log(Rate::per_hour(3)).unwrap(), "full").await;
    let primaries = cluster.primaries();
    let (full, other) = (primaries[0].clone(), primaries[1].clone());
    let keys = keys_on(
        &cluster,
        &limiter,
        "full",
        &[full.clone(), other.clone()],
        1,
    );
    let on_full = if cluster.node_for_key(limiter.redis_key(keys[0].as_bytes())) == full {
        [&keys[0], &keys[1]]
    } else {
        [&keys[1], &keys[0]]
    };
    let (key, elsewhere) = (on_full[0], on_full[1]);
    assert_eq!(
        limiter.acquire(key.as_bytes(), 1).await.unwrap().remaining,
        2
    );
    let set = |args: &[&str]| {
        let reply = cluster.command(&full, &[&["CONFIG", "SET"], args].concat());
        assert_eq!(reply, Reply::Status("OK".into()), "CONFIG SET {args:?}");
    };
    set(&["maxmemory-policy", "noeviction"]);
    set(&["maxmemory", "1"]);
    let refused = |error: &limiter_core::Error| {
        assert_eq!(
            common::backend_kind(error),
            limiter_redis::BackendErrorKind::Redis,
            "{}",
            chain(error)
        );
        assert!(chain(error).contains("OOM"), "{}", chain(error));
    };
    refused(&limiter.acquire(key.as_bytes(), 1).await.unwrap_err());
    assert!(
        limiter
            .acquire(elsewhere.as_bytes(), 1)
            .await
            .unwrap()
            .allowed
    );
    let peeked = || async {
        let peek = limiter.peek(key.as_bytes(), 1).await.unwrap();
        assert!(
            peek.allowed && peek.remaining == 1 && !peek.is_degraded(),
            "a full primary answers a peek, as the one admission left it: {peek:?}"
        );
    };
    peeked().await;

    // Its connection lost: the new one's FUNCTION LOAD is refused, yet the
    // node answers, so it is not marked down.
    let killed = cluster.command(
        &full,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    );
    assert!(
        killed.integer() >= 1,
        "the limiter's connection is killed: {killed:?}"
    );
    refused(&limiter.acquire(key.as_bytes(), 1).await.unwrap_err());
    peeked().await;
    let backend = backend(&cluster);
    let second = RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
        .key_prefix(common::fresh_prefix("full-second"))
        .build()
        .await
        .expect("a limiter builds while a primary is full");
    assert!(
        second
            .acquire(elsewhere.as_bytes(), 1)
            .await
            .unwrap()
            .allowed
    );
    refused(&second.acquire(key.as_bytes(), 1).await.unwrap_err());

    set(&["maxmemory", "0"]);
    let decision = limiter.acquire(key.as_bytes(), 1).await.unwrap();
    assert!(
        decision.allowed && decision.remaining == 1,
        "the refused decisions counted nothing: {decision:?}"
    );
    assert!(second.acquire(key.as_bytes(), 1).await.unwrap().allowed);
}

/// Live resharding: while 64 tasks decide on 24 keys (8 per primary) of two
/// limiters (sliding log, windows longer than the test: one limit reached
/// early, one never), each key's slot moves to the next primary, twice,
/// some migrations held half-done for 60 ms (`ASK`). No error reaches a
/// caller, no key admits more than its limit, every key's state counts
/// exactly what was admitted, and no decision waits anywhere near the
/// command timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_resharding_under_load_answers_every_decision_and_never_over_admits() {
    // Reached early even on a slow machine (2,352 decisions over 48 targets in
    // one loaded run): the migrations meet denials as well as admissions.
    const SMALL: u64 = 30;
    const LARGE: u64 = 10_000; // the default maximum of a sliding log
    const RESHARD_TIMEOUT: Duration = limiter_redis::RedisBackendBuilder::DEFAULT_COMMAND_TIMEOUT;
    const TASKS: usize = 64;
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    // The default timeouts: what a deployment stalls for.
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .build_lazy()
        .unwrap();
    let small = limiter(
        &backend,
        Policy::sliding_log(Rate::per_hour(SMALL)).unwrap(),
        "reshard",
    )
    .await;
    let large = limiter(
        &backend,
        Policy::sliding_log(Rate::per_hour(LARGE)).unwrap(),
        "reshard",
    )
    .await;
    let primaries = cluster.primaries();
    let keys = keys_on(&cluster, &small, "reshard", &primaries, 8);
    let targets: Vec<(Arc<RedisLimiter>, String)> = keys
        .iter()
        .flat_map(|k| {
            [
                (Arc::clone(&small), k.clone()),
                (Arc::clone(&large), k.clone()),
            ]
        })
        .collect();
    let limits: Vec<u64> = keys.iter().flat_map(|_| [SMALL, LARGE]).collect();
    // Both limiters' keys of a user key share its slot.
    let mut slots: Vec<u16> = keys
        .iter()
        .map(|k| {
            let slot = cluster.slot_of(small.redis_key(k.as_bytes()));
            assert_eq!(slot, cluster.slot_of(large.redis_key(k.as_bytes())));
            slot
        })
        .collect();
    slots.sort_unstable();
    slots.dedup();

    let load = Load::start(targets.clone(), TASKS);
    tokio::time::sleep(Duration::from_millis(200)).await; // every key in use
    let started = Instant::now();
    let mover = Arc::clone(&cluster);
    let moves = tokio::task::spawn_blocking(move || {
        let cluster = mover;
        let mut moves = Vec::new();
        for round in 0..2 {
            for (i, &slot) in slots.iter().enumerate() {
                let from = cluster.node_of_slot(slot);
                let at = primaries.iter().position(|p| *p == from).unwrap();
                let to = &primaries[(at + 1) % primaries.len()];
                let pause = if (i + round) % 2 == 0 {
                    Duration::from_millis(60)
                } else {
                    Duration::ZERO
                };
                let keys = cluster.migrate_slot_paced(slot, to, 1, pause);
                moves.push((slot, from.port, to.port, keys));
            }
        }
        moves
    })
    .await
    .unwrap();
    let resharding = started.elapsed();
    let during = load.admitted();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let Report {
        admitted,
        decisions,
        errors,
        slowest,
        ..
    } = load.stop().await;
    let keys_moved: usize = moves.iter().map(|m| m.3).sum();
    eprintln!(
        "resharding: {} slot moves ({keys_moved} keys) in {resharding:?} under load; \
         {decisions} decisions, {} errors {:?}, slowest {:?}; admitted {admitted:?}",
        moves.len(),
        errors.count,
        errors.samples,
        slowest.iter().max()
    );
    assert!(
        keys_moved >= moves.len(),
        "every move carried the slot's keys: {moves:?}"
    );
    assert_eq!(errors.count, 0, "errors reached callers: {errors:?}");
    let longest = slowest.iter().max().copied().unwrap_or_default();
    assert!(
        longest < RESHARD_TIMEOUT,
        "a decision waited {longest:?}, as long as the command timeout ({RESHARD_TIMEOUT:?})"
    );
    let counted = counted(&targets).await;
    let mut over = Vec::new();
    let mut inexact = Vec::new();
    for (i, (_, key)) in targets.iter().enumerate() {
        let (limit, admitted, counted) = (limits[i], admitted[i], counted[i]);
        if admitted > limit {
            over.push(format!("{key} (limit {limit}): {admitted} admitted"));
        }
        if counted != admitted {
            inexact.push(format!(
                "{key} (limit {limit}): {admitted} admitted, the state counts {counted}"
            ));
        }
    }
    assert!(over.is_empty(), "over-admissions: {over:#?}");
    assert!(
        inexact.is_empty(),
        "the state does not count exactly what was admitted: {inexact:#?}"
    );
    // The small limit was reached while slots moved, the large one never:
    // both admitting and denying decisions met the migrations.
    for (i, (_, key)) in targets.iter().enumerate() {
        if limits[i] == SMALL {
            assert_eq!(admitted[i], SMALL, "{key}");
        } else {
            assert!(during[i] > 0 && admitted[i] < LARGE, "{key}");
        }
    }
}

/// A reshard whose last step reaches the nodes out of order: the source is
/// told the slot's new owner 50 ms before the target, which meanwhile
/// still imports it, so the two redirect its keys to each other (`MOVED`
/// back and forth). While 32 tasks decide under fail-open on four keys of
/// the source, through two limiters (one limit reached early, one never),
/// each key's slot moves so in turn: every decision is Redis's (no error,
/// no fail-open answer), no key admits more than its limit, and each
/// state counts exactly what was admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_whose_nodes_disagree_for_a_moment_fails_no_decision() {
    const TASKS: usize = 32;
    const SMALL: u64 = 30;
    const LARGE: u64 = 1_000_000;
    const LAG: Duration = Duration::from_millis(50);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    // The default timeouts: what a deployment waits for.
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .build_lazy()
        .unwrap();
    let mut limiters = Vec::new();
    for limit in [SMALL, LARGE] {
        let policy = Policy::fixed_window(Rate::per_hour(limit)).unwrap();
        limiters.push((limit, limiter(&backend, policy, "disagree").await));
    }
    let primaries = cluster.primaries();
    let (source, target) = (primaries[0].clone(), primaries[1].clone());
    let keys = keys_on(
        &cluster,
        &limiters[0].1,
        "disagree",
        std::slice::from_ref(&source),
        4,
    );
    // (limit, the limiter under fail-open, key), a target per pair.
    let targets: Vec<_> = keys
        .iter()
        .flat_map(|key| {
            limiters.iter().map(|(limit, limiter)| {
                let open = limiter_core::LimiterExt::on_failure(
                    Arc::clone(limiter),
                    limiter_core::FailurePolicy::FailOpen,
                );
                (*limit, Arc::new(open), key.clone())
            })
        })
        .collect();
    let targets = Arc::new(targets);
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (targets, stop) = (Arc::clone(&targets), Arc::clone(&stop));
            tokio::spawn(async move {
                // Per target: admitted by Redis; and in all, errors and
                // fail-open answers, with a sample.
                let mut admitted = vec![0u64; targets.len()];
                let (mut failed, mut degraded, mut sample) = (0u64, 0u64, None);
                let mut n = task;
                while !stop.load(Ordering::Relaxed) {
                    let i = n % targets.len();
                    n += 1;
                    let (_, open, key) = &targets[i];
                    match open.acquire(key.as_bytes(), 1).await {
                        Ok(d) if !d.source.is_degraded() => {
                            admitted[i] += u64::from(d.allowed);
                            continue;
                        }
                        Ok(_) => degraded += 1,
                        Err(e) => {
                            failed += 1;
                            sample.get_or_insert_with(|| chain(&e));
                        }
                    }
                    // Answered at once, without Redis.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                (admitted, failed, degraded, sample)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let slots: Vec<u16> = keys
        .iter()
        .map(|k| cluster.slot_of(limiters[0].1.redis_key(k.as_bytes())))
        .collect();
    let mover = Arc::clone(&cluster);
    let moved = tokio::task::spawn_blocking(move || {
        slots
            .iter()
            .map(|&slot| mover.migrate_slot_source_first(slot, &target, LAG))
            .sum::<usize>()
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::Relaxed);
    let mut admitted = vec![0u64; targets.len()];
    let (mut failed, mut degraded, mut samples) = (0, 0, Vec::new());
    for task in tasks {
        let (each, f, d, sample) = task.await.unwrap();
        for (sum, a) in admitted.iter_mut().zip(each) {
            *sum += a;
        }
        failed += f;
        degraded += d;
        samples.extend(sample);
    }
    let plain: Vec<_> = keys
        .iter()
        .flat_map(|key| {
            limiters
                .iter()
                .map(|(_, limiter)| (Arc::clone(limiter), key.clone()))
        })
        .collect();
    let counted = counted(&plain).await;
    eprintln!(
        "source-first reshard of {} slots ({moved} keys moved): {failed} failed, {degraded} \
         fail-open answers, admitted {admitted:?}, counted {counted:?}; samples {samples:?}",
        keys.len()
    );
    assert_eq!(moved, 2 * keys.len(), "every key's states moved");
    assert_eq!(failed, 0, "decisions failed: {samples:?}");
    assert_eq!(degraded, 0, "decisions answered by fail-open");
    assert_eq!(counted, admitted, "the states count what was admitted");
    for (i, (limit, _, key)) in targets.iter().enumerate() {
        match *limit {
            SMALL => assert_eq!(admitted[i], SMALL, "{key}"),
            _ => assert!(admitted[i] > 0 && admitted[i] < LARGE, "{key}"),
        }
    }
}

/// A new primary (an empty node joined to the cluster) takes a slot with
/// active keys: the backend follows the `MOVED` to a node it has never
/// seen, loads the function library there before its first `FCALL` (no
/// "function not found" on the new node), and the moved state counts on:
/// 5 admitted before the move, 5 after, then denials (limit 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_primary_gets_the_library_before_its_first_decision() {
    let mut cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let backend = backend(&cluster);
    let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
    let limiter = limiter(&backend, policy, "new-primary").await;
    let key = "user:new-primary";
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += u32::from(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
    }
    let (cluster, new) = tokio::task::spawn_blocking(move || {
        let new = cluster.add_primary();
        (cluster, new)
    })
    .await
    .unwrap();
    let slot = cluster.slot_of(limiter.redis_key(key.as_bytes()));
    assert_eq!(cluster.migrate_slot(slot, &new), 1, "the key's state moved");
    for _ in 0..15 {
        admitted += u32::from(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
    }
    assert_eq!(admitted, 10, "the moved state went on counting");
    assert_eq!(cluster.node_for_key(limiter.redis_key(key.as_bytes())), new);
    assert_eq!(
        error_count(&cluster, &new, "ERR"),
        0,
        "the new primary answered an error (function not found?)"
    );
}

/// A slot no primary served when the backend read the slot map (a cluster
/// still being created, a dead primary's slots being covered again) fails
/// its decisions at once, and is served once a primary covers it: the
/// failure makes the backend read the map again (at most once per probe
/// interval). Without that, the slot failed until the process restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_covered_after_the_map_was_read_is_served_once_covered() {
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
    let name = common::fresh_prefix("uncovered");
    // The slot of the key, from a first limiter under the same prefix.
    let first = RedisLimiter::builder(&backend(&cluster), policy.clone())
        .key_prefix(name.clone())
        .build()
        .await
        .unwrap();
    let key = "user:uncovered";
    let slot = cluster.slot_of(first.redis_key(key.as_bytes()));
    let owner = cluster.node_of_slot(slot);
    let slot_text = slot.to_string();
    let on_every_node = |args: &[&str]| {
        for node in cluster.nodes() {
            let reply = cluster.command(&node, args);
            assert!(
                !reply.is_error(),
                "{} on {}: {reply:?}",
                args.join(" "),
                node.port
            );
        }
    };
    // The slot uncovered everywhere; the others still served.
    on_every_node(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    on_every_node(&["CLUSTER", "DELSLOTS", &slot_text]);

    let backend = probing_backend(&cluster, TIMEOUT);
    let limiter = RedisLimiter::builder(&backend, policy)
        .key_prefix(name)
        .build()
        .await
        .unwrap();
    let error = limiter.acquire(key.as_bytes(), 1).await.unwrap_err();
    assert!(
        chain(&error).contains("no primary serves the slot"),
        "{error}"
    );
    let another = (0..)
        .map(|i| format!("user:another-{i}"))
        .find(|other| cluster.slot_of(limiter.redis_key(other.as_bytes())) != slot)
        .unwrap();
    let served = limiter.acquire(another.as_bytes(), 1).await.unwrap();
    assert!(served.allowed, "the other slots are served");

    // Covered again by its primary: served within a few probe intervals.
    let reply = cluster.command(&owner, &["CLUSTER", "ADDSLOTS", &slot_text]);
    assert!(!reply.is_error(), "CLUSTER ADDSLOTS: {reply:?}");
    let covered_at = Instant::now();
    let decision = loop {
        match limiter.acquire(key.as_bytes(), 1).await {
            Ok(decision) => break decision,
            Err(error) if covered_at.elapsed() < Duration::from_secs(10) => {
                assert!(
                    chain(&error).contains("no primary serves the slot"),
                    "{error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the slot was covered 10 s ago and still fails: {error}"),
        }
    };
    assert!(decision.allowed);
    assert_eq!(
        decision.remaining, 9,
        "the first decision counted on that slot"
    );
    eprintln!(
        "served {:?} after the slot was covered",
        covered_at.elapsed()
    );
}

/// Decisions on one hot key of a cluster share calls (its slot's lane, see
/// `batch.rs`), exactly: 64 tasks of 20 acquires each on one key with a
/// limit of 500 admit 500, in fewer `FCALL`s on its primary than
/// decisions; keys spread over the primaries are decided too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_on_a_hot_key_share_calls_and_stay_exact() {
    const TASKS: usize = 64;
    const EACH: usize = 20;
    const LIMIT: u64 = 500;
    let policy = Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap();
    let (cluster, limiter) = own_cluster(policy, "hot").await;
    let owner = cluster.node_for_key(limiter.redis_key(b"global"));
    let fcalls = |node: &ClusterNode| command_calls(&cluster, node, "fcall");
    let before = fcalls(&owner);
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..EACH {
                    admitted += u64::from(limiter.acquire(b"global", 1).await.unwrap().allowed);
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    let calls = fcalls(&owner) - before;
    let decisions = (TASKS * EACH) as u64;
    eprintln!("hot key: {decisions} decisions in {calls} calls, {admitted} admitted");
    assert_eq!(admitted, LIMIT);
    assert!(
        calls < decisions,
        "{decisions} concurrent decisions took {calls} calls: none shared"
    );
}

/// A backend built while a primary hangs (`SIGSTOP`, for less than the
/// node timeout, so no failover starts), that primary the first of its
/// seeds: the build ends within its timeouts (the slot map read from
/// another seed, the hung primary marked down, not waited for), and the
/// other primaries' keys are decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_built_while_its_first_seed_hangs_serves_the_other_primaries() {
    // Short, so that the whole hang stays well under the node timeout.
    const HUNG_TIMEOUT: Duration = Duration::from_millis(200);
    /// The build's bound: the connection and command timeouts (what one
    /// connection may take), plus slack for a loaded machine.
    const BUILT_WITHIN: Duration = Duration::from_millis(2 * 200 + 150);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
    let primaries = cluster.primaries();
    let hung = primaries[0].clone();
    // Keys of the other primaries (a key's slot does not depend on the
    // prefix: its hash tag is the key).
    let healthy = limiter(&backend(&cluster), policy.clone(), "hung-seed").await;
    let keys = keys_on(&cluster, &healthy, "hung-seed", &primaries[1..], 2);
    let mut seeds = vec![hung.url()];
    seeds.extend(
        cluster
            .nodes()
            .iter()
            .filter(|n| **n != hung)
            .map(|n| n.url()),
    );

    cluster.pause(&hung);
    let started = Instant::now();
    let built = async {
        let backend = RedisBackend::cluster(seeds)
            .connection_timeout(HUNG_TIMEOUT)
            .command_timeout(HUNG_TIMEOUT)
            .probe_interval(Duration::from_millis(100))
            .build()
            .await?;
        let took = started.elapsed();
        let limiter = RedisLimiter::builder(&backend, policy)
            .key_prefix(common::fresh_prefix("hung-seed"))
            .build()
            .await?;
        let mut decisions = Vec::new();
        for key in &keys {
            decisions.push(limiter.acquire(key.as_bytes(), 1).await?);
        }
        Ok::<_, limiter_core::Error>((took, decisions))
    }
    .await;
    let all_took = started.elapsed();
    cluster.resume(&hung);
    let (took, decisions) = built.unwrap_or_else(|e| panic!("after {all_took:?}: {}", chain(&e)));
    eprintln!("built in {took:?}, decided in {all_took:?}");
    assert!(took <= BUILT_WITHIN, "the build took {took:?}");
    assert!(decisions.iter().all(|d| d.allowed), "{decisions:?}");
    assert_eq!(decisions.len(), 4);
}

/// A cluster whose nodes require a password (`requirepass`): the backend
/// reaches every primary with the builder's password, or with one in the
/// seed URLs, and decides exactly (ten of 40 on a key of each primary);
/// without it, building fails with the server's refusal in the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_password_needs_it_and_decides_exactly_with_it() {
    const PASSWORD: &str = "s3cret-cluster";
    let cluster = Arc::new(
        tokio::task::spawn_blocking(|| RedisCluster::start_with_password(PASSWORD))
            .await
            .unwrap(),
    );
    let refused = RedisBackend::cluster(cluster.seed_urls())
        .build()
        .await
        .expect_err("no password, no cluster");
    assert!(chain(&refused).contains("NOAUTH"), "{}", chain(&refused));

    let with_urls: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| url.replacen("redis://", &format!("redis://:{PASSWORD}@"), 1))
        .collect();
    let backends = [
        RedisBackend::cluster(cluster.seed_urls())
            .password(PASSWORD)
            .build()
            .await
            .unwrap(),
        RedisBackend::cluster(with_urls).build().await.unwrap(),
    ];
    for (i, backend) in backends.iter().enumerate() {
        let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
        let name = format!("password-{i}");
        let limiter = limiter(backend, policy, &name).await;
        let keys = keys_on(&cluster, &limiter, &name, &cluster.primaries(), 1);
        assert_eq!(keys.len(), 3);
        for key in keys {
            let mut admitted = 0;
            for _ in 0..40 {
                admitted += u32::from(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
            }
            assert_eq!(admitted, 10, "{key} (backend {i})");
        }
    }
}

/// A hung primary (`SIGSTOP`, held for less than the cluster's node
/// timeout, so no failover starts) while 64 tasks decide on keys of every
/// primary: its callers wait at most one command timeout, once each (the
/// decisions in flight when it hung); then its keys fail at once while a
/// background probe checks it; the other primaries' keys never fail; once
/// it resumes its keys are served again within a few probe intervals; and
/// every state counts what was admitted (plus, at most, the decisions whose
/// answer was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_costs_its_callers_one_command_timeout_at_most() {
    const TASKS: usize = 64;
    // Long enough that a healthy node answers within it on a loaded CI
    // machine; the hang longer still, and shorter than the node timeout.
    const COMMAND_TIMEOUT: Duration = Duration::from_millis(300);
    const PROBE_INTERVAL: Duration = Duration::from_millis(100);
    /// Two command timeouts: a caller that waited more than one (a retry
    /// after its timeout, or a wait for the resume) waits this long. Well
    /// short of the node timeout, which an oversleep on a loaded machine
    /// must not reach (a failover would start).
    const HUNG_FOR: Duration = Duration::from_millis(600);
    /// The longest a caller of the hung node may wait: one command timeout,
    /// plus slack for a loaded machine; shorter than `HUNG_FOR`.
    const LONGEST: Duration = Duration::from_millis(COMMAND_TIMEOUT.as_millis() as u64 + 250);
    /// From the resume to the last error on the hung node's keys: the
    /// probe's next `PING` (one interval) answered, plus slack for CI.
    const BACK_WITHIN: Duration = Duration::from_millis(1_000);
    assert!(HUNG_FOR < Duration::from_millis(NODE_TIMEOUT_MS));
    assert!(LONGEST < HUNG_FOR && LONGEST < 2 * COMMAND_TIMEOUT);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .command_timeout(COMMAND_TIMEOUT)
        .probe_interval(PROBE_INTERVAL)
        .build_lazy()
        .unwrap();
    let (keys, on_hung, targets) = spread_over_primaries(&cluster, &backend, "hung", 4).await;
    let hung = cluster.primaries()[0].clone();
    let limiter = Arc::clone(&targets[0].0);

    let load = Load::start(targets.clone(), TASKS);
    // Slow decisions so far, per target: those of the hang are counted from
    // the pause to the resume plus a probe interval (when the node's keys
    // are served again), not healthy ones before or after.
    let slow_so_far = |load: &Load| -> Vec<u64> {
        load.stats
            .iter()
            .map(|s| s.slow.load(Ordering::Relaxed))
            .collect()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slow_before = slow_so_far(&load);
    let paused_at = load.started.elapsed();
    cluster.pause(&hung);
    tokio::time::sleep(HUNG_FOR).await;
    cluster.resume(&hung);
    let resumed_at = load.started.elapsed();
    tokio::time::sleep(PROBE_INTERVAL).await;
    let slow_during: Vec<u64> = slow_so_far(&load)
        .iter()
        .zip(&slow_before)
        .map(|(now, before)| now - before)
        .collect();
    let window_end = load.started.elapsed();
    tokio::time::sleep(Duration::from_millis(1_500) - PROBE_INTERVAL).await;
    let report = load.stop().await;
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            cluster.node_for_key(limiter.redis_key(key.as_bytes())) == hung,
            on_hung[i],
            "no failover was meant to start"
        );
    }
    let sum = |hung_side: bool, figures: &[u64]| -> u64 {
        (0..keys.len())
            .filter(|&i| on_hung[i] == hung_side)
            .map(|i| figures[i])
            .sum()
    };
    let longest = |hung_side: bool| {
        (0..keys.len())
            .filter(|&i| on_hung[i] == hung_side)
            .map(|i| report.slowest[i])
            .max()
            .unwrap_or_default()
    };
    let last_error = (0..keys.len())
        .filter(|&i| on_hung[i])
        .filter_map(|i| report.error_span[i].map(|(_, last)| last))
        .max();
    let slow_in_hang = sum(true, &slow_during);
    eprintln!(
        "hung primary {}: paused at {paused_at:?}, resumed at {resumed_at:?}; {} decisions; \
         on its keys {} errors (last at {last_error:?}), {} slow (>= {SLOW:?}; {slow_in_hang} \
         from the pause to {window_end:?}), slowest {:?}; on the others' keys {} errors, {} \
         slow ({} in the hang), slowest {:?}; samples {:?}",
        hung.port,
        report.decisions,
        sum(true, &report.errors_per_target),
        sum(true, &report.slow),
        longest(true),
        sum(false, &report.errors_per_target),
        sum(false, &report.slow),
        sum(false, &slow_during),
        longest(false),
        report.errors.samples
    );
    assert!(
        longest(true) <= LONGEST,
        "a caller of the hung node waited {:?}; the command timeout is {COMMAND_TIMEOUT:?}",
        longest(true)
    );
    // One per caller (64 in every run here), and a quarter more for a
    // loaded machine's pauses; without the node's circuit every caller
    // would wait out a timeout again and again while it hangs (twice each,
    // about 128).
    assert!(
        slow_in_hang <= (TASKS + TASKS / 4) as u64,
        "{slow_in_hang} slow decisions on the hung node's keys during the hang: more than one \
         per caller"
    );
    assert!(
        sum(true, &report.errors_per_target) > 0,
        "the hung node's callers were told"
    );
    assert_eq!(
        sum(false, &report.errors_per_target),
        0,
        "the other primaries' keys failed: {:?}",
        report.errors.samples
    );
    let last_error = last_error.expect("errors on the hung node's keys");
    assert!(
        last_error <= resumed_at + BACK_WITHIN,
        "the hung node's keys failed until {last_error:?}, resumed at {resumed_at:?}"
    );
    let counted = counted(&targets).await;
    for (i, key) in keys.iter().enumerate() {
        let (admitted, errors) = (report.admitted[i], report.errors_per_target[i]);
        assert!(
            counted[i] >= admitted && counted[i] <= admitted + errors,
            "{key}: {admitted} admitted, {errors} errors, the state counts {}",
            counted[i]
        );
    }
}

/// A redirect late in a command's budget to a hung node: the command's
/// first node (stale in the client's map: its slot has moved) hangs for
/// most of the command timeout, then answers `MOVED` to a node that is
/// hung by then. The caller is answered within the command timeout, not
/// the hang plus a second timeout; the retry, going on in the background,
/// still marks the hung node down (its keys then fail at once); and once
/// it resumes, its keys are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_redirect_to_a_hung_node_costs_the_caller_one_command_timeout() {
    const COMMAND_TIMEOUT: Duration = Duration::from_millis(400);
    /// How long the stale node hangs before it answers `MOVED`.
    const FIRST_HANG: Duration = Duration::from_millis(250);
    const SLACK: Duration = Duration::from_millis(200);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let backend = probing_backend(&cluster, COMMAND_TIMEOUT);
    let limiter = limiter(
        &backend,
        Policy::sliding_log(Rate::per_hour(100)).unwrap(),
        "late",
    )
    .await;
    let primaries = cluster.primaries();
    let (stale, hung) = (primaries[0].clone(), primaries[1].clone());
    let key = keys_on(&cluster, &limiter, "late", std::slice::from_ref(&stale), 1).remove(0);
    assert!(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
    let slot = cluster.slot_of(limiter.redis_key(key.as_bytes()));
    tokio::task::block_in_place(|| cluster.migrate_slot(slot, &hung));

    // Hung from the start (the retry meets it whenever it comes), for less
    // than the node timeout all told, so no failover starts.
    cluster.pause(&hung);
    cluster.pause(&stale);
    let hang = {
        let cluster = Arc::clone(&cluster);
        std::thread::spawn(move || {
            std::thread::sleep(FIRST_HANG);
            cluster.resume(&stale);
        })
    };
    let started = Instant::now();
    let answer = limiter.acquire(key.as_bytes(), 1).await;
    let waited = started.elapsed();
    hang.join().unwrap();
    let error = answer.expect_err("the hung node answered");
    // Cut by the command's deadline, not by the stale node's own timeout
    // (the redirect came in time).
    assert!(
        chain(&error).contains("retries included"),
        "{}",
        chain(&error)
    );
    assert!(
        waited <= COMMAND_TIMEOUT + SLACK,
        "the caller waited {waited:?}; the command timeout is {COMMAND_TIMEOUT:?} \
         (the stale node hung for {FIRST_HANG:?})"
    );

    // The retry's own timeout has passed: the node is known to be down.
    tokio::time::sleep_until((started + FIRST_HANG + COMMAND_TIMEOUT + SLACK).into()).await;
    let asked = Instant::now();
    let down = limiter.acquire(key.as_bytes(), 1).await;
    let failed_in = asked.elapsed();
    cluster.resume(&hung);
    assert!(down.is_err(), "a hung node answered: {down:?}");
    assert!(
        failed_in < SLACK,
        "a call on the hung node's keys took {failed_in:?}: it was not marked down"
    );

    let back = Instant::now();
    loop {
        match limiter.acquire(key.as_bytes(), 1).await {
            Ok(decision) => break assert!(decision.allowed),
            Err(e) => assert!(
                back.elapsed() < Duration::from_secs(5),
                "the node's keys still fail after it resumed: {}",
                chain(&e)
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Failover: a primary is killed (`SIGKILL`) while 64 tasks decide on 8
/// keys of it and 8 keys of the other primaries (sliding log, 400 per hour
/// each), half-way to the limits. Its replica is promoted; the same limiter
/// serves again without a restart soon after the cluster is whole again
/// (the bounds below); no caller waits anywhere near a command timeout (a
/// killed node refuses at once: nothing is hung); and after every key
/// reached its limit, the over-admissions (admissions the dead primary
/// acknowledged before replicating them) are within the documented bound,
/// and none on the other primaries' keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_recovers_within_a_bound_and_over_admits_at_most_one_per_caller() {
    const LIMIT: u64 = 400;
    const TASKS: usize = 64;
    const PER_PRIMARY: usize = 4;
    /// From the kill to the last error a caller sees: a failover takes
    /// about two node timeouts (2 s); several times that for CI.
    const RECOVERY_BOUND: Duration = Duration::from_secs(15);
    /// From the cluster's failover (as the harness sees it: a replica
    /// promoted, every node's view whole) to the last error a caller sees:
    /// the backend reads the slot map anew at most once per probe interval
    /// (500 ms) after a node failed, and a decision sent on the old map
    /// gives up within the command timeout (the default, 1 s): one of each,
    /// twice over, plus slack for a loaded machine.
    const AFTER_FAILOVER: Duration = Duration::from_millis(2 * (500 + 1_000) + 1_000);
    /// The longest decision: the command timeout (the default, 1 s) plus
    /// slack. A decision for the dead node's slots gives up within it.
    const SLOWEST: Duration = Duration::from_millis(2_500);
    /// Replication is asynchronous: what the dead primary acknowledged and
    /// had not yet sent its replica is lost. A caller has one decision in
    /// flight, so at most one admission per caller is lost (the primary
    /// writes a reply and the replication stream in the same event-loop
    /// turn).
    const OVER_ADMISSION_BOUND: u64 = TASKS as u64;

    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    // The default timeouts (1 s) and probe interval (500 ms): what a
    // deployment recovers with.
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .build_lazy()
        .unwrap();
    let limiter = limiter(
        &backend,
        Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap(),
        "failover",
    )
    .await;
    let primaries = cluster.primaries();
    let victim = primaries[0].clone();
    // Twice as many keys on the victim as on each other primary.
    let mut keys = keys_on(
        &cluster,
        &limiter,
        "victim",
        &primaries[..1],
        2 * PER_PRIMARY,
    );
    keys.extend(keys_on(
        &cluster,
        &limiter,
        "control",
        &primaries[1..],
        PER_PRIMARY,
    ));
    let on_victim: Vec<bool> = keys
        .iter()
        .map(|k| cluster.node_for_key(limiter.redis_key(k.as_bytes())) == victim)
        .collect();
    let targets: Vec<_> = keys
        .iter()
        .map(|k| (Arc::clone(&limiter), k.clone()))
        .collect();

    let load = Load::start(targets.clone(), TASKS);
    let victim_total = LIMIT * on_victim.iter().filter(|&&v| v).count() as u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let admitted: u64 = load
            .admitted()
            .iter()
            .zip(&on_victim)
            .filter(|(_, &v)| v)
            .map(|(a, _)| a)
            .sum();
        if admitted >= victim_total / 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the load never got half-way");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let before_kill = load.admitted();
    let killed_at = load.started.elapsed();
    let cluster_for_kill = Arc::clone(&cluster);
    let (killed, promoted, failover) = tokio::task::spawn_blocking(move || {
        let killed = cluster_for_kill.kill_primary(0);
        let started = Instant::now();
        let promoted = cluster_for_kill.wait_for_failover();
        (killed, promoted, started.elapsed())
    })
    .await
    .unwrap();
    assert_eq!(killed, victim);

    // Until every key reached its limit (by peek), or the bound.
    let deadline = Instant::now() + RECOVERY_BOUND + Duration::from_secs(10);
    loop {
        let mut done = true;
        for (limiter, key) in &targets {
            done &= limiter
                .peek(key.as_bytes(), 1)
                .await
                .is_ok_and(|d| d.remaining == 0);
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the keys never reached their limits after the failover: admitted {:?}",
            load.admitted()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = load.stop().await;
    let Report {
        admitted,
        decisions,
        errors,
        ..
    } = &report;
    let recovery = errors
        .last
        .map_or(Duration::ZERO, |last| last.saturating_sub(killed_at));
    let over: Vec<u64> = admitted.iter().map(|a| a.saturating_sub(LIMIT)).collect();
    let sum = |values: &[u64], victim: bool| -> u64 {
        values
            .iter()
            .zip(&on_victim)
            .filter(|(_, &v)| v == victim)
            .map(|(n, _)| n)
            .sum()
    };
    let (over_victim, over_control) = (sum(&over, true), sum(&over, false));
    let err = error_count(&cluster, &promoted, "ERR");
    eprintln!(
        "failover: killed {} at {} admissions on its keys; replica {} promoted {failover:?} \
         after the kill; {decisions} decisions; callers saw errors until {recovery:?} after \
         the kill, e.g. {:?}\n  on the killed primary's keys: {}\n  on the others' keys: {}\n  \
         over-admissions: {over_victim} on the killed primary's keys ({over:?}), \
         {over_control} elsewhere; ERR replies on the new primary: {err}",
        killed.port,
        sum(&before_kill, true),
        promoted.port,
        errors.samples,
        summary(&report, &on_victim, true, killed_at),
        summary(&report, &on_victim, false, killed_at),
    );
    assert!(
        errors.first.is_none_or(|first| first >= killed_at),
        "errors before the kill: {errors:?}"
    );
    assert!(
        recovery <= RECOVERY_BOUND && recovery <= failover + AFTER_FAILOVER,
        "callers saw errors until {recovery:?} after the kill, the cluster failed over in \
         {failover:?} (bounds: {RECOVERY_BOUND:?} after the kill, {AFTER_FAILOVER:?} after the \
         failover): {errors:?}"
    );
    let slowest = report.slowest.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < SLOWEST,
        "a decision waited {slowest:?} (bound {SLOWEST:?}, command timeout {TIMEOUT:?})"
    );
    assert_eq!(
        over_control, 0,
        "keys of the surviving primaries over-admitted: {over:?}"
    );
    assert!(
        over_victim <= OVER_ADMISSION_BOUND,
        "{over_victim} over-admissions after the failover (bound {OVER_ADMISSION_BOUND}): {over:?}"
    );
    // A decision that failed may still have counted (its reply lost).
    for ((key, admitted), errors) in keys.iter().zip(admitted).zip(&report.errors_per_target) {
        assert!(
            admitted + errors >= LIMIT,
            "{key}: only {admitted} of {LIMIT} admitted, {errors} errors"
        );
    }
}

/// The errors and the slowest decision of the targets whose `on_victim` is
/// `victim`, times since `killed_at`.
fn summary(report: &Report, on_victim: &[bool], victim: bool, killed_at: Duration) -> String {
    let chosen = |i: &usize| on_victim[*i] == victim;
    let targets: Vec<usize> = (0..on_victim.len()).filter(chosen).collect();
    let errors: u64 = targets.iter().map(|&i| report.errors_per_target[i]).sum();
    let first = targets
        .iter()
        .filter_map(|&i| report.error_span[i].map(|s| s.0))
        .min();
    let last = targets
        .iter()
        .filter_map(|&i| report.error_span[i].map(|s| s.1))
        .max();
    let slowest = targets.iter().map(|&i| report.slowest[i]).max();
    format!(
        "{errors} errors, from {:?} to {:?} after the kill; slowest decision {slowest:?}",
        first.map(|t| t.saturating_sub(killed_at)),
        last.map(|t| t.saturating_sub(killed_at)),
    )
}

/// A single-server backend pointed at a cluster node is the wrong backend
/// (the node redirects the keys of every other node): building it fails
/// with a configuration error that names `RedisBackend::cluster`, as does a
/// lazy backend's first call. For a user whose ACL refuses `INFO` the
/// backend builds, and the node's first `MOVED` is that configuration
/// error: under fail-open it is no admission, and every later call, on any
/// node's key, fails with it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_backend_at_a_cluster_node_is_refused() {
    let cluster = cluster();
    let node = cluster.primaries()[0].clone();
    let refused = |error: limiter_core::Error| match error {
        limiter_core::Error::InvalidConfig(e) => {
            let message = chain(&*e);
            let e = e
                .downcast::<limiter_redis::BackendError>()
                .expect("a BackendError");
            assert_eq!(e.kind(), limiter_redis::BackendErrorKind::Config);
            assert!(message.contains("RedisBackend::cluster"), "{message}");
            message
        }
        other => panic!("expected a configuration error, got {}", chain(&other)),
    };
    let error = RedisBackend::builder(node.url()).build().await.unwrap_err();
    let message = refused(error);
    assert!(message.contains("cluster_enabled:1"), "{message}");
    let lazy = RedisBackend::builder(node.url()).build_lazy().unwrap();
    let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
    let error = RedisLimiter::builder(&lazy, policy.clone())
        .build()
        .await
        .unwrap_err();
    refused(error);

    let user = [
        "ACL", "SETUSER", "no-info", "on", ">pw", "~*", "&*", "+@all", "-info",
    ];
    assert_eq!(cluster.command(&node, &user).text(), "OK");
    let backend = RedisBackend::builder(node.url())
        .username("no-info")
        .password("pw")
        .build()
        .await
        .expect("INFO refused: taken as one server");
    let limiter = limiter(&backend, policy, "single-at-node").await;
    let primaries = cluster.primaries();
    let elsewhere = keys_on(cluster, &limiter, "single", &primaries[1..2], 1).remove(0);
    let here = keys_on(cluster, &limiter, "single", &primaries[..1], 1).remove(0);
    let open = limiter_core::LimiterExt::on_failure(
        Arc::clone(&limiter),
        limiter_core::FailurePolicy::FailOpen,
    );
    let message = refused(open.acquire(elsewhere.as_bytes(), 1).await.unwrap_err());
    assert!(message.contains("MOVED"), "{message}");
    refused(open.acquire(here.as_bytes(), 1).await.unwrap_err());
}

/// A lost shard: a primary and its replica killed (`SIGKILL`), so nothing
/// serves its slots and no failover comes, while 16 tasks decide on keys
/// of every primary. Its keys fail at once (the node refuses, then is
/// known down). Once the other nodes mark it failed they answer
/// `CLUSTERDOWN` for every key (`cluster-require-full-coverage`, on by
/// default): those calls are retried until their command timeout, and the
/// requests queued behind them are answered with their failure, so no call
/// waits longer than one command timeout (plus slack for a loaded machine).
/// Told to serve without full coverage, the other primaries' keys are
/// decided by Redis again, none failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_shard_costs_each_call_one_command_timeout_at_most() {
    // Over two per key: requests queue behind their key's calls in flight.
    const TASKS: usize = 16;
    const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
    /// The command timeout and slack for a loaded machine. A call that
    /// waited out a second timeout (queued behind a call that failed, then
    /// sent) waits twice the timeout: more than this.
    const LONGEST: Duration = Duration::from_millis(COMMAND_TIMEOUT.as_millis() as u64 + 350);
    /// How long the other nodes may take to mark the shard failed: the
    /// node timeout, then their gossip, with slack for a loaded machine.
    const MARKED_FAILED: Duration = Duration::from_millis(5 * NODE_TIMEOUT_MS);
    assert!(LONGEST < 2 * COMMAND_TIMEOUT);
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    );
    let backend = probing_backend(&cluster, COMMAND_TIMEOUT);
    let (keys, on_lost, targets) = spread_over_primaries(&cluster, &backend, "lost", 2).await;
    let lost = cluster.primaries()[0].clone();
    let limiter = Arc::clone(&targets[0].0);
    let sum = |report: &Report, lost_side: bool, figures: &dyn Fn(&Report, usize) -> u64| {
        (0..keys.len())
            .filter(|&i| on_lost[i] == lost_side)
            .map(|i| figures(report, i))
            .sum::<u64>()
    };
    let errors = |report: &Report, i: usize| report.errors_per_target[i];
    let longest = |report: &Report| report.slowest.iter().max().copied().unwrap_or_default();

    // The shard lost, until the other nodes answer `CLUSTERDOWN` and for
    // a few command timeouts after.
    let load = Load::start(targets.clone(), TASKS);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killer = Arc::clone(&cluster);
    let killed = tokio::task::spawn_blocking(move || killer.kill_shard(0))
        .await
        .unwrap();
    assert_eq!(killed[0], lost);
    let killed_at = Instant::now();
    let others_fail = |load: &Load| {
        (0..keys.len())
            .filter(|&i| !on_lost[i])
            .any(|i| load.stats[i].errors.load(Ordering::Relaxed) > 0)
    };
    while !others_fail(&load) {
        assert!(
            killed_at.elapsed() < MARKED_FAILED,
            "the other nodes never answered CLUSTERDOWN"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down_after = killed_at.elapsed();
    tokio::time::sleep(3 * COMMAND_TIMEOUT).await;
    let down = load.stop().await;
    eprintln!(
        "lost shard {:?}: CLUSTERDOWN {down_after:?} after the kill; {} decisions; errors on \
         its keys {}, on the others' {}; slowest {:?} (per key {:?}); samples {:?}",
        killed.iter().map(|n| n.port).collect::<Vec<_>>(),
        down.decisions,
        sum(&down, true, &errors),
        sum(&down, false, &errors),
        longest(&down),
        down.slowest,
        down.errors.samples
    );
    assert!(
        longest(&down) <= LONGEST,
        "a call waited {:?}; the command timeout is {COMMAND_TIMEOUT:?}",
        longest(&down)
    );
    assert!(
        sum(&down, true, &errors) > 0,
        "the lost shard's keys failed"
    );

    // Served without full coverage: the other primaries' keys by Redis.
    for node in cluster.live_nodes() {
        let coverage = ["CONFIG", "SET", "cluster-require-full-coverage", "no"];
        assert_eq!(cluster.command(&node, &coverage).text(), "OK");
    }
    let served_from = Instant::now();
    for (i, key) in keys.iter().enumerate().filter(|(i, _)| !on_lost[*i]) {
        while let Err(e) = limiter.acquire(key.as_bytes(), 1).await {
            assert!(
                served_from.elapsed() < MARKED_FAILED,
                "{key} (target {i}) still fails: {}",
                chain(&e)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let load = Load::start(targets, TASKS);
    tokio::time::sleep(3 * COMMAND_TIMEOUT).await;
    let partial = load.stop().await;
    let admitted = |report: &Report, i: usize| report.admitted[i];
    eprintln!(
        "served again {:?} after full coverage was off: {} decisions, {} admitted on the \
         others' keys, errors on its keys {} and the others' {}; slowest {:?}",
        served_from.elapsed(),
        partial.decisions,
        sum(&partial, false, &admitted),
        sum(&partial, true, &errors),
        sum(&partial, false, &errors),
        longest(&partial),
    );
    assert_eq!(
        sum(&partial, false, &errors),
        0,
        "the other primaries' keys failed: {:?}",
        partial.errors.samples
    );
    assert!(sum(&partial, false, &admitted) > 0);
    assert!(
        sum(&partial, true, &errors) > 0,
        "the lost shard's keys failed"
    );
    assert!(
        longest(&partial) <= LONGEST,
        "a call waited {:?}; the command timeout is {COMMAND_TIMEOUT:?}",
        longest(&partial)
    );
}

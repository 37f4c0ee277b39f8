//! Nodes that refuse or go: a full primary, and a lost shard.

use super::load::{spread_over_primaries, Load, Report};
use super::*;

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
/// A lost shard: a primary and its replica killed (`SIGKILL`), so nothing
/// serves its slots and no failover comes, while 16 tasks decide on keys
/// of every primary. Its keys fail at once (the node refuses, then is
/// known down). Once the other nodes mark it failed they answer
/// `CLUSTERDOWN` for every key (`cluster-require-full-coverage`, on by
/// default): those calls are retried until their command timeout, and the
/// requests queued behind them are answered with their failure, so no call
/// waits longer than one command timeout (plus 1.5 s for a loaded
/// machine's stalls).
/// Told to serve without full coverage, the other primaries' keys are
/// decided by Redis again, none failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_shard_costs_each_call_one_command_timeout_at_most() {
    // Over two per key: requests queue behind their key's calls in flight.
    const TASKS: usize = 16;
    /// Long enough that the slack below fits under it.
    const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
    /// The command timeout and 1.5 s for a loaded machine's stalls. A call
    /// that waited out a second timeout (queued behind a call that failed,
    /// then sent) waits twice the timeout: more than this.
    const LONGEST: Duration = Duration::from_millis(2_000 + 1_500);
    /// How long the other nodes may take to mark the shard failed: the
    /// node timeout, then their gossip (seconds on a loaded machine), with
    /// as much again to spare: a bound that says they did.
    const MARKED_FAILED: Duration = Duration::from_millis(10 * NODE_TIMEOUT_MS);
    assert!(LONGEST < 2 * COMMAND_TIMEOUT);
    let cluster = cluster_of_its_own().await;
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

//! Nodes that hang: the first seed while a backend is built, a primary
//! under load, and a node a late redirect points to. Each costs its
//! callers one command timeout at most.

use limiter_core::{DecisionSource, FailurePolicy, LimiterExt};

use super::load::{spread_over_primaries, Load, SLOW};
use super::*;

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
    let cluster = cluster_of_its_own().await;
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
    let cluster = cluster_of_its_own().await;
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
    let cluster = cluster_of_its_own().await;
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

/// A primary that lost its library (`FUNCTION FLUSH`, a restart) while
/// another primary hangs: the library is loaded on the node that asked
/// for it alone, so the hung one neither delays its caller nor makes the
/// failure the whole backend's (a `Resilient` on top keeps deciding every
/// other primary's keys by the backend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_on_a_healthy_primary_is_not_held_up_by_a_hung_one() {
    const COMMAND_TIMEOUT: Duration = Duration::from_millis(300);
    let cluster = cluster_of_its_own().await;
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .connection_timeout(COMMAND_TIMEOUT)
        .command_timeout(COMMAND_TIMEOUT)
        .probe_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let policy = Policy::fixed_window(Rate::per_hour(1000)).unwrap();
    let raw = limiter(&backend, policy, "reload-hung").await;
    let primaries = cluster.primaries();
    let keys = keys_on(&cluster, &raw, "reload-hung", &primaries, 1);
    let key_of = |primary: &ClusterNode| {
        keys.iter()
            .find(|key| cluster.node_for_key(raw.redis_key(key.as_bytes())) == *primary)
            .unwrap()
            .clone()
    };
    let (flushed, hung, other) = (&primaries[0], &primaries[1], &primaries[2]);
    let (on_flushed, on_other) = (key_of(flushed), key_of(other));
    // Every node's connection is up.
    for key in &keys {
        raw.acquire(key.as_bytes(), 1).await.unwrap();
    }
    let resilient = Arc::clone(&raw)
        .on_failure(FailurePolicy::FailOpen)
        .probe_interval(Duration::from_secs(3600));

    cluster.command(flushed, &["FUNCTION", "FLUSH"]);
    cluster.pause(hung);
    let started = Instant::now();
    let reloaded = resilient.acquire(on_flushed.as_bytes(), 1).await.unwrap();
    let took = started.elapsed();
    let elsewhere = resilient.acquire(on_other.as_bytes(), 1).await.unwrap();
    cluster.resume(hung);
    assert_eq!(
        (reloaded.source, elsewhere.source),
        (DecisionSource::Backend, DecisionSource::Backend),
        "a flushed primary's key (after {took:?}) and another primary's key"
    );
    assert!(took < COMMAND_TIMEOUT, "the reload waited {took:?}");
}

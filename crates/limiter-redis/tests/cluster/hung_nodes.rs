//! Nodes that hang: the first seed while a backend is built, a primary
//! under load (and the requests queued behind its calls), and a node a
//! late redirect points to. Each costs its callers one command timeout at
//! most.

use limiter_core::{DecisionSource, FailurePolicy, LimiterExt};

use super::load::{spread_over_primaries, Load};
use super::*;

/// A backend built while a primary hangs (`SIGSTOP`; no failover starts,
/// see [`hold_off_failover`]), that primary the first of its seeds: the
/// build ends within its timeouts (the slot map read from another seed,
/// the hung primary marked down, not waited for), and the other
/// primaries' keys are decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_built_while_its_first_seed_hangs_serves_the_other_primaries() {
    const HUNG_TIMEOUT: Duration = Duration::from_secs(1);
    /// The build's bound: the connection and command timeouts (what one
    /// connection may take), plus 1.5 s for a loaded machine's stalls.
    const BUILT_WITHIN: Duration = Duration::from_millis(2 * 1_000 + 1_500);
    let cluster = cluster_of_its_own().await;
    hold_off_failover(&cluster);
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
/// Requests queued in a lane behind calls to a hung primary (`SIGSTOP`; no
/// failover starts) are answered, once the first call's timeout marks the
/// node down, as the node's open circuit answers, at once and never sent;
/// the calls in flight fail with their own timeout, and only their
/// requests count once the node resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_behind_a_call_to_a_hung_primary_hear_its_circuit() {
    const COMMAND: Duration = Duration::from_secs(1);
    /// Long enough, however loaded the machine, for a call's task to send
    /// its one request before the next request arrives.
    const APART: Duration = Duration::from_millis(200);
    const LIMIT: u64 = 100;
    let cluster = cluster_of_its_own().await;
    hold_off_failover(&cluster);
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .command_timeout(COMMAND)
        .probe_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let policy = Policy::fixed_window(Rate::per_hour(LIMIT)).unwrap();
    let limiter = limiter(&backend, policy, "behind-hung").await;
    let hung = cluster.primaries()[0].clone();
    let key = keys_on(
        &cluster,
        &limiter,
        "behind-hung",
        std::slice::from_ref(&hung),
        1,
    )
    .remove(0);
    assert_eq!(
        limiter.acquire(key.as_bytes(), 1).await.unwrap().remaining,
        LIMIT - 1
    );

    cluster.pause(&hung);
    let decide = || {
        let (limiter, key) = (Arc::clone(&limiter), key.clone());
        tokio::spawn(async move { limiter.acquire(key.as_bytes(), 1).await })
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
        let error = call.await.unwrap().expect_err("the node hangs");
        assert_eq!(
            common::backend_kind(&error),
            BackendErrorKind::Timeout,
            "{}",
            chain(&error)
        );
        sent += 1;
    }
    for request in queued {
        let error = request.await.unwrap().expect_err("the node hangs");
        let told = chain(&error);
        assert_eq!(
            common::backend_kind(&error),
            BackendErrorKind::Connect,
            "{told}"
        );
        assert!(told.contains("not sent, nothing counted"), "{told}");
        assert!(
            told.contains("down for"),
            "the node's circuit answered: {told}"
        );
    }

    // Back: the two requests sent count, the queued ones do not.
    cluster.resume(&hung);
    let started = Instant::now();
    let peek = loop {
        match limiter.peek(key.as_bytes(), 1).await {
            Ok(peek) => break peek,
            Err(e) => assert!(
                started.elapsed() < Duration::from_secs(10),
                "the node serves again: {}",
                chain(&e)
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A peek tells what one more would leave.
    assert_eq!(peek.remaining, LIMIT - 1 - sent - 1, "{peek:?}");
}

/// A hung primary (`SIGSTOP` for two command timeouts; no failover starts,
/// see [`hold_off_failover`]) while 64 tasks decide on keys of every
/// primary: at most one decision per caller waits out a command timeout
/// (those sent before it was known down), and none waits longer than one; then
/// its keys fail at once while a background probe checks it; the other
/// primaries' keys never fail; once it resumes its keys are served again
/// within a bound; and every state counts what was admitted (plus, at
/// most, the decisions whose answer was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_costs_its_callers_one_command_timeout_at_most() {
    const TASKS: usize = 64;
    /// Long enough that a healthy node answers within it however loaded
    /// the machine.
    const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
    const PROBE_INTERVAL: Duration = Duration::from_millis(100);
    /// Two command timeouts: without the node's circuit every caller would
    /// wait out a timeout on its keys twice.
    const HUNG_FOR: Duration = Duration::from_secs(4);
    /// The longest a caller of the hung node may wait: one command timeout,
    /// plus 1.5 s for a loaded machine's stalls; shorter than two.
    const LONGEST: Duration = Duration::from_millis(2_000 + 1_500);
    /// From the resume to the last error on the hung node's keys: the
    /// probe's next `PING` (one interval) answered, plus 1.9 s for a loaded
    /// machine. The load runs [`AFTER_RESUME`], longer, so that keys still
    /// failing show.
    const BACK_WITHIN: Duration = Duration::from_secs(2);
    const AFTER_RESUME: Duration = Duration::from_secs(3);
    assert!(LONGEST < 2 * COMMAND_TIMEOUT && BACK_WITHIN < AFTER_RESUME);
    let cluster = cluster_of_its_own().await;
    hold_off_failover(&cluster);
    let backend = RedisBackend::cluster(cluster.seed_urls())
        .command_timeout(COMMAND_TIMEOUT)
        .probe_interval(PROBE_INTERVAL)
        .build_lazy()
        .unwrap();
    let (keys, on_hung, targets) = spread_over_primaries(&cluster, &backend, "hung", 4).await;
    let hung = cluster.primaries()[0].clone();
    let limiter = Arc::clone(&targets[0].0);

    let load = Load::start(targets.clone(), TASKS);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let paused_at = load.started.elapsed();
    cluster.pause(&hung);
    tokio::time::sleep(HUNG_FOR).await;
    cluster.resume(&hung);
    let resumed_at = load.started.elapsed();
    tokio::time::sleep(AFTER_RESUME).await;
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
    let timeouts = sum(true, &report.timeouts);
    eprintln!(
        "hung primary {}: paused at {paused_at:?}, resumed at {resumed_at:?}; {} decisions; \
         on its keys {} errors ({timeouts} timeouts, the last error at {last_error:?}), \
         slowest {:?}; on the others' keys {} errors, slowest {:?}; samples {:?}",
        hung.port,
        report.decisions,
        sum(true, &report.errors_per_target),
        longest(true),
        sum(false, &report.errors_per_target),
        longest(false),
        report.errors.samples
    );
    assert!(
        longest(true) <= LONGEST,
        "a caller of the hung node waited {:?}; the command timeout is {COMMAND_TIMEOUT:?}",
        longest(true)
    );
    // One per caller at most: the calls sent before the node was known
    // down time out, and the requests queued behind them are answered as
    // the node's open circuit answers. Without the node's circuit every
    // caller would wait out a timeout again and again while it hangs
    // (twice each, about 128).
    assert!(
        timeouts <= TASKS as u64,
        "{timeouts} decisions on the hung node's keys waited out the command timeout: more \
         than one per caller"
    );
    assert!(
        sum(true, &report.errors_per_target) > timeouts,
        "the hung node's keys failed at once once it was known down"
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
/// half the command timeout, then answers `MOVED` to a node that is
/// hung by then. The caller is answered within the command timeout, not
/// the hang plus a second timeout; the retry, going on in the background,
/// still marks the hung node down (its keys then fail at once); and once
/// it resumes, its keys are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_redirect_to_a_hung_node_costs_the_caller_one_command_timeout() {
    const COMMAND_TIMEOUT: Duration = Duration::from_secs(4);
    /// How long the stale node hangs before it answers `MOVED`: half the
    /// command timeout, so that its answer comes in time however the
    /// machine stalls, and the redirect's own timeout would end past the
    /// command's.
    const FIRST_HANG: Duration = Duration::from_secs(2);
    /// For a loaded machine's stalls: less than `FIRST_HANG`, which a
    /// caller that waited out the hang plus a second timeout waits more.
    const SLACK: Duration = Duration::from_millis(1_500);
    assert!(SLACK < FIRST_HANG);
    let cluster = cluster_of_its_own().await;
    hold_off_failover(&cluster);
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

    // Hung from the start (the retry meets it whenever it comes).
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

    // The retry's own timeout has passed: the node is known to be down,
    // and its keys fail without a round trip (its circuit answers).
    tokio::time::sleep_until((started + FIRST_HANG + COMMAND_TIMEOUT + SLACK).into()).await;
    let down = limiter.acquire(key.as_bytes(), 1).await;
    cluster.resume(&hung);
    let down = chain(&down.expect_err("a hung node answered"));
    assert!(
        down.contains("down for") && down.contains("probing every"),
        "a call on the hung node's keys was not answered by its circuit: {down}"
    );

    let back = Instant::now();
    loop {
        match limiter.acquire(key.as_bytes(), 1).await {
            Ok(decision) => break assert!(decision.allowed),
            Err(e) => assert!(
                back.elapsed() < Duration::from_secs(10),
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
    /// What the reload would wait on the hung primary: far above what a
    /// reload takes however loaded the machine.
    const COMMAND_TIMEOUT: Duration = Duration::from_secs(3);
    let cluster = cluster_of_its_own().await;
    hold_off_failover(&cluster);
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

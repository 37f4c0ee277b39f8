//! The cluster changing shape under load: live resharding, nodes that
//! disagree for a moment, a new primary, a slot covered late, and
//! `FUNCTION FLUSH` on one node.

use super::load::{Load, Report};
use super::*;

/// `FUNCTION FLUSH` on one primary, then on every primary, while 16 tasks
/// decide on keys of every primary (20 decisions between two flushes): no
/// error reaches a caller, and each key's state is exact afterwards (the
/// reloaded function decided as the first did). On a cluster of its own:
/// the flushes would reach the other tests' decisions too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush_on_a_node_recovers_without_an_error() {
    const LIMIT: u64 = 5_000;
    let cluster = cluster_of_its_own().await;
    let backend = backend(&cluster);
    let limiter = limiter(
        &backend,
        Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap(),
        "flush",
    )
    .await;
    let primaries = cluster.primaries();
    let keys = keys_on(&cluster, &limiter, "flush", &primaries, 3);

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
    let decided = Arc::clone(&load.decisions);
    let flusher = Arc::clone(&cluster);
    let flushes = tokio::task::spawn_blocking(move || {
        let flush = |node: &ClusterNode| {
            let reply = flusher.command(node, &["FUNCTION", "FLUSH"]);
            assert_eq!(reply, Reply::Status("OK".into()), "node {}", node.port);
        };
        let mut flushes = 0;
        for round in 0..3 {
            for primary in &primaries {
                after_decisions(&decided, 20);
                flush(primary);
                flushes += 1;
            }
            if round > 0 {
                primaries.iter().for_each(flush);
                flushes += primaries.len();
            }
        }
        after_decisions(&decided, 20);
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
/// A bound on a wait for what a load does in well under a second: it did
/// not hang.
const HUNG: Duration = Duration::from_secs(60);

/// Blocks until `decisions` has grown by `n`: a schedule by work done, not
/// by time.
fn after_decisions(decisions: &AtomicU64, n: u64) {
    let target = decisions.load(Ordering::Relaxed) + n;
    let started = Instant::now();
    while decisions.load(Ordering::Relaxed) < target {
        assert!(started.elapsed() < HUNG, "the load made no progress");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Live resharding: while 64 tasks decide on 24 keys (8 per primary) of two
/// limiters (sliding log, windows longer than the test: one limit reached
/// early, one never), each key's slot moves to the next primary, twice,
/// some migrations held half-done for 60 ms (`ASK`); the second round once
/// every small limit is reached. No error reaches a caller (none waits out
/// the command timeout), no key admits more than its limit, and every key's
/// state counts exactly what was admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_resharding_under_load_answers_every_decision_and_never_over_admits() {
    // Reached before the second round of migrations, which waits for it:
    // the migrations meet denials as well as admissions.
    const SMALL: u64 = 30;
    const LARGE: u64 = 10_000; // the default maximum of a sliding log
    const TASKS: usize = 64;
    let cluster = cluster_of_its_own().await;
    // The default timeouts: what a deployment stalls for.
    let backend = default_backend(&cluster);
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
    // Every key in use before the first migration.
    let in_use = Instant::now();
    while load.admitted().contains(&0) {
        assert!(in_use.elapsed() < HUNG, "the load did not start");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let started = Instant::now();
    let mover = Arc::clone(&cluster);
    let stats = Arc::clone(&load.stats);
    let small_targets: Vec<usize> = (0..targets.len()).filter(|&i| limits[i] == SMALL).collect();
    let moves = tokio::task::spawn_blocking(move || {
        let cluster = mover;
        let mut moves = Vec::new();
        for round in 0..2 {
            if round == 1 {
                let reached = Instant::now();
                while small_targets
                    .iter()
                    .any(|&i| stats[i].admitted.load(Ordering::Relaxed) < SMALL)
                {
                    assert!(
                        reached.elapsed() < HUNG,
                        "the small limits were never reached"
                    );
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
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
    let cluster = cluster_of_its_own().await;
    // The default timeouts: what a deployment waits for.
    let backend = default_backend(&cluster);
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
    // Until every small limit is reached (however slow the machine), so
    // that the admissions met the moves and the denials are checked.
    let plain: Vec<_> = keys
        .iter()
        .flat_map(|key| {
            limiters
                .iter()
                .map(|(_, limiter)| (Arc::clone(limiter), key.clone()))
        })
        .collect();
    let reached = Instant::now();
    loop {
        let counted = counted(&plain).await;
        if (0..targets.len()).all(|i| targets[i].0 != SMALL || counted[i] >= SMALL) {
            break;
        }
        assert!(
            reached.elapsed() < HUNG,
            "the small limits were never reached"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    let counted = counted(&plain).await;
    eprintln!(
        "source-first reshard of {} slots ({moved} keys moved): {failed} failed, {degraded} \
         fail-open answers, admitted {admitted:?}, counted {counted:?}; samples {samples:?}",
        keys.len()
    );
    // Per key, each limiter's state and record.
    assert_eq!(
        moved,
        4 * keys.len(),
        "every key's states and records moved"
    );
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
    assert_eq!(
        cluster.migrate_slot(slot, &new),
        2,
        "the key's state and record moved"
    );
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
    let cluster = cluster_of_its_own().await;
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

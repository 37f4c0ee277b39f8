//! A healthy server under load, with default settings: 64 callers on one
//! key never fail, admit exactly the limit, and are served fairly: none is
//! starved (a pool's unfair checkout can starve callers for its whole
//! timeout, waits of seconds). Its own test binary, so that it
//! runs alone.
//!
//! No performance target and no clock bound but one that says the load
//! did not hang: the load runs until every caller has made [`PER_TASK`]
//! decisions (however long a loaded machine takes). A caller starved for
//! the command timeout fails its decision; one starved for less makes a
//! fraction of the others' decisions meanwhile.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{Limiter, Policy, Rate};
use limiter_redis::{RedisBackend, RedisLimiter};

const TASKS: usize = 64;
/// The load runs until every caller has made this many decisions: 64,000
/// at least, so that a starved caller shows.
const PER_TASK: u64 = 1_000;
/// Past this, the load hung (a fair run takes seconds, even on a loaded
/// machine).
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// A window longer than the test: exactly this many are admitted.
const LIMIT: u64 = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_callers_on_one_key_are_served_fairly_and_admit_exactly_the_limit() {
    let backend = RedisBackend::builder(common::server().url())
        .build()
        .await
        .unwrap();
    let policy = Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap();
    let limiter = Arc::new(
        RedisLimiter::builder(&backend, policy)
            .key_prefix(common::fresh_prefix("healthy"))
            .build()
            .await
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let made: Arc<Vec<AtomicU64>> = Arc::new((0..TASKS).map(|_| AtomicU64::new(0)).collect());
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let limiter = Arc::clone(&limiter);
            let stop = Arc::clone(&stop);
            let made = Arc::clone(&made);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut admitted = 0u64;
                let mut errors = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    let result = limiter.acquire(b"one-key", 1).await;
                    latencies.push(start.elapsed());
                    made[task].fetch_add(1, Ordering::Relaxed);
                    match result {
                        Ok(decision) => admitted += u64::from(decision.allowed),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (latencies, admitted, errors)
            })
        })
        .collect();
    let counts = || -> Vec<u64> { made.iter().map(|m| m.load(Ordering::Relaxed)).collect() };
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let counts = counts();
        if counts.iter().all(|&n| n >= PER_TASK) {
            break;
        }
        assert!(
            started.elapsed() < RUN_LIMIT,
            "after {RUN_LIMIT:?} some caller has not made {PER_TASK} decisions: {counts:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let ran_for = started.elapsed();

    let mut latencies = Vec::new();
    let mut per_task = Vec::new();
    let mut admitted = 0;
    let mut errors = Vec::new();
    for task in tasks {
        let (l, a, e) = task.await.unwrap();
        per_task.push(l.len());
        latencies.extend(l);
        admitted += a;
        errors.extend(e);
    }
    latencies.sort_unstable();
    let decisions = latencies.len();
    let percentile = |p: f64| latencies[((decisions as f64 * p) as usize).min(decisions - 1)];
    let fewest = *per_task.iter().min().unwrap();
    let most = *per_task.iter().max().unwrap();
    let mean = decisions / TASKS;
    let summary = format!(
        "{decisions} decisions in {ran_for:?}: p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}; \
         per caller {fewest} to {most} (mean {mean}); {admitted} admitted; {} errors",
        percentile(0.5),
        percentile(0.99),
        percentile(0.999),
        latencies[decisions - 1],
        errors.len()
    );
    println!("{summary}");
    let stats = common::server().query("INFO commandstats");
    for line in stats.lines().filter(|l| l.contains("fcall")) {
        println!("server: {line}");
    }
    assert!(
        errors.is_empty(),
        "{summary}; first errors: {:?}",
        &errors[..errors.len().min(5)]
    );
    assert_eq!(admitted, LIMIT, "{summary}");
    // Fair service: a caller served last, or left waiting while the others
    // go on, makes a fraction of the others' decisions (a clock-free check;
    // one starved for the whole command timeout failed a decision).
    assert!(
        fewest * 4 >= mean,
        "a caller made {fewest} decisions, the mean is {mean}: {summary}"
    );
}

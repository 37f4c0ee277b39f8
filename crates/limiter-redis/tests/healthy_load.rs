//! A healthy server under load, with default settings: 64 callers on one
//! key for 12 s never wait longer than 50 ms, never fail, and admit exactly
//! the limit (issue 10: a pool's unfair checkout once starved callers for
//! its whole timeout). Its own test binary, so that it runs alone.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{Limiter, Policy, Rate};
use limiter_redis::{RedisBackend, RedisLimiter};

const TASKS: usize = 64;
const DURATION: Duration = Duration::from_secs(12);
/// The longest any decision may wait on a healthy server.
const MAX_WAIT: Duration = Duration::from_millis(50);
/// A window longer than the test: exactly this many are admitted.
const LIMIT: u64 = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_callers_on_one_key_never_wait_and_admit_exactly_the_limit() {
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
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut admitted = 0u64;
                let mut errors = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    let result = limiter.acquire("one-key", 1).await;
                    latencies.push(start.elapsed());
                    match result {
                        Ok(decision) => admitted += u64::from(decision.allowed),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (latencies, admitted, errors)
            })
        })
        .collect();
    tokio::time::sleep(DURATION).await; // the test's length, not a synchronisation
    stop.store(true, Ordering::Relaxed);

    let mut latencies = Vec::new();
    let mut admitted = 0;
    let mut errors = Vec::new();
    for task in tasks {
        let (l, a, e) = task.await.unwrap();
        latencies.extend(l);
        admitted += a;
        errors.extend(e);
    }
    latencies.sort_unstable();
    let decisions = latencies.len();
    let percentile = |p: f64| latencies[((decisions as f64 * p) as usize).min(decisions - 1)];
    let summary = format!(
        "{decisions} decisions in {DURATION:?} ({:.0}/s): p50 {:?}, p99 {:?}, p99.9 {:?}, \
         max {:?}; {admitted} admitted; {} errors",
        decisions as f64 / DURATION.as_secs_f64(),
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
    assert!(
        latencies[decisions - 1] <= MAX_WAIT,
        "a decision waited longer than {MAX_WAIT:?}: {summary}"
    );
    assert_eq!(admitted, LIMIT, "{summary}");
    assert!(
        decisions as u64 > 10 * LIMIT,
        "too few decisions: {summary}"
    );
}

//! Comparative benches, one group per question (see docs/benchmarks.md):
//!
//! - `algorithms/*`: what one decision costs on the memory backend, per
//!   algorithm, allowed and denied, on one key and on 10,000 keys;
//! - `peers/token-bucket`: limiter's memory token bucket against governor's
//!   keyed limiter on the same 10,000 `String` keys;
//! - `scaling/*`: one and two threads, distinct keys and one hot key.
#![allow(missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::{Quota, RateLimiter};
use limiter_core::{Algorithm, ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

const KEYS: usize = 10_000;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user:{i}")).collect()
}

/// A policy that admits every request of the bench (the allowed path).
fn generous(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, Rate::new(1_000_000_000, Duration::from_secs(1))).unwrap()
}

/// A policy that denies all but the first request of each key (the denied path).
fn strict(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, Rate::per_hour(1)).unwrap()
}

fn algorithms(c: &mut Criterion) {
    for (path, make) in [
        ("allowed", generous as fn(Algorithm) -> Policy),
        ("denied", strict),
    ] {
        for key_count in [1, KEYS] {
            let mut group = c.benchmark_group(format!("algorithms/{path}/{key_count}-keys"));
            group.throughput(Throughput::Elements(1));
            let keys = keys(key_count);
            for algorithm in Algorithm::ALL {
                let limiter = MemoryLimiter::new(make(algorithm));
                for key in &keys {
                    limiter.try_acquire(key, 1).unwrap();
                }
                let mut i = 0;
                group.bench_function(BenchmarkId::new(algorithm.name(), "memory"), |b| {
                    b.iter(|| {
                        i = (i + 1) % keys.len();
                        black_box(limiter.try_acquire(&keys[i], 1).unwrap())
                    })
                });
            }
            group.finish();
        }
    }
}

fn peers(c: &mut Criterion) {
    let mut group = c.benchmark_group("peers/token-bucket-10000-string-keys");
    group.throughput(Throughput::Elements(1));
    let keys = keys(KEYS);

    let ours = MemoryLimiter::new(generous(Algorithm::TokenBucket));
    let mut i = 0;
    group.bench_function(BenchmarkId::new("token-bucket", "limiter-memory"), |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(ours.try_acquire(&keys[i], 1).unwrap().allowed)
        })
    });

    // The same limiter on a clock that costs nothing to read: what the
    // decision itself costs, without the system clock's read.
    let manual = MemoryLimiter::builder(generous(Algorithm::TokenBucket))
        .clock(ManualClock::new(1_000_000))
        .build();
    let mut i = 0;
    group.bench_function(
        BenchmarkId::new("token-bucket", "limiter-memory-manual-clock"),
        |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(manual.try_acquire(&keys[i], 1).unwrap().allowed)
            })
        },
    );

    let quota = Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap());
    let governor = RateLimiter::<String, _, _>::keyed(quota);
    let mut i = 0;
    group.bench_function(BenchmarkId::new("gcra", "governor-keyed"), |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(governor.check_key(&keys[i]).is_ok())
        })
    });
    group.finish();
}

/// Runs `per_thread` decisions on each of `threads` threads at once and
/// returns the wall time; `key_of(thread, i)` picks the key.
fn run_threads(
    limiter: &Arc<MemoryLimiter>,
    keys: &Arc<Vec<String>>,
    threads: usize,
    per_thread: u64,
    hot_key: bool,
) -> Duration {
    let start = Instant::now();
    thread::scope(|scope| {
        for thread in 0..threads {
            let (limiter, keys) = (Arc::clone(limiter), Arc::clone(keys));
            scope.spawn(move || {
                for i in 0..per_thread as usize {
                    let key = if hot_key {
                        &keys[0]
                    } else {
                        &keys[(thread * 7919 + i) % keys.len()]
                    };
                    black_box(limiter.try_acquire(key, 1).unwrap());
                }
            });
        }
    });
    start.elapsed()
}

fn scaling(c: &mut Criterion) {
    let keys = Arc::new(keys(KEYS));
    for hot_key in [false, true] {
        let name = if hot_key {
            "one-hot-key"
        } else {
            "distinct-keys"
        };
        let mut group = c.benchmark_group(format!("scaling/token-bucket/{name}"));
        for threads in [1, 2] {
            let limiter = Arc::new(MemoryLimiter::new(generous(Algorithm::TokenBucket)));
            group.throughput(Throughput::Elements(threads as u64));
            group.bench_function(BenchmarkId::new("threads", threads), |b| {
                b.iter_custom(|iters| run_threads(&limiter, &keys, threads, iters, hot_key))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, algorithms, peers, scaling);
criterion_main!(benches);

//! Comparative benches, one group per question (see docs/benchmarks.md):
//!
//! - `algorithms/*`: what one decision costs on the memory backend, per
//!   algorithm, allowed and denied, on one key and on 10,000 keys;
//! - `sliding-log-by-limit/*`: a sliding log's cost per request at limits
//!   of 10, 1,000 and 100,000, denied and allowed;
//! - `peers/{1,10000,1000000}-string-keys`: every algorithm of
//!   limiter-memory against governor's keyed limiter on equal terms (the
//!   same `String` keys and as many, the same aHash map, a quanta TSC clock
//!   on both sides), with governor's default SipHash map as a second,
//!   labelled row;
//! - `dyn-path/*`: the memory token bucket through `Arc<dyn Limiter>`
//!   (`acquire().await`, a boxed future; `acquire_now`, the synchronous
//!   fast path; the same behind `Resilient`) beside the sync
//!   `MemoryLimiter::try_acquire`;
//! - `tiers/*`: a tiered set of two policies on the memory backend (one
//!   map entry and one lock per key, docs/spec.md section 7) beside the sum
//!   of its parts, each part a `MemoryLimiter` of its own;
//! - `peers/threads/*`: one and two threads, distinct keys and one hot
//!   key, the token bucket against both governors;
//! - `redis/*`: decisions per second of each algorithm at concurrency 1, 16
//!   and 64 through one shared `RedisBackend`, beside what the same server
//!   gives a plain redis-rs multiplexed connection in the same run: the
//!   ceiling (EVALSHA of `return 1`), the original article's classic
//!   sorted-set script, and redis-cell's `CL.THROTTLE` when
//!   `REDIS_CELL_MODULE` names the module (`scripts/redis-cell`);
//! - `redis-cluster/*`: the token bucket on a 3-primary cluster at
//!   concurrency 1, 16 and 64, over 10,000 keys and on one hot key
//!   (every decision admitted), beside one server and the cluster's
//!   ceiling on the same keys through the same routing (and through
//!   redis-rs's cluster connection).
#![allow(missing_docs)]

mod concurrently;
mod redis_cell;
mod redis_groups;
// Shared with the finer peers harnesses; this bench uses the limiters only.
#[allow(dead_code)]
mod peer_limiters;

use std::hint::black_box;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use limiter_core::{
    Algorithm, FailurePolicy, Limiter, LimiterExt, ManualClock, Policies, Policy, Rate,
};
use limiter_memory::MemoryLimiter;
use limiter_redis::{RedisBackend, RedisLimiter};

use concurrently::run_concurrently;
use peer_limiters::{
    generous, governor_ahash, governor_siphash, governor_state_information, limiter_memory,
};
use redis_groups::{redis, redis_cluster};

const KEYS: usize = 10_000;

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user:{i}")).collect()
}

/// The allowed path on Redis, whose sliding logs are capped at 10,000 per
/// key: no key of the bench comes near it at Redis speeds.
fn generous_for_redis(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, Rate::per_second(10_000)).unwrap()
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
                    limiter.try_acquire(key.as_bytes(), 1).unwrap();
                }
                let mut i = 0;
                group.bench_function(BenchmarkId::new(algorithm.name(), "memory"), |b| {
                    b.iter(|| {
                        i = (i + 1) % keys.len();
                        black_box(limiter.try_acquire(keys[i].as_bytes(), 1).unwrap())
                    })
                });
            }
            group.finish();
        }
    }
}

/// A sliding log's cost per request must not grow with its limit: a full
/// log of `L` entries at distinct ticks, decided on the denied path (a
/// binary search for `retry_after`) and on the allowed path in steady state
/// (each admission drops the entry leaving the window).
fn sliding_log_limit(c: &mut Criterion) {
    let mut group = c.benchmark_group("sliding-log-by-limit");
    group.throughput(Throughput::Elements(1));
    for limit in [10u64, 1_000, 100_000] {
        let step = Duration::from_micros(10);
        let window = step * u32::try_from(limit).unwrap();
        let policy = Policy::sliding_log(Rate::new(limit, window)).unwrap();

        let clock = ManualClock::new(1_000_000_000);
        let full = MemoryLimiter::builder(policy.clone())
            .clock(clock.clone())
            .build();
        for _ in 0..limit {
            clock.advance(step);
            assert!(full.try_acquire(b"k", 1).unwrap().allowed);
        }
        group.bench_function(BenchmarkId::new("denied", limit), |b| {
            b.iter(|| black_box(full.try_acquire(b"k", 1).unwrap()))
        });

        let steady = MemoryLimiter::builder(policy).clock(clock.clone()).build();
        for _ in 0..limit {
            clock.advance(step);
            steady.try_acquire(b"k", 1).unwrap();
        }
        group.bench_function(BenchmarkId::new("allowed", limit), |b| {
            b.iter(|| {
                clock.advance(step);
                let decision = steady.try_acquire(b"k", 1).unwrap();
                assert!(decision.allowed);
                black_box(decision)
            })
        });
    }
    group.finish();
}

/// A set of two policies against its parts decided one after the other on
/// two limiters (what a user without sets would write, minus the race), on
/// 10,000 keys: allowed (generous parts) and denied (the first part denies).
fn tiers(c: &mut Criterion) {
    let pairs = [
        (
            "token-bucket+fixed-window",
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
        ),
        (
            "sliding-log+sliding-log",
            Algorithm::SlidingLog,
            Algorithm::SlidingLog,
        ),
        (
            "sliding-counter+leaky-bucket",
            Algorithm::SlidingCounter,
            Algorithm::LeakyBucket,
        ),
    ];
    for (path, make) in [
        ("allowed", generous as fn(Algorithm) -> Policy),
        ("denied", strict),
    ] {
        let mut group = c.benchmark_group(format!("tiers/{path}/{KEYS}-keys"));
        group.throughput(Throughput::Elements(1));
        let keys = keys(KEYS);
        for (name, first, second) in pairs {
            let (first, second) = (make(first), make(second));
            let alone = [
                MemoryLimiter::new(first.clone()),
                MemoryLimiter::new(second.clone()),
            ];
            let set = MemoryLimiter::new(Policies::new([first, second]).unwrap());
            for key in &keys {
                for limiter in alone.iter().chain([&set]) {
                    limiter.try_acquire(key.as_bytes(), 1).unwrap();
                }
            }
            let mut i = 0;
            group.bench_function(BenchmarkId::new(name, "sum-of-parts"), |b| {
                b.iter(|| {
                    i = (i + 1) % keys.len();
                    black_box(alone[0].try_acquire(keys[i].as_bytes(), 1).unwrap());
                    black_box(alone[1].try_acquire(keys[i].as_bytes(), 1).unwrap())
                })
            });
            group.bench_function(BenchmarkId::new(name, "set"), |b| {
                b.iter(|| {
                    i = (i + 1) % keys.len();
                    black_box(set.try_acquire(keys[i].as_bytes(), 1).unwrap())
                })
            });
        }
        group.finish();
    }
}

/// Whether `answer` admitted, the whole answer made where a caller could
/// read every field of it (in memory, once): what the `peers` group does
/// with each limiter's answer, ours a `Result<Decision, _>`, governor's a
/// `Result<(), _>`.
#[inline(always)]
fn answered<T>(answer: T, allowed: impl FnOnce(T) -> bool) -> bool {
    black_box(&answer);
    allowed(answer)
}

/// One decision per iteration, single thread, round-robin over `keys`:
/// every limiter against governor on equal terms (same `String` keys, same
/// number of them, same hasher for the `ahash` row, a quanta TSC clock on
/// both sides), every request admitted. Each limiter is filled with every
/// key first, then dropped before the next is built.
fn peers(c: &mut Criterion) {
    for key_count in [1, KEYS, 1_000_000] {
        let mut group = c.benchmark_group(format!("peers/{key_count}-string-keys"));
        group.throughput(Throughput::Elements(1));
        let keys = keys(key_count);
        let next = |i: &mut usize| {
            *i += 1;
            if *i == key_count {
                *i = 0;
            }
            *i
        };
        for algorithm in Algorithm::ALL {
            let ours = limiter_memory(algorithm);
            for key in &keys {
                ours.try_acquire(key.as_bytes(), 1).unwrap();
            }
            assert_eq!(
                ours.len(),
                key_count,
                "every key held, as governor holds them"
            );
            let mut i = 0;
            group.bench_function(BenchmarkId::new("limiter-memory", algorithm.name()), |b| {
                b.iter(|| {
                    answered(ours.try_acquire((keys[next(&mut i)]).as_bytes(), 1), |d| {
                        d.unwrap().allowed
                    })
                })
            });
            assert_eq!(ours.len(), key_count, "no key evicted during the bench");
        }
        for algorithm in Algorithm::ALL {
            // The same decision for a caller that needs only `allowed`, as
            // governor's `check_key` answers.
            let ours = limiter_memory(algorithm);
            for key in &keys {
                ours.try_acquire(key.as_bytes(), 1).unwrap();
            }
            assert_eq!(
                ours.len(),
                key_count,
                "every key held, as governor holds them"
            );
            let mut i = 0;
            group.bench_function(
                BenchmarkId::new("limiter-memory-allowed-only", algorithm.name()),
                |b| {
                    b.iter(|| {
                        answered(
                            ours.try_acquire_allowed((keys[next(&mut i)]).as_bytes(), 1),
                            |a| a.unwrap(),
                        )
                    })
                },
            );
            assert_eq!(ours.len(), key_count, "no key evicted during the bench");
        }
        {
            let governor = governor_ahash();
            for key in &keys {
                governor.check_key(key).unwrap();
            }
            let mut i = 0;
            group.bench_function(BenchmarkId::new("governor-gcra", "ahash"), |b| {
                b.iter(|| answered(governor.check_key(&keys[next(&mut i)]), |r| r.is_ok()))
            });
        }
        {
            // The reference answering the remaining capacity too, as
            // `try_acquire` answers its numbers.
            let governor = governor_state_information();
            for key in &keys {
                governor.check_key(key).unwrap();
            }
            let mut i = 0;
            group.bench_function(
                BenchmarkId::new("governor-gcra-state-information", "ahash"),
                |b| {
                    b.iter(|| {
                        answered(
                            governor
                                .check_key(&keys[next(&mut i)])
                                .map(|snapshot| snapshot.remaining_burst_capacity()),
                            |r| r.is_ok(),
                        )
                    })
                },
            );
        }
        {
            let governor = governor_siphash();
            for key in &keys {
                governor.check_key(key).unwrap();
            }
            let mut i = 0;
            group.bench_function(BenchmarkId::new("governor-gcra", "siphash-default"), |b| {
                b.iter(|| answered(governor.check_key(&keys[next(&mut i)]), |r| r.is_ok()))
            });
        }
        group.finish();
    }
}

/// What `Arc<dyn Limiter>` costs over the sync call on the memory backend:
/// the same limiter, the same 10,000 keys, one decision per iteration.
fn dyn_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("dyn-path/token-bucket-10000-keys");
    group.throughput(Throughput::Elements(1));
    let keys = keys(KEYS);
    let memory = Arc::new(MemoryLimiter::new(generous(Algorithm::TokenBucket)));
    let dynamic: Arc<dyn Limiter> = memory.clone();
    let resilient: Arc<dyn Limiter> =
        Arc::new(Arc::clone(&memory).on_failure(FailurePolicy::FailOpen));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    let mut i = 0;
    group.bench_function("sync-try_acquire", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(memory.try_acquire(keys[i].as_bytes(), 1).unwrap().allowed)
        })
    });
    let mut i = 0;
    group.bench_function("dyn-acquire-await", |b| {
        b.to_async(&runtime).iter(|| {
            i = (i + 1) % keys.len();
            let (limiter, key) = (&dynamic, &keys[i]);
            async move { black_box(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed) }
        })
    });
    let mut i = 0;
    group.bench_function("dyn-acquire_now", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let decided = dynamic.acquire_now(keys[i].as_bytes(), 1).unwrap();
            black_box(decided.unwrap().allowed)
        })
    });
    let mut i = 0;
    group.bench_function("dyn-resilient-acquire_now", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let decided = resilient.acquire_now(keys[i].as_bytes(), 1).unwrap();
            black_box(decided.unwrap().allowed)
        })
    });
    let mut i = 0;
    group.bench_function("dyn-resilient-acquire-await", |b| {
        b.to_async(&runtime).iter(|| {
            i = (i + 1) % keys.len();
            let (limiter, key) = (&resilient, &keys[i]);
            async move { black_box(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed) }
        })
    });
    group.finish();
}

/// Runs `per_thread` decisions on each of `threads` threads at once and
/// returns the wall time: on one hot key, or on keys spread so that the
/// threads never share one.
fn run_threads(
    decide: &(dyn Fn(&String) + Sync),
    keys: &[String],
    threads: usize,
    per_thread: u64,
    hot_key: bool,
) -> Duration {
    let start = Instant::now();
    thread::scope(|scope| {
        for thread in 0..threads {
            scope.spawn(move || {
                let share = keys.len() / threads;
                for i in 0..per_thread as usize {
                    let key = if hot_key {
                        &keys[0]
                    } else {
                        &keys[thread * share + i % share]
                    };
                    decide(key);
                }
            });
        }
    });
    start.elapsed()
}

/// One and two threads at once, each deciding on its own half of the
/// 10,000 keys (`distinct-keys`) or all on one key (`one-hot-key`):
/// limiter-memory's token bucket against governor with the same hasher
/// (and, labelled, its default SipHash), every limiter filled first.
/// Throughput is decisions per second over all threads.
fn scaling(c: &mut Criterion) {
    let keys = keys(KEYS);
    for hot_key in [false, true] {
        let name = if hot_key {
            "one-hot-key"
        } else {
            "distinct-keys"
        };
        let mut group = c.benchmark_group(format!("peers/threads/{name}"));
        for threads in [1, 2] {
            group.throughput(Throughput::Elements(threads as u64));
            let ours = limiter_memory(Algorithm::TokenBucket);
            let governor = governor_ahash();
            let siphash = governor_siphash();
            for key in &keys {
                ours.try_acquire(key.as_bytes(), 1).unwrap();
                governor.check_key(key).unwrap();
                siphash.check_key(key).unwrap();
            }
            let decide = |key: &String| {
                answered(ours.try_acquire(key.as_bytes(), 1), |d| d.unwrap().allowed);
            };
            group.bench_function(
                BenchmarkId::new("limiter-memory-token-bucket", threads),
                |b| b.iter_custom(|iters| run_threads(&decide, &keys, threads, iters, hot_key)),
            );
            let decide = |key: &String| {
                answered(governor.check_key(key), |r| r.is_ok());
            };
            group.bench_function(BenchmarkId::new("governor-gcra-ahash", threads), |b| {
                b.iter_custom(|iters| run_threads(&decide, &keys, threads, iters, hot_key))
            });
            let decide = |key: &String| {
                answered(siphash.check_key(key), |r| r.is_ok());
            };
            group.bench_function(
                BenchmarkId::new("governor-gcra-siphash-default", threads),
                |b| b.iter_custom(|iters| run_threads(&decide, &keys, threads, iters, hot_key)),
            );
        }
        group.finish();
    }
}

criterion_group!(
    benches,
    algorithms,
    sliding_log_limit,
    peers,
    tiers,
    dyn_path,
    scaling,
    redis,
    redis_cluster
);

criterion_main!(benches);

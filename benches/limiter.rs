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

/// The original article's sliding-window script: a sorted set trimmed,
/// counted and added to, with the time passed in by the caller.
const CLASSIC_ZSET_SCRIPT: &str = r"
local key, now, window, limit = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
if redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window)
  return 1
end
return 0
";

/// One-unit acquires on `limiter` from `concurrency` tasks at once, each
/// on a spread of `keys` different for every task.
fn bench_acquires(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    runtime: &tokio::runtime::Runtime,
    concurrency: u64,
    limiter: &Arc<RedisLimiter>,
    keys: &Arc<Vec<String>>,
) {
    group.bench_function(id, |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (limiter, keys) = (Arc::clone(limiter), Arc::clone(keys));
            run_concurrently(concurrency, iters, move |i| {
                let (limiter, keys) = (Arc::clone(&limiter), Arc::clone(&keys));
                async move {
                    let key = &keys[(i.wrapping_mul(7919) % keys.len() as u64) as usize];
                    black_box(limiter.acquire(key.as_bytes(), 1).await.unwrap());
                }
            })
        })
    });
}

fn redis(c: &mut Criterion) {
    let (server, with_cell) = redis_cell::server();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let keys = Arc::new(keys(KEYS));
    let trivial = redis::Script::new("return 1");
    let classic = redis::Script::new(CLASSIC_ZSET_SCRIPT);
    // The ceiling: a plain redis-rs multiplexed connection shared by every
    // task, as a redis-rs user would hold one.
    let plain = runtime.block_on(async {
        redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    });
    let backend = runtime.block_on(async {
        RedisBackend::builder(server.url())
            // A slow moment (a profiler attached, a busy machine) must not
            // fail a run.
            .connection_timeout(Duration::from_secs(30))
            .command_timeout(Duration::from_secs(30))
            .build()
            .await
            .unwrap()
    });
    for concurrency in [1u64, 16, 64] {
        let mut group = c.benchmark_group(format!("redis/concurrency-{concurrency}"));
        group.throughput(Throughput::Elements(1));
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(4));

        // Over the limiters' 10,000 keys, in their order (the same keys).
        let (conn, script, ceiling_keys) = (plain.clone(), trivial.clone(), Arc::clone(&keys));
        group.bench_function(
            BenchmarkId::new("ceiling-evalsha-return-1", "redis-rs"),
            |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (conn, script, keys) =
                        (conn.clone(), script.clone(), Arc::clone(&ceiling_keys));
                    run_concurrently(concurrency, iters, move |i| {
                        let (mut conn, script) = (conn.clone(), script.clone());
                        let key = &keys[(i.wrapping_mul(7919) % keys.len() as u64) as usize];
                        let key = format!("{{{key}}}:ceiling");
                        async move {
                            let one: i64 = script.key(key).invoke_async(&mut conn).await.unwrap();
                            black_box(one);
                        }
                    })
                })
            },
        );

        let (conn, script, classic_keys) = (plain.clone(), classic.clone(), Arc::clone(&keys));
        group.bench_function(BenchmarkId::new("classic-zset-script", "redis-rs"), |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let (conn, script, keys) =
                    (conn.clone(), script.clone(), Arc::clone(&classic_keys));
                run_concurrently(concurrency, iters, move |i| {
                    let (mut conn, script, keys) =
                        (conn.clone(), script.clone(), Arc::clone(&keys));
                    async move {
                        let key = &keys[(i.wrapping_mul(7919) % keys.len() as u64) as usize];
                        let now = i; // caller time, one µs per request
                        let allowed: i64 = script
                            .key(format!("classic-{concurrency}:{key}"))
                            .arg(now)
                            .arg(10_000_000_000u64)
                            .arg(1_000_000_000u64)
                            .arg(format!("{now}-{i}"))
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                        black_box(allowed);
                    }
                })
            })
        });

        if with_cell {
            // The same keys, each a GCRA of 100,000 a second with a burst
            // of 10,000: every request admitted, as the limiters' below.
            let (conn, cell_keys) = (plain.clone(), Arc::clone(&keys));
            group.bench_function(
                BenchmarkId::new("redis-cell-cl-throttle", "redis-rs"),
                |b| {
                    b.to_async(&runtime).iter_custom(|iters| {
                        let (conn, keys) = (conn.clone(), Arc::clone(&cell_keys));
                        run_concurrently(concurrency, iters, move |i| {
                            let (mut conn, keys) = (conn.clone(), Arc::clone(&keys));
                            async move {
                                let key =
                                    &keys[(i.wrapping_mul(7919) % keys.len() as u64) as usize];
                                let key = format!("cell-{concurrency}:{key}");
                                let admitted =
                                    redis_cell::throttle(&mut conn, &key, 10_000, 100_000, 1).await;
                                black_box(admitted);
                            }
                        })
                    })
                },
            );
        }

        // Each algorithm alone, then a tiered set of two token buckets (one
        // script, one round trip: beside the single token bucket).
        let tiered = Policies::new([
            generous_for_redis(Algorithm::TokenBucket),
            Policy::token_bucket(Rate::per_minute(600_000)).unwrap(),
        ])
        .unwrap();
        // The sliding log's row above is 10,000 per second, kept in a
        // sorted set; a limit of up to 128 keeps it in one string
        // (limiter-redis, scripts/packed_log.lua), still generous here.
        let small_log = Policy::sliding_log(Rate::per_second(128)).unwrap();
        let runs = Algorithm::ALL
            .into_iter()
            .map(|a| (a.name(), Policies::from(generous_for_redis(a))))
            .chain([
                ("sliding-log-limit-128", Policies::from(small_log)),
                ("tiered-token-bucket-x2", tiered),
            ]);
        for (name, policies) in runs {
            let limiter = runtime.block_on(async {
                let limiter = RedisLimiter::builder(&backend, policies)
                    .key_prefix(format!("bench-{concurrency}"))
                    .build()
                    .await
                    .unwrap();
                Arc::new(limiter)
            });
            let id = BenchmarkId::new(name, "redis");
            bench_acquires(&mut group, id, &runtime, concurrency, &limiter, &keys);
        }
        group.finish();
    }
}

/// A Redis Cluster (3 primaries, 3 replicas) beside one server, in the same
/// run: the token bucket through `RedisBackend::cluster` and through one
/// server, and the cluster's own ceiling, `EVALSHA` of `return 1` on a key
/// of one slot through a plain redis-rs cluster connection and through this
/// crate's cluster routing (`RedisBackend::command`). (All six nodes
/// share this machine's cores: no horizontal scaling can show here.)
fn redis_cluster(c: &mut Criterion) {
    let cluster = limiter_test::redis_cluster::RedisCluster::start();
    let server = limiter_test::redis_server::RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let keys = Arc::new(keys(KEYS));
    let trivial = redis::Script::new("return 1");
    let plain = runtime.block_on(async {
        redis::cluster::ClusterClient::new(cluster.seed_urls())
            .unwrap()
            .get_async_connection()
            .await
            .unwrap()
    });
    let connect = |backend: limiter_redis::RedisBackendBuilder| {
        runtime
            .block_on(
                backend
                    .connection_timeout(Duration::from_secs(30))
                    .command_timeout(Duration::from_secs(30))
                    .build(),
            )
            .unwrap()
    };
    let token_bucket_on = |backend: &RedisBackend, policy: Policy| {
        let limiter = RedisLimiter::builder(backend, policy).key_prefix("bench-cluster");
        Arc::new(runtime.block_on(limiter.build()).unwrap())
    };
    let (cluster_backend, server_backend) = (
        connect(RedisBackend::cluster(cluster.seed_urls())),
        connect(RedisBackend::builder(server.url())),
    );
    let spread = generous_for_redis(Algorithm::TokenBucket);
    let on_cluster = token_bucket_on(&cluster_backend, spread.clone());
    let on_server = token_bucket_on(&server_backend, spread);
    // One hot key whose every decision is admitted (and so written and
    // replicated), in the slot of the ceiling's key: the user key `bench`
    // is the hash tag of its state key, as of `{bench}:ceiling`.
    let hot_on_cluster = token_bucket_on(
        &cluster_backend,
        Policy::token_bucket(Rate::per_second(1_000_000_000)).unwrap(),
    );
    let hot_key = Arc::new(vec!["bench".to_owned()]);
    // The same ceiling through this crate's own cluster routing
    // (`RedisBackend::command`), the client the limiter's row uses, its
    // script cached on every primary by an EVAL on each key's slot.
    let ceiling_key = |key: &str| format!("{{{key}}}:ceiling");
    for key in std::iter::once("bench").chain(keys.iter().map(String::as_str)) {
        let mut eval = redis::cmd("EVAL");
        eval.arg("return 1").arg(1).arg(ceiling_key(key));
        let _: i64 = runtime.block_on(cluster_backend.command(&eval)).unwrap();
    }
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg("return 1");
    let sha: String = runtime.block_on(cluster_backend.command(&load)).unwrap();
    let mut evalsha = redis::cmd("EVALSHA");
    evalsha.arg(&sha).arg(1).arg("{bench}:ceiling");
    let evalsha = Arc::new(evalsha);
    for concurrency in [1u64, 16, 64] {
        let mut group = c.benchmark_group(format!("redis-cluster/concurrency-{concurrency}"));
        group.throughput(Throughput::Elements(1));
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(4));
        let (conn, script) = (plain.clone(), trivial.clone());
        group.bench_function(
            BenchmarkId::new("ceiling-evalsha-return-1", "cluster"),
            |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (conn, script) = (conn.clone(), script.clone());
                    run_concurrently(concurrency, iters, move |_| {
                        let (mut conn, script) = (conn.clone(), script.clone());
                        async move {
                            let one: i64 = script
                                .key("{bench}:ceiling")
                                .invoke_async(&mut conn)
                                .await
                                .unwrap();
                            black_box(one);
                        }
                    })
                })
            },
        );
        group.bench_function(
            BenchmarkId::new("ceiling-evalsha-return-1", "cluster-limiter-routing"),
            |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (backend, cmd) = (cluster_backend.clone(), Arc::clone(&evalsha));
                    run_concurrently(concurrency, iters, move |_| {
                        let (backend, cmd) = (backend.clone(), Arc::clone(&cmd));
                        async move {
                            let one: i64 = backend.command(&cmd).await.unwrap();
                            black_box(one);
                        }
                    })
                })
            },
        );
        // The same ceiling over the token bucket's 10,000 keys: each call
        // routed to the primary of its key's slot, as the decisions are.
        group.bench_function(
            BenchmarkId::new(
                "ceiling-evalsha-return-1",
                "cluster-limiter-routing-10000-keys",
            ),
            |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (backend, sha, keys) =
                        (cluster_backend.clone(), sha.clone(), Arc::clone(&keys));
                    run_concurrently(concurrency, iters, move |i| {
                        let (backend, keys) = (backend.clone(), Arc::clone(&keys));
                        let key = &keys[(i.wrapping_mul(7919) % keys.len() as u64) as usize];
                        let mut cmd = redis::cmd("EVALSHA");
                        cmd.arg(&sha).arg(1).arg(ceiling_key(key));
                        async move {
                            let one: i64 = backend.command(&cmd).await.unwrap();
                            black_box(one);
                        }
                    })
                })
            },
        );
        for (backend, limiter, keys) in [
            ("cluster", &on_cluster, &keys),
            ("cluster-one-hot-key", &hot_on_cluster, &hot_key),
            ("redis", &on_server, &keys),
        ] {
            let id = BenchmarkId::new("token-bucket", backend);
            bench_acquires(&mut group, id, &runtime, concurrency, limiter, keys);
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

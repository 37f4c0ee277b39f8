//! The `redis/*` and `redis-cluster/*` groups of the `limiter` bench:
//! decisions per second through a shared `RedisBackend` beside what the
//! same server gives a plain redis-rs connection (see `limiter.rs`).

use super::*;

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

pub(super) fn redis(c: &mut Criterion) {
    let (server, with_cell) = redis_cell::server(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let keys = Arc::new(keys(KEYS));
    let trivial = redis::Script::new("return 1");
    let classic = redis::Script::new(CLASSIC_ZSET_SCRIPT);
    // The ceiling: a plain redis-rs multiplexed connection shared by every
    // task, as a redis-rs user would hold one.
    let plain = runtime.block_on(redis_cell::connect(&server.url()));
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
pub(super) fn redis_cluster(c: &mut Criterion) {
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

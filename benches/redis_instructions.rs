//! The Redis client's cost in instructions (docs/benchmarks.md, "The
//! client's share"): a fixed number of decisions from 64 tasks on one
//! thread, against a real `redis-server` (another process, so callgrind
//! counts the client alone), through the limiter or through a plain
//! redis-rs multiplexed connection calling `EVALSHA` of `return 1` (the
//! ceiling's client). Run it under callgrind for N and 2N decisions,
//! counting only the load (`--toggle-collect='redis_instructions::measured*'`),
//! and the difference over N is what one decision costs the client: its
//! share of the machine that the server does not see.
//!
//! `cargo bench -p limiter-benches --bench redis_instructions -- VARIANT DECISIONS`
//! (`VARIANT`: `ceiling` or an algorithm, e.g. `token-bucket`).
#![allow(missing_docs)]

mod concurrently;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use limiter_core::{Algorithm, Limiter, Policy, Rate};
use limiter_redis::{RedisBackend, RedisLimiter};

use concurrently::run_concurrently;

/// Tasks deciding at once, as in the benches' concurrency-64 group.
const TASKS: u64 = 64;
/// User keys the decisions are spread over.
const KEYS: u64 = 10_000;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    let usage = "usage: redis_instructions ceiling|ALGORITHM DECISIONS";
    let variant = args.first().expect(usage).clone();
    let decisions: u64 = args.get(1).expect(usage).parse().expect(usage);
    let server = limiter_test::redis_server::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("user:{i}")).collect());
    let decide: Decide = if variant == "ceiling" {
        let conn = runtime.block_on(async {
            redis::Client::open(server.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap()
        });
        let script = redis::Script::new("return 1");
        let keys = Arc::clone(&keys);
        // The limiter's keys, in its order (the same keys).
        Arc::new(move |i| {
            let (mut conn, script) = (conn.clone(), script.clone());
            let key = format!(
                "{{{}}}:ceiling",
                keys[(i.wrapping_mul(7919) % KEYS) as usize]
            );
            Box::pin(async move {
                let one: i64 = script.key(key).invoke_async(&mut conn).await.unwrap();
                assert_eq!(one, 1);
            })
        })
    } else {
        let algorithm: Algorithm = variant.parse().expect(usage);
        let policy = Policy::new(algorithm, Rate::new(1_000_000, Duration::from_secs(1))).unwrap();
        let limiter = runtime.block_on(async {
            let backend = RedisBackend::builder(server.url())
                // Callgrind slows the client fiftyfold: no timeout may fire.
                .command_timeout(Duration::from_secs(60))
                .build()
                .await
                .unwrap();
            Arc::new(
                RedisLimiter::builder(&backend, policy)
                    .build()
                    .await
                    .unwrap(),
            )
        });
        Arc::new(move |i| {
            let (limiter, keys) = (Arc::clone(&limiter), Arc::clone(&keys));
            Box::pin(async move {
                let key = &keys[(i.wrapping_mul(7919) % KEYS) as usize];
                assert!(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed);
            })
        })
    };
    // Connections made, scripts loaded, before counting starts.
    runtime.block_on(load(&decide, TASKS));
    measured(&runtime, load(&decide, decisions));
    println!("{variant}: {decisions} decisions");
}

type Decide = Arc<dyn Fn(u64) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// `decisions` decisions from [`TASKS`] tasks at once.
async fn load(decide: &Decide, decisions: u64) {
    let decide = Arc::clone(decide);
    run_concurrently(TASKS, decisions, move |i| decide(i)).await;
}

/// Runs `load` to its end: the only part callgrind counts.
#[inline(never)]
fn measured(runtime: &tokio::runtime::Runtime, load: impl Future<Output = ()>) {
    runtime.block_on(load)
}

//! Shared by the Redis tests: one `redis-server` per test binary, fresh key
//! prefixes, and [`RedisHarness`] for the conformance suite.
#![allow(dead_code, unreachable_pub)] // each test binary uses a part

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use limiter_core::{Decision, Error, Limiter, ManualClock, Policies, Policy};
use limiter_redis::{
    BackendError, BackendErrorKind, Engine, RedisBackend, RedisLimiter, RedisLimiterBuilder,
};
use limiter_test::redis_server::RedisServer;
use limiter_test::Harness;

/// The test binary's server, started on first use and stopped when the
/// process exits (see `RedisServer`).
pub fn server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// The test binary's server with limiter-redis-module loaded, started on
/// first use, for the tests that run both engines.
pub fn module_server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| RedisServer::start_with_module(&[]))
}

pub use limiter_test::redis_server::fresh_prefix;

/// A builder on the shared server under a fresh prefix, with timeouts
/// generous enough for a loaded machine.
pub fn builder(policies: impl Into<Policies>) -> RedisLimiterBuilder {
    builder_at(&server().url(), policies)
}

/// A builder on `url` under a fresh prefix, on a backend of its own that
/// connects on first use, with generous timeouts.
pub fn builder_at(url: &str, policies: impl Into<Policies>) -> RedisLimiterBuilder {
    RedisLimiter::builder(&lazy_backend(url), policies).key_prefix(fresh_prefix("t"))
}

/// A backend on `url` that connects on first use, with timeouts generous
/// enough for a loaded machine. (Each test builds its own: a backend's
/// connections run on the Tokio runtime that opened them, and every test
/// has its own runtime.)
pub fn lazy_backend(url: &str) -> RedisBackend {
    RedisBackend::builder(url)
        .connection_timeout(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(5))
        .build_lazy()
        .unwrap()
}

/// A connection to the shared server, for inspecting keys.
pub async fn connection() -> redis::aio::MultiplexedConnection {
    connection_at(&server().url()).await
}

/// A connection to the server at `url`, for inspecting keys.
pub async fn connection_at(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A key's remaining time to live in ms (`PTTL`: -1 without one, -2 if absent).
pub async fn pttl(key: impl redis::ToRedisArgs + Send + Sync) -> i64 {
    pttl_at(&server().url(), key).await
}

/// [`pttl`] on the server at `url`.
pub async fn pttl_at(url: &str, key: impl redis::ToRedisArgs + Send + Sync) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut connection_at(url).await)
        .await
        .unwrap()
}

/// Every key under `prefix`, by `SCAN`.
pub async fn keys_under(prefix: &str) -> Vec<String> {
    keys_under_at(&server().url(), prefix).await
}

/// [`keys_under`] on the server at `url`.
pub async fn keys_under_at(url: &str, prefix: &str) -> Vec<String> {
    let mut conn = connection_at(url).await;
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

/// The conformance suite's view of Redis: on the test binary's server with
/// limiter-redis-module loaded, under a fresh key prefix per call, with
/// time from the suite's clock, a limiter whose decisions alternate
/// between the two engines on the same keys ([`BothEngines`]).
#[derive(Debug, Default)]
pub struct RedisHarness;

#[async_trait]
impl Harness for RedisHarness {
    async fn limiter(&self, policy: Policy, clock: ManualClock) -> Arc<dyn Limiter> {
        self.set_limiter(policy.into(), clock).await
    }

    async fn set_limiter(&self, policies: Policies, clock: ManualClock) -> Arc<dyn Limiter> {
        let url = module_server().url();
        let prefix = fresh_prefix("t");
        let mut engines = Vec::new();
        for engine in [Engine::Lua, Engine::Module] {
            let limiter = builder_at(&url, policies.clone())
                .key_prefix(prefix.clone())
                .engine(engine)
                .clock(clock.clone())
                .build()
                .await
                .unwrap();
            engines.push(limiter);
        }
        Arc::new(BothEngines {
            engines: engines.try_into().unwrap(),
            next: AtomicUsize::new(0),
        })
    }
}

/// Two limiters of one policy set on the same keys, the Lua functions' and
/// limiter-redis-module's, taking each call in turn: every case of the
/// suite then runs on both engines, each reading the state the other
/// wrote.
#[derive(Debug)]
pub struct BothEngines {
    engines: [RedisLimiter; 2],
    next: AtomicUsize,
}

impl BothEngines {
    /// The engine whose turn it is.
    fn turn(&self) -> &RedisLimiter {
        &self.engines[self.next.fetch_add(1, Ordering::Relaxed) % 2]
    }
}

#[async_trait]
impl Limiter for BothEngines {
    fn policies(&self) -> &Policies {
        self.engines[0].policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.turn().acquire(key, cost).await
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.turn().peek(key, cost).await
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.turn().reset(key).await
    }
}

/// The kind of a backend error (panics on any other error).
pub fn backend_kind(error: &Error) -> BackendErrorKind {
    match error {
        Error::Backend(e) => e
            .downcast_ref::<BackendError>()
            .expect("backend errors are BackendError")
            .kind(),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

/// A Redis key made of text, as text (the tests' keys are text).
pub fn text(key: Vec<u8>) -> String {
    String::from_utf8(key).expect("a text key")
}

//! Building a limiter on the chosen backend, driven by a manual clock.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use limiter_core::{Error, ErrorChain, Limiter, ManualClock, Policies};
use limiter_memory::MemoryLimiter;
use limiter_redis::{RedisBackend, RedisLimiter};

use crate::cli::{BackendArgs, BackendKind, RedisEngine};
use crate::failure::Failure;

/// How long, in trace time, the memory backend keeps a key past its reset
/// before it may evict it. Eviction never changes a decision while time
/// moves forward; a trace whose clock steps back by less than this still
/// replays exactly (docs/spec.md rule 2.5), and memory stays bounded by the keys
/// active within the last hour of the trace.
pub(crate) const MEMORY_EVICTION_DELAY: Duration = Duration::from_secs(3600);

/// The least real time a Redis key outlives its last write (the Redis
/// limiter's `ttl_floor`; its own default is a minute). A replay's trace
/// time is not the server's: a key whose state the trace still needs
/// (within its `reset_after` in trace time) must not expire in real time
/// first, as it would between two touches more than a minute apart (a
/// dense trace replayed slower than it was recorded, or a second replay
/// under the same `--redis-prefix` that continues the first). An hour, as
/// the memory backend's [`MEMORY_EVICTION_DELAY`].
pub(crate) const REDIS_TTL_FLOOR: Duration = Duration::from_secs(3600);

/// How long connecting to Redis may take in all before the command gives
/// up (the Redis builder's own connection timeout, 1 s, bounds each try).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A limiter for `policy` (one policy or a tiered set) on the chosen backend that reads its time from
/// `clock`. On Redis its keys live under `--redis-prefix`, or else under a
/// fresh prefix, `limiter-<purpose>-<pid>-<nanos>`, so runs never see each
/// other's state unless asked to. A `lane` (one of several limiters of a
/// run, such as `compare`'s algorithms in each scenario) gets a key space
/// of its own under a given prefix, `<prefix>:<lane>`, so that no lane
/// sees another's state.
pub(crate) async fn connect(
    backend: &BackendArgs,
    policy: impl Into<Policies>,
    clock: ManualClock,
    purpose: &str,
    lane: Option<&str>,
) -> Result<Arc<dyn Limiter>, Failure> {
    let policy = policy.into();
    match backend.backend {
        BackendKind::Memory => Ok(Arc::new(memory(backend, policy, clock)?)),
        BackendKind::Redis | BackendKind::RedisCluster => Ok(Arc::new(
            redis_limiter(backend, policy, clock, purpose, lane).await?,
        )),
    }
}

/// [`connect`]'s limiter on Redis.
async fn redis_limiter(
    backend: &BackendArgs,
    policy: Policies,
    clock: ManualClock,
    purpose: &str,
    lane: Option<&str>,
) -> Result<RedisLimiter, Failure> {
    {
        {
            let redis = redis_backend(backend)?;
            let url = redis.url().to_owned();
            let prefix = match (&backend.redis_prefix, lane) {
                (Some(prefix), Some(lane)) => format!("{prefix}:{lane}"),
                (Some(prefix), None) => prefix.clone(),
                (None, _) => fresh_prefix(purpose),
            };
            let build = async {
                redis.connect().await?;
                RedisLimiter::builder(&redis, policy)
                    .key_prefix(prefix)
                    .clock(clock)
                    .ttl_floor(REDIS_TTL_FLOOR)
                    .engine(backend.redis_engine.engine())
                    .build()
                    .await
            };
            match tokio::time::timeout(CONNECT_TIMEOUT, build).await {
                Ok(Ok(limiter)) => Ok(limiter),
                Ok(Err(Error::InvalidPolicy(e))) => {
                    Err(Failure::usage(format!("invalid policy: {e}")))
                }
                // A bad --redis-url is the user's to fix, like a bad flag.
                Ok(Err(e @ Error::InvalidConfig(_))) => Err(Failure::usage(reason(&e))),
                // The Redis backend's messages name the server.
                Ok(Err(e)) => Err(Failure::runtime(reason(&e))),
                Err(_) => Err(Failure::runtime(format!(
                    "cannot connect to Redis at {url}: no answer within {}s",
                    CONNECT_TIMEOUT.as_secs()
                ))),
            }
        }
    }
}

/// The memory backend's limiter for `policy`, reading its time from `clock`.
fn memory(
    backend: &BackendArgs,
    policy: Policies,
    clock: ManualClock,
) -> Result<MemoryLimiter, Failure> {
    memory_takes_no_redis_flags(backend)?;
    Ok(MemoryLimiter::builder(policy)
        .clock(clock)
        .eviction_delay(MEMORY_EVICTION_DELAY)
        .build())
}

/// A limiter whose policies change while it serves, each key keeping what
/// it used (docs/spec.md section 9).
#[derive(Debug, Clone)]
pub(crate) enum ChangingLimiter {
    /// `MemoryLimiter::set_policies`.
    Memory(Arc<MemoryLimiter>),
    /// `RedisLimiter::set_policies`.
    Redis(Arc<RedisLimiter>),
}

impl ChangingLimiter {
    /// The limiter that decides.
    pub(crate) fn limiter(&self) -> Arc<dyn Limiter> {
        match self {
            Self::Memory(limiter) => Arc::clone(limiter) as Arc<dyn Limiter>,
            Self::Redis(limiter) => Arc::clone(limiter) as Arc<dyn Limiter>,
        }
    }

    /// Puts `policies` in force for every later request; on Redis, a
    /// policy its backend refuses (a sliding log above its maximum) is a
    /// usage error.
    pub(crate) fn set_policies(&self, policies: Policies) -> Result<(), Failure> {
        match self {
            Self::Memory(limiter) => {
                limiter.set_policies(policies);
                Ok(())
            }
            Self::Redis(limiter) => limiter
                .set_policies(policies)
                .map_err(|e| Failure::usage(reason(&e))),
        }
    }
}

/// As [`connect`], a limiter whose policies can change while it serves.
pub(crate) async fn connect_changing(
    backend: &BackendArgs,
    policy: Policies,
    clock: ManualClock,
    purpose: &str,
    lane: Option<&str>,
) -> Result<ChangingLimiter, Failure> {
    Ok(match backend.backend {
        BackendKind::Memory => ChangingLimiter::Memory(Arc::new(memory(backend, policy, clock)?)),
        BackendKind::Redis | BackendKind::RedisCluster => ChangingLimiter::Redis(Arc::new(
            redis_limiter(backend, policy, clock, purpose, lane).await?,
        )),
    })
}

/// A usage error for `--redis-url` or `--redis-prefix` beside the memory
/// backend, which would ignore them: a forgotten `--backend redis` must
/// not pass for a Redis run.
pub(crate) fn memory_takes_no_redis_flags(backend: &BackendArgs) -> Result<(), Failure> {
    if backend.names_redis_url()
        || backend.redis_prefix.is_some()
        || backend.redis_engine != RedisEngine::Lua
    {
        return Err(Failure::usage(
            "--redis-url, --redis-prefix and --redis-engine are for --backend redis or \
             redis-cluster; the memory backend (the default) takes none of them",
        ));
    }
    Ok(())
}

/// The backend `--backend` and `--redis-url` name, not connected yet: one
/// URL for a server, one or more seed nodes for a cluster.
pub(crate) fn redis_backend(backend: &BackendArgs) -> Result<RedisBackend, Failure> {
    let urls = backend.redis_urls();
    let builder = match (backend.backend, urls.as_slice()) {
        (BackendKind::RedisCluster, seeds) => RedisBackend::cluster(seeds.iter().cloned()),
        (_, [url]) => RedisBackend::builder(url.as_str()),
        (_, _) => {
            return Err(Failure::usage(
                "--redis-url names one server for --backend redis; repeat it only for \
                 --backend redis-cluster's seed nodes",
            ))
        }
    };
    builder.build_lazy().map_err(|e| Failure::usage(reason(&e)))
}

/// `limiter-<purpose>-<pid>-<nanos since the epoch>`.
pub(crate) fn fresh_prefix(purpose: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("limiter-{purpose}-{}-{nanos}", std::process::id())
}

/// How a backend failure is reported: which backend, on which request.
pub(crate) fn backend_failure(backend: &BackendArgs, what: &str, error: &Error) -> Failure {
    let backend = match backend.backend {
        BackendKind::Memory => "memory",
        BackendKind::Redis => "Redis",
        BackendKind::RedisCluster => "Redis Cluster",
    };
    Failure::runtime(format!(
        "{backend} backend failed on {what}: {}",
        reason(error)
    ))
}

/// An error's message and its causes, each once (`a: b: c`), without the
/// core's `backend error` and `invalid configuration` wrappers.
pub(crate) fn reason(error: &Error) -> String {
    match error {
        Error::Backend(failure) => ErrorChain(failure.get_ref()).to_string(),
        Error::InvalidConfig(inner) => ErrorChain(inner.as_ref()).to_string(),
        other => other.chain().to_string(),
    }
}

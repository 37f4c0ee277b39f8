//! Building a limiter on the chosen backend, driven by a manual clock.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use limiter_core::{Error, Limiter, ManualClock, Policy};
use limiter_memory::MemoryLimiter;
use limiter_redis::RedisLimiter;

use crate::cli::{BackendArgs, BackendKind};
use crate::failure::Failure;

/// How long, in trace time, the memory backend keeps a key past its reset
/// before it may evict it. Eviction never changes a decision while time
/// moves forward; a trace whose clock steps back by less than this still
/// replays exactly (docs/spec.md rule 2.5), and memory stays bounded by the keys
/// active within the last hour of the trace.
pub(crate) const MEMORY_EVICTION_DELAY: Duration = Duration::from_secs(3600);

/// How long connecting to Redis may take in all before the command gives
/// up (the Redis builder's own connection timeout, 1 s, bounds each try).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A limiter for `policy` on the chosen backend that reads its time from
/// `clock`. On Redis its keys live under a fresh prefix,
/// `limiter-<purpose>-<pid>-<nanos>`, so runs never see each other's state.
pub(crate) async fn connect(
    backend: &BackendArgs,
    policy: Policy,
    clock: ManualClock,
    purpose: &str,
) -> Result<Arc<dyn Limiter>, Failure> {
    match backend.backend {
        BackendKind::Memory => Ok(Arc::new(
            MemoryLimiter::builder(policy)
                .clock(clock)
                .eviction_delay(MEMORY_EVICTION_DELAY)
                .build(),
        )),
        BackendKind::Redis => {
            let url = &backend.redis_url;
            let build = RedisLimiter::builder(url.as_str(), policy)
                .key_prefix(fresh_prefix(purpose))
                .clock(clock)
                .build();
            match tokio::time::timeout(CONNECT_TIMEOUT, build).await {
                Ok(Ok(limiter)) => Ok(Arc::new(limiter)),
                Ok(Err(Error::InvalidPolicy(e))) => {
                    Err(Failure::usage(format!("invalid policy: {e}")))
                }
                // A bad --redis-url is the user's to fix, like a bad flag.
                Ok(Err(Error::InvalidConfig(e))) => Err(Failure::usage(e.to_string())),
                Ok(Err(e)) => {
                    let reason = reason(&e);
                    // The Redis backend's messages name the server already.
                    Err(Failure::runtime(if reason.contains("Redis") {
                        reason
                    } else {
                        format!("cannot connect to Redis at {url}: {reason}")
                    }))
                }
                Err(_) => Err(Failure::runtime(format!(
                    "cannot connect to Redis at {url}: no answer within {}s",
                    CONNECT_TIMEOUT.as_secs()
                ))),
            }
        }
    }
}

/// `limiter-<purpose>-<pid>-<nanos since the epoch>`.
fn fresh_prefix(purpose: &str) -> String {
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
    };
    Failure::runtime(format!(
        "{backend} backend failed on {what}: {}",
        reason(error)
    ))
}

/// An error's message without the core's `backend error: ` wrapper.
fn reason(error: &Error) -> String {
    match error {
        Error::Backend(inner) => inner.to_string(),
        other => other.to_string(),
    }
}

//! Building a limiter on the chosen backend, driven by a manual clock.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use limiter_core::{Error, Limiter, ManualClock, Policy};
use limiter_memory::MemoryLimiter;

use crate::cli::{BackendArgs, BackendKind};
use crate::failure::Failure;

/// How long, in trace time, the memory backend keeps a key past its reset
/// before it may evict it. Eviction never changes a decision while time
/// moves forward; a trace whose clock steps back by less than this still
/// replays exactly (SPEC rule 5), and memory stays bounded by the keys
/// active within the last hour of the trace.
pub(crate) const MEMORY_EVICTION_DELAY: Duration = Duration::from_secs(3600);

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
            let _ = fresh_prefix(purpose);
            Err(Failure::runtime(format!(
                "cannot connect to Redis at {}: the Redis backend is not wired in yet",
                backend.redis_url
            )))
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

/// How a backend failure is reported: which request, on which backend.
pub(crate) fn backend_failure(backend: &BackendArgs, what: &str, error: &Error) -> Failure {
    let at = match backend.backend {
        BackendKind::Memory => "memory backend".to_owned(),
        BackendKind::Redis => format!("Redis at {}", backend.redis_url),
    };
    Failure::runtime(format!("{at} failed on {what}: {error}"))
}

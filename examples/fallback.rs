//! A failure policy with a fallback: a Redis limiter for the fleet, and,
//! while Redis cannot be reached, this instance's share of the limit in
//! memory. Every decision says which decided it (`decision.source`).
//!
//! Here Redis is an address where nothing listens, as during an outage, so
//! the fallback answers; with `REDIS_URL` set to a live server, Redis does.
//!
//! ```sh
//! cargo run -p limiter-examples --example fallback
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p limiter-examples --example fallback
//! ```

use std::time::Duration;

use limiter_core::{DecisionSource, FailurePolicy, Limiter, LimiterExt, Policy, Rate};
use limiter_memory::MemoryLimiter;
use limiter_redis::{RedisBackend, RedisLimiter};

/// The fleet's limit, and the share of it one of its ten instances
/// enforces alone while Redis is down.
const LIMIT: u64 = 100;
const INSTANCES: u64 = 10;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let live = std::env::var("REDIS_URL").ok();
    // Port 1 on loopback: nothing listens, the connection is refused.
    let url = live
        .clone()
        .unwrap_or_else(|| "redis://127.0.0.1:1".to_owned());
    // `build_lazy`: the service starts even while Redis is down.
    let backend = RedisBackend::builder(&url)
        .connection_timeout(Duration::from_millis(200))
        .build_lazy()?;
    let fleet = Policy::fixed_window(Rate::per_minute(LIMIT))?;
    // An outage does not fail the build: the library loads on the next connection.
    let redis = RedisLimiter::builder(&backend, fleet).build().await?;
    let share = MemoryLimiter::new(Policy::fixed_window(Rate::per_minute(LIMIT / INSTANCES))?);
    let limiter = redis.on_failure(FailurePolicy::fallback(share));

    let mut admitted = 0;
    for _ in 0..15 {
        let decision = limiter.acquire(b"tenant:7", 1).await?;
        admitted += u64::from(decision.allowed);
        let expected = match live {
            Some(_) => DecisionSource::Backend,
            None => DecisionSource::Fallback,
        };
        assert_eq!(decision.source, expected, "{decision:?}");
    }
    println!(
        "Redis at {url}: {}; {admitted} of 15 admitted",
        match live {
            Some(_) => "decided by Redis",
            None => "unreachable, decided by this instance's share",
        }
    );
    if live.is_none() {
        assert_eq!(admitted, LIMIT / INSTANCES, "the share: 10 a minute");
    }
    Ok(())
}

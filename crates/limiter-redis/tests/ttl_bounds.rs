//! A key's TTL at the numeric bounds (docs/spec.md section 5): a bucket
//! whose refill takes longer than Redis takes an expiry gets a TTL of 2^53
//! µs (285 years) at most, so its requests are decided as on memory, with
//! a caller clock and with Redis `TIME`, and one of them fails no other
//! request of its call.

mod common;

use std::sync::Arc;
use std::time::Duration;

use limiter_core::{Limiter, ManualClock, Policy, Rate, MAX_TIME_US};
use limiter_memory::MemoryLimiter;

/// One token a day, a trillion of capacity: from empty to full takes
/// about 2.7 billion years, past any expiry Redis takes.
fn huge_bucket() -> Policy {
    Policy::token_bucket(Rate::new(1, Duration::from_secs(86_400)))
        .unwrap()
        .with_capacity(1_000_000_000_000)
        .unwrap()
}

const T0: u64 = 1_750_000_000_000_000;

#[tokio::test]
async fn a_huge_buckets_key_on_redis_decides_as_on_memory_with_a_caller_clock() {
    let clock = ManualClock::new(T0);
    let redis = common::builder(huge_bucket())
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let memory = MemoryLimiter::builder(huge_bucket()).clock(clock).build();
    for cost in [1_000_000_000_000, 1] {
        let expected = memory.try_acquire(b"k", cost).unwrap();
        assert_eq!(redis.acquire(b"k", cost).await.unwrap(), expected, "{cost}");
    }
    let ttl_ms = common::pttl(redis.redis_key(b"k")).await;
    let most = i64::try_from(MAX_TIME_US / 1_000).unwrap();
    assert!((most - 60_000..=most).contains(&ttl_ms), "{ttl_ms}");
}

#[tokio::test]
async fn a_huge_buckets_key_on_redis_is_decided_with_redis_time() {
    let redis = common::builder(huge_bucket()).build().await.unwrap();
    let decision = redis.acquire(b"k", 100_000_000_000).await.unwrap();
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 900_000_000_000);
    assert!(common::pttl(redis.redis_key(b"k")).await > 0);
}

/// Four requests at once, the last two in one call: the huge one fails
/// neither the other nor itself.
#[tokio::test(flavor = "current_thread")]
async fn a_huge_buckets_request_on_redis_fails_no_other_request_of_its_call() {
    let clock = ManualClock::new(T0);
    let redis = Arc::new(
        common::builder(huge_bucket())
            .clock(clock)
            .build()
            .await
            .unwrap(),
    );
    let plan: [(&[u8], u64); 4] = [
        (b"warm", 1),
        (b"warm", 1),
        (b"other", 1),
        (b"huge", 1_000_000_000_000),
    ];
    let calls = plan.iter().map(|&(key, cost)| {
        let redis = Arc::clone(&redis);
        async move { redis.acquire(key, cost).await }
    });
    let results = futures_util::future::join_all(calls).await;
    for (result, (key, _)) in results.iter().zip(plan) {
        let decision = result.as_ref().unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert!(decision.allowed, "{key:?}");
    }
    assert_eq!(
        redis.peek(b"other", 1).await.unwrap().remaining,
        1_000_000_000_000 - 2
    );
}

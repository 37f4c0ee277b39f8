//! A limiter's state is named by its prefix, never by its policies: two
//! policies, or a tiered set and one of its policies alone, on one user key
//! under two prefixes are independent on Redis exactly as two memory
//! limiters are, while the same prefix on two backends (two app instances)
//! shares one state (under other policies too: policy_change.rs).

mod common;

use std::time::Duration;

use limiter_core::{Limiter, ManualClock, Policies, Policy, Rate};
use limiter_memory::MemoryLimiter;
use limiter_redis::RedisLimiter;

/// Admitted units of `requests` one-unit acquires on `key`.
async fn admitted(limiter: &dyn Limiter, key: &str, requests: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..requests {
        if limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed {
            admitted += 1;
        }
    }
    admitted
}

#[tokio::test]
async fn two_policies_on_one_user_key_under_two_prefixes_are_independent_as_on_memory() {
    let short = Policy::sliding_log(Rate::new(5, Duration::from_secs(10))).unwrap();
    let long = Policy::sliding_log(Rate::per_minute(100)).unwrap();
    let backend = common::lazy_backend(&common::server().url());
    let clock = ManualClock::new(1_000_000);
    let on_redis = |policy: &Policy| {
        RedisLimiter::builder(&backend, policy.clone())
            .key_prefix(common::fresh_prefix("policies"))
            .clock(clock.clone())
            .build()
    };
    let (redis_short, redis_long) = (
        on_redis(&short).await.unwrap(),
        on_redis(&long).await.unwrap(),
    );
    assert_ne!(
        redis_short.redis_key(b"user"),
        redis_long.redis_key(b"user")
    );
    let memory_short = MemoryLimiter::builder(short).clock(clock.clone()).build();
    let memory_long = MemoryLimiter::builder(long).clock(clock.clone()).build();
    let redis = (
        admitted(&redis_short, "user", 150).await,
        admitted(&redis_long, "user", 300).await,
    );
    let memory = (
        admitted(&memory_short, "user", 150).await,
        admitted(&memory_long, "user", 300).await,
    );
    assert_eq!(redis, (5, 100));
    assert_eq!(redis, memory);
}

#[tokio::test]
async fn a_set_and_one_of_its_policies_alone_under_two_prefixes_are_independent_as_on_memory() {
    let alone: Policy = "fixed-window:5/10s".parse().unwrap();
    let set: Policies = "fixed-window:5/10s;sliding-log:100/1m".parse().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut redis = Vec::new();
    for policies in [Policies::from(alone.clone()), set.clone()] {
        // One backend each, as two processes (or two parts of one) would have.
        let backend = common::lazy_backend(&common::server().url());
        let limiter = RedisLimiter::builder(&backend, policies)
            .key_prefix(common::fresh_prefix("sets"))
            .clock(clock.clone())
            .build()
            .await
            .unwrap();
        redis.push(limiter);
    }
    assert_ne!(redis[0].redis_key(b"user"), redis[1].redis_key(b"user"));
    let memory_alone = MemoryLimiter::builder(alone).clock(clock.clone()).build();
    let memory_set = MemoryLimiter::builder(set).clock(clock.clone()).build();
    let on_redis = (
        admitted(&redis[0], "user", 5).await,
        admitted(&redis[1], "user", 5).await,
    );
    let on_memory = (
        admitted(&memory_alone, "user", 5).await,
        admitted(&memory_set, "user", 5).await,
    );
    assert_eq!(on_redis, (5, 5));
    assert_eq!(on_redis, on_memory);
}

#[tokio::test]
async fn the_same_policy_on_two_backends_shares_state() {
    let policy = Policy::token_bucket(Rate::per_minute(10)).unwrap();
    let prefix = common::fresh_prefix("shared");
    let clock = ManualClock::new(1_000_000);
    let mut instances = Vec::new();
    for _ in 0..2 {
        // One backend each, as two processes would have.
        let backend = common::lazy_backend(&common::server().url());
        let limiter = RedisLimiter::builder(&backend, policy.clone())
            .key_prefix(prefix.clone())
            .clock(clock.clone())
            .build()
            .await
            .unwrap();
        instances.push(limiter);
    }
    assert_eq!(instances[0].redis_key(b"k"), instances[1].redis_key(b"k"));
    let first = admitted(&instances[0], "k", 7).await;
    let second = admitted(&instances[1], "k", 7).await;
    assert_eq!((first, second), (7, 3), "one bucket of 10 for both");
}

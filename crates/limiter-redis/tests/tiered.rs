//! Tiered sets on Redis (docs/spec.md section 7): one function call decides every
//! part in one round trip, each part's state is its own key under the user
//! key's one hash tag with a TTL covering that part's reset, and a denial
//! writes nothing to any part. (The decisions themselves are the
//! conformance suite's and the differential test's.)

mod common;

use limiter_core::{Limiter, ManualClock, Policies};
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_server::RedisServer;

fn article() -> Policies {
    "sliding-log:5/1s;sliding-log:100/1m".parse().unwrap()
}

/// `GET` or, for a sorted set, every member with its score: a key's whole
/// content, to compare before and after.
async fn content(key: &str) -> Vec<Vec<u8>> {
    let mut conn = common::connection().await;
    let kind: String = redis::cmd("TYPE")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    match kind.as_str() {
        "zset" => redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .unwrap(),
        "string" => vec![redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap()],
        other => panic!("{key} is a {other}"),
    }
}

#[tokio::test]
async fn every_part_has_its_own_key_under_one_hash_tag_with_its_own_ttl() {
    // Redis TIME (no caller clock): each TTL is its part's reset_after.
    let limiter = common::builder(article()).build().await.unwrap();
    let decision = limiter.acquire(b"user:7", 1).await.unwrap();
    assert!(decision.allowed);
    let keys = limiter
        .redis_keys(b"user:7")
        .into_iter()
        .map(common::text)
        .collect::<Vec<_>>();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "one key per part");
    for key in &keys {
        assert!(key.contains("{user:7}"), "{key}: one hash tag, one slot");
    }
    // At least its reset, at most twice it (a TTL is granted with a margin
    // of max(reset, 1 s): scripts/prelude.lua, `save`), a ms of rounding.
    let (second, minute) = (common::pttl(&keys[0]).await, common::pttl(&keys[1]).await);
    assert!(
        (900..=2_002).contains(&second),
        "the 1 s part's PTTL {second}"
    );
    assert!(
        (59_000..=120_002).contains(&minute),
        "the 1 min part's PTTL {minute}"
    );
    limiter.reset(b"user:7").await.unwrap();
    for key in &keys {
        assert_eq!(common::pttl(key).await, -2, "reset deletes every part");
    }
}

#[tokio::test]
async fn a_denial_writes_nothing_to_any_part() {
    let policies: Policies = "fixed-window:1/1m;token-bucket:10/1s;sliding-log:3/1h"
        .parse()
        .unwrap();
    let clock = ManualClock::new(1_000_000);
    let limiter = common::builder(policies)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    let keys = limiter
        .redis_keys(b"k")
        .into_iter()
        .map(common::text)
        .collect::<Vec<_>>();
    let mut before = Vec::new();
    for key in &keys {
        before.push((content(key).await, common::pttl(key).await));
    }
    clock.advance(std::time::Duration::from_millis(500));
    let denied = limiter.acquire(b"k", 1).await.unwrap();
    assert!(!denied.allowed, "the fixed window's one is spent");
    assert_eq!(denied.bound_by, 0, "the fixed window denied");
    assert!(denied.parts()[1].allowed && denied.parts()[2].allowed);
    for (key, (content_before, ttl_before)) in keys.iter().zip(before) {
        assert_eq!(content(key).await, content_before, "{key} changed");
        let ttl = common::pttl(key).await;
        assert!(
            ttl <= ttl_before,
            "{key}'s TTL was set again: {ttl_before} -> {ttl}"
        );
    }
}

#[tokio::test]
async fn a_set_is_one_round_trip() {
    // A server of its own, so that only this limiter's calls are counted.
    let server = RedisServer::start();
    let backend = RedisBackend::builder(server.url()).build().await.unwrap();
    let limiter = RedisLimiter::builder(&backend, article())
        .build()
        .await
        .unwrap();
    let calls = || {
        let stats = server.query("INFO commandstats");
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_fcall:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    let before = calls();
    for _ in 0..10 {
        limiter.acquire(b"k", 1).await.unwrap();
        limiter.peek(b"k", 1).await.unwrap();
    }
    assert_eq!(calls() - before, 20, "one FCALL per decision");
}

//! With Redis `TIME` (no caller clock): concurrent acquires on one key admit
//! exactly the quota, and every key written carries a TTL.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::backend::{encode_policy_record, policy_record_tag};
use limiter_core::{Algorithm, Decision, Limiter, ManualClock, Policy, Rate};
use limiter_redis::RedisLimiter;

/// Fires `requests` concurrent acquires of one unit on one key.
async fn burst(limiter: RedisLimiter, requests: usize) -> Vec<Decision> {
    let limiter = Arc::new(limiter);
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.acquire(b"hot-key", 1).await.unwrap() })
        })
        .collect();
    let mut decisions = Vec::with_capacity(requests);
    for task in tasks {
        decisions.push(task.await.unwrap());
    }
    decisions
}

fn admitted(decisions: &[Decision]) -> usize {
    decisions.iter().filter(|d| d.allowed).count()
}

/// The article's load test: 500 concurrent requests against 100 per 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_concurrent_acquires_admit_exactly_one_hundred() {
    let policy = Policy::sliding_log(Rate::new(100, Duration::from_secs(10))).unwrap();
    let limiter = common::builder(policy).build().await.unwrap();
    let decisions = burst(limiter, 500).await;
    assert_eq!(admitted(&decisions), 100);
    for denied in decisions.iter().filter(|d| !d.allowed) {
        assert_eq!(denied.remaining, 0);
        assert!(denied.retry_after > Duration::ZERO);
        assert!(denied.retry_after <= Duration::from_secs(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_acquires_admit_exactly_five() {
    let policy = Policy::sliding_log(Rate::new(5, Duration::from_secs(10))).unwrap();
    let limiter = common::builder(policy).build().await.unwrap();
    assert_eq!(admitted(&burst(limiter, 20).await), 5);
}

/// Every algorithm admits exactly its quota from a burst when the window is
/// long enough that nothing refills meanwhile (a day: one unit per 864 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_algorithm_admits_exactly_its_quota_from_a_burst() {
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::per_day(100)).unwrap();
        let limiter = common::builder(policy).build().await.unwrap();
        let decisions = burst(limiter, 300).await;
        let windows = |d: &Decision| d.time_us / 86_400_000_000;
        let first = decisions.iter().map(windows).min().unwrap();
        let last = decisions.iter().map(windows).max().unwrap();
        let admitted = admitted(&decisions);
        match algorithm {
            // Window-based algorithms see a fresh quota past midnight UTC:
            // exact only if the burst did not straddle it.
            Algorithm::FixedWindow | Algorithm::SlidingCounter if first != last => {
                assert!((100..=200).contains(&admitted), "{algorithm}: {admitted}")
            }
            _ => assert_eq!(admitted, 100, "{algorithm}"),
        }
    }
}

/// With Redis time, after every decision its key lives at least the
/// decision's `reset_after` (docs/spec.md rule 2.5: never dropped before its
/// reset), and at most a bounded margin longer: a write sets the TTL only
/// when the one the key has ends too soon, and then grants its reset plus
/// max(reset, 1 s) (scripts/prelude.lua, `save`). Three per 30 s: the
/// buckets' reset grows with each admission (a TTL set again), the windows'
/// holds or shrinks (a TTL kept); denials write nothing.
#[tokio::test]
async fn every_key_written_with_redis_time_outlives_its_reset_after() {
    let window = Duration::from_secs(30);
    // Every algorithm at 3 per 30 s (a sliding log of 3 is one string),
    // and a sliding log of 200, a sorted set (state.rs, PACKED_LOG_MAX).
    let policies = Algorithm::ALL
        .into_iter()
        .map(|algorithm| Policy::new(algorithm, Rate::new(3, window)).unwrap())
        .chain([Policy::sliding_log(Rate::new(200, window)).unwrap()]);
    for policy in policies {
        let algorithm = policy.to_string();
        let limiter = common::builder(policy).build().await.unwrap();
        for i in 0..12 {
            let key = format!("user:{}", i % 2);
            let started = Instant::now();
            let decision = limiter.acquire(key.as_bytes(), 1).await.unwrap();
            // The record's first: read later, it could only have run down.
            let record_ttl = common::pttl(&limiter.redis_record_key(key.as_bytes())).await;
            let ttl = common::pttl(&limiter.redis_keys(key.as_bytes())[0]).await;
            let elapsed = started.elapsed().as_millis() as i64;
            assert!(
                record_ttl >= ttl,
                "{algorithm}: decision {i} on {key}: the record's PTTL {record_ttl} ms below \
                 the state's {ttl} ms"
            );
            let reset = decision.reset_after.as_millis() as i64;
            assert!(
                ttl >= reset - elapsed,
                "{algorithm}: decision {i} on {key}: PTTL {ttl} ms below its reset {reset} ms"
            );
            // The sliding counter's reset reaches two windows; a TTL
            // granted is at most twice a reset, plus a millisecond each.
            let most = 2 * (2 * window.as_millis() as i64 + 1);
            assert!(ttl <= most, "{algorithm}: {key} has PTTL {ttl}");
        }
        limiter.peek(b"peeked", 1).await.unwrap();
        let keys = common::keys_under(limiter.key_prefix()).await;
        // Each user key's state and record.
        assert_eq!(keys.len(), 4, "{algorithm}: peeks write nothing: {keys:?}");
    }
}

/// A state without its TTL's deadline (the fields and the tag, 24 bytes,
/// as a take-over writes it) is read as it is, and the write after it
/// sets a TTL.
#[tokio::test]
async fn a_state_without_a_deadline_is_read_and_given_a_ttl() {
    let policy = Policy::token_bucket(Rate::new(10, Duration::from_secs(10))).unwrap();
    let tag = policy_record_tag(&encode_policy_record(std::slice::from_ref(&policy)));
    let limiter = common::builder(policy).build().await.unwrap();
    let key = &limiter
        .redis_keys(b"user:1")
        .into_iter()
        .map(common::text)
        .collect::<Vec<_>>()[0];
    // Two tokens left (scaled by the window, 10,000,000 ticks of 1 µs),
    // last admission now: the next acquire leaves one.
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as f64;
    let mut state = (2.0f64 * 10_000_000.0).to_le_bytes().to_vec();
    state.extend_from_slice(&now_us.to_le_bytes());
    state.extend_from_slice(&tag);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(state)
        .query_async(&mut common::connection().await)
        .await
        .unwrap();
    let decision = limiter.acquire(b"user:1", 1).await.unwrap();
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 1, "read from the old state");
    let ttl = common::pttl(key).await;
    assert!(
        ttl >= decision.reset_after.as_millis() as i64 - 100,
        "PTTL {ttl}"
    );
}

/// With a caller clock, keys live at least the TTL floor, whatever the
/// trace's times say (even far in the past or future).
#[tokio::test]
async fn every_key_written_with_caller_time_has_at_least_the_floor() {
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::new(2, Duration::from_millis(5))).unwrap();
        let clock = ManualClock::new(1_000);
        let limiter = common::builder(policy)
            .clock(clock.clone())
            .ttl_floor(Duration::from_secs(90))
            .build()
            .await
            .unwrap();
        for i in 0..12u64 {
            clock.set(1_000 + i * 700);
            limiter
                .acquire(format!("k{}", i % 3).as_bytes(), 1)
                .await
                .unwrap();
        }
        let keys = common::keys_under(limiter.key_prefix()).await;
        // Each user key's state and record.
        assert_eq!(keys.len(), 6, "{algorithm}: {keys:?}");
        for key in keys {
            let ttl = common::pttl(&key).await;
            assert!(
                ttl > 60_000 && ttl <= 90_000,
                "{algorithm}: {key} has PTTL {ttl}"
            );
        }
    }
}

/// Keys are laid out as documented: `{prefix}:{user key}:{position}`, and
/// the record beside them at `{prefix}:{user key}:p`.
#[tokio::test]
async fn keys_are_prefixed_and_hash_tagged_by_user_key() {
    let policy = Policy::sliding_log(Rate::per_second(5)).unwrap();
    let limiter = common::builder(policy).build().await.unwrap();
    limiter.acquire(b"user:42", 1).await.unwrap();
    let prefix = limiter.key_prefix().to_owned();
    let mut keys = common::keys_under(&prefix).await;
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("{prefix}:{{user:42}}:0"),
            format!("{prefix}:{{user:42}}:p")
        ]
    );
    assert_eq!(common::text(limiter.redis_key(b"user:42")), keys[0]);
    assert_eq!(common::text(limiter.redis_record_key(b"user:42")), keys[1]);
    limiter.reset(b"user:42").await.unwrap();
    assert!(
        common::keys_under(&prefix).await.is_empty(),
        "reset deletes the state and the record"
    );
}

/// A server that saves and reloads its data (`DEBUG RELOAD`: an RDB
/// written and read back, as a restart with persistence does) keeps every
/// state and its TTL: the TTL is an absolute time in Redis and the state's
/// deadline (scripts/prelude.lua, `save`) an absolute server time, so a
/// write after the reload still keeps or sets a TTL that outlives its
/// reset, and the count goes on where it was (nothing admitted again).
#[tokio::test]
async fn a_reloaded_server_keeps_every_state_and_its_ttl() {
    use limiter_test::redis_server::RedisServer;

    let server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::new(3, Duration::from_secs(30))).unwrap();
        let limiter = common::builder_at(&server.url(), policy)
            .build()
            .await
            .unwrap();
        let key = limiter
            .redis_keys(b"user:1")
            .into_iter()
            .map(common::text)
            .collect::<Vec<_>>()[0]
            .clone();
        let pttl = || server.query(&format!("PTTL {key}"));
        for _ in 0..2 {
            assert!(limiter.acquire(b"user:1", 1).await.unwrap().allowed);
        }
        let before: i64 = pttl().trim_start_matches(':').parse().unwrap();
        assert_eq!(server.command("DEBUG RELOAD"), "+OK", "{algorithm}");
        let after: i64 = pttl().trim_start_matches(':').parse().unwrap();
        assert!(
            after > 0 && after <= before,
            "{algorithm}: PTTL {before} ms before the reload, {after} after"
        );
        let third = limiter.acquire(b"user:1", 1).await.unwrap();
        assert!(third.allowed, "{algorithm}");
        assert_eq!(third.remaining, 0, "{algorithm}: the count went on");
        let ttl: i64 = pttl().trim_start_matches(':').parse().unwrap();
        assert!(
            ttl >= third.reset_after.as_millis() as i64 - 100,
            "{algorithm}: PTTL {ttl} ms below its reset {:?}",
            third.reset_after
        );
        let fourth = limiter.acquire(b"user:1", 1).await.unwrap();
        assert!(!fourth.allowed, "{algorithm}: nothing admitted again");
    }
}

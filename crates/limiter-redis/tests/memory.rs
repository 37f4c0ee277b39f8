//! Memory per key, measured with `MEMORY USAGE` on the real server (the
//! figures in docs/backends.md come from this test's output).

mod common;

use std::time::Duration;

use limiter_core::{Algorithm, Limiter, ManualClock, Policy, Rate};

async fn memory_usage(key: &str) -> u64 {
    let mut conn = common::connection().await;
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A key after `admissions` admissions one millisecond apart, at a
/// realistic time (16-digit µs), so every stored number has its real width.
async fn key_after(algorithm: Algorithm, limit: u64, admissions: u64) -> (String, u64) {
    let policy = Policy::new(algorithm, Rate::new(limit, Duration::from_secs(3600))).unwrap();
    let clock = ManualClock::new(1_750_000_000_123_456);
    let limiter = common::builder(policy)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    for _ in 0..admissions {
        assert!(limiter.acquire(b"user:1234567", 1).await.unwrap().allowed);
        clock.advance(Duration::from_millis(1));
    }
    let key = common::text(limiter.redis_key(b"user:1234567"));
    let bytes = memory_usage(&key).await;
    println!("{algorithm}: {admissions} admissions: {key} uses {bytes} bytes");
    // Beside it, the record of its policy (docs/backends.md, "Key layout").
    let record = common::text(limiter.redis_record_key(b"user:1234567"));
    let record_bytes = memory_usage(&record).await;
    println!("{algorithm}: its record {record} uses {record_bytes} bytes");
    assert!(record_bytes < 200, "{record}: {record_bytes} bytes");
    (key, bytes)
}

#[tokio::test]
async fn state_keys_stay_small() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingCounter,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ] {
        // A short string (two or three numbers): well under 200 bytes.
        let (_, bytes) = key_after(algorithm, 1_000, 5).await;
        assert!(bytes < 200, "{algorithm}: {bytes} bytes");
    }
    // A limit up to 128 keeps its log in one string: 14 bytes per record.
    let (_, one) = key_after(Algorithm::SlidingLog, 100, 1).await;
    let (_, hundred) = key_after(Algorithm::SlidingLog, 100, 100).await;
    assert!(one < 200, "{one}");
    let packed = (hundred - one) / 99;
    println!("sliding-log of 100: {packed} bytes per record");
    assert!((14..=20).contains(&packed), "{packed} bytes per record");
    // A larger limit, a sorted set: one entry per admission in the window,
    // compact (listpack) up to Redis's zset-max-listpack-entries (128 by
    // default), then a skiplist.
    let (_, one) = key_after(Algorithm::SlidingLog, 10_000, 1).await;
    let (_, hundred) = key_after(Algorithm::SlidingLog, 10_000, 100).await;
    let (_, thousand) = key_after(Algorithm::SlidingLog, 10_000, 1_000).await;
    assert!(one < 200, "{one}");
    let compact = (hundred - one) / 99;
    let large = thousand / 1_000;
    println!("sliding-log: {compact} bytes per entry up to 128 entries, {large} beyond");
    assert!((5..=40).contains(&compact), "{compact} bytes per entry");
    assert!((40..=150).contains(&large), "{large} bytes per entry");
}

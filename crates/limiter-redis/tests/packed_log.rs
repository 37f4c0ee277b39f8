//! A sliding log of a small limit kept in one string
//! (scripts/packed_log.lua): its layout, and its rebase before a running
//! total would pass 2^53, which no trace reaches in practice (a limit of at
//! most 128 adds at most 128 per admission), so the state is written by
//! hand here.

mod common;

use std::time::Duration;

use limiter_core::backend::{encode_policy_record, policy_record_tag};
use limiter_core::{Limiter, ManualClock, Policies, Policy, Rate};
use limiter_redis::RedisLimiter;

const TWO_POW_53: u64 = 1 << 53;

/// The string: the deadline, then `(tick, total)` records, then the tag
/// of the set that made it, [`ten_per_second`]'s.
fn log(deadline: f64, records: &[(u64, u64)]) -> Vec<u8> {
    let mut bytes = deadline.to_le_bytes().to_vec();
    for (tick, total) in records {
        bytes.extend_from_slice(&tick.to_le_bytes()[..7]);
        bytes.extend_from_slice(&total.to_le_bytes()[..7]);
    }
    let policy = Policy::sliding_log(Rate::per_second(10)).unwrap();
    bytes.extend_from_slice(&policy_record_tag(&encode_policy_record(&[policy])));
    bytes
}

fn records(bytes: &[u8]) -> Vec<(u64, u64)> {
    let seven = |at: &[u8]| {
        let mut word = [0u8; 8];
        word[..7].copy_from_slice(at);
        u64::from_le_bytes(word)
    };
    bytes[8..bytes.len() - 8]
        .chunks(14)
        .map(|record| (seven(&record[..7]), seven(&record[7..])))
        .collect()
}

/// A sliding log of 10 per second (ticks of 1 µs) on a caller clock at
/// `start_us`, and the Redis key of user key `k`.
async fn ten_per_second(start_us: u64) -> (RedisLimiter, ManualClock, String) {
    let policy = Policy::sliding_log(Rate::per_second(10)).unwrap();
    assert_eq!(policy.tick_us(), 1);
    let clock = ManualClock::new(start_us);
    let limiter = common::builder(policy)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let key = common::text(limiter.redis_key(b"k"));
    (limiter, clock, key)
}

async fn get(key: &str) -> Vec<u8> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut common::connection().await)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_total_near_2_pow_53_is_rebased_on_the_edge_and_decides_as_before() {
    let (limiter, _clock, key) = ten_per_second(2_200_000).await;
    let mut conn = common::connection().await;
    // The edge record (at or before 2.2 s - 1 s) and 5 units inside the
    // window, totals 8 and 3 short of 2^53.
    let before = [(1_000_000, TWO_POW_53 - 8), (1_500_000, TWO_POW_53 - 3)];
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(log(0.0, &before))
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();

    // 5 + 4 <= 10: admitted, and 2^53 - 3 + 4 would pass 2^53: every kept
    // total loses the edge's.
    let admitted = limiter.acquire(b"k", 4).await.unwrap();
    assert!(admitted.allowed);
    assert_eq!(admitted.remaining, 1);
    assert_eq!(admitted.reset_after, Duration::from_secs(1));
    let value = get(&key).await;
    assert_eq!(
        records(&value),
        [(1_000_000, 0), (1_500_000, 5), (2_200_000, 9)]
    );

    // 9 + 2 > 10: denied until the admission at 1.5 s leaves the window.
    let denied = limiter.acquire(b"k", 2).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.remaining, 1);
    assert_eq!(denied.retry_after, Duration::from_millis(300));
    assert_eq!(get(&key).await, value, "a denial writes nothing");
}

#[tokio::test]
async fn admissions_keep_the_edge_record_and_share_a_tick() {
    let (limiter, clock, key) = ten_per_second(1_000_000).await;
    assert!(limiter.acquire(b"k", 2).await.unwrap().allowed);
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    assert_eq!(records(&get(&key).await), [(1_000_000, 3)]);
    clock.advance(Duration::from_millis(600));
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    clock.advance(Duration::from_millis(600));
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    assert_eq!(
        records(&get(&key).await),
        [(1_000_000, 3), (1_600_000, 4), (2_200_000, 5)],
        "the record at 1.0 s is the edge's: kept"
    );
    clock.advance(Duration::from_millis(500));
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    assert_eq!(
        records(&get(&key).await),
        [(1_600_000, 4), (2_200_000, 5), (2_700_000, 6)],
        "the edge moved past 1.6 s: the record before it is dropped"
    );
}

/// A policy repeated in a set shares one key; its log is committed once
/// per admission, not once per repetition (found by the differential
/// test: committed twice, each admission was held twice, the edge record
/// was lost, and a request stamped just before the newest admission was
/// told 1 remaining instead of 2).
#[tokio::test]
async fn a_policy_repeated_in_a_set_commits_its_log_once() {
    let policies: Policies = "sliding-log:8/1s;sliding-log:8/1s".parse().unwrap();
    let clock = ManualClock::new(0);
    let limiter = common::builder(policies)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let mut now = 9_007_199_248_585_994i64;
    let mut answers = Vec::new();
    for (dt, cost) in [
        (0, 1),
        (46_542, 1),
        (290_571, 3),
        (183_585, 4),
        (154_098, 4),
        (325_204, 1),
        (-1, 1),
    ] {
        now += dt;
        clock.set(now as u64);
        let answer = limiter.acquire(b"k", cost).await.unwrap();
        answers.push((answer.allowed, answer.remaining));
    }
    assert_eq!(
        answers,
        [
            (true, 7),
            (true, 6),
            (true, 3),
            (false, 3),
            (false, 3),
            (true, 3),
            (true, 2)
        ]
    );
}

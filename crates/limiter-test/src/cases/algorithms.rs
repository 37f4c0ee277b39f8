//! Each algorithm's behaviour on small hand-worked examples (docs/spec.md
//! section 3), and the article's boundary case.

use std::time::Duration;

use limiter_core::{Algorithm, Policy, Rate};

use super::{secs, Expected, Subject, T0};
use crate::Harness;

const S: u64 = 1_000_000; // one second in µs

/// Fixed window, 3 per 10 s: windows align to multiples of 10 s, and the
/// count starts again in each.
pub async fn fixed_window_counts_per_aligned_window<H: Harness>(harness: &H) {
    let policy = Policy::fixed_window(Rate::new(3, secs(10))).unwrap();
    let s = Subject::new(harness, &policy).await;
    // (time, cost, the decision: allowed(remaining, reset_after) or
    // denied(remaining, retry_after, reset_after), in µs)
    let steps = [
        (T0 + S, 1, Expected::allowed(2, 9 * S)),
        (T0 + 2 * S, 1, Expected::allowed(1, 8 * S)),
        (T0 + 3 * S, 1, Expected::allowed(0, 7 * S)),
        (T0 + 4 * S, 1, Expected::denied(0, 6 * S, 6 * S)),
        (T0 + 10 * S - 1, 1, Expected::denied(0, 1, 1)),
        (T0 + 10 * S, 1, Expected::allowed(2, 10 * S)),
        (T0 + 11 * S, 2, Expected::allowed(0, 9 * S)),
    ];
    s.expect_steps(&steps).await;
}

/// Sliding log, 3 per 10 s: the window is `(t - W, t]`, and a denial waits
/// for the oldest entries that must leave.
pub async fn sliding_log_counts_the_trailing_window<H: Harness>(harness: &H) {
    let policy = Policy::sliding_log(Rate::new(3, secs(10))).unwrap();
    let s = Subject::new(harness, &policy).await;
    let steps = [
        (T0 + S, 1, Expected::allowed(2, 10 * S)),
        (T0 + 2 * S, 1, Expected::allowed(1, 10 * S)),
        (T0 + 5 * S, 1, Expected::allowed(0, 10 * S)),
        // The entry at 1 s leaves at 11 s.
        (T0 + 6 * S, 1, Expected::denied(0, 5 * S, 9 * S)),
        // Three units must leave: the last of them, at 5 s, leaves at 15 s.
        (T0 + 6 * S, 3, Expected::denied(0, 9 * S, 9 * S)),
        (T0 + 11 * S - 1, 1, Expected::denied(0, 1, 4 * S + 1)),
        (T0 + 11 * S, 1, Expected::allowed(0, 10 * S)),
        (T0 + 11 * S + 1, 1, Expected::denied(0, S - 1, 10 * S - 1)),
    ];
    s.expect_steps(&steps).await;
}

/// Sliding window counter, 10 per 10 s: the previous window's count weighs
/// in proportion to its overlap with the trailing window.
pub async fn sliding_counter_weighs_the_previous_window<H: Harness>(harness: &H) {
    let policy = Policy::sliding_counter(Rate::new(10, secs(10))).unwrap();
    let s = Subject::new(harness, &policy).await;
    let steps = [
        // curr = 6 in the window [0, 10 s): counts until the end of the next.
        (T0 + S, 6, Expected::allowed(4, 19 * S)),
        // At 15 s the previous 6 weigh half: 3 + 1 <= 10; remaining 10 - 3 - 1.
        (T0 + 15 * S, 1, Expected::allowed(6, 15 * S)),
        // 6 * (W - e) + 8 * W <= 10 * W from e = W - (2 * W) div 6.
        (T0 + 15 * S, 7, Expected::denied(6, 1_666_667, 15 * S)),
        // curr + n > L: wait for this window to pass, then for curr to weigh
        // no more (it must leave entirely: L - n = 0).
        (T0 + 15 * S, 10, Expected::denied(6, 15 * S, 15 * S)),
        (
            T0 + 15 * S + 1_666_666,
            7,
            Expected::denied(6, 1, 15 * S - 1_666_666),
        ),
        (
            T0 + 15 * S + 1_666_667,
            7,
            Expected::allowed(0, 15 * S - 1_666_667),
        ),
    ];
    s.expect_steps(&steps).await;
}

/// Token bucket, 2 per second with capacity 5: a fresh key is full, spends
/// a burst of 5, then refills one token every 0.5 s up to 5.
pub async fn token_bucket_bursts_then_refills<H: Harness>(harness: &H) {
    let policy = Policy::token_bucket(Rate::per_second(2))
        .unwrap()
        .with_capacity(5)
        .unwrap();
    let s = Subject::new(harness, &policy).await;
    let t = T0 + 123;
    let steps = [
        (t, 5, Expected::allowed(0, 2_500_000)),
        (t, 1, Expected::denied(0, 500_000, 2_500_000)),
        (t + S, 1, Expected::allowed(1, 2 * S)),
        (t + S, 3, Expected::denied(1, S, 2 * S)),
        // Long idle: the bucket is full again, never fuller.
        (t + 10 * S, 1, Expected::allowed(4, 500_000)),
    ];
    s.expect_steps(&steps).await;
}

/// Leaky bucket, 2 per second with a queue of 3: admitted units queue up
/// and are told to wait 0.5 s apart; a full queue denies.
pub async fn leaky_bucket_queues_and_reports_the_wait<H: Harness>(harness: &H) {
    let policy = Policy::leaky_bucket(Rate::per_second(2))
        .unwrap()
        .with_queue(3)
        .unwrap();
    let s = Subject::new(harness, &policy).await;
    let t = T0 + 77;
    let steps = [
        (t, 1, Expected::allowed(2, 500_000)),
        (t, 1, Expected::allowed(1, S).waiting(500_000)),
        (t, 1, Expected::allowed(0, 1_500_000).waiting(S)),
        (t, 1, Expected::denied(0, 500_000, 1_500_000)),
        (t + 500_000, 1, Expected::allowed(0, 1_500_000).waiting(S)),
        (t + 500_000, 3, Expected::denied(0, 1_500_000, 1_500_000)),
    ];
    s.expect_steps(&steps).await;
}

/// The article's case (trace 000 of the shared vectors): 100 per 10 s; 100
/// requests at 9 s and 100 at 11 s. A fixed window admits all 200, a
/// sliding log 100; the counts of the others are those of the vectors'
/// `expected/*-000.csv`.
pub async fn article_boundary_case<H: Harness>(harness: &H) {
    let expected = [
        (Algorithm::FixedWindow, 200),
        (Algorithm::SlidingLog, 100),
        (Algorithm::SlidingCounter, 110),
        (Algorithm::TokenBucket, 120),
        (Algorithm::LeakyBucket, 120),
    ];
    for (algorithm, admitted) in expected {
        let policy = Policy::new(algorithm, Rate::new(100, Duration::from_secs(10))).unwrap();
        let s = Subject::new(harness, &policy).await;
        let mut count = 0;
        for start in [9 * S, 11 * S] {
            for i in 0..100 {
                count += u64::from(s.acquire(start + i, "sms:13800000000", 1).await.allowed);
            }
        }
        assert_eq!(
            count, admitted,
            "{algorithm}: admitted in the boundary case"
        );
    }
}

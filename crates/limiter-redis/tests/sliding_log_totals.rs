//! The Redis sliding log stays exact after 2^53 units: its members are
//! running totals, which Lua holds as doubles.

mod common;

use std::time::Duration;

use limiter_core::backend::KeyState;
use limiter_core::{Limiter, ManualClock, Policy, Rate};
use limiter_test::Rng;

/// 2^48 per 8 µs (the largest limit the exact range allows for that window,
/// docs/spec.md section 5) with the guard raised: totals pass 2^53 after
/// about 64 full admissions, and small costs in between show any unit lost
/// to a double's rounding. Every decision must equal the core's.
#[tokio::test]
async fn redis_sliding_log_matches_core_after_2_pow_53_units_admitted() {
    let limit = 1u64 << 48;
    let policy = Policy::sliding_log(Rate::new(limit, Duration::from_micros(8))).unwrap();
    let clock = ManualClock::new(0);
    let limiter = common::builder(policy.clone())
        .max_sliding_log_limit(limit)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let mut core = KeyState::fresh(&policy);
    let mut rng = Rng::new(14);
    let (mut now, mut admitted_units) = (1_000u64, 0u128);
    for step in 0..3_000 {
        now += rng.below(4);
        let cost = match rng.below(4) {
            0 => 1 + rng.below(3),
            1 => limit,
            _ => 1 + rng.below(limit),
        };
        clock.set(now);
        let expected = core.acquire(&policy, now, cost).unwrap();
        let actual = limiter.acquire(b"k", cost).await.unwrap();
        assert_eq!(actual, expected, "step {step}: t={now} cost={cost}");
        if expected.allowed {
            admitted_units += u128::from(cost);
        }
    }
    assert!(
        admitted_units > 4 << 53,
        "the trace admitted only {admitted_units} units"
    );
}

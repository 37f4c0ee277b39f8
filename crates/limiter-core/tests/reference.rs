//! The five algorithms against a u128 reference of docs/spec.md section 3
//! (`model/mod.rs`), over any valid policy, huge ones included (durations
//! beyond u64 µs, saturating at `Duration::MAX`), and arbitrary request
//! sequences, stepping back in time (rule 2.3) and beyond 2^53 µs and back:
//! no panic, `remaining <= limit`, and every decision and every error equal
//! to the reference's. The proptest twin of the fuzz target
//! `fuzz/fuzz_targets/algorithms.rs`, which shares the reference.

mod model;

use std::time::Duration;

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Policy, Rate, MAX_TIME_US};
use model::Reference;
use proptest::prelude::*;

/// Limits from 1 to the largest the exact range allows (2^51 at a 1 µs window).
fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=16u64,
        1..=1_000_000u64,
        (0u32..=51).prop_map(|bits| 1u64 << bits),
        (40u32..=51).prop_flat_map(|bits| (1u64 << (bits - 1))..=(1u64 << bits)),
    ]
}

/// Windows from 1 µs to any u64: small ones, powers of two, everyday ones,
/// anything within the time range, and multiples of a large power of ten
/// (up to 10^18 µs), whose tick is large (docs/spec.md section 5) and whose
/// refills can outlast a u64 of µs, and even `Duration::MAX`.
fn window_us() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=16u64,
        (0u32..=40).prop_map(|p| 1u64 << p),
        prop::sample::select(vec![1_000, 1_000_000, 60_000_000, 86_400_000_000]),
        1..=MAX_TIME_US,
        (1u64..=18, 0u32..=18).prop_map(|(m, e)| m * 10u64.pow(e)),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    let algorithm = prop::sample::select(Algorithm::ALL.to_vec());
    (algorithm, limit(), window_us(), limit()).prop_filter_map(
        "out of the exact range",
        |(algorithm, limit, window, extra)| {
            let rate = Rate::new(limit, Duration::from_micros(window));
            let (capacity, queue) = if algorithm == Algorithm::TokenBucket {
                (Some(extra), None)
            } else if algorithm == Algorithm::LeakyBucket {
                (None, Some(extra))
            } else {
                (None, None)
            };
            Policy::from_options(algorithm, rate, capacity, queue).ok()
        },
    )
}

#[derive(Debug, Clone, Copy)]
struct Step {
    /// Time step in µs: 0, within a window or two, far, or backwards.
    dt: i64,
    /// Cost: a fraction of the max cost, 0 and max + 1 included.
    cost: u64,
    peek: bool,
}

fn steps(policy: &Policy) -> impl Strategy<Value = Vec<Step>> {
    // Steps of a window or two, within the time range (a window may be
    // longer than it).
    let w = policy.window_us().min(MAX_TIME_US) as i64;
    let tick = policy.tick_us().min(MAX_TIME_US) as i64;
    let m = policy.max_cost();
    let dt = prop_oneof![
        3 => Just(0i64),
        4 => 0..=(w + 7) / 8,
        2 => 0..=w.saturating_mul(2),
        1 => 0..=(MAX_TIME_US / 4) as i64,
        // Back before the key's stamp (rule 2.3): within its tick, or a
        // window or two.
        1 => -tick..=0,
        1 => -w.saturating_mul(2)..=0,
    ];
    let cost = prop_oneof![
        3 => 1..=m.min(3),
        4 => 1..=m,
        2 => Just(m),
        1 => Just(0u64),
        1 => Just(m + 1),
    ];
    let step =
        (dt, cost, prop::bool::weighted(0.1)).prop_map(|(dt, cost, peek)| Step { dt, cost, peek });
    prop::collection::vec(step, 1..200)
}

fn check(policy: &Policy, start: u64, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut core = KeyState::fresh(policy);
    let mut model = Reference::new(policy);
    // The last time within the range: a step beyond it (an error, which
    // changes nothing) does not move the clock, so the steps after it are
    // decisions again.
    let mut clock = start;
    for (i, step) in steps.iter().enumerate() {
        let now = clock.saturating_add_signed(step.dt);
        if now <= MAX_TIME_US {
            clock = now;
        }
        let expected = model.decide(now, step.cost, !step.peek);
        let actual = if step.peek {
            core.peek(policy, now, step.cost)
        } else {
            core.acquire(policy, now, step.cost)
        };
        let at = || format!("{policy}: step {i} (t={now}, cost={})", step.cost);
        match (&actual, &expected) {
            (Ok(decision), Ok(expected)) => {
                prop_assert!(
                    decision.remaining <= decision.limit,
                    "{}: {decision:?}",
                    at()
                );
                prop_assert!(
                    expected.matches(decision),
                    "{}: core {decision:?}, reference {expected:?}",
                    at()
                );
            }
            (Err(error), Err(expected)) => prop_assert!(
                expected.matches(error),
                "{}: core {error:?}, reference {expected:?}",
                at()
            ),
            (actual, expected) => {
                return Err(TestCaseError::fail(format!(
                    "{}: core {actual:?}, reference {expected:?}",
                    at()
                )))
            }
        }
    }
    Ok(())
}

fn case() -> impl Strategy<Value = (Policy, u64, Vec<Step>)> {
    let start = prop_oneof![Just(0u64), 0..=MAX_TIME_US, Just(MAX_TIME_US - 1_000)];
    (policy(), start).prop_flat_map(|(policy, start)| {
        let steps = steps(&policy);
        (Just(policy), Just(start), steps)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn every_algorithm_equals_the_u128_reference_on_any_valid_policy(
        (policy, start, steps) in case()
    ) {
        check(&policy, start, &steps)?;
    }
}

/// Past 2^64 units on one sliding log, through the reference: 40,000
/// windows of 2^49 units.
#[test]
fn the_reference_agrees_past_2_pow_64_units_on_one_sliding_log() {
    let policy = Policy::sliding_log(Rate::new(1 << 49, Duration::from_micros(4))).unwrap();
    let steps: Vec<Step> = (0..40_000)
        .flat_map(|_| {
            [
                Step {
                    dt: 4,
                    cost: 1 << 49,
                    peek: false,
                },
                Step {
                    dt: 1,
                    cost: 1,
                    peek: false,
                },
            ]
        })
        .collect();
    check(&policy, 0, &steps).unwrap();
}

/// Durations beyond u64 µs are reported (in 128 bits) and saturate at
/// `Duration::MAX`, in the core as in the reference (docs/spec.md section 5).
#[test]
fn the_reference_agrees_on_durations_beyond_u64_micros() {
    let drain = |cost| Step {
        dt: 0,
        cost,
        peek: false,
    };
    // A refill of 7 * 10^19 µs: past u64 µs, within `Duration`.
    let capacity = 70_372_992_312_949;
    let long = Policy::token_bucket(Rate::per_second(1))
        .unwrap()
        .with_capacity(capacity)
        .unwrap();
    // A tick of 10^18 µs and a refill of 2^51 ticks: past `Duration::MAX`.
    let huge = Policy::token_bucket(Rate::new(1, Duration::from_micros(10u64.pow(18))))
        .unwrap()
        .with_capacity(1 << 51)
        .unwrap();
    assert_eq!(huge.tick_us(), 10u64.pow(18));
    for (policy, saturated) in [(&long, false), (&huge, true)] {
        let max = policy.max_cost();
        check(policy, 1_000_000, &[drain(max), drain(max), drain(1)]).unwrap();
        let mut state = KeyState::fresh(policy);
        let admitted = state.acquire(policy, 1_000_000, max).unwrap();
        let denied = state.acquire(policy, 1_000_000, max).unwrap();
        assert!(admitted.allowed && !denied.allowed);
        for duration in [admitted.reset_after, denied.retry_after, denied.reset_after] {
            assert!(
                duration.as_micros() > u128::from(u64::MAX),
                "{policy}: {duration:?}"
            );
            assert_eq!(
                duration == Duration::MAX,
                saturated,
                "{policy}: {duration:?}"
            );
        }
    }
}

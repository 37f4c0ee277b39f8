//! The properties of docs/spec.md section 4, proven over arbitrary request sequences
//! for every algorithm.

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Decision, Error, Policy, Rate, MAX_TIME_US};
use proptest::prelude::*;
use std::time::Duration;

/// One request of a generated trace: a time step (possibly backwards) and a cost.
#[derive(Debug, Clone, Copy)]
struct Step {
    delta: i64,
    cost: u64,
}

/// An admitted request: its effective time (the time it was counted at)
/// and what it was told.
#[derive(Debug, Clone, Copy)]
struct Admission {
    t_eff: u64,
    cost: u64,
    decision: Decision,
}

fn small_policy(algorithm: Algorithm) -> impl Strategy<Value = Policy> {
    (1u64..=12, 1u64..=40, 1u64..=12).prop_map(move |(limit, window, extra)| {
        let rate = Rate::new(limit, Duration::from_micros(window));
        let policy = Policy::new(algorithm, rate).unwrap();
        match algorithm {
            Algorithm::TokenBucket => policy.with_capacity(extra).unwrap(),
            Algorithm::LeakyBucket => policy.with_queue(extra).unwrap(),
            _ => policy,
        }
    })
}

fn any_small_policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Algorithm::ALL.to_vec()).prop_flat_map(small_policy)
}

/// Requests clustered in time (many at the same tick, some across
/// boundaries), with costs up to one above the maximum and a few backward steps.
fn steps(policy: &Policy) -> impl Strategy<Value = Vec<Step>> {
    let w = policy.window_ticks() as i64;
    let max = policy.max_cost();
    let delta = prop_oneof![
        4 => Just(0i64),
        6 => 0..=w / 2 + 1,
        2 => 0..=2 * w + 2,
        1 => -w..=0,
    ];
    let cost = prop_oneof![6 => Just(1u64), 3 => 1..=max, 1 => 1..=max + 1];
    prop::collection::vec(
        (delta, cost).prop_map(|(delta, cost)| Step { delta, cost }),
        1..120,
    )
}

fn policy_and_steps() -> impl Strategy<Value = (Policy, Vec<Step>)> {
    any_small_policy().prop_flat_map(|p| {
        let s = steps(&p);
        (Just(p), s)
    })
}

/// Replays `steps` from time `start` on one key, checking on every request
/// the properties that hold per decision, and returns the admissions.
fn replay(policy: &Policy, start: u64, steps: &[Step]) -> Result<Vec<Admission>, TestCaseError> {
    let mut state = KeyState::fresh(policy);
    let mut t = start;
    let mut admitted = Vec::new();
    for step in steps {
        t = t.saturating_add_signed(step.delta).min(MAX_TIME_US);
        let before = state.clone();
        let t_eff = (t / policy.tick_us()).max(before.stamp()) * policy.tick_us();
        let peeked = state.peek(policy, t, step.cost);
        let result = state.acquire(policy, t, step.cost);
        match result {
            Err(Error::CostExceedsCapacity { cost, max_cost }) => {
                prop_assert!(cost > policy.max_cost() && max_cost == policy.max_cost());
                prop_assert_eq!(&state, &before, "an error changes nothing");
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
            Ok(decision) => {
                prop_assert_eq!(
                    peeked.ok(),
                    Some(decision),
                    "peek answers what acquire does"
                );
                prop_assert!(decision.remaining <= decision.limit);
                prop_assert_eq!(decision.limit, policy.max_cost());
                if decision.allowed {
                    prop_assert_eq!(decision.retry_after, Duration::ZERO);
                    admitted.push(Admission {
                        t_eff,
                        cost: step.cost,
                        decision,
                    });
                } else {
                    prop_assert_eq!(&state, &before, "a denied request changes nothing");
                    check_retry_after_is_exact(policy, &state, t, step.cost, &decision)?;
                }
                check_reset_after_returns_to_fresh(policy, &state, t, &decision)?;
            }
        }
    }
    Ok(admitted)
}

/// Allowed at `t + retry_after`, denied one microsecond earlier (docs/spec.md section 1).
fn check_retry_after_is_exact(
    policy: &Policy,
    state: &KeyState,
    t: u64,
    cost: u64,
    denied: &Decision,
) -> Result<(), TestCaseError> {
    let retry = denied.retry_after.as_micros() as u64;
    prop_assert!(retry > 0, "a denial has a positive retry_after");
    let at = state.peek(policy, t + retry, cost).unwrap();
    prop_assert!(
        at.allowed,
        "not allowed at t + retry_after ({} + {})",
        t,
        retry
    );
    let before = state.peek(policy, t + retry - 1, cost).unwrap();
    prop_assert!(
        !before.allowed,
        "already allowed at t + retry_after - 1 ({} + {} - 1)",
        t,
        retry
    );
    Ok(())
}

/// After `reset_after` with nothing else, the key decides like a fresh one.
fn check_reset_after_returns_to_fresh(
    policy: &Policy,
    state: &KeyState,
    t: u64,
    decision: &Decision,
) -> Result<(), TestCaseError> {
    let reset_at = t + decision.reset_after.as_micros() as u64;
    let fresh = KeyState::fresh(policy);
    for at in [reset_at, reset_at + policy.window_us()] {
        let cost = policy.max_cost();
        prop_assert_eq!(
            state.peek(policy, at, cost).unwrap(),
            fresh.peek(policy, at, cost).unwrap(),
            "state at t + reset_after differs from a fresh key"
        );
    }
    if decision.reset_after.is_zero() {
        prop_assert_eq!(
            state.peek(policy, t, 1).unwrap(),
            fresh.peek(policy, t, 1).unwrap()
        );
    }
    Ok(())
}

/// The largest sum of `value` over points within `d` consecutive ticks, for
/// every `d`, checked against `bound(d)`.
fn check_interval_bound(
    points: &[(u64, u64)],
    bound: impl Fn(u64) -> u64,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut points = points.to_vec();
    points.sort_unstable();
    for (i, &(a, _)) in points.iter().enumerate() {
        let mut sum = 0;
        for &(b, units) in &points[i..] {
            sum += units;
            let d = b - a + 1;
            prop_assert!(
                sum <= bound(d),
                "{}: {} in {} ticks from {} (bound {})",
                what,
                sum,
                d,
                a,
                bound(d)
            );
        }
    }
    Ok(())
}

fn admitted_units(admitted: &[Admission]) -> Vec<(u64, u64)> {
    admitted.iter().map(|a| (a.t_eff, a.cost)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_decision_is_consistent_and_exact((policy, steps) in policy_and_steps(), start in 0u64..1_000) {
        replay(&policy, start, &steps)?;
    }

    #[test]
    fn sliding_log_admits_at_most_the_limit_in_any_window(
        (policy, steps) in small_policy(Algorithm::SlidingLog).prop_flat_map(|p| (Just(p.clone()), steps(&p)))
    ) {
        let admitted = replay(&policy, 0, &steps)?;
        let (l, w) = (policy.limit(), policy.window_ticks());
        check_interval_bound(&admitted_units(&admitted), |d| if d <= w { l } else { u64::MAX }, "sliding log")?;
    }

    #[test]
    fn sliding_counter_bursts_at_most_l_d_over_w(
        (policy, steps) in small_policy(Algorithm::SlidingCounter).prop_flat_map(|p| (Just(p.clone()), steps(&p)))
    ) {
        let admitted = replay(&policy, 0, &steps)?;
        let (l, w) = (policy.limit(), policy.window_ticks());
        check_interval_bound(&admitted_units(&admitted), |d| l + l * d / w, "sliding counter")?;
    }

    #[test]
    fn token_bucket_admits_at_most_capacity_plus_refill(
        (policy, steps) in small_policy(Algorithm::TokenBucket).prop_flat_map(|p| (Just(p.clone()), steps(&p)))
    ) {
        let admitted = replay(&policy, 0, &steps)?;
        let (l, w, c) = (policy.limit(), policy.window_ticks(), policy.max_cost());
        check_interval_bound(&admitted_units(&admitted), |d| c + l * (d - 1) / w, "token bucket")?;
    }

    #[test]
    fn leaky_bucket_departures_are_smooth(
        (policy, steps) in small_policy(Algorithm::LeakyBucket).prop_flat_map(|p| (Just(p.clone()), steps(&p)))
    ) {
        let admitted = replay(&policy, 0, &steps)?;
        let (l, w) = (policy.limit(), policy.window_ticks());
        let departures: Vec<(u64, u64)> = admitted
            .iter()
            .map(|a| (a.decision.time_us + a.decision.wait.as_micros() as u64, 1))
            .collect();
        // docs/spec.md section 4: `1 + ceil(L*(d-1)/W)` assumes at most one
        // departure per tick (L <= W); a faster drain lets several leave
        // within one tick, at most ceil(L*d/W).
        let bound = |d: u64| if l <= w { 1 + (l * (d - 1)).div_ceil(w) } else { (l * d).div_ceil(w) };
        check_interval_bound(&departures, bound, "leaky bucket departures")?;
    }

    #[test]
    fn fixed_window_admits_two_limits_within_two_microseconds(
        limit in 1u64..=1_000, window in 2u64..=1_000_000_000, idx in 1u64..=1_000
    ) {
        let policy = Policy::fixed_window(Rate::new(limit, Duration::from_micros(window))).unwrap();
        let boundary = idx * window;
        let mut state = KeyState::fresh(&policy);
        let admitted = (0..2 * limit)
            .map(|i| if i < limit { boundary - 1 } else { boundary })
            .filter(|&t| state.acquire(&policy, t, 1).unwrap().allowed)
            .count() as u64;
        prop_assert_eq!(admitted, 2 * limit);
    }

    #[test]
    fn no_overflow_near_the_range_limit(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        window_exp in 0u32..=12,
        window_mantissa in 1u64..=9,
        units_exp in 0u32..=52,
        times in prop::collection::vec((0u64..=MAX_TIME_US, 1u64..=u64::MAX), 1..40),
    ) {
        let window = window_mantissa * 10u64.pow(window_exp);
        let units = 1u64 << units_exp;
        let Ok(policy) = Policy::new(algorithm, Rate::new(units, Duration::from_micros(window))) else {
            // Out of range is a clean error; that is all we ask of it.
            return Ok(());
        };
        let mut state = KeyState::fresh(&policy);
        for (t, cost) in times {
            let cost = cost % (policy.max_cost() + 1) + 1;
            let t = if cost % 3 == 0 { MAX_TIME_US - t % 1000 } else { t };
            match state.acquire(&policy, t, cost) {
                Ok(d) => prop_assert!(d.remaining <= d.limit),
                Err(Error::CostExceedsCapacity { .. }) => prop_assert!(cost > policy.max_cost()),
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
        }
    }
}

#[test]
fn times_beyond_two_to_the_53_are_an_error_not_an_overflow() {
    let policy = Policy::token_bucket(Rate::per_second(10)).unwrap();
    let mut state = KeyState::fresh(&policy);
    assert!(matches!(
        state.acquire(&policy, MAX_TIME_US + 1, 1),
        Err(Error::TimeOutOfRange { .. })
    ));
    assert!(state.acquire(&policy, MAX_TIME_US, 1).unwrap().allowed);
}

#[test]
fn cost_zero_and_cost_above_the_maximum_are_errors() {
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::per_second(5)).unwrap();
        let mut state = KeyState::fresh(&policy);
        assert!(matches!(state.acquire(&policy, 0, 0), Err(Error::ZeroCost)));
        assert!(matches!(
            state.acquire(&policy, 0, 6),
            Err(Error::CostExceedsCapacity {
                cost: 6,
                max_cost: 5
            })
        ));
        assert_eq!(state, KeyState::fresh(&policy));
    }
}

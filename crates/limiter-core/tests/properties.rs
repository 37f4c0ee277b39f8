//! The properties of docs/spec.md section 4, proven over arbitrary request sequences
//! for every algorithm.

#[path = "small_policy/mod.rs"]
mod small_policy;

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Decision, Error, Policy, PolicyError, Rate, MAX_TIME_US};
use proptest::prelude::*;
use small_policy::{any_small_policy, small_policy};
use std::time::Duration;

/// One request of a generated trace: a time step (possibly backwards) and a cost.
#[derive(Debug, Clone, Copy)]
struct Step {
    delta: i64,
    cost: u64,
}

/// An admitted request: its effective time (the time it was counted at)
/// and what it was told.
#[derive(Debug, Clone)]
struct Admission {
    t_eff: u64,
    cost: u64,
    decision: Decision,
}

/// Policies whose tick is 10, 100 or 1,000 µs (docs/spec.md section 5): a
/// window of `k` ticks (1 to 40) and a largest number of units `U` just
/// above what the next smaller tick allows, `2^51 / (10k) < U <= 2^51 / k`
/// (`4 * U * (W / q) <= 2^53` holds for `q` and fails for `q / 10`). A
/// bucket has either the limit `U` and a capacity (queue) that is huge too
/// or small (1 to 12), or the capacity (queue) `U` and a limit up to 1,000
/// times smaller (a refill of up to 1,000 windows, so every duration stays
/// well within the time range).
fn big_tick_policy(algorithm: Algorithm) -> impl Strategy<Value = Policy> {
    (1u32..=3, 1u64..=40)
        .prop_flat_map(|(exp, k)| {
            let top = (1u64 << 51) / k;
            let huge = top / 10 + 1..=top;
            let slower = (1u64..=1_000).prop_map(move |f| top / f);
            let (limit, extra) = (huge.clone(), huge.clone());
            let bucket = prop_oneof![(limit.clone(), extra), (limit, 1u64..=12), (slower, huge)];
            (Just(exp), Just(k), bucket)
        })
        .prop_map(move |(exp, k, (limit, extra))| {
            let tick = 10u64.pow(exp);
            let window = Duration::from_micros(k * tick);
            let bucket = |limit| Policy::new(algorithm, Rate::new(limit, window)).unwrap();
            let policy = match algorithm {
                Algorithm::TokenBucket => bucket(limit).with_capacity(extra).unwrap(),
                Algorithm::LeakyBucket => bucket(limit).with_queue(extra).unwrap(),
                // The window algorithms have only the limit: the larger one is `U`.
                _ => Policy::new(algorithm, Rate::new(limit.max(extra), window)).unwrap(),
            };
            assert_eq!(policy.tick_us(), tick, "{policy}");
            assert_eq!(policy.window_ticks(), k, "{policy}");
            policy
        })
}

/// Requests clustered in time (many at the same tick, some across
/// boundaries), with costs up to one above the maximum and a few backward
/// steps. Steps are in µs, mostly not multiples of the tick: some within
/// one tick, forward or back.
fn steps(policy: &Policy) -> impl Strategy<Value = Vec<Step>> {
    let w = policy.window_us() as i64;
    let tick = policy.tick_us() as i64;
    let max = policy.max_cost();
    let delta = prop_oneof![
        4 => Just(0i64),
        6 => 0..=w / 2 + 1,
        2 => 0..=2 * w + 2,
        1 => -w..=0,
        1 => -tick..=tick,
    ];
    let cost = prop_oneof![
        6 => Just(1u64),
        3 => 1..=max,
        1 => 1..=max + 1,
        // Exactly the maximum and one above, which a huge maximum (a large
        // tick's policy) would otherwise almost never draw.
        1 => Just(max),
        1 => Just(max + 1),
    ];
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
                prop_assert!(cost == step.cost && cost > max_cost && max_cost == policy.max_cost());
                prop_assert_eq!(&state, &before, "an error changes nothing");
                prop_assert!(
                    matches!(peeked, Err(Error::CostExceedsCapacity { cost: c, max_cost: m }) if c == cost && m == max_cost),
                    "a peek returns the acquire's error (rule 2.6): {:?}",
                    peeked
                );
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
            Ok(decision) => {
                prop_assert_eq!(
                    peeked.as_ref().ok(),
                    Some(&decision),
                    "peek answers what acquire does"
                );
                prop_assert!(decision.remaining <= decision.limit);
                prop_assert_eq!(decision.limit, policy.max_cost());
                if decision.allowed {
                    prop_assert_eq!(decision.retry_after, Duration::ZERO);
                    admitted.push(Admission {
                        t_eff,
                        cost: step.cost,
                        decision: decision.clone(),
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

/// Whether `state`, at `t` with no arrivals, decides as a fresh key: a
/// request of the largest cost peeks the same.
fn is_fresh(policy: &Policy, state: &KeyState, t: u64) -> Result<bool, TestCaseError> {
    let cost = policy.max_cost();
    let fresh = KeyState::fresh(policy).peek(policy, t, cost);
    match (state.peek(policy, t, cost), fresh) {
        (Ok(ours), Ok(fresh)) => Ok(ours == fresh),
        (ours, fresh) => Err(TestCaseError::fail(format!(
            "peek at {t}: {ours:?}, fresh {fresh:?}"
        ))),
    }
}

/// `reset_after` is exact: at `t + reset_after` (and a window later) with
/// nothing else, the key decides like a fresh one; one microsecond earlier
/// (the tick before) it does not.
fn check_reset_after_returns_to_fresh(
    policy: &Policy,
    state: &KeyState,
    t: u64,
    decision: &Decision,
) -> Result<(), TestCaseError> {
    let reset = decision.reset_after.as_micros() as u64;
    let reset_at = t + reset;
    for at in [reset_at, reset_at + policy.window_us()] {
        prop_assert!(
            is_fresh(policy, state, at)?,
            "state at t + reset_after ({} + {}) + {} differs from a fresh key",
            t,
            reset,
            at - reset_at
        );
    }
    if reset > 0 {
        prop_assert!(
            !is_fresh(policy, state, reset_at - 1)?,
            "state already fresh at t + reset_after - 1 ({} + {} - 1)",
            t,
            reset
        );
    } else {
        let fresh = KeyState::fresh(policy);
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

    /// The same, with a tick of 10 to 1,000 µs: request times within a
    /// tick, `t_eff` rounded to it, and durations of `D` ticks reported as
    /// `(t_eff + D)*q - t` µs (docs/spec.md section 5).
    #[test]
    fn every_decision_is_consistent_and_exact_with_a_tick_above_one(
        (policy, steps) in prop::sample::select(Algorithm::ALL.to_vec())
            .prop_flat_map(big_tick_policy)
            .prop_flat_map(|p| (Just(p.clone()), steps(&p))),
        start in 0u64..1_000_000,
    ) {
        prop_assert!(policy.tick_us() > 1);
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

    /// Any policy a tick exists for (docs/spec.md section 5), from tiny to
    /// at the bound, with capacities and queues up to the bound over small
    /// limits: built with the tick of section 5, and no panic or overflow
    /// at any time up to 2^53. Every other policy is the error `OutOfRange`.
    #[test]
    fn no_overflow_near_the_range_limit(
        algorithm in prop::sample::select(Algorithm::ALL.to_vec()),
        window_exp in 0u32..=18,
        window_mantissa in 1u64..=9,
        limit in prop_oneof![1u64..=16, (0u32..=52).prop_map(|e| 1u64 << e)],
        // The capacity or queue (the limit, for the window algorithms):
        // none, a power of two, or one below, at or above the bound.
        extra in (0u8..=2, 0u32..=52, 0u64..=2),
        times in prop::collection::vec((0u64..=MAX_TIME_US, 1u64..=u64::MAX), 1..40),
    ) {
        let window = window_mantissa * 10u64.pow(window_exp);
        let extra = match extra {
            (0, _, _) => None,
            (1, exp, _) => Some(1u64 << exp),
            // W is `window_mantissa` ticks of 10^window_exp µs at the largest
            // tick: 4 * U * W <= 2^53 in those ticks.
            (_, _, delta) => Some((1u64 << 51) / window_mantissa + delta - 1),
        };
        let bucket = matches!(algorithm, Algorithm::TokenBucket | Algorithm::LeakyBucket);
        let (limit, capacity, queue) = match (algorithm, extra) {
            (Algorithm::TokenBucket, _) => (limit, extra, None),
            (Algorithm::LeakyBucket, _) => (limit, None, extra),
            (_, Some(units)) => (limit.max(units), None, None),
            (_, None) => (limit, None, None),
        };
        let units = limit.max(extra.unwrap_or(limit));
        let built = Policy::from_options(algorithm, Rate::new(limit, Duration::from_micros(window)), capacity, queue);
        let policy = match (built, spec_tick(units, window)) {
            (Ok(policy), Some(tick)) => {
                prop_assert_eq!(policy.tick_us(), tick, "{}", policy);
                prop_assert_eq!(policy.window_ticks(), window / tick);
                prop_assert_eq!(policy.limit().max(policy.max_cost()), units);
                policy
            }
            (Err(error), None) => {
                // A bucket's limit is checked first, alone.
                let rejected = if bucket && spec_tick(limit, window).is_none() { limit } else { units };
                prop_assert_eq!(error, PolicyError::OutOfRange { units: rejected, window_us: window });
                return Ok(());
            }
            (built, tick) => {
                return Err(TestCaseError::fail(format!(
                    "{units} units per {window}µs: built {built:?}, section 5's tick {tick:?}"
                )));
            }
        };
        let mut state = KeyState::fresh(&policy);
        for (t, cost) in times {
            let cost = cost % (policy.max_cost() + 1) + 1;
            let t = if cost % 3 == 0 { MAX_TIME_US - t % 1000 } else { t };
            match state.acquire(&policy, t, cost) {
                Ok(d) => {
                    prop_assert!(d.remaining <= d.limit && d.limit == policy.max_cost(), "{:?}", d);
                    prop_assert_eq!(d.allowed, d.retry_after.is_zero(), "{:?}", d);
                }
                Err(Error::CostExceedsCapacity { .. }) => prop_assert!(cost > policy.max_cost()),
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
        }
    }
}

/// The tick of docs/spec.md section 5, computed apart from `Policy`: the
/// smallest power of ten `q` that divides the window with
/// `4 * U * (W / q) <= 2^53`, if there is one.
fn spec_tick(units: u64, window_us: u64) -> Option<u64> {
    (0u32..=19)
        .map(|exp| 10u64.pow(exp))
        .take_while(|&q| window_us.is_multiple_of(q))
        .find(|&q| 4 * u128::from(units) * u128::from(window_us / q) <= 1u128 << 53)
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

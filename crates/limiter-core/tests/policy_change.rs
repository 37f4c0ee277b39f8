//! The rule of docs/spec.md section 9, proven over arbitrary traces with a
//! change of policy at an arbitrary request: the bound on what any window
//! spanning the change admits, the units carried across it, expiry still
//! invisible, and a change to the same policy changing no decision.

#[path = "small_policy/mod.rs"]
mod small_policy;

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Decision, Policy, Rate};
use proptest::prelude::*;
use small_policy::{any_small_policy, small_policy};
use std::time::Duration;

/// One request: a step in µs from the one before (sometimes back) and a
/// cost from 1 to 12.
fn steps() -> impl Strategy<Value = Vec<(i64, u64)>> {
    let delta = prop_oneof![4 => Just(0i64), 6 => 0i64..=20, 2 => 0i64..=80, 1 => -20i64..=0];
    let cost = prop_oneof![6 => Just(1u64), 3 => 1u64..=12];
    prop::collection::vec((delta, cost), 1..120)
}

/// An admitted request: its effective time and cost, and its decision.
#[derive(Debug, Clone)]
struct Admission {
    t_eff: u64,
    cost: u64,
    decision: Decision,
}

/// A trace on one key decided by `a` for its first `change` requests and
/// by `b` from then on: the first request under `b` takes the key over by
/// the rule, whatever it decides (docs/spec.md section 9). Returns the
/// admissions.
///
/// Times step back, but not at the change (the first request under `b`
/// comes at or after every request before it) and after it never to
/// before it: a state `a` has reset converts to a fresh one, as a dropped
/// key is (docs/spec.md rule 2.5), and neither remembers its stamp.
fn replay(a: &Policy, b: &Policy, change: usize, steps: &[(i64, u64)]) -> Vec<Admission> {
    let mut state = KeyState::fresh(a);
    let (mut t, mut admitted, mut changed_at, mut latest) = (1_000u64, Vec::new(), 0, 0);
    for (i, &(delta, cost)) in steps.iter().enumerate() {
        t = t.saturating_add_signed(delta).max(changed_at);
        if i == change {
            t = t.max(latest);
            changed_at = t;
            state = state.change_policy(a, b, t);
        }
        latest = latest.max(t);
        let policy = if i < change { a } else { b };
        let t_eff = t.max(state.stamp());
        if let Ok(decision) = state.acquire(policy, t, cost) {
            if decision.allowed {
                admitted.push(Admission {
                    t_eff,
                    cost,
                    decision,
                });
            }
        }
    }
    admitted
}

/// The largest sum of `units` over points within `d` consecutive µs, for
/// every `d`, checked against `bound(d)`.
fn check_interval_bound(
    points: &[(u64, u64)],
    bound: impl Fn(u64) -> u64,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut points = points.to_vec();
    points.sort_unstable();
    for (i, &(start, _)) in points.iter().enumerate() {
        let mut sum = 0;
        for &(at, units) in &points[i..] {
            sum += units;
            let d = at - start + 1;
            prop_assert!(
                sum <= bound(d),
                "{}: {} in {} µs from {} (bound {})",
                what,
                sum,
                d,
                start,
                bound(d)
            );
        }
    }
    Ok(())
}

/// The units a policy counts against the key as it stands at `t`: its
/// maximum cost less what it could still admit.
fn used(policy: &Policy, state: &KeyState, t: u64) -> u64 {
    let peek = state.peek(policy, t, 1).unwrap();
    let stands = if peek.allowed {
        peek.remaining + 1
    } else {
        peek.remaining
    };
    policy.max_cost() - stands
}

/// A policy of any algorithm whose tick is 1, 10, 100 or 1,000 µs: a
/// window of 1 to 40 ticks and a largest number of units from tiny to the
/// most the tick allows (`4 * U * (W / q) <= 2^53`).
fn big_policy() -> impl Strategy<Value = Policy> {
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        0u32..=3,
        1u64..=40,
        prop_oneof![1u64..=12, 1u64..=1_000_000, Just(u64::MAX)],
        prop_oneof![Just(1u64), 1u64..=1_000],
    )
        .prop_map(|(algorithm, exp, k, units, slower)| {
            let tick = 10u64.pow(exp);
            let top = (1u64 << 51) / k;
            let units = units.min(top);
            let window = Duration::from_micros(k * tick);
            let limit = (units / slower).max(1);
            let policy = Policy::new(algorithm, Rate::new(limit, window)).unwrap();
            match algorithm {
                Algorithm::TokenBucket => policy.with_capacity(units).unwrap(),
                Algorithm::LeakyBucket => policy.with_queue(units).unwrap(),
                _ => policy,
            }
        })
}

/// The most `policy` admits within `d <= W` consecutive µs on its own
/// (docs/spec.md section 4; for a leaky bucket, admissions rather than
/// departures, bounded as a token bucket's are).
fn own_bound(policy: &Policy, d: u64) -> u64 {
    let (l, w, max) = (policy.limit(), policy.window_us(), policy.max_cost());
    match policy.algorithm() {
        Algorithm::FixedWindow => 2 * l,
        Algorithm::SlidingLog => l,
        Algorithm::SlidingCounter => l + l * d / w,
        _ => max + l * (d - 1) / w,
    }
}

/// Whether `state` decides at `t` as a fresh key of `policy` does, for
/// every cost.
fn is_fresh(policy: &Policy, state: &KeyState, t: u64) -> bool {
    let fresh = KeyState::fresh(policy);
    (1..=policy.max_cost())
        .all(|cost| state.peek(policy, t, cost).ok() == fresh.peek(policy, t, cost).ok())
}

/// A state of `policy` after `steps` from time 1,000, and the time after them.
fn state_after(policy: &Policy, steps: &[(i64, u64)]) -> (KeyState, u64) {
    let mut state = KeyState::fresh(policy);
    let mut t = 1_000u64;
    for &(delta, cost) in steps {
        t = t.saturating_add_signed(delta);
        let _ = state.acquire(policy, t, cost);
    }
    (state, t)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Sliding log to sliding log: within `min(W_A, W_B)` µs, at most
    /// `max(L_A, L_B)`, across the change as on either side.
    #[test]
    fn a_sliding_log_admits_the_larger_limit_across_a_change(
        a in small_policy(Algorithm::SlidingLog),
        b in small_policy(Algorithm::SlidingLog),
        steps in steps(),
        change in 0usize..120,
    ) {
        let admitted = replay(&a, &b, change, &steps);
        let (m, w) = (a.limit().max(b.limit()), a.window_us().min(b.window_us()));
        let points: Vec<_> = admitted.iter().map(|x| (x.t_eff, x.cost)).collect();
        check_interval_bound(&points, |d| if d <= w { m } else { u64::MAX }, "sliding log")?;
    }

    /// Token bucket to token bucket: within `d` µs, at most the larger
    /// capacity plus the faster refill over `d - 1` µs.
    #[test]
    fn a_token_bucket_admits_the_larger_capacity_and_faster_refill_across_a_change(
        a in small_policy(Algorithm::TokenBucket),
        b in small_policy(Algorithm::TokenBucket),
        steps in steps(),
        change in 0usize..120,
    ) {
        let admitted = replay(&a, &b, change, &steps);
        let c = a.max_cost().max(b.max_cost());
        let (wa, wb) = (a.window_us(), b.window_us());
        let rate = (a.limit() * wb).max(b.limit() * wa);
        let points: Vec<_> = admitted.iter().map(|x| (x.t_eff, x.cost)).collect();
        check_interval_bound(&points, |d| c + rate * (d - 1) / (wa * wb), "token bucket")?;
    }

    /// Fixed window to fixed window: within `min(W_A, W_B)` µs, at most
    /// three times the larger limit (a window of each policy and the one
    /// across the change).
    #[test]
    fn a_fixed_window_admits_three_larger_limits_across_a_change(
        a in small_policy(Algorithm::FixedWindow),
        b in small_policy(Algorithm::FixedWindow),
        steps in steps(),
        change in 0usize..120,
    ) {
        let admitted = replay(&a, &b, change, &steps);
        let (m, w) = (a.limit().max(b.limit()), a.window_us().min(b.window_us()));
        let points: Vec<_> = admitted.iter().map(|x| (x.t_eff, x.cost)).collect();
        check_interval_bound(&points, |d| if d <= w { 3 * m } else { u64::MAX }, "fixed window")?;
    }

    /// Sliding counter to sliding counter: within `d` µs, at most the
    /// larger limit plus its share of `d` over the shorter window.
    #[test]
    fn a_sliding_counter_bursts_at_most_the_larger_limit_over_the_shorter_window(
        a in small_policy(Algorithm::SlidingCounter),
        b in small_policy(Algorithm::SlidingCounter),
        steps in steps(),
        change in 0usize..120,
    ) {
        let admitted = replay(&a, &b, change, &steps);
        let (m, w) = (a.limit().max(b.limit()), a.window_us().min(b.window_us()));
        let points: Vec<_> = admitted.iter().map(|x| (x.t_eff, x.cost)).collect();
        check_interval_bound(&points, |d| m + m * d / w, "sliding counter")?;
    }

    /// Leaky bucket to leaky bucket: departures within `d` µs are at most
    /// the sum of the two policies' own bounds (docs/spec.md section 4).
    #[test]
    fn leaky_bucket_departures_across_a_change_are_at_most_both_bounds(
        a in small_policy(Algorithm::LeakyBucket),
        b in small_policy(Algorithm::LeakyBucket),
        steps in steps(),
        change in 0usize..120,
    ) {
        let admitted = replay(&a, &b, change, &steps);
        let own = |p: &Policy, d: u64| {
            let (l, w) = (p.limit(), p.window_us());
            if l <= w { 1 + (l * (d - 1)).div_ceil(w) } else { (l * d).div_ceil(w) }
        };
        let departures: Vec<_> = admitted
            .iter()
            .map(|x| {
                (x.decision.time_us + x.decision.wait.as_micros() as u64, 1)
            })
            .collect();
        check_interval_bound(&departures, |d| own(&a, d) + own(&b, d), "leaky bucket departures")?;
    }

    /// Any change, of algorithm too: within `min(W_A, W_B)` µs, at most
    /// the sum of the two policies' own bounds on admitted units.
    #[test]
    fn any_change_admits_at_most_both_bounds(
        a in any_small_policy(),
        b in any_small_policy(),
        steps in steps(),
        change in 0usize..120,
    ) {
        let admitted = replay(&a, &b, change, &steps);
        let w = a.window_us().min(b.window_us());
        let bound = |d: u64| if d <= w { own_bound(&a, d) + own_bound(&b, d) } else { u64::MAX };
        let points: Vec<_> = admitted.iter().map(|x| (x.t_eff, x.cost)).collect();
        check_interval_bound(&points, bound, "any change")?;
    }

    /// Any change: the units the old policy counts at the change are what
    /// the new one counts, up to its maximum cost; more room only where
    /// the new window of a sliding log is shorter (its units leave at
    /// their own times).
    #[test]
    fn the_used_units_are_carried(
        a in any_small_policy(),
        b in any_small_policy(),
        steps in steps(),
        delta in 0u64..60,
    ) {
        let (state, t) = state_after(&a, &steps);
        let t = t + delta;
        let changed = state.change_policy(&a, &b, t);
        let (before, after) = (used(&a, &state, t), used(&b, &changed, t));
        let carried = before.min(b.max_cost());
        let shorter_log = a.algorithm() == Algorithm::SlidingLog
            && b.algorithm() == Algorithm::SlidingLog
            && b.window_us() < a.window_us();
        if shorter_log {
            prop_assert!(after <= carried, "{} -> {}: {} used, {} counted", a, b, before, after);
        } else {
            prop_assert_eq!(after, carried, "{} -> {}: {} used", a, b, before);
        }
    }

    /// A state the old policy has reset converts to a fresh one, so a
    /// dropped state and a kept one still decide alike (docs/spec.md rule
    /// 2.5); and the new policy's decisions on a converted state are exact
    /// (its `reset_after` and `retry_after`).
    #[test]
    fn expiry_stays_invisible_across_a_change(
        a in any_small_policy(),
        b in any_small_policy(),
        steps in steps(),
        delta in 0u64..200,
    ) {
        let (state, t) = state_after(&a, &steps);
        let t = t + delta;
        let changed = state.change_policy(&a, &b, t);
        if is_fresh(&a, &state, t) {
            prop_assert!(is_fresh(&b, &changed, t), "{} -> {} at {}: {:?}", a, b, t, changed);
        }
        for cost in 1..=b.max_cost() {
            let mut after = changed.clone();
            let decision = after.acquire(&b, t, cost).unwrap();
            let reset_at = t + decision.reset_after.as_micros() as u64;
            prop_assert!(is_fresh(&b, &after, reset_at));
            if decision.reset_after > Duration::ZERO {
                prop_assert!(!is_fresh(&b, &after, reset_at - 1));
            }
            if !decision.allowed {
                let retry_at = t + decision.retry_after.as_micros() as u64;
                prop_assert!(after.peek(&b, retry_at, cost).unwrap().allowed);
                prop_assert!(!after.peek(&b, retry_at - 1, cost).unwrap().allowed);
            }
        }
    }

    /// Policies whose ticks are 1 to 1,000 µs and whose numbers reach the
    /// exact range's bound (docs/spec.md section 5), changed from one to
    /// another: no overflow, the units carried (a sliding log's entries may
    /// round out of a window of another tick: fewer), and the decisions on
    /// the state taken over exact.
    #[test]
    fn a_change_between_ticks_carries_the_units_exactly(
        a in big_policy(),
        b in big_policy(),
        steps in prop::collection::vec((0u64..=1_000, 0u64..=1_000), 1..40),
        delta in 0u64..=1_000,
    ) {
        let mut state = KeyState::fresh(&a);
        let (per_step, big) = (a.window_us() / 500 + 1, a.max_cost() / 3 + 1);
        let mut t = 1_000_000_000;
        for (step, share) in steps {
            t += step * per_step;
            let _ = state.acquire(&a, t, 1 + share * big / 1_000);
        }
        let t = t + delta * per_step;
        let changed = state.change_policy(&a, &b, t);
        let (before, after) = (used(&a, &state, t), used(&b, &changed, t));
        let carried = before.min(b.max_cost());
        if a.algorithm() == Algorithm::SlidingLog && b.algorithm() == Algorithm::SlidingLog {
            prop_assert!(after <= carried, "{} -> {}: {} used, {} counted", a, b, before, after);
        } else {
            prop_assert_eq!(after, carried, "{} -> {}: {} used", a, b, before);
        }
        for cost in [1, b.max_cost() / 2 + 1, b.max_cost()] {
            let decision = changed.peek(&b, t, cost).unwrap();
            if !decision.allowed {
                let retry_at = t + decision.retry_after.as_micros() as u64;
                prop_assert!(changed.peek(&b, retry_at, cost).unwrap().allowed);
                prop_assert!(!changed.peek(&b, retry_at - 1, cost).unwrap().allowed);
            }
        }
    }

    /// A policy changed to itself decides every later request as the state it had does.
    #[test]
    fn a_change_to_the_same_policy_changes_no_decision(
        a in any_small_policy(),
        before in steps(),
        after in prop::collection::vec((0i64..=30, 1u64..=12), 1..60),
    ) {
        let (state, mut t) = state_after(&a, &before);
        let (mut kept, mut changed) = (state.clone(), state.change_policy(&a, &a, t));
        for (delta, cost) in after {
            t += delta as u64;
            prop_assert_eq!(kept.acquire(&a, t, cost).ok(), changed.acquire(&a, t, cost).ok(), "{} at {}", a, t);
        }
    }
}

/// The examples of docs/spec.md section 9 on every algorithm: 90 of 100
/// used this minute, then a plan of 50 a minute refuses, and a plan of
/// 1,000 a minute admits 910 more and no more.
#[test]
fn ninety_of_a_hundred_used_carry_to_a_smaller_and_a_bigger_plan() {
    let minute = Duration::from_secs(60);
    for algorithm in Algorithm::ALL {
        let plan = |limit| Policy::new(algorithm, Rate::new(limit, minute)).unwrap();
        let (hundred, fifty, thousand) = (plan(100), plan(50), plan(1_000));
        let mut key = KeyState::fresh(&hundred);
        assert!(key.acquire(&hundred, 1_000_000, 90).unwrap().allowed);
        let t = 1_000_001;

        let mut smaller = key.change_policy(&hundred, &fifty, t);
        let refused = smaller.acquire(&fifty, t, 1).unwrap();
        assert!(!refused.allowed, "{algorithm}: {refused:?}");
        assert_eq!(refused.remaining, 0, "{algorithm}");

        let mut bigger = key.change_policy(&hundred, &thousand, t);
        assert!(
            !bigger.peek(&thousand, t, 911).unwrap().allowed,
            "{algorithm}"
        );
        assert!(
            bigger.acquire(&thousand, t, 910).unwrap().allowed,
            "{algorithm}"
        );
        assert!(
            !bigger.acquire(&thousand, t, 1).unwrap().allowed,
            "{algorithm}"
        );
    }
}

/// The smaller plan refuses until its window allows: a sliding log of 50
/// a minute after 90 used admits again only once 41 have left its window,
/// that is when the 90 admitted together leave it.
#[test]
fn a_smaller_plan_refuses_until_its_window_allows() {
    let hundred: Policy = "sliding-log:100/1m".parse().unwrap();
    let fifty: Policy = "sliding-log:50/1m".parse().unwrap();
    let mut key = KeyState::fresh(&hundred);
    key.acquire(&hundred, 0, 90).unwrap();
    let mut key = key.change_policy(&hundred, &fifty, 30_000_000);
    let refused = key.acquire(&fifty, 30_000_000, 1).unwrap();
    assert_eq!(refused.retry_after, Duration::from_secs(30));
    assert!(!key.acquire(&fifty, 59_999_999, 1).unwrap().allowed);
    assert_eq!(key.acquire(&fifty, 60_000_000, 50).unwrap().remaining, 0);
}

/// The fixed window's bound is reached: the last microsecond of one window
/// of the old policy, the first of the new policy's window across the
/// change (which counts nothing the old window has let go) and the first
/// of its next window admit a limit each.
#[test]
fn a_fixed_window_admits_three_limits_within_three_microseconds_across_a_change() {
    let a: Policy = "fixed-window:5/10us".parse().unwrap();
    let b: Policy = "fixed-window:5/3us".parse().unwrap();
    let mut key = KeyState::fresh(&a);
    assert!(key.acquire(&a, 19, 5).unwrap().allowed);
    let mut key = key.change_policy(&a, &b, 20);
    assert!(key.acquire(&b, 20, 5).unwrap().allowed);
    assert!(key.acquire(&b, 21, 5).unwrap().allowed);
}

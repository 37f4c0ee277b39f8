//! The rule of docs/spec.md section 10, proven over arbitrary traces of
//! requests and charges: a charge is counted whatever the key has left, a
//! bucket's debt is paid back at its rate and is at most one full bucket,
//! the decisions after a charge are exact, and charges never let a window
//! admit more than the bounds of section 4.

#[path = "small_policy/mod.rs"]
mod small_policy;

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Policy};
use proptest::prelude::*;
use small_policy::{any_small_policy, small_policy};
use std::time::Duration;

/// One step: a time step in µs (sometimes back), a cost, and whether it
/// is a charge after the fact (of up to 30 units) rather than a request.
fn steps() -> impl Strategy<Value = Vec<(i64, u64, bool)>> {
    let delta = prop_oneof![4 => Just(0i64), 6 => 0i64..=20, 2 => 0i64..=80, 1 => -20i64..=0];
    let cost = prop_oneof![6 => Just(1u64), 3 => 1u64..=12, 1 => 1u64..=30];
    prop::collection::vec((delta, cost, prop::bool::weighted(0.3)), 1..120)
}

/// Replays `steps` from time 1,000 on one key; returns the admitted
/// requests' effective times and costs, and the state and time after.
fn replay(policy: &Policy, steps: &[(i64, u64, bool)]) -> (Vec<(u64, u64)>, KeyState, u64) {
    let mut state = KeyState::fresh(policy);
    let (mut t, mut admitted) = (1_000u64, Vec::new());
    for &(delta, cost, charge) in steps {
        t = t.saturating_add_signed(delta);
        if charge {
            state.charge(policy, t, cost).unwrap();
            continue;
        }
        let t_eff = t.max(state.stamp());
        if let Ok(decision) = state.acquire(policy, t, cost) {
            if decision.allowed {
                admitted.push((t_eff, cost));
            }
        }
    }
    (admitted, state, t)
}

/// The most `policy` admits within `d` consecutive µs (docs/spec.md
/// section 4; a leaky bucket's admissions, bounded as a token bucket's).
fn own_bound(policy: &Policy, d: u64) -> u64 {
    let (l, w, max) = (policy.limit(), policy.window_us(), policy.max_cost());
    match policy.algorithm() {
        Algorithm::FixedWindow if d <= w => 2 * l,
        Algorithm::SlidingLog if d <= w => l,
        Algorithm::FixedWindow | Algorithm::SlidingLog => u64::MAX,
        Algorithm::SlidingCounter => l + l * d / w,
        _ => max + l * (d - 1) / w,
    }
}

/// The units `policy` counts against the key as it stands at `t`.
fn used(policy: &Policy, state: &KeyState, t: u64) -> u64 {
    let peek = state.peek(policy, t, 1).unwrap();
    let stands = if peek.allowed {
        peek.remaining + 1
    } else {
        peek.remaining
    };
    policy.max_cost() - stands
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Charges between the requests never let any `d` consecutive µs
    /// admit more than the policy's own bound.
    #[test]
    fn charges_never_add_admissions(
        (policy, steps) in any_small_policy().prop_flat_map(|p| (Just(p), steps()))
    ) {
        let (mut admitted, _, _) = replay(&policy, &steps);
        admitted.sort_unstable();
        for (i, &(start, _)) in admitted.iter().enumerate() {
            let mut sum = 0;
            for &(at, units) in &admitted[i..] {
                sum += units;
                let d = at - start + 1;
                prop_assert!(sum <= own_bound(&policy, d), "{}: {} in {} µs", policy, sum, d);
            }
        }
    }

    /// A charge is counted: the key counts `min(used + n, M)` units just
    /// after it, whatever it had left.
    #[test]
    fn a_charge_is_counted_whatever_is_left(
        (policy, steps) in any_small_policy().prop_flat_map(|p| (Just(p), steps())),
        units in 1u64..=40,
        delta in 0u64..=40,
    ) {
        let (_, mut state, t) = replay(&policy, &steps);
        let t = (t + delta).max(state.stamp());
        let before = used(&policy, &state, t);
        state.charge(&policy, t, units).unwrap();
        prop_assert_eq!(used(&policy, &state, t), (before + units).min(policy.max_cost()));
    }

    /// A bucket owes what it could not count: a request of `c` is refused
    /// until the debt (rounded up to whole ticks, at most one fill time
    /// `ceil(M*W / L)`) and then `c` units are paid back at the policy's
    /// rate, exactly.
    #[test]
    fn a_bucket_pays_its_debt_back_at_its_rate(
        (policy, steps) in prop::sample::select(vec![Algorithm::TokenBucket, Algorithm::LeakyBucket])
            .prop_flat_map(small_policy)
            .prop_flat_map(|p| (Just(p), steps())),
        units in 1u64..=40,
        cost in 1u64..=12,
    ) {
        prop_assume!(cost <= policy.max_cost());
        let (_, mut state, t) = replay(&policy, &steps);
        let t = t.max(state.stamp());
        let (w, l, max) = (policy.window_us(), policy.limit(), policy.max_cost());
        let (full, fill, charged) = (max * w, (max * w).div_ceil(l), units.min(2 * max) * w);
        // Scaled by W: what the charge leaves, and what it owes beyond.
        let (left, owed) = match &state {
            KeyState::TokenBucket(bucket) => {
                let level = full.min(bucket.scaled_tokens() + (t - bucket.last()).min(fill) * l);
                (level.saturating_sub(charged), charged.saturating_sub(level))
            }
            KeyState::LeakyBucket(bucket) => {
                let queued = bucket.scaled_queued().saturating_sub((t - bucket.last()).min(fill) * l) + charged;
                (full - queued.min(full), queued.saturating_sub(full))
            }
            _ => unreachable!("a bucket"),
        };
        state.charge(&policy, t, units).unwrap();
        let decision = state.peek(&policy, t, cost).unwrap();
        let expected = if owed > 0 {
            owed.div_ceil(l).min(fill) + (cost * w).div_ceil(l)
        } else {
            (cost * w).saturating_sub(left).div_ceil(l)
        };
        prop_assert_eq!(decision.retry_after.as_micros() as u64, expected, "{} owed {}", policy, owed);
        prop_assert_eq!(decision.allowed, expected == 0);
    }

    /// After any charges the decisions stay exact: `retry_after` and
    /// `reset_after` as section 1 says, so expiry stays invisible.
    #[test]
    fn decisions_after_charges_are_exact(
        (policy, steps) in any_small_policy().prop_flat_map(|p| (Just(p), steps())),
        delta in 0u64..=40,
    ) {
        let (_, state, t) = replay(&policy, &steps);
        let t = t + delta;
        let fresh = KeyState::fresh(&policy);
        let is_fresh = |state: &KeyState, at: u64| {
            (1..=policy.max_cost()).all(|c| state.peek(&policy, at, c).ok() == fresh.peek(&policy, at, c).ok())
        };
        for cost in 1..=policy.max_cost() {
            let mut after = state.clone();
            let decision = after.acquire(&policy, t, cost).unwrap();
            let reset_at = t + decision.reset_after.as_micros() as u64;
            prop_assert!(is_fresh(&after, reset_at));
            if decision.reset_after > Duration::ZERO {
                prop_assert!(!is_fresh(&after, reset_at - 1));
            }
            if !decision.allowed {
                let retry_at = t + decision.retry_after.as_micros() as u64;
                prop_assert!(after.peek(&policy, retry_at, cost).unwrap().allowed);
                prop_assert!(!after.peek(&policy, retry_at - 1, cost).unwrap().allowed);
            }
        }
    }
}

/// The example of docs/spec.md section 10: 100 tokens estimated, 1,500
/// used; the 500 owed are paid back at 1,000 a second before anything else
/// is admitted.
#[test]
fn a_token_bucket_owes_what_a_response_used_beyond_it() {
    let tokens: Policy = "token-bucket:1000/1s".parse().unwrap();
    let mut key = KeyState::fresh(&tokens);
    assert!(key.acquire(&tokens, 0, 100).unwrap().allowed);
    key.charge(&tokens, 0, 1_400).unwrap();
    assert!(!key.acquire(&tokens, 499_999, 1).unwrap().allowed);
    assert!(!key.acquire(&tokens, 500_999, 1).unwrap().allowed);
    assert!(key.acquire(&tokens, 501_000, 1).unwrap().allowed);
    // A debt of more than a full bucket is capped at one: 3,000 more owe
    // at most a second.
    key.charge(&tokens, 501_000, 3_000).unwrap();
    assert!(!key.peek(&tokens, 1_501_999, 1).unwrap().allowed);
    assert!(key.peek(&tokens, 1_502_000, 1).unwrap().allowed);
}

/// A window algorithm counts a charge up to its limit in the window of
/// the charge, and refuses until the window lets the units go.
#[test]
fn a_sliding_log_refuses_until_the_charged_units_leave() {
    let log: Policy = "sliding-log:10/1s".parse().unwrap();
    let mut key = KeyState::fresh(&log);
    assert!(key.acquire(&log, 0, 4).unwrap().allowed);
    key.charge(&log, 500_000, 50).unwrap();
    let refused = key.acquire(&log, 500_000, 1).unwrap();
    assert_eq!((refused.allowed, refused.remaining), (false, 0));
    assert_eq!(refused.retry_after, Duration::from_secs(1));
    assert!(key.acquire(&log, 1_500_000, 10).unwrap().allowed);
    assert!(key.charge(&log, 0, 0).is_err());
}

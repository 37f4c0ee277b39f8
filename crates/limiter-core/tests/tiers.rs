//! Tiered limits (docs/spec.md section 7), proven over arbitrary sets of
//! two or three policies and arbitrary request sequences:
//!
//! - a set decides as the conjunction of its parts, each evaluated alone on
//!   its own state (the combined fields computed here from the spec, apart
//!   from `all_of`);
//! - a denial leaves every part unchanged, an admission commits every part;
//! - `retry_after` is exact: the same request is admitted at
//!   `t + retry_after` and not a microsecond earlier;
//! - every part's `reset_after` as it stands is exact, and the set's is the
//!   largest;
//! - over any interval, the admitted units are within every part's own
//!   bound: replayed alone on a fresh state, each part admits every request
//!   the set admitted (so docs/spec.md section 4 applies to each part).

use std::time::Duration;

use limiter_core::backend::{KeyState, SetState};
use limiter_core::{Algorithm, Decision, Error, Policies, Policy, Rate, MAX_TIME_US};
use proptest::prelude::*;

fn small_policy(algorithm: Algorithm) -> impl Strategy<Value = Policy> {
    (1u64..=10, 1u64..=40, 1u64..=10).prop_map(move |(limit, window, extra)| {
        let policy =
            Policy::new(algorithm, Rate::new(limit, Duration::from_micros(window))).unwrap();
        match algorithm {
            Algorithm::TokenBucket => policy.with_capacity(extra).unwrap(),
            Algorithm::LeakyBucket => policy.with_queue(extra).unwrap(),
            _ => policy,
        }
    })
}

fn small_set() -> impl Strategy<Value = Policies> {
    let part = prop::sample::select(Algorithm::ALL.to_vec()).prop_flat_map(small_policy);
    prop::collection::vec(part, 2..=3).prop_map(|parts| Policies::new(parts).unwrap())
}

/// `(delta µs, possibly backwards; cost, up to one above the largest part's max)`.
fn steps(policies: &Policies) -> impl Strategy<Value = Vec<(i64, u64)>> {
    let w = policies.iter().map(Policy::window_us).max().unwrap() as i64;
    let max = policies.iter().map(Policy::max_cost).max().unwrap();
    let delta = prop_oneof![4 => Just(0i64), 6 => 0..=w / 2 + 1, 2 => 0..=2 * w + 2, 1 => -w..=0];
    let cost = prop_oneof![6 => Just(1u64), 3 => 1..=max, 1 => 1..=max + 1];
    prop::collection::vec((delta, cost), 1..100)
}

fn set_and_steps() -> impl Strategy<Value = (Policies, Vec<(i64, u64)>)> {
    small_set().prop_flat_map(|p| {
        let s = steps(&p);
        (Just(p), s)
    })
}

/// Whether `state`, at `t` with no arrivals, decides as a fresh key: a
/// request of the largest cost peeks the same.
fn is_reset(policy: &Policy, state: &KeyState, t: u64) -> bool {
    let cost = policy.max_cost();
    state.peek(policy, t, cost).unwrap() == KeyState::fresh(policy).peek(policy, t, cost).unwrap()
}

/// The combined decision per docs/spec.md section 7, from the parts'
/// decisions alone (`alone`) and their resets as they stand (`stood`).
fn expected(
    alone: &[Decision],
    stood: &[Duration],
) -> (bool, u64, u64, usize, Duration, Duration, Duration) {
    let allowed = alone.iter().all(|d| d.allowed);
    let speaking: Vec<usize> = (0..alone.len())
        .filter(|&i| allowed || !alone[i].allowed)
        .collect();
    let remaining = speaking.iter().map(|&i| alone[i].remaining).min().unwrap();
    let bound = *speaking
        .iter()
        .find(|&&i| alone[i].remaining == remaining)
        .unwrap();
    let retry = speaking
        .iter()
        .map(|&i| alone[i].retry_after)
        .max()
        .unwrap();
    let reset = if allowed {
        alone.iter().map(|d| d.reset_after).max().unwrap()
    } else {
        stood.iter().copied().max().unwrap()
    };
    let wait = if allowed {
        alone.iter().map(|d| d.wait).max().unwrap()
    } else {
        Duration::ZERO
    };
    (
        allowed,
        remaining,
        alone[bound].limit,
        bound,
        retry,
        reset,
        wait,
    )
}

fn fields(set: &Decision) -> (bool, u64, u64, usize, Duration, Duration, Duration) {
    let d = set.clone();
    (
        d.allowed,
        d.remaining,
        d.limit,
        usize::from(d.bound_by),
        d.retry_after,
        d.reset_after,
        d.wait,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn a_set_decides_as_the_conjunction_of_its_parts((policies, steps) in set_and_steps()) {
        let mut set = SetState::fresh(&policies);
        let mut alone: Vec<KeyState> = policies.iter().map(KeyState::fresh).collect();
        let mut admissions = Vec::new();
        let mut t: u64 = 1_000;
        for (delta, cost) in steps {
            t = t.saturating_add_signed(delta).min(MAX_TIME_US);
            let before = set.clone();
            let peeked = set.peek(&policies, t, cost);
            let result = set.acquire(&policies, t, cost);
            // Each part alone, on its own state: the first error is the set's.
            let evaluated: Result<Vec<Decision>, Error> = policies
                .iter()
                .zip(&alone)
                .map(|(policy, state)| state.peek(policy, t, cost))
                .collect();
            let alone_decisions = match (evaluated, &result) {
                (Err(expected), Err(got)) => {
                    prop_assert_eq!(expected.to_string(), got.to_string());
                    prop_assert_eq!(&set, &before, "an error writes nothing");
                    continue;
                }
                (Ok(decisions), Ok(_)) => decisions,
                (expected, got) => {
                    return Err(TestCaseError::fail(format!("{policies}: alone {expected:?}, set {got:?}")));
                }
            };
            let got = result.unwrap();
            prop_assert_eq!(&peeked.unwrap(), &got, "peek answers what acquire does");
            let allowed = alone_decisions.iter().all(|d| d.allowed);
            // As they stand: an admitting part of a denied set is unchanged.
            let mut stood = Vec::new();
            for (i, (policy, state)) in policies.iter().zip(&alone).enumerate() {
                let part = &got.parts()[i];
                if !allowed && alone_decisions[i].allowed {
                    let reset = part.reset_after;
                    let micros = u64::try_from(reset.as_micros()).unwrap();
                    prop_assert!(part.allowed && part.remaining == alone_decisions[i].remaining + cost);
                    prop_assert!(is_reset(policy, state, t + micros), "{policy}: reset {reset:?} as it stands is late");
                    if micros > 0 {
                        prop_assert!(!is_reset(policy, state, t + micros - 1), "{policy}: reset {reset:?} as it stands is early");
                    }
                    stood.push(reset);
                } else {
                    prop_assert_eq!(part, &alone_decisions[i]);
                    stood.push(alone_decisions[i].reset_after);
                }
            }
            prop_assert_eq!(fields(&got), expected(&alone_decisions, &stood), "{} at {}µs cost {}", policies, t, cost);
            if allowed {
                for (policy, state) in policies.iter().zip(alone.iter_mut()) {
                    prop_assert!(state.acquire(policy, t, cost).unwrap().allowed);
                }
                admissions.push((t, cost));
            } else {
                prop_assert_eq!(&set, &before, "a denial leaves every part unchanged");
                // retry_after is exact: admitted then, not a microsecond earlier.
                let retry = u64::try_from(got.retry_after.as_micros()).unwrap();
                prop_assert!(retry > 0);
                prop_assert!(set.peek(&policies, t + retry, cost).unwrap().allowed,
                    "{} at {}µs cost {}: not admitted after retry_after {}µs", policies, t, cost, retry);
                prop_assert!(!set.peek(&policies, t + retry - 1, cost).unwrap().allowed,
                    "{} at {}µs cost {}: admitted before retry_after {}µs", policies, t, cost, retry);
            }
            prop_assert_eq!(set.parts(), &alone[..], "every part's state is its own");
        }
        // Within every part's own bound: each part alone admits all the set admitted.
        for policy in policies.iter() {
            let mut state = KeyState::fresh(policy);
            for &(t, cost) in &admissions {
                prop_assert!(state.acquire(policy, t, cost).unwrap().allowed, "{policy} alone denies an admission of the set at {t}µs");
            }
        }
    }

    #[test]
    fn a_set_of_one_decides_exactly_as_its_policy(
        (policy, steps) in prop::sample::select(Algorithm::ALL.to_vec())
            .prop_flat_map(small_policy)
            .prop_flat_map(|p| {
                let s = steps(&Policies::from(&p));
                (Just(p), s)
            })
    ) {
        let policies = Policies::from(&policy);
        let mut set = SetState::fresh(&policies);
        let mut alone = KeyState::fresh(&policy);
        let mut t: u64 = 1_000;
        for (delta, cost) in steps {
            t = t.saturating_add_signed(delta).min(MAX_TIME_US);
            let ours = set.acquire(&policies, t, cost);
            let theirs = alone.acquire(&policy, t, cost);
            prop_assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
        }
    }

    /// A peek on a key not held, made without its state
    /// (`SetState::peek_fresh`), answers as the fresh state's peek, errors
    /// included (cost 0, above a part's max, a time beyond the range).
    #[test]
    fn a_fresh_peek_answers_as_a_fresh_states_peek(
        policies in small_set(),
        t in prop_oneof![0u64..=1_000_000, Just(MAX_TIME_US), Just(MAX_TIME_US + 1)],
        cost in 0u64..=12,
    ) {
        let ours = SetState::peek_fresh(&policies, t, cost);
        let theirs = SetState::fresh(&policies).peek(&policies, t, cost);
        prop_assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
    }
}

#[test]
fn the_article_case_five_a_second_and_a_hundred_a_minute() {
    let tiers: Policies = "sliding-log:5/1s;sliding-log:100/1m".parse().unwrap();
    let mut key = SetState::fresh(&tiers);
    let mut admitted = 0;
    // One request every 10 ms for two minutes.
    for i in 0..12_000u64 {
        if key.acquire(&tiers, i * 10_000, 1).unwrap().allowed {
            admitted += 1;
        }
    }
    // At most 5 in any second, at most 100 in any minute: 100 per minute.
    assert_eq!(admitted, 200);
}

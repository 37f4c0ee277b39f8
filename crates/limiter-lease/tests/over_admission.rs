//! docs/spec.md section 8.2: several instances leasing from one exact
//! limiter admit, in every interval, at most the bound written there, for
//! every algorithm and for tiered sets.

mod fleet;

use std::time::Duration;

use fleet::{Instance, LeaseOptions};
use limiter_core::{Algorithm, Policies, Policy, Rate};
use proptest::prelude::*;

fn small_policy() -> impl Strategy<Value = Policy> {
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        1u64..=40,
        10u64..=120,
        1u64..=20,
    )
        .prop_map(|(algorithm, limit, window, extra)| {
            let policy = Policy::new(algorithm, Rate::new(limit, Duration::from_micros(window)))
                .expect("a small policy");
            match algorithm {
                Algorithm::TokenBucket => policy.with_capacity(extra).expect("a capacity"),
                Algorithm::LeakyBucket => policy.with_queue(extra).expect("a queue"),
                _ => policy,
            }
        })
}

/// One policy, or a tiered set of two.
fn policies() -> impl Strategy<Value = Policies> {
    prop::collection::vec(small_policy(), 1..=2).prop_map(|parts| Policies::new(parts).unwrap())
}

fn lease_options() -> impl Strategy<Value = LeaseOptions> {
    (1u64..=400, 1u64..=12)
        .prop_flat_map(|(lifetime_us, max_lease)| {
            (Just(lifetime_us), 1..=max_lease, Just(max_lease))
        })
        .prop_map(|(lifetime_us, min_lease, max_lease)| LeaseOptions {
            lifetime_us,
            min_lease,
            max_lease,
        })
}

/// An instance with its own delays, threshold and bursty requests.
fn instance(max_cost: u64) -> impl Strategy<Value = Instance> {
    let step = prop_oneof![4 => Just(0u64), 4 => 1u64..=4, 1 => 5u64..=40];
    let cost = prop_oneof![4 => Just(1u64), 1 => 1u64..=3].prop_map(move |cost| cost.min(max_cost));
    (
        0u64..=8,
        0u64..=8,
        0u8..=100,
        prop::collection::vec((step, cost), 1..60),
    )
        .prop_map(|(to_us, back_us, refill_percent, steps)| {
            let mut at = 0;
            let requests = steps
                .into_iter()
                .map(|(step, cost)| {
                    at += step;
                    (at, cost)
                })
                .collect();
            Instance {
                to_us,
                back_us,
                refill_percent,
                requests,
            }
        })
}

fn fleet() -> impl Strategy<Value = (Policies, LeaseOptions, Vec<Instance>)> {
    policies().prop_flat_map(|policies| {
        let max_cost = policies.max_cost();
        (
            Just(policies),
            lease_options(),
            prop::collection::vec(instance(max_cost), 1..=4),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn every_interval_admits_at_most_the_exact_bound_plus_the_lease_bound(
        (policies, lease, instances) in fleet()
    ) {
        let run = fleet::run(&policies, lease, &instances);
        prop_assert!(run.most_held <= run.max_lease, "{} held, M = {}", run.most_held, run.max_lease);
        let outcome = fleet::bound::check(
            &policies,
            &run.admitted,
            instances.len() as u64,
            run.max_lease,
            lease.lifetime_us,
        );
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}

//! docs/spec.md section 8.2, exhaustion: a key that runs out is decided
//! exactly. With nothing refilled during the run, several instances
//! leasing from one exact limiter admit at most its capacity, every unit
//! counted is admitted or still held (none admitted uncounted), and
//! demand beyond the capacity at every instance uses every unit.

mod fleet;

use std::time::Duration;

use fleet::{Instance, LeaseOptions};
use limiter_core::{Algorithm, Policies, Policy, Rate};
use proptest::prelude::*;

/// A window of 1,000 s: no unit comes back within the run.
const WINDOW: Duration = Duration::from_secs(1_000);

fn long_policy() -> impl Strategy<Value = Policy> {
    (
        prop::sample::select(Algorithm::ALL.to_vec()),
        1u64..=40,
        1u64..=40,
    )
        .prop_map(|(algorithm, limit, extra)| {
            let policy = Policy::new(algorithm, Rate::new(limit, WINDOW)).expect("a policy");
            match algorithm {
                Algorithm::TokenBucket => policy.with_capacity(extra).expect("a capacity"),
                Algorithm::LeakyBucket => policy.with_queue(extra).expect("a queue"),
                _ => policy,
            }
        })
}

/// Requests of 1 to 3 units, then one more of 1 unit than the key holds.
fn instance(max_cost: u64) -> impl Strategy<Value = Instance> {
    let cost = prop_oneof![3 => Just(1u64), 1 => 1u64..=3].prop_map(move |cost| cost.min(max_cost));
    (
        0u64..=8,
        0u64..=8,
        0u8..=100,
        prop::collection::vec((0u64..=3, cost), 0..40),
    )
        .prop_map(move |(to_us, back_us, refill_percent, steps)| {
            let mut at = 0;
            let mut requests: Vec<(u64, u64)> = steps
                .into_iter()
                .map(|(step, cost)| {
                    at += step;
                    (at, cost)
                })
                .collect();
            requests.extend((1..=max_cost + 1).map(|i| (at + i, 1)));
            Instance {
                to_us,
                back_us,
                refill_percent,
                requests,
            }
        })
}

fn fleet() -> impl Strategy<Value = (Policies, LeaseOptions, Vec<Instance>)> {
    (
        prop::collection::vec(long_policy(), 1..=2).prop_map(|parts| Policies::new(parts).unwrap()),
        1u64..=20,
    )
        .prop_flat_map(|(policies, max_lease)| {
            let max_cost = policies.max_cost();
            (
                Just(policies),
                (1..=max_lease).prop_map(move |min_lease| LeaseOptions {
                    lifetime_us: 1_000_000,
                    min_lease: Some(min_lease),
                    max_lease: Some(max_lease),
                    budget_percent: None,
                }),
                prop::collection::vec(instance(max_cost), 1..=4),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn an_exhausted_key_admits_exactly_its_capacity((policies, lease, instances) in fleet()) {
        let run = fleet::run(&policies, lease, &instances);
        let capacity = policies.max_cost();
        let admitted: u64 = run.admitted.iter().map(|&(_, units)| units).sum();
        prop_assert!(admitted <= capacity, "{} admitted, capacity {}", admitted, capacity);
        prop_assert_eq!(run.lapsed, 0, "no lease outlives the run");
        prop_assert_eq!(
            admitted + run.held + run.available,
            capacity,
            "every unit counted is admitted or held ({} admitted, {} held, {} left)",
            admitted,
            run.held,
            run.available
        );
        prop_assert_eq!(run.available, 0, "demand beyond the capacity takes every unit");
        prop_assert!(run.held <= instances.len() as u64 * run.max_lease);
        prop_assert!(!run.refused.is_empty(), "demand beyond the capacity is refused");
    }
}

//! docs/spec.md sections 8.2 and 8.6: several instances leasing from one
//! exact limiter admit, in every interval, at most the bound written
//! there, for every algorithm and for tiered sets, with the maximum lease
//! set or the over-admission budget's.

mod fleet;

use std::time::Duration;

use fleet::{Instance, LeaseOptions};
use limiter_core::{Algorithm, Policies, Policy, Rate};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;
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
            min_lease: Some(min_lease),
            max_lease: Some(max_lease),
            budget_percent: None,
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

/// The default options but the clock, or the default lifetime (250 ms,
/// thousands of these windows) and minimum lease with an over-admission
/// budget of its own: the maximum lease is the budget's share of the
/// smallest limit.
fn default_lease_options() -> impl Strategy<Value = LeaseOptions> {
    prop_oneof![
        Just(None),
        (0u32..=100_000).prop_map(|m| Some(f64::from(m) / 1_000.0))
    ]
    .prop_map(|budget_percent| LeaseOptions {
        lifetime_us: 250_000,
        min_lease: None,
        max_lease: None,
        budget_percent,
    })
}

/// The maximum lease an over-admission budget gives (1% by default):
/// `floor(L * percent / 100)` of the smallest limit, at least 1, at most
/// the max cost.
fn budgeted_max_lease(policies: &Policies, budget_percent: Option<f64>) -> u64 {
    let per_million = (budget_percent.unwrap_or(1.0) * 10_000.0).round() as u64;
    let smallest = policies.iter().map(Policy::limit).min().unwrap();
    (smallest * per_million / 1_000_000).clamp(1, policies.max_cost())
}

fn fleet() -> impl Strategy<Value = (Policies, LeaseOptions, Vec<Instance>)> {
    fleet_with(policies(), lease_options)
}

/// A fleet of 1 to 4 instances leasing with `options` on `policies`.
fn fleet_with<S: Strategy<Value = LeaseOptions>>(
    policies: impl Strategy<Value = Policies>,
    options: fn() -> S,
) -> impl Strategy<Value = (Policies, LeaseOptions, Vec<Instance>)> {
    policies.prop_flat_map(move |policies| {
        let max_cost = policies.max_cost();
        (
            Just(policies),
            options(),
            prop::collection::vec(instance(max_cost), 1..=4),
        )
    })
}

/// `policies` with limits 100 times [`small_policy`]'s, so that a budget
/// of a few percent leases a few units.
fn large_policies() -> impl Strategy<Value = Policies> {
    policies().prop_map(|policies| {
        let parts = policies.iter().map(|policy| {
            let rate = Rate::new(100 * policy.limit(), policy.window());
            let large = Policy::new(policy.algorithm(), rate).expect("a policy");
            match policy.algorithm() {
                Algorithm::TokenBucket => large.with_capacity(100 * policy.max_cost()),
                Algorithm::LeakyBucket => large.with_queue(100 * policy.max_cost()),
                _ => Ok(large),
            }
            .expect("a large policy")
        });
        Policies::new(parts).unwrap()
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
        let outcome = limiter_test::lease_bound::check(
            &policies,
            &run.admitted,
            instances.len() as u64,
            run.max_lease,
            lease.lifetime_us,
        );
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }

    #[test]
    fn at_the_default_options_every_interval_admits_at_most_the_budgeted_bound(
        (policies, lease, instances) in prop_oneof![
            fleet_with(policies(), default_lease_options),
            fleet_with(large_policies(), default_lease_options),
        ]
    ) {
        let run = fleet::run(&policies, lease, &instances);
        prop_assert_eq!(run.max_lease, budgeted_max_lease(&policies, lease.budget_percent));
        prop_assert!(run.most_held <= run.max_lease, "{} held, M = {}", run.most_held, run.max_lease);
        let outcome = limiter_test::lease_bound::check(
            &policies,
            &run.admitted,
            instances.len() as u64,
            run.max_lease,
            lease.lifetime_us,
        );
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}

/// The maximum lease by default: the over-admission budget's share (1% by
/// default) of the smallest limit, at least one unit; a maximum lease set
/// replaces it.
#[test]
fn the_default_maximum_lease_is_the_budgets_share_of_the_smallest_limit() {
    let leased = |policies: &str, budget_percent: Option<f64>| {
        let policies: Policies = policies.parse().unwrap();
        let builder = Leased::builder(MemoryLimiter::new(policies));
        match budget_percent {
            Some(percent) => builder.over_admission_budget(percent).build(),
            None => builder.build(),
        }
    };
    let max_lease = |policies, budget_percent| leased(policies, budget_percent).max_lease();
    assert_eq!(max_lease("token-bucket:10000/1s", None), 100);
    assert_eq!(
        max_lease("sliding-log:5000/1s;sliding-log:100000/1m", None),
        50
    );
    assert_eq!(
        max_lease("sliding-log:150/1s", None),
        1,
        "at least one unit"
    );
    assert_eq!(max_lease("token-bucket:10000/1s", Some(0.25)), 25);
    assert_eq!(max_lease("token-bucket:10000/1s", Some(100.0)), 10_000);
    assert_eq!(max_lease("token-bucket:10000/1s", Some(250.0)), 10_000);
    assert_eq!(max_lease("token-bucket:10000/1s", Some(f64::NAN)), 1);
    // The budget in force: M's share of the smallest limit.
    assert_eq!(
        leased("token-bucket:10000/1s", None).over_admission_budget(),
        1.0
    );
    assert_eq!(
        leased("sliding-log:50/1s", None).over_admission_budget(),
        2.0
    );
    let global = MemoryLimiter::new("token-bucket:10000/1s".parse::<Policy>().unwrap());
    let set = Leased::builder(global)
        .max_lease(500)
        .over_admission_budget(0.1)
        .build();
    assert_eq!(
        set.max_lease(),
        500,
        "a maximum lease set replaces the budget's"
    );
    assert_eq!(set.over_admission_budget(), 5.0);
}

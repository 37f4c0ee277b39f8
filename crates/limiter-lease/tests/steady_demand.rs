//! docs/spec.md section 8.3: under steady demand that leaves `N * M`
//! units of room in every window (for the buckets, of the capacity or
//! queue), instances leasing from one exact limiter refuse nothing; the
//! exact limiter, asked the same requests, admits them all.

mod fleet;

use std::time::Duration;

use fleet::{Instance, LeaseOptions};
use limiter_core::{Algorithm, ManualClock, Policies, Policy, Rate};
use limiter_memory::MemoryLimiter;
use proptest::prelude::*;

/// A run of this many windows.
const WINDOWS: u64 = 5;

fn policy(algorithm: Algorithm, limit: u64, window_us: u64) -> Policy {
    Policy::new(
        algorithm,
        Rate::new(limit, Duration::from_micros(window_us)),
    )
    .expect("a policy")
}

/// One policy, or a tiered set of two with the second window longer.
fn policies(limit: u64, window_us: u64) -> impl Strategy<Value = Policies> {
    let algorithm = || prop::sample::select(Algorithm::ALL.to_vec());
    prop_oneof![
        algorithm().prop_map(move |a| Policies::from(policy(a, limit, window_us))),
        (algorithm(), algorithm()).prop_map(move |(a, b)| {
            Policies::new([
                policy(a, limit, window_us),
                policy(b, 3 * limit, 3 * window_us),
            ])
            .unwrap()
        }),
    ]
}

/// `N` instances each sending one unit every `period` µs (at least the
/// period that keeps `sum(W / period + 1) + N * M <= L`), from its own
/// phase, with its own delays; leases that live for several periods.
fn fleet() -> impl Strategy<Value = (Policies, LeaseOptions, Vec<Instance>)> {
    (1u64..=3, 1u64..=4, 40u64..=200)
        .prop_flat_map(|(instances, max_lease, window_us)| {
            let room = instances * (max_lease + 1);
            (
                Just((instances, max_lease, window_us)),
                room + 1..=room + 12,
            )
        })
        .prop_flat_map(|((instances, max_lease, window_us), limit)| {
            let spare = limit - instances * (max_lease + 1);
            let shortest = (window_us * instances).div_ceil(spare);
            let one = (
                0u64..=3,
                0u64..=3,
                0u8..=100,
                shortest..=shortest * 3,
                0u64..=window_us,
            )
                .prop_map(
                    move |(to_us, back_us, refill_percent, period, phase)| Instance {
                        to_us,
                        back_us,
                        refill_percent,
                        requests: (phase..WINDOWS * window_us)
                            .step_by(period as usize)
                            .map(|at| (at, 1))
                            .collect(),
                    },
                );
            (
                policies(limit, window_us),
                // Long enough for a lease to serve several requests of the
                // slowest instance (period at most 3 * shortest).
                (12 * shortest..=24 * shortest).prop_map(move |lifetime_us| LeaseOptions {
                    lifetime_us,
                    min_lease: Some(1),
                    max_lease: Some(max_lease),
                    budget_percent: None,
                }),
                prop::collection::vec(one, instances as usize),
            )
        })
}

/// The lifetime of a lease by default, in µs.
const DEFAULT_LIFETIME_US: u64 = 250_000;

/// As [`fleet`], at the default options but the clock: the maximum lease
/// is the default over-admission budget's, 1% of a limit of 500 to 3,000
/// per window (5 to 30 units), and leases live for the default 250 ms,
/// hundreds of windows.
fn fleet_at_defaults() -> impl Strategy<Value = (Policies, LeaseOptions, Vec<Instance>)> {
    (1u64..=3, 5u64..=30, 40u64..=200).prop_flat_map(|(instances, max_lease, window_us)| {
        let limit = 100 * max_lease;
        let spare = limit - instances * (max_lease + 1);
        let shortest = (window_us * instances).div_ceil(spare);
        let one = (
            0u64..=3,
            0u64..=3,
            shortest..=shortest * 3,
            0u64..=window_us,
        )
            .prop_map(move |(to_us, back_us, period, phase)| Instance {
                to_us,
                back_us,
                refill_percent: 25,
                requests: (phase..WINDOWS * window_us)
                    .step_by(period as usize)
                    .map(|at| (at, 1))
                    .collect(),
            });
        (
            policies(limit, window_us),
            Just(LeaseOptions {
                lifetime_us: DEFAULT_LIFETIME_US,
                min_lease: None,
                max_lease: None,
                budget_percent: None,
            }),
            prop::collection::vec(one, instances as usize),
        )
    })
}

/// Whether the exact limiter admits every request of `instances`, each at
/// its arrival.
fn exact_admits_all(policies: &Policies, instances: &[Instance]) -> bool {
    let clock = ManualClock::new(0);
    let exact = MemoryLimiter::builder(policies.clone())
        .clock(clock.clone())
        .build();
    let mut requests: Vec<(u64, u64)> = instances
        .iter()
        .flat_map(|instance| instance.requests.iter().copied())
        .collect();
    requests.sort_unstable();
    requests.into_iter().all(|(at, cost)| {
        clock.set(at);
        exact
            .try_acquire(fleet::KEY.as_bytes(), cost)
            .expect("a valid request")
            .allowed
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn demand_leaving_room_for_the_leases_is_never_refused((policies, lease, instances) in fleet()) {
        prop_assert!(exact_admits_all(&policies, &instances), "the demand is within the limit");
        let run = fleet::run(&policies, lease, &instances);
        prop_assert!(
            run.refused.is_empty(),
            "{} refused, first at {:?}; {} of {} units from leases",
            run.refused.len(),
            run.refused.first(),
            run.leased,
            run.admitted.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn demand_leaving_room_for_the_default_leases_is_never_refused(
        (policies, lease, instances) in fleet_at_defaults()
    ) {
        prop_assert!(exact_admits_all(&policies, &instances), "the demand is within the limit");
        let run = fleet::run(&policies, lease, &instances);
        let smallest = policies.iter().map(|policy| policy.limit()).min().unwrap();
        prop_assert_eq!(run.max_lease, smallest / 100, "1% of the smallest limit");
        prop_assert!(
            run.refused.is_empty(),
            "{} refused, first at {:?}; {} of {} units from leases",
            run.refused.len(),
            run.refused.first(),
            run.leased,
            run.admitted.len()
        );
    }
}

/// The steady demand above, decided mostly from leases: 3 instances at one
/// unit every 10 µs (300 per ms) against 400 per ms, leases of up to 8 living 200 µs.
#[test]
fn steady_demand_is_decided_from_leases() {
    let policies = Policies::from(policy(Algorithm::SlidingLog, 400, 1_000));
    let lease = LeaseOptions {
        lifetime_us: 200,
        min_lease: Some(1),
        max_lease: Some(8),
        budget_percent: None,
    };
    let instances: Vec<Instance> = (0..3)
        .map(|i| Instance {
            to_us: 2,
            back_us: 3,
            refill_percent: 25,
            requests: (i..10_000).step_by(10).map(|at| (at, 1)).collect(),
        })
        .collect();
    assert!(exact_admits_all(&policies, &instances));
    let run = fleet::run(&policies, lease, &instances);
    assert!(run.refused.is_empty(), "{:?}", run.refused);
    let admitted = run.admitted.len() as u64;
    assert!(run.lapsed <= 3 * 8, "{} units lapsed", run.lapsed);
    assert!(
        run.leased * 10 >= admitted * 8,
        "{} of {} units from leases",
        run.leased,
        admitted
    );
}

//! docs/spec.md section 8.5: under steady demand a key's lease reaches its
//! steady size within `1 + ceil(log2 M)` lease requests, whatever the
//! round trip to the global limiter, and a fleet ends in the same state
//! from a cold and from a warm start; callers that wait for each answer
//! take off at the default options where leases sized by their arrivals
//! alone would stay at one unit. Instances behind fixed round trips on a
//! manual clock; the global limiter never denies.

mod fleet;

use fleet::{Instance, LeaseOptions, Run};
use limiter_core::{DecisionSource, Policies, Policy, Rate};

/// `M` in these runs.
const MAX_LEASE: u64 = 64;

/// The lease requests that reach `M` from cold: `1 + ceil(log2 M)`.
const LEASES_TO_FULL: usize = 1 + MAX_LEASE.next_power_of_two().trailing_zeros() as usize;

/// A limit no run reaches: only the leases' sizing is at work.
fn unlimited() -> Policies {
    Policies::from(Policy::token_bucket(Rate::per_second(1_000_000_000)).unwrap())
}

/// A lifetime in which `M` units are asked for at least twice over half a
/// lifetime (`T >= 4 * M * period`), and a lease outlives its round trip.
fn lifetime_us(period_us: u64, round_trip_us: u64) -> u64 {
    4 * MAX_LEASE * period_us + 4 * round_trip_us
}

/// One unit every `period_us` from `from_us` to `until_us`, behind a round
/// trip of `round_trip_us`; the refill threshold at 0, so that each lease
/// is asked with nothing in hand and is the whole of what sizing gives.
fn steady(round_trip_us: u64, period_us: u64, from_us: u64, until_us: u64) -> Instance {
    Instance {
        to_us: round_trip_us / 2,
        back_us: round_trip_us - round_trip_us / 2,
        refill_percent: 0,
        requests: (from_us..until_us)
            .step_by(period_us as usize)
            .map(|at| (at, 1))
            .collect(),
    }
}

fn options(lifetime_us: u64) -> LeaseOptions {
    LeaseOptions {
        lifetime_us,
        min_lease: Some(1),
        max_lease: Some(MAX_LEASE),
        budget_percent: None,
    }
}

/// The sizes of the leases instance `i` asked, in order: every call of
/// more than one unit (requests are of one unit), and the first call,
/// the first lease, of one.
fn leases(run: &Run, i: usize) -> Vec<(u64, u64)> {
    let sent = &run.sent[i];
    sent.iter()
        .take(1)
        .chain(sent.iter().skip(1).filter(|&&(_, cost)| cost > 1))
        .copied()
        .collect()
}

#[test]
fn a_key_under_steady_demand_reaches_its_steady_lease_whatever_the_round_trip() {
    for round_trip_us in [2, 10, 50, 200] {
        for period_us in [1, 3, 40] {
            let lifetime_us = lifetime_us(period_us, round_trip_us);
            let until_us = 4 * lifetime_us;
            let instance = steady(round_trip_us, period_us, 0, until_us);
            let run = fleet::run(&unlimited(), options(lifetime_us), &[instance]);
            let leases = leases(&run, 0);
            let case = format!("round trip {round_trip_us} µs, a unit every {period_us} µs");
            // The second lease counts every request that arrived while the
            // first was in flight, though the global limiter, at their own
            // cost, had not answered them yet: twice them, up to M.
            let in_flight = (round_trip_us / period_us).saturating_sub(1);
            assert!(
                leases[1].1 >= MAX_LEASE.min(2 * in_flight),
                "{case}: {leases:?}"
            );
            // Each lease at least doubles the last one's size until M.
            for (k, &(_, size)) in leases.iter().enumerate().take(LEASES_TO_FULL) {
                assert!(
                    size >= MAX_LEASE.min(1 << k),
                    "{case}: lease {} of {size} units: {leases:?}",
                    k + 1
                );
            }
            assert!(
                leases[LEASES_TO_FULL - 1..]
                    .iter()
                    .all(|&(_, size)| size == MAX_LEASE),
                "{case}: {leases:?}"
            );
            // The first lease of M within `K * (R + P) + 2 * M * P`
            // (docs/spec.md section 8.5), one more µs a lease for the
            // simulation's step.
            let (full_at, _) = leases.iter().find(|&&(_, size)| size == MAX_LEASE).unwrap();
            let most =
                LEASES_TO_FULL as u64 * (round_trip_us + period_us + 1) + 2 * MAX_LEASE * period_us;
            assert!(
                full_at <= &most,
                "{case}: full at {full_at} µs, not within {most}"
            );
            assert!(run.refused.is_empty(), "{case}");
        }
    }
}

/// The share, in tenths of a percent, of the requests that arrived from
/// `from_us` on that were decided from a lease, per instance.
fn leased_share(run: &Run, instances: usize, from_us: u64) -> Vec<u64> {
    (0..instances)
        .map(|i| {
            let late: Vec<_> = run
                .sources
                .iter()
                .filter(|&&(j, at, _)| j == i && at >= from_us)
                .collect();
            let leased = late
                .iter()
                .filter(|&&&(_, _, source)| source == DecisionSource::Lease)
                .count();
            (leased * 1_000 / late.len().max(1)) as u64
        })
        .collect()
}

#[test]
fn a_fleet_at_the_same_demand_ends_alike_from_a_cold_and_a_warm_start() {
    // Three instances with their own round trips and rates. Warm: a long
    // while at a fortieth of the demand first (small leases, sized from
    // few requests), then the demand; cold: the demand alone, from the
    // same moment.
    let shapes = [(4, 1), (30, 2), (120, 3)];
    let lifetime_us = shapes
        .iter()
        .map(|&(round_trip, period)| lifetime_us(period, round_trip))
        .max()
        .unwrap();
    let start_us = 3 * lifetime_us;
    let end_us = start_us + 3 * lifetime_us;
    let cold: Vec<Instance> = shapes
        .iter()
        .map(|&(round_trip, period)| steady(round_trip, period, start_us, end_us))
        .collect();
    let warm: Vec<Instance> = shapes
        .iter()
        .map(|&(round_trip, period)| {
            let quiet = steady(round_trip, 40 * period, 0, start_us);
            let mut instance = steady(round_trip, period, start_us, end_us);
            instance.requests = [quiet.requests, instance.requests].concat();
            instance
        })
        .collect();
    let runs = [
        fleet::run(&unlimited(), options(lifetime_us), &cold),
        fleet::run(&unlimited(), options(lifetime_us), &warm),
    ];
    // The last lifetime of the run: the state each start ends in.
    let late_us = end_us - lifetime_us;
    let [cold_end, warm_end] = runs.each_ref().map(|run| {
        let sizes: Vec<Vec<u64>> = (0..shapes.len())
            .map(|i| {
                let asked = leases(run, i);
                asked
                    .iter()
                    .filter(|&&(at, _)| at >= late_us)
                    .map(|&(_, size)| size)
                    .collect()
            })
            .collect();
        (sizes, leased_share(run, shapes.len(), late_us))
    });
    for (start, end) in [("cold", &cold_end), ("warm", &warm_end)] {
        for (i, sizes) in end.0.iter().enumerate() {
            assert!(!sizes.is_empty(), "{start} {i} asks leases to the end");
            assert!(
                sizes.iter().all(|&size| size == MAX_LEASE),
                "{start} {i}: {sizes:?}"
            );
        }
    }
    assert_eq!(cold_end.1, warm_end.1, "the same share from leases");
    assert!(
        cold_end.1.iter().all(|&share| share >= 900),
        "leases took off: {:?} tenths of a percent",
        cold_end.1
    );
}

#[test]
fn a_closed_loop_too_slow_for_leases_above_a_unit_takes_off_at_the_defaults() {
    // 8 callers over 1,000 keys behind a round trip of 1 ms: at the
    // global limiter's speed each key is asked every 125 ms, once per half
    // of the default lifetime, which sizes no lease above one unit
    // (docs/spec.md section 8.5). The default minimum lease, the maximum
    // lease's share of a lifetime, starts each key on a lease of 25.
    let policies = Policies::from(Policy::token_bucket(Rate::per_second(10_000)).unwrap());
    let run = fleet::closed_loop(&policies, 8, 1_000, 1_000, 5_000);
    assert_eq!((run.min_lease, run.max_lease), (25, 100), "{run:?}");
    assert_eq!(run.decisions, 8 * 5_000);
    // Fixed work: 5,000 decisions a caller, a key asked 40 times; the
    // first of each key's requests fetches its first lease.
    assert!(
        run.leased * 10 >= run.decisions * 9,
        "{} of {} decisions from leases: {run:?}",
        run.leased,
        run.decisions
    );
    let calls = run.stats.leases + run.stats.exact;
    assert!(
        calls * 10 <= run.decisions,
        "{calls} calls to the global limiter for {} decisions: {run:?}",
        run.decisions
    );
}

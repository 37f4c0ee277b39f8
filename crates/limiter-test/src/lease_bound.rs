//! The over-admission bound of leased quota (docs/spec.md section 8.2),
//! checked on the units a run of leasing instances admitted: by
//! limiter-lease's simulated fleets and by the fleets of `lease_worker`
//! processes on a real Redis (limiter-examples).

use limiter_core::{Algorithm, Policies, Policy};

/// `B(D)`: the most the exact policy admits in `D` consecutive ticks
/// (docs/spec.md sections 4 and 8.2), for every algorithm but the fixed
/// window (checked per aligned window).
fn exact_bound(policy: &Policy, ticks: u64) -> u64 {
    let (l, w) = (policy.limit(), policy.window_ticks());
    match policy.algorithm() {
        Algorithm::SlidingLog => l * ticks.div_ceil(w),
        Algorithm::SlidingCounter => l + l * ticks / w,
        // Token bucket (capacity) and leaky bucket (queue), on admissions.
        _ => policy.max_cost() + l * (ticks - 1) / w,
    }
}

/// The most units the bound lets `instances` leasing up to `max_lease`
/// units for `lifetime_us` admit in `ticks` consecutive ticks:
/// `min(B(d + tau), B(d) + N*M)`; for a fixed window, `L` in each aligned
/// window the ticks meet. A 1 µs tick.
pub fn most_admitted(
    policy: &Policy,
    ticks: u64,
    instances: u64,
    max_lease: u64,
    lifetime_us: u64,
) -> u64 {
    if policy.algorithm() == Algorithm::FixedWindow {
        let w = policy.window_ticks();
        return policy.limit() * (ticks.saturating_sub(2) / w + 1 + u64::from(ticks > 1));
    }
    let tau = lifetime_us.saturating_sub(1);
    exact_bound(policy, ticks + tau).min(exact_bound(policy, ticks) + instances * max_lease)
}

/// Checks `U(I) <= min(B(d + tau), B(d) + N*M)` for every part of
/// `policies` and every interval of the `admitted` `(tick, units)`; for a
/// fixed-window part, `U <= L` in every aligned window. A 1 µs tick.
pub fn check(
    policies: &Policies,
    admitted: &[(u64, u64)],
    instances: u64,
    max_lease: u64,
    lifetime_us: u64,
) -> Result<(), String> {
    let mut points = admitted.to_vec();
    points.sort_unstable();
    let held = instances * max_lease;
    for policy in policies.iter() {
        assert_eq!(policy.tick_us(), 1, "the simulation's time is in ticks");
        if policy.algorithm() == Algorithm::FixedWindow {
            let w = policy.window_ticks();
            let mut windows = std::collections::BTreeMap::<u64, u64>::new();
            for &(t, units) in &points {
                *windows.entry(t / w).or_default() += units;
            }
            if let Some((window, units)) = windows.iter().find(|(_, &u)| u > policy.limit()) {
                return Err(format!("{policy}: {units} in window {window}"));
            }
            continue;
        }
        for (i, &(a, _)) in points.iter().enumerate() {
            let mut used = 0;
            for &(b, units) in &points[i..] {
                used += units;
                let d = b - a + 1;
                let bound = most_admitted(policy, d, instances, max_lease, lifetime_us);
                if used > bound {
                    return Err(format!(
                        "{policy}: {used} used in {d} ticks from {a}, bound {bound} \
                         (N*M = {held}, T = {lifetime_us} µs)"
                    ));
                }
            }
        }
    }
    Ok(())
}

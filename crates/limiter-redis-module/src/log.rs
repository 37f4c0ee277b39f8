//! The sliding log as the Lua functions keep it: entries of a tick and the
//! running total up to it, the first being the edge's (the newest entry
//! at or before the window's edge, whose total is the count there) once
//! an admission dropped older ones. In a string for a limit up to
//! [`PACKED_LOG_MAX`], in a sorted set (score the tick, member the total)
//! above.
//!
//! limiter-core's [`SlidingLog`] keeps the edge's total alone
//! (`dropped_total`): read from Redis, every entry, the edge's included,
//! goes in (dropped total 0), and it decides alike; after an admission
//! the edge's entry goes back in front ([`with_edge`]).

use limiter_core::backend::SlidingLog;
use limiter_core::{Algorithm, Policy, MAX_TIME_US};

/// The largest limit whose sliding log is kept in a string: limiter-redis's
/// `PACKED_LOG_MAX` (its `protocol/state.rs`), part of the state encoding
/// the version in a key's record names (limiter-core's
/// `POLICY_RECORD_VERSION`).
pub(crate) const PACKED_LOG_MAX: u64 = 128;

/// Whether `policy` is a sliding log kept in one string.
pub(crate) fn keeps_packed_log(policy: &Policy) -> bool {
    policy.algorithm() == Algorithm::SlidingLog && policy.limit() <= PACKED_LOG_MAX
}

/// Whether `policy` is a sliding log kept in a sorted set.
pub(crate) fn keeps_sorted_set(policy: &Policy) -> bool {
    policy.algorithm() == Algorithm::SlidingLog && !keeps_packed_log(policy)
}

/// The entries `records` hold, if the functions could have written them:
/// ticks increasing, totals not decreasing, each at most 2^53, at most one
/// per unit of the limit and the edge's.
pub(crate) fn checked(
    policy: &Policy,
    records: impl Iterator<Item = (u64, u64)>,
) -> Option<Vec<(u64, u64)>> {
    let mut entries: Vec<(u64, u64)> = Vec::new();
    for (ts, total) in records {
        if ts > MAX_TIME_US || total > MAX_TIME_US {
            return None;
        }
        if let Some(&(last_ts, last_total)) = entries.last() {
            if ts <= last_ts || total < last_total {
                return None;
            }
        }
        if entries.len() as u64 > policy.limit() {
            return None;
        }
        entries.push((ts, total));
    }
    Some(entries)
}

/// How many of `log`'s entries are at or before the edge of the window
/// ending at `t_eff`: what an admission drops (all but the newest of
/// them, the edge's, in Redis).
pub(crate) fn expired(policy: &Policy, log: &SlidingLog, t_eff: u64) -> usize {
    match t_eff.checked_sub(policy.window_ticks()) {
        Some(edge) => log.entries().take_while(|&(ts, _)| ts <= edge).count(),
        None => 0,
    }
}

/// The log after an admission (`admitted`, limiter-core's, which keeps the
/// edge's total only) with the edge's entry back in front: the tick of
/// the newest of the `expired` entries of the log before it (`before`),
/// and the total the admission kept. What the Lua functions leave.
pub(crate) fn with_edge(before: &SlidingLog, expired: usize, admitted: &SlidingLog) -> SlidingLog {
    let edge = expired
        .checked_sub(1)
        .and_then(|newest| before.entries().nth(newest))
        .map(|(ts, _)| (ts, admitted.dropped_total()));
    SlidingLog::from_parts(0, edge.into_iter().chain(admitted.entries()))
}

#[cfg(test)]
mod tests {
    use limiter_core::backend::AlgorithmState;
    use limiter_core::Rate;

    use super::*;

    /// The edge's entry comes back in front with the total the admission
    /// dropped, and an admission deciding on the log with it decides as on
    /// limiter-core's own.
    #[test]
    fn the_edge_entry_goes_back_in_front() {
        let policy = Policy::sliding_log(Rate::per_second(3)).unwrap();
        let mut ours = SlidingLog::fresh(&policy);
        let mut core = SlidingLog::fresh(&policy);
        for (t, cost) in [
            (0, 1),
            (10, 2),
            (1_000_005, 1),
            (1_000_006, 1),
            (2_000_020, 2),
        ] {
            let before = ours.clone();
            let expired = expired(&policy, &before, t.max(core.stamp()));
            let decision = ours.acquire(&policy, t, cost).unwrap();
            assert_eq!(decision, core.acquire(&policy, t, cost).unwrap());
            if decision.allowed {
                ours = with_edge(&before, expired, &ours);
            }
        }
        assert_eq!(
            ours.entries().collect::<Vec<_>>(),
            [(1_000_005, 4), (2_000_020, 6)],
            "the edge's entry, then the window's"
        );
    }
}

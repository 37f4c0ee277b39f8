//! Sliding log: every admission in the trailing window, exactly.
//!
//! Numeric bounds (docs/spec.md section 5: `4*L*W <= 2^53`, `t <= 2^53`,
//! `1 <= n <= L`): every running total stays at or below 2^53, because an
//! admission that would carry the newest total past it first rebases the
//! totals on the dropped total (see [`SlidingLog::rebase`]). Each other
//! site states its bound.
#![warn(clippy::arithmetic_side_effects)]

use std::collections::VecDeque;

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::{Policy, EXACT_LIMIT};

/// State: the admitted entries `(ts, units)`, oldest first; `T_s` is the
/// newest `ts`.
///
/// Entries keep a running total of units instead of their own units, so
/// counting the window and finding `retry_after` are binary searches, not
/// walks: a denied request costs O(log L) whatever the limit. Admissions at
/// the same tick share one entry, and entries older than the window are
/// dropped on every admission, so a key holds at most `L` entries.
///
/// Totals never exceed 2^53: before an admission would carry the newest
/// total past it, every total is rebased on the dropped total, which brings
/// the newest down to the window's count (at most `L`). The Redis script
/// does the same, so both stay exact (docs/spec.md rule 2.4).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingLog {
    entries: VecDeque<LogEntry>,
    /// Running total of units just before the oldest kept entry.
    dropped_total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogEntry {
    ts: u64,
    /// Units admitted up to and including this entry, since the key began
    /// or since the last rebase (at most 2^53).
    total: u64,
}

/// The write of an admitted sliding-log request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogUpdate {
    expired: usize,
    t: u64,
    cost: u64,
}

impl SlidingLog {
    /// The log of `entries`, each a tick and the running total of units
    /// up to and including it (ticks increasing, totals increasing, at
    /// most 2^53), after `dropped_total` units dropped before the first:
    /// for a backend that stores the log in a layout of its own and
    /// decides with it here. A log whose entries break that order decides
    /// nonsense (and may panic): check them first.
    pub fn from_parts(dropped_total: u64, entries: impl IntoIterator<Item = (u64, u64)>) -> Self {
        Self {
            entries: entries
                .into_iter()
                .map(|(ts, total)| LogEntry { ts, total })
                .collect(),
            dropped_total,
        }
    }

    /// The entries, oldest first: each a tick and the running total of
    /// units up to and including it ([`from_parts`](Self::from_parts)).
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries.iter().map(|e| (e.ts, e.total))
    }

    /// The running total just before the first entry: the units dropped.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_total
    }

    /// Entries stored (at most the limit; fewer when admissions share a tick).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the entries take on the heap (the deque's unused capacity not
    /// counted): what a key's log adds to the state's own size.
    pub fn heap_bytes(&self) -> usize {
        self.entries
            .len()
            .saturating_mul(std::mem::size_of::<LogEntry>())
    }

    /// The entries in the window `(t - W, t]` of tick `t`, oldest first, as
    /// `(ts, units)`.
    pub(crate) fn in_window(
        &self,
        policy: &Policy,
        t: u64,
    ) -> impl Iterator<Item = (u64, u64)> + '_ {
        let expired = t
            .checked_sub(policy.window_ticks())
            .map_or(0, |edge| self.expired_by(edge));
        let mut before = match expired.checked_sub(1) {
            None => self.dropped_total,
            Some(k) => self.entries[k].total,
        };
        self.entries.range(expired..).map(move |entry| {
            // No underflow: the totals grow with the entries.
            #[allow(clippy::arithmetic_side_effects)]
            let units = entry.total - before;
            before = entry.total;
            (entry.ts, units)
        })
    }

    /// The log of `entries`, `(ts, units)` oldest first (`ts` not
    /// decreasing, the units of one window summing to at most the limit):
    /// entries of one tick become one.
    pub(crate) fn from_entries(entries: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut log = Self::default();
        for (ts, units) in entries {
            // At most the limit, which is below 2^51.
            #[allow(clippy::arithmetic_side_effects)]
            let total = log.total() + units;
            match log.entries.back_mut() {
                Some(last) if last.ts == ts => last.total = total,
                _ => log.entries.push_back(LogEntry { ts, total }),
            }
        }
        log
    }

    #[inline]
    fn total(&self) -> u64 {
        self.entries.back().map_or(self.dropped_total, |e| e.total)
    }

    /// How many entries, from the oldest, are at or before `edge`: the
    /// two ends first, as a log is most often all live or all expired,
    /// then a binary search.
    #[inline]
    fn expired_by(&self, edge: u64) -> usize {
        match (self.entries.front(), self.entries.back()) {
            (Some(oldest), _) if oldest.ts > edge => 0,
            (_, Some(newest)) if newest.ts <= edge => self.entries.len(),
            _ => self.entries.partition_point(|e| e.ts <= edge),
        }
    }

    /// Subtracts the dropped total from every total, so the newest total
    /// becomes the units in the window. O(entries), and rare: right after a
    /// rebase the newest total is at most `L`, and the next one waits until
    /// the total has grown past `2^53 - L >= 3 * 2^51`, that is for at least
    /// `3 * 2^51 / L` admissions, while a key holds at most `min(L, W)`
    /// entries; with `L * W <= 2^51` that is under one entry rewritten per
    /// admission on average.
    fn rebase(&mut self) {
        let base = self.dropped_total;
        for entry in &mut self.entries {
            // No underflow: every kept entry's total is above the dropped total.
            #[allow(clippy::arithmetic_side_effects)]
            let rebased = entry.total - base;
            entry.total = rebased;
        }
        self.dropped_total = 0;
    }
}

impl AlgorithmState for SlidingLog {
    type Update = LogUpdate;

    fn fresh(_: &Policy) -> Self {
        Self::default()
    }

    #[inline]
    fn stamp(&self) -> u64 {
        self.entries.back().map_or(0, |e| e.ts)
    }

    #[inline(always)]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<LogUpdate>) {
        let (w, limit) = (policy.window_ticks(), policy.limit());
        // The window is (t - W, t]: entries at or before t - W are out.
        let expired = match t.checked_sub(w) {
            Some(edge) => self.expired_by(edge),
            None => 0,
        };
        let base = match expired.checked_sub(1) {
            None => self.dropped_total,
            Some(k) => self.entries[k].total,
        };
        // No underflow: totals grow with the entries; at most L (only
        // admitted units are in the window).
        #[allow(clippy::arithmetic_side_effects)]
        let count = self.total() - base;
        // At most 2L <= 2^52.
        #[allow(clippy::arithmetic_side_effects)]
        let wanted = count + n;
        if wanted <= limit {
            // No underflow: count + n <= L.
            #[allow(clippy::arithmetic_side_effects)]
            let remaining = limit - wanted;
            let decision = TickDecision {
                allowed: true,
                remaining,
                reset_after: w,
                ..TickDecision::default()
            };
            let update = LogUpdate {
                expired,
                t,
                cost: n,
            };
            (decision, Some(update))
        } else {
            // The oldest entries leave first: retry when enough have left.
            // need in [1, count] (count + n > L and n <= L), so base + need
            // <= the newest total <= 2^53, the newest entry reaches it (k is
            // in bounds) and no entry before the window does (k >= expired,
            // so ts_k > t - W and ts_k + W - t > 0; ts_k + W <= 2^53 + 2^51).
            #[allow(clippy::arithmetic_side_effects)]
            let (need, remaining) = (wanted - limit, limit - count);
            #[allow(clippy::arithmetic_side_effects)]
            let target = base + need;
            let k = self.entries.partition_point(|e| e.total < target);
            let newest = self.stamp();
            // t >= newest (t is t_eff >= T_s), and newest + W <= 2^53 + 2^51.
            #[allow(clippy::arithmetic_side_effects)]
            let (retry_after, reset_after) = (self.entries[k].ts + w - t, newest + w - t);
            let decision = TickDecision {
                allowed: false,
                remaining,
                retry_after,
                reset_after,
                ..TickDecision::default()
            };
            (decision, None)
        }
    }

    #[inline(always)]
    fn apply(&mut self, update: LogUpdate) {
        if let Some(newest_expired) = update.expired.checked_sub(1) {
            self.dropped_total = self.entries[newest_expired].total;
            if update.expired == self.entries.len() {
                self.entries.clear();
            } else {
                self.entries.drain(..update.expired);
            }
        }
        // Keep every total at or below 2^53 (EXACT_LIMIT - cost: cost <= L < 2^53).
        #[allow(clippy::arithmetic_side_effects)]
        let room = EXACT_LIMIT - update.cost;
        if self.total() > room {
            self.rebase();
        }
        // At most 2^53: total <= 2^53 - cost, by the rebase above.
        #[allow(clippy::arithmetic_side_effects)]
        let total = self.total() + update.cost;
        match self.entries.back_mut() {
            Some(last) if last.ts == update.t => last.total = total,
            _ => self.entries.push_back(LogEntry {
                ts: update.t,
                total,
            }),
        }
    }

    fn reset_as_it_stands(&self, policy: &Policy, t: u64) -> u64 {
        // The newest entry leaves the window at ts + W (ts <= 2^53, W <=
        // 2^51); an empty log, or one whose newest entry has left, is reset.
        #[allow(clippy::arithmetic_side_effects)]
        match self.entries.back() {
            Some(newest) if newest.ts + policy.window_ticks() > t => {
                newest.ts + policy.window_ticks() - t
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rate::Rate;

    /// 2^49 units per 4 µs, each window filled by one request, carries a
    /// total since the key began past 2^64 after 2^15 windows: the running
    /// totals must not overflow (a panic in debug, an index out of bounds
    /// in release).
    #[test]
    fn sliding_log_running_totals_never_overflow_on_a_huge_policy() {
        let limit = 1u64 << 49;
        let policy = Policy::sliding_log(Rate::new(limit, Duration::from_micros(4))).unwrap();
        assert_eq!(policy.tick_us(), 1);
        let mut log = SlidingLog::default();
        let mut admitted: u128 = 0;
        for i in 0..40_000u64 {
            let t = i * 4;
            let allowed = log.acquire(&policy, t, limit).unwrap();
            assert!(allowed.allowed, "window {i}");
            assert_eq!(allowed.remaining, 0);
            admitted += u128::from(limit);
            let denied = log.acquire(&policy, t + 1, 1).unwrap();
            assert!(!denied.allowed);
            assert_eq!(denied.retry_after, Duration::from_micros(3), "window {i}");
            assert!(
                log.total() <= EXACT_LIMIT,
                "total {} at window {i}",
                log.total()
            );
        }
        assert!(admitted > u128::from(u64::MAX), "the totals did pass 2^64");
        assert!(log.len() <= 1);
    }

    /// A rebase keeps every decision: a log with many entries in the window
    /// decides the same before and after its totals are rebased.
    #[test]
    fn rebasing_the_totals_changes_no_decision() {
        let policy =
            Policy::sliding_log(Rate::new(1 << 20, Duration::from_micros(1 << 10))).unwrap();
        let mut log = SlidingLog::default();
        for t in 0..5_000u64 {
            log.acquire(&policy, t, 1 + t % 700).unwrap();
        }
        assert!(log.dropped_total > 0, "old entries were dropped");
        let mut rebased = log.clone();
        rebased.rebase();
        assert_ne!(rebased, log);
        for t in 5_000..5_200u64 {
            for cost in [1, 500, 1 << 19, 1 << 20] {
                assert_eq!(
                    log.peek(&policy, t, cost).unwrap(),
                    rebased.peek(&policy, t, cost).unwrap()
                );
            }
            assert_eq!(
                log.acquire(&policy, t, 300).unwrap(),
                rebased.acquire(&policy, t, 300).unwrap()
            );
        }
    }
}

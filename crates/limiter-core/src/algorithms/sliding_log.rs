//! Sliding log: every admission in the trailing window, exactly.

use std::collections::VecDeque;

use super::AlgorithmState;
use crate::decision::TickDecision;
use crate::policy::Policy;

/// State: the admitted entries `(ts, units)`, oldest first; `T_s` is the
/// newest `ts`.
///
/// Entries keep a running total of units instead of their own units, so
/// counting the window and finding `retry_after` are binary searches, not
/// walks: a denied request costs O(log L) whatever the limit. Admissions at
/// the same tick share one entry, and entries older than the window are
/// dropped on every admission, so a key holds at most `L` entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingLog {
    entries: VecDeque<LogEntry>,
    /// Running total of units just before the oldest kept entry.
    dropped_total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogEntry {
    ts: u64,
    /// Units admitted up to and including this entry, since the key began.
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
    /// Entries stored (at most the limit; fewer when admissions share a tick).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn total(&self) -> u64 {
        self.entries.back().map_or(self.dropped_total, |e| e.total)
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

    #[inline]
    fn evaluate(&self, policy: &Policy, t: u64, n: u64) -> (TickDecision, Option<LogUpdate>) {
        let (w, limit) = (policy.window_ticks(), policy.limit());
        // The window is (t - W, t]: entries at or before t - W are out.
        let expired = match t.checked_sub(w) {
            Some(edge) => self.entries.partition_point(|e| e.ts <= edge),
            None => 0,
        };
        let base = match expired {
            0 => self.dropped_total,
            k => self.entries[k - 1].total,
        };
        let count = self.total() - base;
        if count + n <= limit {
            let decision = TickDecision {
                allowed: true,
                remaining: limit - count - n,
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
            let need = count + n - limit;
            let k = self.entries.partition_point(|e| e.total < base + need);
            let newest = self.stamp();
            let decision = TickDecision {
                allowed: false,
                remaining: limit - count,
                retry_after: self.entries[k].ts + w - t,
                reset_after: newest + w - t,
                ..TickDecision::default()
            };
            (decision, None)
        }
    }

    #[inline]
    fn apply(&mut self, update: LogUpdate) {
        if update.expired > 0 {
            self.dropped_total = self.entries[update.expired - 1].total;
            self.entries.drain(..update.expired);
        }
        let total = self.total() + update.cost;
        match self.entries.back_mut() {
            Some(last) if last.ts == update.t => last.total = total,
            _ => self.entries.push_back(LogEntry {
                ts: update.t,
                total,
            }),
        }
    }
}

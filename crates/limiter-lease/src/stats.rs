//! [`LeaseStats`]: what a leased limiter has asked of the limiter it
//! wraps, to tell whether its leases serve its keys.

use std::sync::atomic::{AtomicU64, Ordering};

/// Requests a [`Leased`](crate::Leased) limiter has sent to the limiter it
/// wraps since it was built: its lease requests, the units they asked, and
/// the requests sent at their own cost. Leases that serve their keys make
/// `leases` and `exact` small beside the decisions; `mean_lease` is the
/// lease size reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Lease requests sent (a lease asked again smaller on a denial counts
    /// again).
    pub leases: u64,
    /// Units those lease requests asked.
    pub leased_units: u64,
    /// Requests sent to the wrapped limiter at their own cost: decided
    /// exactly.
    pub exact: u64,
}

impl LeaseStats {
    /// The units a lease request asked on average, if any was sent.
    pub fn mean_lease(&self) -> Option<u64> {
        self.leased_units.checked_div(self.leases)
    }

    /// What was sent after `earlier`, a snapshot of the same limiter.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            leases: self.leases.saturating_sub(earlier.leases),
            leased_units: self.leased_units.saturating_sub(earlier.leased_units),
            exact: self.exact.saturating_sub(earlier.exact),
        }
    }
}

/// The counts behind [`LeaseStats`], updated off the path that decides
/// from the units in hand.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    leases: AtomicU64,
    leased_units: AtomicU64,
    exact: AtomicU64,
}

impl Counters {
    /// A lease request of `units` is sent.
    pub(crate) fn lease(&self, units: u64) {
        self.leases.fetch_add(1, Ordering::Relaxed);
        self.leased_units.fetch_add(units, Ordering::Relaxed);
    }

    /// A request is sent at its own cost.
    pub(crate) fn exact(&self) {
        self.exact.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LeaseStats {
        LeaseStats {
            leases: self.leases.load(Ordering::Relaxed),
            leased_units: self.leased_units.load(Ordering::Relaxed),
            exact: self.exact.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_count_what_was_sent_and_subtract_a_snapshot() {
        let counters = Counters::default();
        assert_eq!(counters.snapshot().mean_lease(), None);
        counters.lease(10);
        let earlier = counters.snapshot();
        counters.lease(30);
        counters.exact();
        let now = counters.snapshot();
        assert_eq!(now.mean_lease(), Some(20));
        let since = now.since(&earlier);
        assert_eq!((since.leases, since.leased_units, since.exact), (1, 30, 1));
    }
}

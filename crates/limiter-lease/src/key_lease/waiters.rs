//! The requests that wait for a key's lease in flight: what they claim
//! of it, and their wakers, woken when it settles (docs/spec.md section
//! 8.1).

use std::task::Waker;

use super::{packed, KeyLease, IN_FLIGHT, LAPSING};

impl KeyLease {
    /// Claims `cost` units of the lease in flight for a request the units
    /// in hand do not cover, if that many are unclaimed: the request waits
    /// for the lease rather than asking the global limiter itself
    /// (docs/spec.md section 8.1). Answers the settle count to wait on.
    pub(crate) fn claim(&mut self, cost: u64) -> Option<u32> {
        let claimed = u64::from(self.cold.waiting) + cost;
        (self.has(IN_FLIGHT) && claimed <= u64::from(self.cold.spare)).then(|| {
            self.cold.waiting = packed(claimed);
            self.cold.settles
        })
    }

    /// Whether the lease request that `settles` counted is still in flight;
    /// if it is, `waker` is woken when it settles.
    pub(crate) fn in_flight_since(&mut self, settles: u32, waker: &Waker) -> bool {
        let in_flight = self.has(IN_FLIGHT) && self.cold.settles == settles;
        if in_flight && !self.cold.waiters.iter().any(|w| w.will_wake(waker)) {
            self.cold.waiters.push(waker.clone());
        }
        in_flight
    }

    /// The lease request in flight ended (granted, denied, failed, or
    /// dropped unanswered): answers the requests waiting for it, to wake.
    #[must_use = "the requests waiting for the lease are to be woken"]
    pub(crate) fn settled(&mut self) -> Vec<Waker> {
        self.set(IN_FLIGHT, false);
        self.unclaimed()
    }

    /// The lease in flight was denied and is asked again, smaller: the
    /// requests that claimed its units stop waiting (none claims more), so
    /// that none waits longer than one round trip; the lease asked again is
    /// sent after any giving up of units, so it is kept. Answers them, to
    /// wake.
    #[must_use = "the requests waiting for the lease are to be woken"]
    pub(crate) fn unclaimed(&mut self) -> Vec<Waker> {
        self.set(LAPSING, false);
        self.cold.settles = self.cold.settles.wrapping_add(1);
        self.cold.spare = 0;
        self.cold.waiting = 0;
        std::mem::take(&mut self.cold.waiters)
    }
}

//! Units leaving a key unused: leases that lapse at their expiry, and
//! units given up (`reset`, `release`; docs/spec.md section 8.3).

use super::{Batch, KeyLease, IN_FLIGHT, LAPSING};

impl KeyLease {
    /// Drops the leases that lapsed by `now_us`; returns their units.
    #[inline]
    pub(crate) fn expire(&mut self, now_us: u64) -> u64 {
        if self.units > 0 && self.expires_us <= now_us {
            self.expire_held(now_us)
        } else {
            0
        }
    }

    /// [`expire`](Self::expire), the older lease having lapsed.
    #[cold]
    fn expire_held(&mut self, now_us: u64) -> u64 {
        let mut lapsed = 0;
        // Expiries follow the order leases were sent in (one in flight at a
        // time): the older lapses first.
        while self.units > 0 && self.expires_us <= now_us {
            lapsed += u64::from(self.units);
            self.pop();
        }
        lapsed
    }

    /// Drops the older lease: the newer takes its place.
    pub(super) fn pop(&mut self) {
        self.set_older(self.newer());
        self.set_newer(Batch::default());
    }

    /// Gives up every unit in hand, and the lease in flight's, which lapse
    /// when it arrives ([`LAPSING`]); returns the units in hand.
    pub(crate) fn release(&mut self) -> u64 {
        if self.has(IN_FLIGHT) {
            self.set(LAPSING, true);
        }
        let held = self.held();
        self.set_older(Batch::default());
        self.set_newer(Batch::default());
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_lease::fixtures::*;

    #[test]
    fn a_lease_in_flight_when_the_units_are_given_up_lapses_on_arrival() {
        let mut key = KeyLease::new();
        key.ask(1, 0, &SIZING);
        key.granted(batch(4, 1_000), grant(), 50, LIMITS);
        key.ask(1, 0, &SIZING);
        assert_eq!(key.release(), 4, "the units in hand");
        assert_eq!(key.granted(batch(9, 1_000), grant(), 40, LIMITS), 9);
        assert!(key.settled().is_empty(), "no request waited");
        assert_eq!(key.held(), 0);
        // Given up, then denied and asked again: the lease asked again is
        // sent after, and kept.
        key.ask(1, 0, &SIZING);
        key.release();
        assert!(key.unclaimed().is_empty(), "no request waited");
        assert_eq!(key.granted(batch(3, 1_000), grant(), 30, LIMITS), 0);
        assert_eq!(key.held(), 3);
    }
}

//! Taking units from the leases in hand, oldest first, and the place a
//! unit takes in its lease's queue (leaky bucket).

use super::{packed, KeyLease};

/// Units taken from the leases in hand.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    /// Units left in hand after the take.
    pub(crate) left: u64,
    /// When the first unit's lease departs (leaky bucket): the unit
    /// departs after it by its place, at the policy's spacing.
    pub(crate) depart_us: u64,
    /// The first unit's place in its lease.
    pub(crate) place: u64,
}

impl KeyLease {
    /// What taking `cost` units would give, without taking them; `None`
    /// if the units in hand do not cover it (call [`expire`](Self::expire)
    /// first). The first unit's departure is read only if `queued` (a
    /// leaky bucket's queue is timed), 0 otherwise.
    #[inline]
    pub(crate) fn peek(&self, cost: u64, queued: bool) -> Option<Taken> {
        let held = self.held();
        if held < cost {
            return None;
        }
        Some(Taken {
            left: held - cost,
            depart_us: if queued { self.cold.depart_us } else { 0 },
            place: u64::from(self.taken),
        })
    }

    /// Takes `cost` units from the leases in hand, oldest first, if they
    /// cover it (call [`expire`](Self::expire) first); `queued` as in
    /// [`peek`](Self::peek). The request's arrival is counted apart
    /// ([`arrived`](Self::arrived)), once however it is decided.
    pub(crate) fn take(&mut self, cost: u64, queued: bool) -> Option<Taken> {
        let taken = self.peek(cost, queued)?;
        self.take_held(cost);
        Some(taken)
    }

    /// Takes `cost` units from the leases in hand, if they cover it and
    /// leave more than the refill threshold or a lease in flight (call
    /// [`expire`](Self::expire) first): a decision that fetches no lease,
    /// its arrival counted. `queued` as in [`peek`](Self::peek).
    #[inline]
    pub(crate) fn serve(&mut self, cost: u64, now_us: u64, queued: bool) -> Option<Taken> {
        let taken = self.peek(cost, queued)?;
        if self.wants_refill(taken.left, now_us) {
            return None;
        }
        self.take_held(cost);
        self.arrived(cost);
        Some(taken)
    }

    /// Takes `cost` units, which the units in hand cover, oldest first.
    #[inline]
    fn take_held(&mut self, cost: u64) {
        if cost < u64::from(self.units) {
            // Within the older lease, which keeps units: `cost` fits in 32 bits.
            let cost = cost as u32;
            self.units -= cost;
            self.taken = self.taken.saturating_add(cost);
        } else {
            self.take_across(cost);
        }
    }

    /// [`take_held`](Self::take_held) when it empties the older lease.
    fn take_across(&mut self, cost: u64) {
        let mut left = cost;
        while left > 0 {
            let from_this = self.units.min(packed(left));
            self.units -= from_this;
            self.taken = self.taken.saturating_add(from_this);
            left -= u64::from(from_this);
            if self.units == 0 {
                self.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_lease::fixtures::*;
    use crate::key_lease::Batch;

    #[test]
    fn units_are_taken_oldest_first_and_lapse_in_order() {
        let mut key = KeyLease::new();
        key.ask(1, 0, &SIZING);
        key.granted(batch(3, 100), grant(), 50, LIMITS);
        key.ask(1, 0, &SIZING);
        key.granted(batch(5, 200), grant(), 50, LIMITS);
        key.expire(50);
        let taken = key.take(4, true).unwrap();
        assert_eq!((taken.left, taken.place), (4, 0));
        assert_eq!(key.held(), 4);
        assert_eq!(key.expire(199), 0);
        assert_eq!(key.expire(200), 4, "the newer lease lapses at its end");
        assert!(key.take(1, true).is_none());
        assert!(key.is_idle(200));
    }

    #[test]
    fn a_leaky_buckets_queue_is_read_only_when_queued() {
        let mut key = KeyLease::new();
        key.ask(1, 0, &SIZING);
        let queued = Batch {
            units: 10,
            expires_us: 1_000,
            taken: 3,
            depart_us: 500,
        };
        key.granted(queued, grant(), 50, LIMITS);
        let taken = key.peek(1, true).unwrap();
        assert_eq!((taken.depart_us, taken.place), (500, 3));
        assert_eq!(key.peek(1, false).unwrap().depart_us, 0);
        let taken = key.serve(2, 0, true).unwrap();
        assert_eq!((taken.left, taken.place), (8, 3));
        assert_eq!(key.peek(1, true).unwrap().place, 5);
    }
}

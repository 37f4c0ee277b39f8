//! [`KeyLease`]: one key's leases on one instance: the units in hand, the
//! lease in flight, and what sizes the next one (docs/spec.md section 8.1).

/// The numbers a leased limiter's options fix, resolved against the policies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizing {
    /// `T` in µs.
    pub(crate) lifetime_us: u64,
    /// `m`, within `[1, max_lease]`.
    pub(crate) min_lease: u64,
    /// `M`, within `[1, max cost]`.
    pub(crate) max_lease: u64,
    /// The refill threshold, a percentage of the last lease's size.
    pub(crate) refill_percent: u64,
}

/// What a granted lease told about the key, reported by every decision
/// taken from it (docs/spec.md section 8.4).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    /// The lease decision's `limit`.
    pub(crate) limit: u64,
    /// The lease decision's `bound_by`.
    pub(crate) bound_by: u8,
    /// The lease's send time plus its decision's `reset_after` (µs).
    pub(crate) reset_at_us: u64,
}

/// One granted lease's units. Counts of units fit in 32 bits: a lease is
/// at most `M`, which is at most [`MAX_UNITS`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Batch {
    /// When the units lapse (µs, this instance's clock).
    pub(crate) expires_us: u64,
    /// When the lease's first unit departs (leaky bucket; µs).
    pub(crate) depart_us: u64,
    /// Units left.
    pub(crate) units: u32,
    /// Units taken so far, the request that fetched the lease included:
    /// the next unit's place in the lease's queue (leaky bucket).
    pub(crate) taken: u32,
}

/// The most units one key's leases hold: the cap on `M`, so that a key's
/// counts of units pack in 32 bits.
pub(crate) const MAX_UNITS: u64 = u32::MAX as u64;

/// `units` as a packed count: saturated at [`MAX_UNITS`].
pub(crate) fn packed(units: u64) -> u32 {
    u32::try_from(units).unwrap_or(u32::MAX)
}

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

/// One key's leases on this instance, packed: the lease map holds one per
/// key, and the smaller it is, the fewer cache lines a decision reads.
/// Counts of units are 32 bits ([`MAX_UNITS`]); the flags share a word.
#[derive(Debug)]
pub(crate) struct KeyLease {
    /// Granted leases with units left, the older (first to lapse) first;
    /// an empty one (no units) only after a full one.
    batches: [Batch; 2],
    /// The last grant's `limit` and reset (if `has_grant`).
    grant_limit: u64,
    grant_reset_at_us: u64,
    /// When the last lease was asked (if `has_since`): demand is counted
    /// from then.
    since_us: u64,
    /// Until then, no lease: a failure policy answered the last one.
    exact_until_us: u64,
    /// The global `remaining` last reported for the key, saturated; the
    /// most before any report (it bounds no lease then).
    remaining: u32,
    /// The size of the last lease asked, for the refill threshold.
    last_size: u32,
    /// Units asked of the key since `since_us` (saturated).
    used: u32,
    /// The demand (units over half a lifetime) the last lease was sized by,
    /// saturated (a lease is at most `M` anyway).
    demand: u32,
    /// The last grant's `bound_by`.
    grant_bound_by: u8,
    has_grant: bool,
    has_since: bool,
    /// Whether a lease request is in flight.
    in_flight: bool,
}

impl KeyLease {
    pub(crate) fn new() -> Self {
        Self {
            batches: [Batch::default(); 2],
            grant_limit: 0,
            grant_reset_at_us: 0,
            since_us: 0,
            exact_until_us: 0,
            remaining: u32::MAX,
            last_size: 0,
            used: 0,
            demand: 0,
            grant_bound_by: 0,
            has_grant: false,
            has_since: false,
            in_flight: false,
        }
    }

    /// Drops the leases that lapsed by `now_us`; returns their units.
    pub(crate) fn expire(&mut self, now_us: u64) -> u64 {
        let mut lapsed = 0;
        // Expiries follow the order leases were sent in (one in flight at a
        // time): the older lapses first.
        while self.batches[0].units > 0 && self.batches[0].expires_us <= now_us {
            lapsed += u64::from(self.batches[0].units);
            self.pop();
        }
        lapsed
    }

    /// Drops the older lease: the newer takes its place.
    fn pop(&mut self) {
        self.batches = [self.batches[1], Batch::default()];
    }

    /// Units in hand (call [`expire`](Self::expire) first).
    pub(crate) fn held(&self) -> u64 {
        u64::from(self.batches[0].units) + u64::from(self.batches[1].units)
    }

    /// The grant the units in hand report.
    pub(crate) fn grant(&self) -> Option<Grant> {
        self.has_grant.then_some(Grant {
            limit: self.grant_limit,
            bound_by: self.grant_bound_by,
            reset_at_us: self.grant_reset_at_us,
        })
    }

    /// Whether nothing is in hand or in flight: the key may be dropped.
    pub(crate) fn is_idle(&self, now_us: u64) -> bool {
        !self.in_flight
            && self
                .batches
                .iter()
                .all(|batch| batch.units == 0 || batch.expires_us <= now_us)
    }

    /// When the key becomes idle at the latest, if nothing else happens.
    pub(crate) fn idle_at(&self, now_us: u64, lifetime_us: u64) -> u64 {
        let held_until = self
            .batches
            .iter()
            .filter(|batch| batch.units > 0)
            .map(|batch| batch.expires_us)
            .max()
            .unwrap_or(now_us);
        if self.in_flight {
            held_until.max(now_us.saturating_add(lifetime_us))
        } else {
            held_until
        }
    }

    /// What taking `cost` units would give, without taking them; `None`
    /// if the units in hand do not cover it (call [`expire`](Self::expire)
    /// first).
    pub(crate) fn peek(&self, cost: u64) -> Option<Taken> {
        let held = self.held();
        let first = self.batches[0];
        (held >= cost).then(|| Taken {
            left: held - cost,
            depart_us: first.depart_us,
            place: u64::from(first.taken),
        })
    }

    /// Takes `cost` units from the leases in hand, oldest first, if they
    /// cover it (call [`expire`](Self::expire) first).
    pub(crate) fn take(&mut self, cost: u64) -> Option<Taken> {
        let taken = self.peek(cost)?;
        let mut left = cost;
        while left > 0 {
            let batch = &mut self.batches[0];
            let from_this = batch.units.min(packed(left));
            batch.units -= from_this;
            batch.taken = batch.taken.saturating_add(from_this);
            left -= u64::from(from_this);
            if batch.units == 0 {
                self.pop();
            }
        }
        self.used_exactly(cost);
        Some(taken)
    }

    /// Whether leaving `left` units in hand crosses the refill threshold
    /// with no lease in flight.
    pub(crate) fn wants_refill(&self, left: u64, now_us: u64, sizing: &Sizing) -> bool {
        !self.in_flight
            && now_us >= self.exact_until_us
            && left < sizing.max_lease
            && u128::from(left) * 100
                <= u128::from(sizing.refill_percent) * u128::from(self.last_size)
    }

    /// Counts `cost` units the wrapped limiter admitted on its own: demand.
    pub(crate) fn used_exactly(&mut self, cost: u64) {
        self.used = self.used.saturating_add(packed(cost));
    }

    /// The size of a lease asked now for a request of `cost`, and marks it
    /// in flight; `None` when none may be asked: one is in flight, a failure
    /// policy answered the last, or the units in hand leave no room for
    /// `cost` under the maximum lease.
    pub(crate) fn ask(&mut self, cost: u64, now_us: u64, sizing: &Sizing) -> Option<u64> {
        let room = self.room(cost, now_us, sizing)?;
        self.demand = packed(self.demand(cost, now_us, sizing));
        let target = u64::from(self.demand).clamp(sizing.min_lease, sizing.max_lease);
        let size = target.min(u64::from(self.remaining)).min(room).max(cost);
        Some(self.asked(size, now_us))
    }

    /// The size of a lease asked now ahead of need, and marks it in flight;
    /// `None` when none may be asked, or when the demand seen does not
    /// promise to use a unit within half a lifetime (it would lapse), or
    /// the key has no unit left. With nothing asked since the last lease
    /// (fetched just now), the demand that sized it.
    pub(crate) fn ask_ahead(&mut self, now_us: u64, sizing: &Sizing) -> Option<u64> {
        let room = self.room(1, now_us, sizing)?;
        if self.used > 0 {
            self.demand = packed(self.demand(0, now_us, sizing));
        }
        let size = u64::from(self.demand)
            .min(sizing.max_lease)
            .min(u64::from(self.remaining))
            .min(room);
        (size > 0).then(|| self.asked(size, now_us))
    }

    /// Room under the maximum lease, if a lease of at least `cost` may be
    /// asked now.
    fn room(&self, cost: u64, now_us: u64, sizing: &Sizing) -> Option<u64> {
        let room = sizing.max_lease.saturating_sub(self.held());
        (!self.in_flight && now_us >= self.exact_until_us && room >= cost).then_some(room)
    }

    /// The units admitted since the last lease was asked, `cost` (the
    /// request asking now) included, at the rate they came, over half a
    /// lifetime (rounded down), and at most twice those units: a lease
    /// grows at most twofold a time, so that two requests close together
    /// do not take the maximum lease. 0 before the first lease, when no
    /// rate has been seen.
    fn demand(&self, cost: u64, now_us: u64, sizing: &Sizing) -> u64 {
        if !self.has_since {
            return 0;
        }
        let elapsed = now_us.saturating_sub(self.since_us).max(1);
        let units = u128::from(u64::from(self.used).saturating_add(cost));
        let demand = units * u128::from(sizing.lifetime_us / 2) / u128::from(elapsed);
        u64::try_from(demand.min(2 * units)).unwrap_or(u64::MAX)
    }

    /// Marks a lease of `size` in flight, asked at `now_us`, from which
    /// demand is counted anew.
    fn asked(&mut self, size: u64, now_us: u64) -> u64 {
        self.in_flight = true;
        self.last_size = packed(size);
        self.used = 0;
        self.since_us = now_us;
        self.has_since = true;
        size
    }

    /// The lease in flight was granted: `batch` is in hand (nothing if it
    /// has no units left), reported as `grant`.
    pub(crate) fn granted(&mut self, batch: Batch, grant: Grant, remaining: u64) {
        self.in_flight = false;
        self.remaining = packed(remaining);
        self.has_grant = true;
        self.grant_limit = grant.limit;
        self.grant_bound_by = grant.bound_by;
        self.grant_reset_at_us = grant.reset_at_us;
        if batch.units == 0 {
            return;
        }
        match self.batches {
            [older, _] if older.units == 0 => self.batches[0] = batch,
            [_, newer] if newer.units == 0 => self.batches[1] = batch,
            [older, newer] => {
                // A third lease while two hold units (at most the refill
                // threshold between them): the two become one that lapses
                // with the older and queues (leaky bucket) after the newer,
                // never sooner than the global limiter's schedule.
                let merged = Batch {
                    units: older.units.saturating_add(newer.units),
                    expires_us: older.expires_us,
                    ..newer
                };
                self.batches = [merged, batch];
            }
        }
    }

    /// The lease in flight was denied, with the key's global `remaining`.
    pub(crate) fn denied(&mut self, remaining: u64) {
        self.remaining = packed(remaining);
    }

    /// A failure policy answered the lease in flight: no lease until
    /// `until_us`.
    pub(crate) fn degraded(&mut self, until_us: u64) {
        self.exact_until_us = until_us;
    }

    /// The lease request in flight ended (granted, denied, failed, or
    /// dropped unanswered).
    pub(crate) fn settled(&mut self) {
        self.in_flight = false;
    }

    /// Gives up every unit in hand; returns how many.
    pub(crate) fn release(&mut self) -> u64 {
        let held = self.held();
        self.batches = [Batch::default(); 2];
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZING: Sizing = Sizing {
        lifetime_us: 1_000_000,
        min_lease: 1,
        max_lease: 100,
        refill_percent: 25,
    };

    fn batch(units: u32, expires_us: u64) -> Batch {
        Batch {
            units,
            expires_us,
            taken: 0,
            depart_us: 0,
        }
    }

    fn grant() -> Grant {
        Grant {
            limit: 1_000,
            bound_by: 0,
            reset_at_us: 0,
        }
    }

    #[test]
    fn a_lease_follows_demand_within_the_minimum_and_maximum() {
        let mut key = KeyLease::new();
        assert_eq!(key.ask(1, 0, &SIZING), Some(1), "no demand seen yet");
        assert_eq!(key.ask(1, 0, &SIZING), None, "one in flight at a time");
        key.granted(batch(0, 1_000_000), grant(), 900);
        // 10 units (and the request's) in 10 ms: 1,100/s, half a second's
        // worth is 550, but a lease grows at most twofold.
        key.used_exactly(10);
        assert_eq!(key.ask(1, 10_000, &SIZING), Some(22));
        key.granted(batch(0, 1_000_000), grant(), 900);
        // 60 units in 1 ms: far more than the maximum.
        key.used_exactly(60);
        assert_eq!(key.ask(1, 11_000, &SIZING), Some(100));
        key.granted(batch(100, 1_000_000), grant(), 40);
        key.expire(11_000);
        assert!(key.take(60).is_some());
        // 60 units in 9 ms again, but the key has 40 left and 40 are in hand.
        assert_eq!(key.ask(1, 20_000, &SIZING), Some(40));
        key.settled();
        key.denied(3);
        assert_eq!(key.ask(5, 20_000, &SIZING), Some(5), "down to the request");
    }

    #[test]
    fn units_are_taken_oldest_first_and_lapse_in_order() {
        let mut key = KeyLease::new();
        key.ask(1, 0, &SIZING);
        key.granted(batch(3, 100), grant(), 50);
        key.ask(1, 0, &SIZING);
        key.granted(batch(5, 200), grant(), 50);
        key.expire(50);
        let taken = key.take(4).unwrap();
        assert_eq!((taken.left, taken.place), (4, 0));
        assert_eq!(key.held(), 4);
        assert_eq!(key.expire(199), 0);
        assert_eq!(key.expire(200), 4, "the newer lease lapses at its end");
        assert!(key.take(1).is_none());
        assert!(key.is_idle(200));
    }

    #[test]
    fn a_third_lease_merges_the_two_in_hand_into_the_sooner_to_lapse() {
        let mut key = KeyLease::new();
        for (units, expires_us) in [(2, 100), (3, 200), (10, 300)] {
            key.ask(1, 0, &SIZING);
            key.granted(batch(units, expires_us), grant(), 50);
        }
        assert_eq!(key.held(), 15);
        assert_eq!(key.expire(100), 5, "the merged lease lapses with the older");
        assert_eq!(key.held(), 10);
        assert_eq!(key.expire(300), 10);
    }

    #[test]
    fn the_refill_threshold_is_a_share_of_the_last_lease() {
        let mut key = KeyLease::new();
        key.ask(1, 0, &SIZING);
        key.used_exactly(100);
        key.settled();
        assert_eq!(key.ask(1, 1_000, &SIZING), Some(100));
        key.granted(batch(100, 1_000_000), grant(), 500);
        assert!(!key.wants_refill(26, 1_000, &SIZING));
        assert!(key.wants_refill(25, 1_000, &SIZING));
        assert_eq!(
            key.ask_ahead(1_000, &SIZING),
            None,
            "no room under the maximum lease"
        );
        key.take(80);
        assert_eq!(
            key.ask_ahead(2_000, &SIZING),
            Some(80),
            "80 within 1 ms, capped by room"
        );
        key.settled();
        key.degraded(5_000);
        assert!(!key.wants_refill(0, 4_999, &SIZING));
        assert_eq!(key.ask(1, 4_999, &SIZING), None);
    }
}

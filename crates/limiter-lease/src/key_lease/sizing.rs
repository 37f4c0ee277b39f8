//! What sizes a key's next lease: the options resolved against the
//! policies, the arrivals counted as demand, and when and how large a
//! lease is asked (docs/spec.md sections 8.1 and 8.5).

use super::{packed, KeyLease, HAS_SINCE, IN_FLIGHT};

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

impl KeyLease {
    /// Whether leaving `left` units in hand crosses the refill threshold
    /// with no lease in flight.
    #[inline]
    pub(crate) fn wants_refill(&self, left: u64, now_us: u64) -> bool {
        left <= u64::from(self.refill_at) && !self.has(IN_FLIGHT) && !self.exact_at(now_us)
    }

    /// Counts a request of `cost` that arrived on the key: demand, whether
    /// the units in hand, the lease in flight or the wrapped limiter at its
    /// own cost decide it, and whatever the answer.
    #[inline]
    pub(crate) fn arrived(&mut self, cost: u64) {
        self.arrived = self.arrived.saturating_add(packed(cost));
    }

    /// The size of a lease asked now for a request of `cost`, and marks it
    /// in flight; `None` when none may be asked: one is in flight, a failure
    /// policy answered the last, or the units in hand leave no room for
    /// `cost` under the maximum lease.
    /// The request's own arrival is counted before
    /// ([`arrived`](Self::arrived)).
    pub(crate) fn ask(&mut self, cost: u64, now_us: u64, sizing: &Sizing) -> Option<u64> {
        let room = self.room(cost, now_us, sizing)?;
        self.cold.demand = packed(self.demand(now_us, sizing));
        let target = u64::from(self.cold.demand).clamp(sizing.min_lease, sizing.max_lease);
        let size = target
            .min(u64::from(self.cold.remaining))
            .min(room)
            .max(cost);
        self.cold.spare = packed(size - cost);
        Some(self.asked(size, now_us, sizing))
    }

    /// The size of a lease asked now ahead of need, and marks it in flight;
    /// `None` when none may be asked, or when the demand seen does not
    /// promise to use a unit within half a lifetime (it would lapse), or
    /// the key has no unit left. With no request arrived since the last lease
    /// (fetched just now), the demand that sized it. A demand seen is
    /// raised to the minimum lease, as for a lease asked on need.
    pub(crate) fn ask_ahead(&mut self, now_us: u64, sizing: &Sizing) -> Option<u64> {
        let room = self.room(1, now_us, sizing)?;
        if self.arrived > 0 {
            self.cold.demand = packed(self.demand(now_us, sizing));
        }
        let target = match u64::from(self.cold.demand) {
            0 => 0,
            demand => demand.clamp(sizing.min_lease, sizing.max_lease),
        };
        let size = target.min(u64::from(self.cold.remaining)).min(room);
        self.cold.spare = packed(size);
        (size > 0).then(|| self.asked(size, now_us, sizing))
    }

    /// Room under the maximum lease, if a lease of at least `cost` may be
    /// asked now.
    fn room(&self, cost: u64, now_us: u64, sizing: &Sizing) -> Option<u64> {
        let room = sizing.max_lease.saturating_sub(self.held());
        (!self.has(IN_FLIGHT) && !self.exact_at(now_us) && room >= cost).then_some(room)
    }

    /// `D`: the units that arrived since the last lease was asked, at the
    /// rate they came, over half a lifetime (rounded down), and at most
    /// twice the larger of those units and the last lease's `D`. The
    /// arrivals count every request, those the lease in flight or the
    /// wrapped limiter decide included, so a key's lease grows with what
    /// is asked of it, not with what the slower paths got through; and it
    /// grows at most twofold a lease, so that two requests close together
    /// do not take the maximum lease, yet a key under steady demand
    /// reaches it in a logarithmic number of leases (docs/spec.md section
    /// 8.5). 0 before the first lease, when no rate has been seen.
    fn demand(&self, now_us: u64, sizing: &Sizing) -> u64 {
        if !self.has(HAS_SINCE) {
            return 0;
        }
        let elapsed = now_us.saturating_sub(self.cold.since_us).max(1);
        let units = u128::from(self.arrived);
        let rate = units * u128::from(sizing.lifetime_us / 2) / u128::from(elapsed);
        let doubled = 2 * units.max(u128::from(self.cold.demand));
        u64::try_from(rate.min(doubled)).unwrap_or(u64::MAX)
    }

    /// Marks a lease of `size` in flight, asked at `now_us`, from which
    /// demand is counted anew; the next lease is fetched when what is left
    /// in hand is within the refill threshold's share of `size` and below
    /// the maximum lease.
    fn asked(&mut self, size: u64, now_us: u64, sizing: &Sizing) -> u64 {
        self.set(IN_FLIGHT | HAS_SINCE, true);
        let share = u128::from(sizing.refill_percent) * u128::from(packed(size)) / 100;
        let below_max = u128::from(sizing.max_lease.saturating_sub(1));
        self.refill_at = packed(u64::try_from(share.min(below_max)).unwrap_or(u64::MAX));
        self.arrived = 0;
        self.cold.since_us = now_us;
        size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_lease::fixtures::*;

    #[test]
    fn a_lease_follows_demand_within_the_minimum_and_maximum() {
        let mut key = KeyLease::new();
        key.arrived(1);
        assert_eq!(key.ask(1, 0, &SIZING), Some(1), "no demand seen yet");
        assert_eq!(key.ask(1, 0, &SIZING), None, "one in flight at a time");
        key.granted(batch(0, 1_000_000), grant(), 900, LIMITS);
        // 10 units and the request's in 10 ms: 1,100/s, half a second's
        // worth is 550, but a lease grows at most twofold.
        key.arrived(11);
        assert_eq!(key.ask(1, 10_000, &SIZING), Some(22));
        key.granted(batch(0, 1_000_000), grant(), 900, LIMITS);
        // 61 units in 1 ms: far more than the maximum.
        key.arrived(61);
        assert_eq!(key.ask(1, 11_000, &SIZING), Some(100));
        key.granted(batch(100, 1_000_000), grant(), 40, LIMITS);
        key.expire(11_000);
        assert!(key.take(60, true).is_some());
        // 61 units in 9 ms again, but the key has 40 left and 40 are in hand.
        key.arrived(61);
        assert_eq!(key.ask(1, 20_000, &SIZING), Some(40));
        assert!(key.settled().is_empty(), "no request waited");
        key.denied(3);
        assert_eq!(key.ask(5, 20_000, &SIZING), Some(5), "down to the request");
    }

    #[test]
    fn a_lease_doubles_the_last_demand_when_few_requests_arrive_between_leases() {
        // One request a millisecond, 500 in half a lifetime: each lease
        // sees one arrival, and still doubles the last one's demand.
        let mut key = KeyLease::new();
        key.arrived(1);
        assert_eq!(key.ask(1, 0, &SIZING), Some(1));
        let mut sizes = Vec::new();
        for ms in 1..=8 {
            key.granted(batch(0, 10_000_000), grant(), 10_000, LIMITS);
            key.arrived(1);
            sizes.push(key.ask(1, ms * 1_000, &SIZING).unwrap());
        }
        assert_eq!(sizes, [2, 4, 8, 16, 32, 64, 100, 100]);
        // Demand that stops: one request half a lifetime later sizes the
        // next lease by its rate, whatever the last lease was.
        key.granted(batch(0, 10_000_000), grant(), 10_000, LIMITS);
        key.arrived(1);
        assert_eq!(key.ask(1, 508_000, &SIZING), Some(1));
    }

    #[test]
    fn the_refill_threshold_is_a_share_of_the_last_lease() {
        let mut key = KeyLease::new();
        key.ask(1, 0, &SIZING);
        key.arrived(101);
        assert!(key.settled().is_empty(), "no request waited");
        assert_eq!(key.ask(1, 1_000, &SIZING), Some(100));
        key.granted(batch(100, 1_000_000), grant(), 500, LIMITS);
        assert!(!key.wants_refill(26, 1_000));
        assert!(key.wants_refill(25, 1_000));
        assert_eq!(
            key.ask_ahead(1_000, &SIZING),
            None,
            "no room under the maximum lease"
        );
        key.take(80, true);
        key.arrived(80);
        assert_eq!(
            key.ask_ahead(2_000, &SIZING),
            Some(80),
            "80 within 1 ms, capped by room"
        );
        assert!(key.settled().is_empty(), "no request waited");
        key.degraded(5_000);
        assert!(!key.wants_refill(0, 4_999));
        assert_eq!(key.ask(1, 4_999, &SIZING), None);
    }

    #[test]
    fn a_lease_ahead_of_need_is_at_least_the_minimum_lease_if_any_is_due() {
        let sizing = Sizing {
            min_lease: 8,
            ..SIZING
        };
        let mut key = KeyLease::new();
        key.arrived(1);
        assert_eq!(key.ask(1, 0, &sizing), Some(8));
        key.granted(batch(7, 10_000_000), grant(), 500, LIMITS);
        // One request in 600 ms: less than one in half a lifetime.
        key.take(7, false);
        key.arrived(1);
        assert_eq!(key.ask_ahead(600_000, &sizing), None, "no demand, no lease");
        // Three in 900 ms: one unit in half a lifetime, raised to 8.
        key.arrived(2);
        assert_eq!(key.ask_ahead(900_000, &sizing), Some(8));
    }
}

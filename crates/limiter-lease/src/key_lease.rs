//! [`KeyLease`]: one key's leases on one instance: the units in hand, the
//! lease in flight, and what sizes the next one (docs/spec.md section 8.1).

use std::task::Waker;

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
/// key beside the key, in one cache line. What a decision from the units
/// in hand reads and writes is here: the older lease's units, expiry and
/// place in its queue, the newer lease's units, the grant, the refill
/// threshold, the count of arrivals and the flags. The rest, read only when a
/// lease is asked, granted or lapses into its place, or to time a leaky
/// bucket's queue, is behind a pointer ([`Cold`]). Counts of units are
/// 32 bits ([`MAX_UNITS`]).
#[derive(Debug)]
pub(crate) struct KeyLease {
    /// When the older lease's units lapse (µs).
    expires_us: u64,
    /// The last grant's reset (if [`HAS_GRANT`]).
    reset_at_us: u64,
    /// The older lease's units left: granted leases with units left are
    /// the older (first to lapse) and the newer; the newer holds units only
    /// while the older does.
    units: u32,
    /// Units taken from the older lease so far, the request that fetched
    /// it included: the next unit's place in its queue (leaky bucket).
    taken: u32,
    /// The newer lease's units left.
    newer_units: u32,
    /// The most units left in hand that fetch the next lease: the refill
    /// threshold's share of the last lease asked, below the maximum lease.
    refill_at: u32,
    /// Units of the requests that arrived on the key since the last lease
    /// was asked, whatever decided them (saturated): the demand.
    arrived: u32,
    /// The last grant's `bound_by`.
    bound_by: u8,
    /// [`IN_FLIGHT`], [`HAS_GRANT`], [`HAS_SINCE`], [`DEGRADED`],
    /// [`OWN_LIMIT`] and [`LAPSING`].
    flags: u8,
    cold: Box<Cold>,
}

/// A lease request is in flight.
const IN_FLIGHT: u8 = 1;
/// A lease was granted: the grant's fields hold its report.
const HAS_GRANT: u8 = 1 << 1;
/// A lease was asked: `since_us` holds when.
const HAS_SINCE: u8 = 1 << 2;
/// A failure policy answered a lease: `exact_until_us` holds until when
/// no lease is asked.
const DEGRADED: u8 = 1 << 3;
/// The last grant's `limit` is not its part's max cost: `grant_limit`
/// holds it.
const OWN_LIMIT: u8 = 1 << 4;
/// The units were given up (`reset`, `release`) while a lease request was
/// in flight: its lease, counted before, lapses when it arrives
/// (docs/spec.md section 8.3: the units held, the lease in flight
/// included, are dropped).
const LAPSING: u8 = 1 << 5;

/// The part of a key's leases that a decision from the units in hand does
/// not read, a leaky bucket's departure time aside.
#[derive(Debug, Default)]
struct Cold {
    /// When the older lease's first unit departs (leaky bucket; µs).
    depart_us: u64,
    /// When the newer lease's units lapse (µs).
    newer_expires_us: u64,
    /// When the newer lease's first unit departs (leaky bucket; µs).
    newer_depart_us: u64,
    /// The last grant's `limit`.
    grant_limit: u64,
    /// When the last lease was asked (if [`HAS_SINCE`]): demand is counted
    /// from then.
    since_us: u64,
    /// Until then, no lease (if [`DEGRADED`]).
    exact_until_us: u64,
    /// Units taken from the newer lease so far (leaky bucket).
    newer_taken: u32,
    /// The global `remaining` last reported for the key, saturated; the
    /// most before any report (it bounds no lease then).
    remaining: u32,
    /// The demand `D` (units over half a lifetime) the last lease was sized
    /// by, saturated (a lease is at most `M` anyway): the next may double it.
    demand: u32,
    /// Units of the lease in flight that the request fetching it does not
    /// take: what requests may wait for.
    spare: u32,
    /// Units of the lease in flight claimed by the requests waiting for it.
    waiting: u32,
    /// Lease requests settled so far (wrapping): a request waiting for the
    /// lease in flight knows it landed when this moves.
    settles: u32,
    /// The requests waiting for the lease in flight, woken when it settles.
    waiters: Vec<Waker>,
}

impl KeyLease {
    /// The bytes a key's leases hold on the heap, beyond the wakers of
    /// the requests waiting for a lease in flight.
    pub(crate) const COLD_BYTES: usize = std::mem::size_of::<Cold>();

    pub(crate) fn new() -> Self {
        Self {
            expires_us: 0,
            reset_at_us: 0,
            units: 0,
            taken: 0,
            newer_units: 0,
            refill_at: 0,
            arrived: 0,
            bound_by: 0,
            flags: 0,
            cold: Box::new(Cold {
                remaining: u32::MAX,
                ..Cold::default()
            }),
        }
    }

    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    fn set(&mut self, flag: u8, on: bool) {
        match on {
            true => self.flags |= flag,
            false => self.flags &= !flag,
        }
    }

    /// The older lease.
    fn older(&self) -> Batch {
        Batch {
            expires_us: self.expires_us,
            depart_us: self.cold.depart_us,
            units: self.units,
            taken: self.taken,
        }
    }

    /// The newer lease.
    fn newer(&self) -> Batch {
        Batch {
            expires_us: self.cold.newer_expires_us,
            depart_us: self.cold.newer_depart_us,
            units: self.newer_units,
            taken: self.cold.newer_taken,
        }
    }

    /// Puts `batch` in the older lease's place.
    fn set_older(&mut self, batch: Batch) {
        self.expires_us = batch.expires_us;
        self.cold.depart_us = batch.depart_us;
        self.units = batch.units;
        self.taken = batch.taken;
    }

    /// Puts `batch` in the newer lease's place.
    fn set_newer(&mut self, batch: Batch) {
        self.cold.newer_expires_us = batch.expires_us;
        self.cold.newer_depart_us = batch.depart_us;
        self.newer_units = batch.units;
        self.cold.newer_taken = batch.taken;
    }

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
    fn pop(&mut self) {
        self.set_older(self.newer());
        self.set_newer(Batch::default());
    }

    /// Units in hand (call [`expire`](Self::expire) first).
    #[inline]
    pub(crate) fn held(&self) -> u64 {
        u64::from(self.units) + u64::from(self.newer_units)
    }

    /// The grant the units in hand report, its `limit` read from
    /// `part_limits` (each part's max cost) when it is its part's.
    #[inline]
    pub(crate) fn grant(&self, part_limits: &[u64]) -> Option<Grant> {
        if !self.has(HAS_GRANT) {
            return None;
        }
        let limit = match self.has(OWN_LIMIT) {
            false => part_limits[usize::from(self.bound_by)],
            true => self.cold.grant_limit,
        };
        Some(Grant {
            limit,
            bound_by: self.bound_by,
            reset_at_us: self.reset_at_us,
        })
    }

    /// Whether nothing is in hand or in flight, and no failure policy's
    /// answer keeps the key exact: the key may be dropped. An exact key is
    /// kept, so that its requests go on at their own cost for the lifetime
    /// (docs/spec.md section 8.4) rather than ask a whole lease again.
    /// Read after every change to a key, so the older lease is read first,
    /// from the packed line: the newer holds units only while it does.
    #[inline]
    pub(crate) fn is_idle(&self, now_us: u64) -> bool {
        !self.has(IN_FLIGHT)
            && (self.units == 0 || self.expires_us <= now_us)
            && (self.newer_units == 0 || self.cold.newer_expires_us <= now_us)
            && !self.exact_at(now_us)
    }

    /// When the key becomes idle at the latest, if nothing else happens.
    pub(crate) fn idle_at(&self, now_us: u64, lifetime_us: u64) -> u64 {
        let mut idle_at = [self.older(), self.newer()]
            .iter()
            .filter(|batch| batch.units > 0)
            .map(|batch| batch.expires_us)
            .max()
            .unwrap_or(now_us);
        if self.has(IN_FLIGHT) {
            idle_at = idle_at.max(now_us.saturating_add(lifetime_us));
        }
        if self.exact_at(now_us) {
            idle_at = idle_at.max(self.cold.exact_until_us);
        }
        idle_at
    }

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

    /// Whether leaving `left` units in hand crosses the refill threshold
    /// with no lease in flight.
    #[inline]
    pub(crate) fn wants_refill(&self, left: u64, now_us: u64) -> bool {
        left <= u64::from(self.refill_at) && !self.has(IN_FLIGHT) && !self.exact_at(now_us)
    }

    /// Whether a failure policy's answer still keeps the key exact at `now_us`.
    fn exact_at(&self, now_us: u64) -> bool {
        self.has(DEGRADED) && now_us < self.cold.exact_until_us
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

    /// The lease in flight was granted: `batch` is in hand (nothing if it
    /// has no units left), reported as `grant`; `part_limits` holds each
    /// part's max cost. Answers the units that lapse instead: all of
    /// `batch`'s if the key's units were given up while it was in flight
    /// (nothing of that lease is kept: its numbers are of the key before).
    pub(crate) fn granted(
        &mut self,
        batch: Batch,
        grant: Grant,
        remaining: u64,
        part_limits: &[u64],
    ) -> u64 {
        self.set(IN_FLIGHT, false);
        if self.has(LAPSING) {
            return u64::from(batch.units);
        }
        self.cold.remaining = packed(remaining);
        let own_limit = part_limits.get(usize::from(grant.bound_by)) != Some(&grant.limit);
        self.set(HAS_GRANT, true);
        self.set(OWN_LIMIT, own_limit);
        self.cold.grant_limit = grant.limit;
        self.bound_by = grant.bound_by;
        self.reset_at_us = grant.reset_at_us;
        if batch.units == 0 {
            return 0;
        }
        if self.units == 0 {
            self.set_older(batch);
        } else if self.newer_units == 0 {
            self.set_newer(batch);
        } else {
            // A third lease while two hold units (at most the refill
            // threshold between them): the two become one that lapses
            // with the older and queues (leaky bucket) after the newer,
            // never sooner than the global limiter's schedule.
            let (older, newer) = (self.older(), self.newer());
            self.set_older(Batch {
                units: older.units.saturating_add(newer.units),
                expires_us: older.expires_us,
                ..newer
            });
            self.set_newer(batch);
        }
        0
    }

    /// The lease in flight was denied, with the key's global `remaining`.
    pub(crate) fn denied(&mut self, remaining: u64) {
        self.cold.remaining = packed(remaining);
    }

    /// A failure policy answered the lease in flight: no lease until
    /// `until_us`.
    pub(crate) fn degraded(&mut self, until_us: u64) {
        self.set(DEGRADED, true);
        self.cold.exact_until_us = until_us;
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

    /// The part's max cost: the grants' limit.
    const LIMITS: &[u64] = &[1_000];

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
    fn a_third_lease_merges_the_two_in_hand_into_the_sooner_to_lapse() {
        let mut key = KeyLease::new();
        for (units, expires_us) in [(2, 100), (3, 200), (10, 300)] {
            key.ask(1, 0, &SIZING);
            key.granted(batch(units, expires_us), grant(), 50, LIMITS);
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

    #[test]
    fn a_key_a_failure_policy_answered_is_not_idle_while_it_is_exact() {
        let mut key = KeyLease::new();
        key.ask(1, 0, &SIZING);
        key.degraded(5_000);
        assert!(key.settled().is_empty(), "no request waited");
        assert!(!key.is_idle(4_999));
        assert_eq!(key.idle_at(4_999, SIZING.lifetime_us), 5_000);
        assert!(key.is_idle(5_000));
    }

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

    #[test]
    fn a_grant_reports_its_own_limit_when_not_its_parts() {
        let mut key = KeyLease::new();
        assert!(key.grant(LIMITS).is_none(), "nothing granted yet");
        for (limit, bound_by) in [(1_000, 0), (7, 0), (1_000, 3)] {
            key.ask(1, 0, &SIZING);
            let grant = Grant {
                limit,
                bound_by,
                reset_at_us: 42,
            };
            key.granted(batch(1, 100), grant, 50, LIMITS);
            let reported = key.grant(LIMITS).unwrap();
            assert_eq!(
                (reported.limit, reported.bound_by, reported.reset_at_us),
                (limit, bound_by, 42)
            );
        }
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

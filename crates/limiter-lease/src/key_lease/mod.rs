//! [`KeyLease`]: one key's leases on one instance: the units in hand, the
//! lease in flight, and what sizes the next one (docs/spec.md section 8.1).
//!
//! One file per concern: [`batch`] the units of a granted lease,
//! [`sizing`] what sizes the next lease, [`take`] taking units in hand,
//! [`waiters`] the requests waiting for the lease in flight, [`grant`]
//! a lease's answer, [`lapse`] units leaving unused.
//!
//! # The flags
//!
//! A key's state beyond its counts is six flags, each set and cleared by
//! the steps below only:
//!
//! | flag | set by | cleared by | while set |
//! |---|---|---|---|
//! | [`IN_FLIGHT`] | a lease asked, on need or ahead of it (`ask`, `ask_ahead`) | its answer: `granted`, or `settled` (denied, a failure policy's, an error, the request dropped) | no other lease is asked and no refill is due; requests may `claim` its spare units and wait; the key is not idle |
//! | [`HAS_SINCE`] | the first lease asked | never | `since_us` dates the arrivals, which size the next lease by their rate (before it, the first lease is the minimum lease) |
//! | [`HAS_GRANT`] | the first lease granted | never | decisions from the units in hand report the last grant's numbers |
//! | [`OWN_LIMIT`] | a grant whose `limit` is not its part's max cost | a grant whose `limit` is | the grant's `limit` is read from `grant_limit`, not from the policies |
//! | [`DEGRADED`] | a failure policy answered a lease | never: it holds until `exact_until_us` passes | until then, no lease is asked, no refill is due, the key is not idle: each request goes to the wrapped limiter at its own cost |
//! | [`LAPSING`] | the units given up (`release`, `reset`) while [`IN_FLIGHT`] | the lease request's end (`settled`), or its denial before it is asked again smaller (`unclaimed`) | the lease in flight lapses when granted: its units are counted lapsed, never held |
//!
//! `IN_FLIGHT` and `LAPSING` come and go with each lease request;
//! `HAS_SINCE`, `HAS_GRANT` and `DEGRADED` stay set once set; `OWN_LIMIT`
//! follows each grant.

use std::task::Waker;

mod batch;
#[cfg(test)]
mod fixtures;
mod grant;
mod lapse;
mod sizing;
mod take;
mod waiters;

pub(crate) use self::batch::{packed, Batch, MAX_UNITS};
pub(crate) use self::grant::Grant;
pub(crate) use self::sizing::Sizing;
pub(crate) use self::take::Taken;

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

    /// Units in hand (call [`expire`](Self::expire) first).
    #[inline]
    pub(crate) fn held(&self) -> u64 {
        u64::from(self.units) + u64::from(self.newer_units)
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

    /// Whether a failure policy's answer still keeps the key exact at `now_us`.
    fn exact_at(&self, now_us: u64) -> bool {
        self.has(DEGRADED) && now_us < self.cold.exact_until_us
    }
}

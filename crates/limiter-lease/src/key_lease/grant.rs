//! A lease request's answer on the key: granted (its units in hand, its
//! numbers reported by the decisions taken from it), denied, or a failure
//! policy's (docs/spec.md sections 8.1 and 8.4).

use super::{packed, Batch, KeyLease, DEGRADED, HAS_GRANT, IN_FLIGHT, LAPSING, OWN_LIMIT};

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

impl KeyLease {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_lease::fixtures::*;

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
}

//! What the unit tests of a key's leases share: options, leases and
//! grants.

use super::{Batch, Grant, Sizing};

/// Leases of 1 to 100 units living a second.
pub(super) const SIZING: Sizing = Sizing {
    lifetime_us: 1_000_000,
    min_lease: 1,
    max_lease: 100,
    refill_percent: 25,
};

/// A granted lease of `units`, none taken yet.
pub(super) fn batch(units: u32, expires_us: u64) -> Batch {
    Batch {
        units,
        expires_us,
        taken: 0,
        depart_us: 0,
    }
}

/// The part's max cost: the grants' limit.
pub(super) const LIMITS: &[u64] = &[1_000];

/// A grant of the part's own limit.
pub(super) fn grant() -> Grant {
    Grant {
        limit: 1_000,
        bound_by: 0,
        reset_at_us: 0,
    }
}

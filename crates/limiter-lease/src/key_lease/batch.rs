//! [`Batch`]: one granted lease's units, and the 32-bit counts they
//! pack in.

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

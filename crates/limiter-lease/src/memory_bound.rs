//! What the keys held can cost: the most bytes a [`Leases`] map holds,
//! whatever keys clients choose, its cap on keys and its bound on key
//! bytes given.

use std::mem::size_of;

use limiter_core::backend::DIGEST_KEY_BYTES;

use crate::key_lease::KeyLease;
use crate::leases::{Entry, Leases, SHARDS};

impl Leases {
    /// The most bytes the keys held take ([`max_bytes`]).
    pub(crate) fn max_bytes(&self) -> usize {
        max_bytes(self.max_keys, self.per_shard, self.max_key_bytes)
    }
}

/// What the allocator is counted to add to each heap allocation (glibc's
/// malloc adds at most 23 bytes, rounding to 16 with an 8-byte header).
const ALLOCATION_OVERHEAD: usize = 32;

/// The most bytes a map of at most `max_keys` keys, `per_shard` in any one
/// shard, each key held in at most `max_key_bytes` or as a digest, holds:
/// each shard's table at its largest (the entries and their control
/// bytes, and the table it outgrows, held while the entries move), and
/// each key's allocations (its bytes, and its leases' cold part).
pub(crate) fn max_bytes(max_keys: usize, per_shard: usize, max_key_bytes: usize) -> usize {
    let tables = SHARDS.saturating_mul(table_bytes(per_shard));
    let key =
        heap(size_of::<Box<[u8]>>()).saturating_add(heap(max_key_bytes.max(DIGEST_KEY_BYTES)));
    let per_key = key.saturating_add(heap(KeyLease::COLD_BYTES));
    tables.saturating_add(max_keys.saturating_mul(per_key))
}

/// A table of `keys` at most: hashbrown's buckets for that many (a power
/// of two, at least 8/7 of them), one entry and one control byte each,
/// plus the table of half as many buckets it grew from.
fn table_bytes(keys: usize) -> usize {
    let buckets = match keys {
        0 => return 0,
        1..=3 => 4,
        4..=7 => 8,
        _ => (keys.saturating_mul(8) / 7)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX),
    };
    let table = buckets.saturating_mul(size_of::<Entry>() + 1);
    // The group of control bytes past the end, the alignment and the
    // allocator's header.
    heap(table.saturating_add(size_of::<Entry>() + 16)).saturating_mul(3) / 2
}

/// What a heap allocation of `bytes` costs.
fn heap(bytes: usize) -> usize {
    bytes.saturating_add(ALLOCATION_OVERHEAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_costs_its_bytes_up_to_the_bound_or_a_digest() {
        let cost = |max_key_bytes| max_bytes(1_000, 125, max_key_bytes);
        assert_eq!(cost(1_256) - cost(256), 1_000 * 1_000);
        assert_eq!(cost(0), cost(DIGEST_KEY_BYTES), "a digest at the least");
        assert_eq!(cost(usize::MAX), usize::MAX, "no bound");
    }
}

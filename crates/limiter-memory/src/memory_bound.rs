//! What keys can cost: the most bytes one key holds, whatever keys
//! clients choose, which a cap on keys
//! ([`max_keys`](crate::MemoryLimiterBuilder::max_keys)) multiplies into
//! the most the limiter holds.

use std::mem::size_of;

use dashmap::DashMap;
use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Policies, Policy};

use limiter_core::backend::DIGEST_KEY_BYTES;

/// What the allocator is counted to add to each heap allocation (glibc's
/// malloc adds at most 23 bytes, rounding to 16 with an 8-byte header).
const ALLOCATION_OVERHEAD: usize = 32;

/// The hash table's bytes per entry, at most, as a multiple of the entry
/// and its control byte: hashbrown doubles its buckets when 7/8 of them
/// are used, so at least 7/16 of them are (16/7 buckets per key), and while
/// a shard's table grows its old table is held too (24/7): at most 4.
const TABLE_FACTOR: usize = 4;

/// A sliding log's entry (its time and a running total, two `u64`s).
const LOG_ENTRY_BYTES: usize = 16;

/// The fewest entries a sliding log's deque allocates room for.
const LOG_MIN_CAPACITY: u64 = 4;

/// The most bytes one key holds, all counted (the doc of
/// `MemoryLimiter::max_bytes_per_key` details them): its share of the hash
/// table, whose entries are `entry` bytes; its bytes on the heap, up to
/// `max_key_bytes` or a digest; and its state's heap under `policies`.
pub(crate) fn max_bytes_per_key(entry: usize, max_key_bytes: usize, policies: &Policies) -> usize {
    let table = TABLE_FACTOR.saturating_mul(entry + 1);
    // A digest is on the heap (it is longer than the inline bytes).
    let key = heap(max_key_bytes.max(DIGEST_KEY_BYTES));
    let state = match policies.single() {
        Some(policy) => log_bytes(policy),
        // A tiered set boxes its parts, each a `KeyState`.
        None => policies.iter().map(log_bytes).fold(
            heap(policies.len() * size_of::<KeyState>()),
            usize::saturating_add,
        ),
    };
    table.saturating_add(key).saturating_add(state)
}

/// The bytes of one of `map`'s entries: its key and its state.
pub(crate) fn entry_bytes<K, V, S>(_: &DashMap<K, V, S>) -> usize {
    size_of::<(K, V)>()
}

/// What a heap allocation of `bytes` costs.
fn heap(bytes: usize) -> usize {
    if bytes == 0 {
        0
    } else {
        bytes.saturating_add(ALLOCATION_OVERHEAD)
    }
}

/// The most bytes a key's state under `policy` holds on the heap: a
/// sliding log's deque of at most `min(L, window ticks)` entries; nothing
/// for the other algorithms.
fn log_bytes(policy: &Policy) -> usize {
    if policy.algorithm() != Algorithm::SlidingLog {
        return 0;
    }
    let entries = policy.limit().min(policy.window_ticks());
    let capacity = entries
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX)
        .max(LOG_MIN_CAPACITY);
    let bytes = usize::try_from(capacity)
        .unwrap_or(usize::MAX)
        .saturating_mul(LOG_ENTRY_BYTES);
    heap(bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use limiter_core::Rate;

    use super::*;

    #[test]
    fn a_sliding_logs_heap_is_its_entries_rounded_up_to_a_power_of_two() {
        let log =
            |limit, window| log_bytes(&Policy::sliding_log(Rate::new(limit, window)).unwrap());
        assert_eq!(log(1, Duration::from_secs(1)), 4 * 16 + 32);
        assert_eq!(log(100, Duration::from_secs(10)), 128 * 16 + 32);
        assert_eq!(log(128, Duration::from_secs(10)), 128 * 16 + 32);
        // Fewer ticks in the window than units: one entry per tick.
        let ticks = Policy::sliding_log(Rate::new(1_000, Duration::from_micros(10))).unwrap();
        assert_eq!(ticks.window_ticks(), 10);
        assert_eq!(log_bytes(&ticks), 16 * 16 + 32);
        let bucket = Policy::token_bucket(Rate::per_second(1_000)).unwrap();
        assert_eq!(log_bytes(&bucket), 0);
    }
}

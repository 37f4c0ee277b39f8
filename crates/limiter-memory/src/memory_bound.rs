//! What keys can cost: the most bytes one key holds, and with a cap on
//! keys ([`max_keys`](crate::MemoryLimiterBuilder::max_keys)) the most the
//! limiter holds, whatever keys clients choose.

use std::mem::size_of;

use dashmap::DashMap;
use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Policy};

use crate::key::DIGEST_KEY_BYTES;
use crate::limiter::MemoryLimiter;
use crate::map::with_map;

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

impl MemoryLimiter {
    /// The most bytes one key holds, all counted: its share of the hash
    /// table, its bytes on the heap (at most
    /// [`max_key_bytes`](Self::max_key_bytes), or a 33-byte digest of a
    /// longer key; a key up to 22 bytes is held in the entry) and its
    /// state's heap (a sliding log's entries, a tiered set's parts), each
    /// allocation counted with 32 bytes of allocator overhead.
    ///
    /// A sliding log holds at most one entry per distinct tick in its
    /// window and one per unit admitted: at most the smaller of its limit
    /// `L` and its window in ticks, 16 bytes each, in a deque whose
    /// capacity doubles (so up to the next power of two, at least 4). The
    /// other algorithms hold a fixed state in the entry (16 to 24 bytes).
    /// So a `sliding-log:100/10s` key holds at most 128 entries, 2 KiB,
    /// where a `fixed-window:100/10s` key holds no state on the heap.
    ///
    /// ```
    /// use limiter_core::{Policy, Rate};
    /// use limiter_memory::MemoryLimiter;
    ///
    /// let limiter = MemoryLimiter::builder(Policy::fixed_window(Rate::per_hour(100))?)
    ///     .max_keys(100_000)
    ///     .build();
    /// // The key (256 bytes at most) and its share of the table.
    /// assert!(limiter.max_bytes_per_key() < 600);
    /// assert_eq!(limiter.max_bytes(), Some(100_000 * limiter.max_bytes_per_key()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_bytes_per_key(&self) -> usize {
        let entry = with_map!(&self.keys, map => entry_bytes(map));
        let table = TABLE_FACTOR.saturating_mul(entry + 1);
        // A digest is on the heap (it is longer than the inline bytes).
        let key = heap(self.max_key_bytes.max(DIGEST_KEY_BYTES));
        let state = match self.policies.single() {
            Some(policy) => log_bytes(policy),
            // A tiered set boxes its parts, each a `KeyState`.
            None => self.policies.iter().map(log_bytes).fold(
                heap(self.policies.len() * size_of::<KeyState>()),
                usize::saturating_add,
            ),
        };
        table.saturating_add(key).saturating_add(state)
    }

    /// The most bytes the limiter's keys hold:
    /// [`max_keys`](Self::max_keys) times
    /// [`max_bytes_per_key`](Self::max_bytes_per_key), beyond the empty
    /// limiter's own (a few KiB); `None` without a cap on keys, when it is
    /// bounded by the keys active within their reset time alone.
    pub fn max_bytes(&self) -> Option<usize> {
        self.max_keys
            .map(|max_keys| max_keys.saturating_mul(self.max_bytes_per_key()))
    }
}

/// The bytes of one of `map`'s entries: its key and its state.
fn entry_bytes<K, V, S>(_: &DashMap<K, V, S>) -> usize {
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

    use limiter_core::{Policies, Rate};

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

    #[test]
    fn the_bound_grows_with_the_key_bound_and_is_capped_by_the_count() {
        let policy = Policy::fixed_window(Rate::per_hour(10)).unwrap();
        let short = MemoryLimiter::builder(policy.clone())
            .max_key_bytes(16)
            .build();
        let long = MemoryLimiter::builder(policy.clone())
            .max_key_bytes(1_000)
            .build();
        // Below the digest's 33 bytes, the digest is the longest key held.
        assert_eq!(short.max_bytes_per_key(), 4 * 41 + 33 + 32);
        assert_eq!(long.max_bytes_per_key(), 4 * 41 + 1_000 + 32);
        assert_eq!(long.max_bytes(), None);
        let capped = MemoryLimiter::builder(policy).max_keys(10).build();
        assert_eq!(capped.max_bytes(), Some(10 * (4 * 41 + 256 + 32)));
        let tiered = Policies::new([
            Policy::token_bucket(Rate::per_second(5)).unwrap(),
            Policy::sliding_log(Rate::per_minute(100)).unwrap(),
        ])
        .unwrap();
        let set = MemoryLimiter::new(tiered);
        assert_eq!(
            set.max_bytes_per_key(),
            4 * 49 + 256 + 32 + (2 * size_of::<KeyState>() + 32) + (128 * 16 + 32)
        );
    }
}

//! [`Leases`]: the keys this instance holds leases for, in shards under
//! their own locks, at most a fixed number of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ahash::RandomState;
use hashbrown::HashTable;

use crate::key::Key;
use crate::key_lease::KeyLease;

/// Shards: requests on different keys rarely wait on one lock.
const SHARDS: usize = 16;

/// Keys to their leases, at most `max_keys` of them (rounded up to a
/// multiple of the shard count). Hashed with aHash under per-process
/// random keys: clients choose the keys, so the hash must resist flooding,
/// as the memory backend's map does. The hash is computed once a
/// decision: it picks the shard and the slot.
#[derive(Debug)]
pub(crate) struct Leases {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    per_shard: usize,
    lifetime_us: u64,
    /// Units given up unused: lapsed, released or reset.
    lapsed: AtomicU64,
}

/// A key and its leases: the map's slot, one cache line, the key inline
/// when short, so that a decision from the units in hand reads one line.
#[derive(Debug)]
#[repr(align(64))]
struct Entry {
    key: Key,
    lease: KeyLease,
}

#[derive(Debug, Default)]
struct Shard {
    keys: HashTable<Entry>,
    /// No key of the shard can be idle before then: a full shard is not
    /// swept again until it.
    no_sweep_before_us: u64,
}

impl Leases {
    pub(crate) fn new(max_keys: usize, lifetime_us: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            per_shard: max_keys.div_ceil(SHARDS),
            lifetime_us,
            lapsed: AtomicU64::new(0),
        }
    }

    /// `key`'s hash and its shard, locked. The shard is read from the
    /// hash's middle bits: the map reads the low ones and the top seven.
    #[inline]
    fn shard(&self, key: &[u8]) -> (u64, MutexGuard<'_, Shard>) {
        let hash = self.hasher.hash_one(key);
        let index = ((hash >> 32) as usize) % SHARDS;
        let shard = self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (hash, shard)
    }

    /// Runs `f` on `key`'s leases, if held.
    pub(crate) fn with<R>(&self, key: &[u8], f: impl FnOnce(&mut KeyLease) -> R) -> Option<R> {
        let (hash, mut shard) = self.shard(key);
        shard.lease(hash, key).map(f)
    }

    /// Runs `f` on `key`'s leases, if held, after dropping those that
    /// lapsed by `now_us`.
    #[inline]
    pub(crate) fn with_live<R>(
        &self,
        key: &[u8],
        now_us: u64,
        f: impl FnOnce(&mut KeyLease) -> R,
    ) -> Option<R> {
        let (hash, mut shard) = self.shard(key);
        let lease = shard.lease(hash, key)?;
        self.lapse(lease.expire(now_us));
        Some(f(lease))
    }

    /// Counts `units` given up unused.
    fn lapse(&self, units: u64) {
        if units > 0 {
            self.lapsed.fetch_add(units, Ordering::Relaxed);
        }
    }

    /// Units given up unused so far.
    pub(crate) fn lapsed(&self) -> u64 {
        self.lapsed.load(Ordering::Relaxed)
    }

    /// Runs `f` on `key`'s leases (after dropping those that lapsed by
    /// `now_us`), adding the key if there is room: a full shard first drops
    /// its idle keys. `None` when there is no room.
    pub(crate) fn with_new<R>(
        &self,
        key: &[u8],
        now_us: u64,
        f: impl FnOnce(&mut KeyLease) -> R,
    ) -> Option<R> {
        let (hash, mut shard) = self.shard(key);
        if let Some(lease) = shard.lease(hash, key) {
            self.lapse(lease.expire(now_us));
            return Some(f(lease));
        }
        if shard.keys.len() >= self.per_shard {
            let lapsed = shard.sweep(now_us, self.lifetime_us);
            self.lapse(lapsed);
            if shard.keys.len() >= self.per_shard {
                return None;
            }
        }
        // A new key may be idle at once.
        shard.no_sweep_before_us = shard.no_sweep_before_us.min(now_us);
        let entry = Entry {
            key: Key::new(key),
            lease: KeyLease::new(),
        };
        let rehash = |entry: &Entry| self.hasher.hash_one(entry.key.bytes());
        let mut slot = shard.keys.insert_unique(hash, entry, rehash);
        Some(f(&mut slot.get_mut().lease))
    }

    /// Gives up `key`'s units in hand; returns them. The key stays, so
    /// that a lease in flight settles on it.
    pub(crate) fn release_key(&self, key: &[u8], now_us: u64) -> u64 {
        let released = self.with_live(key, now_us, KeyLease::release).unwrap_or(0);
        self.lapse(released);
        released
    }

    /// Gives up every unit in hand, keeping what sizes the next leases;
    /// returns the units given up.
    pub(crate) fn release(&self, now_us: u64) -> u64 {
        let released = self
            .shards
            .iter()
            .map(|shard| {
                let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                shard
                    .keys
                    .iter_mut()
                    .map(|Entry { lease, .. }| {
                        self.lapse(lease.expire(now_us));
                        lease.release()
                    })
                    .sum::<u64>()
            })
            .sum();
        self.lapse(released);
        released
    }

    /// The keys held.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .keys
                    .len()
            })
            .sum()
    }
}

impl Shard {
    /// `key`'s leases, if held; `hash` is its hash.
    #[inline]
    fn lease(&mut self, hash: u64, key: &[u8]) -> Option<&mut KeyLease> {
        self.keys
            .find_mut(hash, |entry| entry.key.is(key))
            .map(|entry| &mut entry.lease)
    }

    /// Drops the idle keys, unless none can be idle yet; returns the units
    /// that lapsed meanwhile.
    fn sweep(&mut self, now_us: u64, lifetime_us: u64) -> u64 {
        if now_us < self.no_sweep_before_us {
            return 0;
        }
        let mut next = u64::MAX;
        let mut lapsed = 0;
        self.keys.retain(|Entry { lease, .. }| {
            lapsed += lease.expire(now_us);
            let idle = lease.is_idle(now_us);
            if !idle {
                next = next.min(lease.idle_at(now_us, lifetime_us));
            }
            !idle
        });
        self.no_sweep_before_us = next;
        lapsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_lease::{Batch, Grant, Sizing};

    const SIZING: Sizing = Sizing {
        lifetime_us: 1_000,
        min_lease: 1,
        max_lease: 10,
        refill_percent: 0,
    };

    fn hold(lease: &mut KeyLease, units: u32, expires_us: u64) {
        lease.ask(1, 0, &SIZING);
        let grant = Grant {
            limit: 10,
            bound_by: 0,
            reset_at_us: 0,
        };
        let batch = Batch {
            units,
            expires_us,
            taken: 0,
            depart_us: 0,
        };
        lease.granted(batch, grant, 0, &[10]);
    }

    #[test]
    fn a_key_with_its_leases_is_packed() {
        // The map's slot: one cache line, a key of up to 14 bytes inline
        // and what a decision from the units in hand reads.
        assert_eq!(std::mem::size_of::<Entry>(), 64);
        assert_eq!(std::mem::size_of::<KeyLease>(), 48);
    }

    #[test]
    fn a_full_map_makes_room_from_idle_keys_only() {
        // One key per shard; 400 keys reach every shard.
        let leases = Leases::new(SHARDS, 1_000);
        let keys = |prefix: &'static str| (0..400).map(move |i| format!("{prefix}{i}"));
        let held = keys("held")
            .filter(|key| {
                leases
                    .with_new(key.as_bytes(), 0, |lease| hold(lease, 5, 500))
                    .is_some()
            })
            .count();
        assert_eq!(held, SHARDS);
        assert!(
            keys("early").all(|key| leases.with_new(key.as_bytes(), 499, |_| ()).is_none()),
            "a live lease is never dropped to make room"
        );
        assert_eq!(leases.len(), SHARDS);
        // Once the leases lapse, their keys make room, and so do new keys
        // that hold nothing.
        assert!(keys("late").all(|key| leases.with_new(key.as_bytes(), 500, |_| ()).is_some()));
        assert_eq!(leases.len(), SHARDS);
        assert_eq!(leases.release(500), 0);
        assert_eq!(
            leases.lapsed(),
            5 * SHARDS as u64,
            "every lease lapsed unused"
        );
    }
}

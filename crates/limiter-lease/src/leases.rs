//! [`Leases`]: the keys this instance holds leases for, in shards under
//! their own locks, at most a fixed number of them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use ahash::RandomState;
use hashbrown::HashTable;

use crate::key::Key;
use crate::key_lease::KeyLease;

/// Shards: requests on different keys rarely wait on one lock.
const SHARDS: usize = 16;

/// Keys to their leases, at most `max_keys` of them, and at most twice
/// their share in any one shard, which bounds each shard's table. Hashed
/// with aHash under per-process random keys: clients choose the keys, so
/// the hash must resist flooding, as the memory backend's map does. The
/// hash is computed once a decision: it picks the shard and the slot.
#[derive(Debug)]
pub(crate) struct Leases {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    max_keys: usize,
    /// A shard's most keys: twice its share of `max_keys`, which bounds
    /// its table; keys hashed at random rarely reach it, short of tiny
    /// `max_keys`.
    per_shard: usize,
    /// The keys held, at most `max_keys`.
    held: AtomicUsize,
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
            max_keys,
            per_shard: max_keys.div_ceil(SHARDS).saturating_mul(2),
            held: AtomicUsize::new(0),
            lifetime_us,
            lapsed: AtomicU64::new(0),
        }
    }

    /// `key`'s hash and its shard, locked.
    #[inline]
    fn shard(&self, key: &[u8]) -> (u64, MutexGuard<'_, Shard>) {
        let hash = self.hasher.hash_one(key);
        (hash, self.lock(shard_of(hash)))
    }

    /// The shard at `index`, locked.
    #[inline]
    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
    /// `now_us`), adding the key if there is room: when `max_keys` are held
    /// (or the key's shard is at its most), the key's shard drops its idle
    /// keys, then, if still needed, the other shards whose lock is free
    /// drop theirs. `None` when there is no room.
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
        if !(shard.keys.len() < self.per_shard && self.reserve()) {
            self.sweep(&mut shard, now_us);
            if shard.keys.len() >= self.per_shard {
                return None;
            }
            if !self.reserve() {
                self.sweep_others(shard_of(hash), now_us);
                if !self.reserve() {
                    return None;
                }
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

    /// Counts one more key held, if fewer than `max_keys` are.
    fn reserve(&self) -> bool {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < self.max_keys).then_some(held + 1)
            })
            .is_ok()
    }

    /// Drops `shard`'s idle keys, counting the units that lapsed meanwhile.
    fn sweep(&self, shard: &mut Shard, now_us: u64) {
        let (dropped, lapsed) = shard.sweep(now_us, self.lifetime_us);
        self.held.fetch_sub(dropped, Ordering::Relaxed);
        self.lapse(lapsed);
    }

    /// Drops the idle keys of the shards other than `own` (locked by the
    /// caller) whose lock is free, until fewer than `max_keys` are held.
    fn sweep_others(&self, own: usize, now_us: u64) {
        for index in (0..SHARDS).filter(|&index| index != own) {
            let mut shard = match self.shards[index].try_lock() {
                Ok(shard) => shard,
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            self.sweep(&mut shard, now_us);
            if self.held.load(Ordering::Relaxed) < self.max_keys {
                return;
            }
        }
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

/// The shard of a key hashed to `hash`: read from the hash's middle bits,
/// as the table reads the low ones and the top seven.
#[inline]
fn shard_of(hash: u64) -> usize {
    ((hash >> 32) as usize) % SHARDS
}

impl Shard {
    /// `key`'s leases, if held; `hash` is its hash.
    #[inline]
    fn lease(&mut self, hash: u64, key: &[u8]) -> Option<&mut KeyLease> {
        self.keys
            .find_mut(hash, |entry| entry.key.is(key))
            .map(|entry| &mut entry.lease)
    }

    /// Drops the idle keys, unless none can be idle yet; returns how many
    /// it dropped and the units that lapsed meanwhile.
    fn sweep(&mut self, now_us: u64, lifetime_us: u64) -> (usize, u64) {
        if now_us < self.no_sweep_before_us {
            return (0, 0);
        }
        let before = self.keys.len();
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
        (before - self.keys.len(), lapsed)
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
        // As many keys as shards, two at most in one; 400 keys reach every
        // shard.
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
        // Once the leases lapse, their keys make room, in any shard, and so
        // do new keys that hold nothing.
        assert!(keys("late").all(|key| leases.with_new(key.as_bytes(), 500, |_| ()).is_some()));
        assert!(leases.len() <= SHARDS);
        assert_eq!(leases.release(500), 0);
        assert_eq!(
            leases.lapsed(),
            5 * SHARDS as u64,
            "every lease lapsed unused"
        );
    }

    #[test]
    fn the_most_keys_are_held_whatever_their_shards() {
        let leases = Leases::new(1_000, 1_000);
        let hold_one = |i: usize| {
            leases
                .with_new(format!("key{i}").as_bytes(), 0, |lease| hold(lease, 1, 500))
                .is_some()
        };
        assert!(
            (0..1_000).all(hold_one),
            "room for every key up to the most"
        );
        assert!(!hold_one(1_000), "none beyond");
        assert_eq!(leases.len(), 1_000);
    }
}

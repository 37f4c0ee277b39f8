//! [`Leases`]: the keys this instance holds leases for, in shards under
//! their own locks, at most a fixed number of them, each at most a fixed
//! number of bytes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use ahash::RandomState;
use hashbrown::HashTable;
use limiter_core::backend::{InlineKey, StoredKey};
use limiter_core::Clock;

use crate::key_lease::KeyLease;

/// Shards: requests on different keys rarely wait on one lock.
pub(crate) const SHARDS: usize = 16;

/// A key as the map holds it: up to 14 bytes inline, so that the key is
/// 16 bytes and an entry one cache line.
pub(crate) type LeaseKey = InlineKey<14>;

/// Each shard's idle keys are dropped at least once in this time (µs)
/// while requests come, whether or not a new key needs the room: one
/// shard in turn every sixteenth of it, or every shard whose turn passed
/// at the first request after a quiet spell.
const IDLE_SWEEP_INTERVAL_US: u64 = 1_000_000;

/// Keys to their leases, at most `max_keys` of them, and at most twice
/// their share in any one shard, which bounds each shard's table. A key
/// longer than `max_key_bytes` is held as its digest ([`StoredKey`]), so
/// what a key costs is bounded whatever its length. Hashed with aHash
/// under per-process random keys: clients choose the keys, so the hash
/// must resist flooding, as the memory backend's map does. The hash is
/// computed once a decision: it picks the shard and the slot.
#[derive(Debug)]
pub(crate) struct Leases {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    pub(crate) max_keys: usize,
    pub(crate) max_key_bytes: usize,
    /// A shard's most keys: twice its share of `max_keys`, which bounds
    /// its table; keys hashed at random rarely reach it, short of tiny
    /// `max_keys`.
    pub(crate) per_shard: usize,
    /// The keys held, at most `max_keys`.
    held: AtomicUsize,
    lifetime_us: u64,
    /// Units given up unused: lapsed, released or reset.
    lapsed: AtomicU64,
    /// When the next shard's idle keys are due to be dropped (µs).
    next_sweep_us: AtomicU64,
    /// The shard swept next, modulo [`SHARDS`].
    next_shard: AtomicUsize,
}

/// A key and its leases: the map's slot, one cache line, the key inline
/// when short, so that a decision from the units in hand reads one line.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Entry {
    key: LeaseKey,
    lease: KeyLease,
}

#[derive(Debug, Default)]
struct Shard {
    keys: HashTable<Entry>,
    /// No key of the shard can be idle before then: a full shard is not
    /// swept again until it. A sweep sets it to when its keys' leases
    /// lapse at the latest; a key that goes idle sooner lowers it.
    no_sweep_before_us: u64,
}

impl Leases {
    pub(crate) fn new(max_keys: usize, max_key_bytes: usize, lifetime_us: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            max_keys,
            max_key_bytes,
            per_shard: per_shard(max_keys),
            held: AtomicUsize::new(0),
            lifetime_us,
            lapsed: AtomicU64::new(0),
            next_sweep_us: AtomicU64::new(0),
            next_shard: AtomicUsize::new(0),
        }
    }

    /// `key` as held, its hash and its shard, locked.
    #[inline]
    fn shard<'k>(&self, key: &'k [u8]) -> (StoredKey<'k>, u64, MutexGuard<'_, Shard>) {
        let stored = StoredKey::of(key, self.max_key_bytes);
        let hash = self.hasher.hash_one(stored.as_bytes());
        let shard = self.lock(shard_of(hash));
        (stored, hash, shard)
    }

    /// Drops the idle keys of the shards whose turn has come by `now_us`
    /// ([`IDLE_SWEEP_INTERVAL_US`]), one request doing it for all; called
    /// with no shard locked, after the request's own work. A sweep also shrinks a table left mostly
    /// empty, so that the memory of keys gone idle is returned.
    #[inline]
    fn sweep_due(&self, now_us: u64) {
        let due_us = self.next_sweep_us.load(Ordering::Relaxed);
        if now_us >= due_us {
            self.sweep_turns(now_us, due_us);
        }
    }

    /// [`sweep_due`](Self::sweep_due)'s sweeps, by the request that moves
    /// the due time from `due_us`: one turn a step since it, all at most.
    #[cold]
    #[inline(never)]
    fn sweep_turns(&self, now_us: u64, due_us: u64) {
        const STEP_US: u64 = IDLE_SWEEP_INTERVAL_US / SHARDS as u64;
        let next_us = now_us.saturating_add(STEP_US);
        if self
            .next_sweep_us
            .compare_exchange(due_us, next_us, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let turns = ((now_us - due_us) / STEP_US).saturating_add(1);
        for _ in 0..turns.min(SHARDS as u64) {
            let index = self.next_shard.fetch_add(1, Ordering::Relaxed) % SHARDS;
            let mut shard = self.lock(index);
            self.sweep(&mut shard, now_us);
            shard.shrink(|entry| self.hasher.hash_one(entry.key.as_bytes()));
        }
    }

    /// The shard at `index`, locked.
    #[inline]
    fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on `key`'s leases, if held: for a read, or a change that
    /// leaves no key idle ([`with_at`](Self::with_at) notes one that may).
    pub(crate) fn with<R>(&self, key: &[u8], f: impl FnOnce(&mut KeyLease) -> R) -> Option<R> {
        let (stored, hash, mut shard) = self.shard(key);
        shard.lease(hash, stored.as_bytes()).map(f)
    }

    /// Runs `f` on `key`'s leases, if held, with the time `clock` tells
    /// once the key is locked: if `f` leaves the key idle, its shard may be
    /// swept from then.
    ///
    /// The time is read under the lock so that a decision's time follows
    /// every change to the key before it: a unit taken from a lease that
    /// landed while the request was on its way is used after the lease was
    /// counted, at the time the decision reports (docs/spec.md section
    /// 8.1, `c <= u`).
    #[inline]
    pub(crate) fn with_at<C: Clock + ?Sized, R>(
        &self,
        key: &[u8],
        clock: &C,
        f: impl FnOnce(&mut KeyLease, u64) -> R,
    ) -> Option<R> {
        let (stored, hash, mut shard) = self.shard(key);
        let now_us = clock.now_us();
        let answer = match shard.lease(hash, stored.as_bytes()) {
            Some(lease) => {
                let answer = f(lease, now_us);
                if lease.is_idle(now_us) {
                    shard.went_idle(now_us);
                }
                Some(answer)
            }
            None => None,
        };
        drop(shard);
        self.sweep_due(now_us);
        answer
    }

    /// [`with_at`](Self::with_at), after dropping the leases that lapsed
    /// by then.
    #[inline]
    pub(crate) fn with_live<C: Clock + ?Sized, R>(
        &self,
        key: &[u8],
        clock: &C,
        f: impl FnOnce(&mut KeyLease, u64) -> R,
    ) -> Option<R> {
        self.with_at(key, clock, |lease, now_us| {
            self.lapse(lease.expire(now_us));
            f(lease, now_us)
        })
    }

    /// Counts `units` given up unused.
    pub(crate) fn lapse(&self, units: u64) {
        if units > 0 {
            self.lapsed.fetch_add(units, Ordering::Relaxed);
        }
    }

    /// Units given up unused so far.
    pub(crate) fn lapsed(&self) -> u64 {
        self.lapsed.load(Ordering::Relaxed)
    }

    /// [`with_live`](Self::with_live), adding the key if there is room:
    /// when `max_keys` are held (or the key's shard is at its most), the
    /// key's shard drops its idle keys, then, if still needed, the other
    /// shards whose lock is free drop theirs. `None` when there is no room.
    pub(crate) fn with_new<C: Clock + ?Sized, R>(
        &self,
        key: &[u8],
        clock: &C,
        f: impl FnOnce(&mut KeyLease, u64) -> R,
    ) -> Option<R> {
        let (stored, hash, mut shard) = self.shard(key);
        let now_us = clock.now_us();
        let answer = self.with_new_locked(&mut shard, stored, hash, now_us, f);
        drop(shard);
        self.sweep_due(now_us);
        answer
    }

    /// [`with_new`](Self::with_new) on the key's shard, locked.
    fn with_new_locked<R>(
        &self,
        shard: &mut Shard,
        stored: StoredKey<'_>,
        hash: u64,
        now_us: u64,
        f: impl FnOnce(&mut KeyLease, u64) -> R,
    ) -> Option<R> {
        if let Some(lease) = shard.lease(hash, stored.as_bytes()) {
            self.lapse(lease.expire(now_us));
            let answer = f(lease, now_us);
            if lease.is_idle(now_us) {
                shard.went_idle(now_us);
            }
            return Some(answer);
        }
        if !(shard.keys.len() < self.per_shard && self.reserve()) {
            self.sweep(shard, now_us);
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
        let entry = Entry {
            key: LeaseKey::new(stored.as_bytes()),
            lease: KeyLease::new(),
        };
        let rehash = |entry: &Entry| self.hasher.hash_one(entry.key.as_bytes());
        let lease = &mut shard
            .keys
            .insert_unique(hash, entry, rehash)
            .into_mut()
            .lease;
        let answer = f(lease, now_us);
        let idle_at = lease.idle_at(now_us, self.lifetime_us);
        shard.went_idle(idle_at);
        Some(answer)
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

    /// Gives up `key`'s units in hand, and those of its lease in flight
    /// when it arrives; returns the units in hand. The key stays, so that
    /// a lease in flight settles on it.
    pub(crate) fn release_key<C: Clock + ?Sized>(&self, key: &[u8], clock: &C) -> u64 {
        let released = self
            .with_live(key, clock, |lease, _| lease.release())
            .unwrap_or(0);
        self.lapse(released);
        released
    }

    /// Gives up every unit in hand, and those of the leases in flight when
    /// they arrive, keeping what sizes the next leases; returns the units
    /// in hand given up.
    pub(crate) fn release(&self, now_us: u64) -> u64 {
        let released = self
            .shards
            .iter()
            .map(|shard| {
                let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                let mut idle = false;
                let released = shard
                    .keys
                    .iter_mut()
                    .map(|Entry { lease, .. }| {
                        self.lapse(lease.expire(now_us));
                        let released = lease.release();
                        idle |= lease.is_idle(now_us);
                        released
                    })
                    .sum::<u64>();
                if idle {
                    shard.went_idle(now_us);
                }
                released
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

/// A shard's most keys under a cap of `max_keys`: twice its share.
fn per_shard(max_keys: usize) -> usize {
    max_keys.div_ceil(SHARDS).saturating_mul(2)
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
            .find_mut(hash, |entry| entry.key.as_bytes() == key)
            .map(|entry| &mut entry.lease)
    }

    /// A key of the shard is idle at `now_us`: the shard may be swept from
    /// then. Besides its leases lapsing, a key goes idle when its last
    /// units are taken or given up, or when its lease request settles with
    /// none, at no time a sweep can foresee; a key added goes idle by its
    /// [`idle_at`](KeyLease::idle_at) at the latest, which a sweep that
    /// kept no key could not foresee either.
    fn went_idle(&mut self, now_us: u64) {
        self.no_sweep_before_us = self.no_sweep_before_us.min(now_us);
    }

    /// Gives back the room of a table at most a quarter full, keeping
    /// twice its keys' room: the table grew to that many keys once, so
    /// shrinking it costs no more rehashing than that growth did.
    fn shrink(&mut self, rehash: impl Fn(&Entry) -> u64) {
        let len = self.keys.len();
        if self.keys.capacity() > len.saturating_mul(4) {
            self.keys.shrink_to(len * 2, rehash);
        }
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
    use limiter_core::ManualClock;

    const SIZING: Sizing = Sizing {
        lifetime_us: 1_000,
        min_lease: 1,
        max_lease: 10,
        refill_percent: 0,
    };

    /// A clock stopped at `now_us`.
    fn at(now_us: u64) -> ManualClock {
        ManualClock::new(now_us)
    }

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

    /// A clock that notes, at each read, whether `key`'s shard of
    /// `leases` was locked.
    #[derive(Debug)]
    struct LockWitness<'a> {
        leases: &'a Leases,
        key: &'a [u8],
        locked: AtomicUsize,
        unlocked: AtomicUsize,
    }

    impl Clock for LockWitness<'_> {
        fn now_us(&self) -> u64 {
            let stored = StoredKey::of(self.key, self.leases.max_key_bytes);
            let shard = shard_of(self.leases.hasher.hash_one(stored.as_bytes()));
            let reads = match self.leases.shards[shard].try_lock() {
                Err(TryLockError::WouldBlock) => &self.locked,
                _ => &self.unlocked,
            };
            reads.fetch_add(1, Ordering::Relaxed);
            0
        }
    }

    #[test]
    fn a_decisions_time_is_read_under_its_keys_lock() {
        // Read before the lock, a time may precede a lease that lands
        // before the lock is taken: a unit would be reported used before
        // the global limiter counted it.
        let leases = Leases::new(64, 256, 1_000);
        let clock = LockWitness {
            leases: &leases,
            key: b"key",
            locked: AtomicUsize::new(0),
            unlocked: AtomicUsize::new(0),
        };
        leases.with_new(b"key", &clock, |lease, _| hold(lease, 5, 500));
        leases.with_new(b"key", &clock, |lease, _| lease.take(1, false));
        leases.with_live(b"key", &clock, |lease, _| lease.take(1, false));
        leases.with_at(b"key", &clock, |lease, _| lease.held());
        leases.release_key(b"key", &clock);
        assert_eq!(clock.locked.load(Ordering::Relaxed), 5);
        assert_eq!(clock.unlocked.load(Ordering::Relaxed), 0);
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
        let leases = Leases::new(SHARDS, 256, 1_000);
        let keys = |prefix: &'static str| (0..400).map(move |i| format!("{prefix}{i}"));
        let held = keys("held")
            .filter(|key| {
                leases
                    .with_new(key.as_bytes(), &at(0), |lease, _| hold(lease, 5, 500))
                    .is_some()
            })
            .count();
        assert_eq!(held, SHARDS);
        assert!(
            keys("early").all(|key| leases
                .with_new(key.as_bytes(), &at(499), |_, _| ())
                .is_none()),
            "a live lease is never dropped to make room"
        );
        assert_eq!(leases.len(), SHARDS);
        // Once the leases lapse, their keys make room, in any shard, and so
        // do new keys that hold nothing.
        assert!(keys("late").all(|key| leases
            .with_new(key.as_bytes(), &at(500), |_, _| ())
            .is_some()));
        assert!(leases.len() <= SHARDS);
        assert_eq!(leases.release(500), 0);
        assert_eq!(
            leases.lapsed(),
            5 * SHARDS as u64,
            "every lease lapsed unused"
        );
    }

    #[test]
    fn a_key_left_idle_before_its_leases_lapse_makes_room_at_once() {
        let leases = Leases::new(1, 256, 1_000);
        let room_for = |key: &str, now_us| {
            leases
                .with_new(key.as_bytes(), &at(now_us), |_, _| ())
                .is_some()
        };
        leases.with_new(b"held", &at(0), |lease, _| hold(lease, 5, 500));
        assert!(!room_for("other", 0), "a live lease is never dropped");
        // Its units given up, long before they lapse.
        leases.with_at(b"held", &at(10), |lease, _| lease.release());
        assert!(room_for("other", 10));
        // A lease request in flight, then settled without units.
        leases.with_new(b"asking", &at(20), |lease, _| lease.ask(1, 20, &SIZING));
        assert!(!room_for("third", 20), "a lease in flight is never dropped");
        leases.with_at(b"asking", &at(30), |lease, _| lease.settled());
        assert!(room_for("third", 30));
        assert_eq!(leases.len(), 1);
    }

    #[test]
    fn keys_added_after_a_sweep_emptied_their_shard_make_room_once_idle() {
        let leases = Leases::new(1, 256, 1_000);
        let room_for = |key: &str, now_us| {
            leases
                .with_new(key.as_bytes(), &at(now_us), |lease, _| {
                    hold(lease, 5, now_us + 500)
                })
                .is_some()
        };
        assert!(room_for("first", 0));
        // Its lease lapsed: the sweep drops it, leaving its shard empty.
        assert!(room_for("second", 500));
        assert!(!room_for("third", 999), "a live lease is never dropped");
        assert!(room_for("third", 1_000), "the second key's lease lapsed");
    }

    #[test]
    fn the_most_keys_are_held_whatever_their_shards() {
        let leases = Leases::new(1_000, 256, 1_000);
        let hold_one = |i: usize| {
            leases
                .with_new(format!("key{i}").as_bytes(), &at(0), |lease, _| {
                    hold(lease, 1, 500)
                })
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

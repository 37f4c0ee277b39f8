//! [`MemoryLimiter`]: keyed state in a [`DashMap`], decided by the core.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use async_trait::async_trait;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use limiter_core::backend::{check_request, with_state, AlgorithmState, ForAlgorithm, StateFamily};
use limiter_core::{Decision, Error, Limiter, Policy};

use crate::builder::MemoryLimiterBuilder;
use crate::clock::ClockSource;
use crate::error::KeyLimitReached;

/// Without a cap, a sweep runs after this many new keys at the least (more
/// when more keys are held), so that sweeping stays amortised O(1) per key.
pub(crate) const MIN_SWEEP_INTERVAL: usize = 1024;

/// A keyed in-process rate limiter: one algorithm state per key in a
/// sharded [`DashMap`], every decision made by `limiter-core` under the
/// key's shard lock, so concurrent requests on one key never over-admit.
///
/// Build one with [`MemoryLimiter::new`] or [`MemoryLimiter::builder`]; use
/// it through the [`Limiter`] trait (`Arc<dyn Limiter>`) or through the
/// synchronous [`try_acquire`](Self::try_acquire) and
/// [`try_peek`](Self::try_peek), which never block on I/O.
///
/// ```
/// use limiter_core::{Policy, Rate};
/// use limiter_memory::MemoryLimiter;
///
/// let limiter = MemoryLimiter::new(Policy::fixed_window(Rate::per_second(2))?);
/// assert!(limiter.try_acquire("ip:10.0.0.1", 1)?.allowed);
/// assert_eq!(limiter.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryLimiter {
    policy: Policy,
    clock: ClockSource,
    keys: Keys,
    max_keys: Option<usize>,
    eviction_delay_us: u64,
    /// Keys held, counted when a slot is reserved (just before its insert).
    held: AtomicUsize,
    sweep: Sweep,
}

/// The keys, in one map typed by the policy's algorithm, so each key holds
/// only its own algorithm's state (16 bytes for a bucket, not the 40 of
/// [`KeyState`](limiter_core::backend::KeyState), which must fit a sliding
/// log). The core lists the algorithms; reach the map with [`with_state!`].
type Keys = ForAlgorithm<Maps>;

/// A map of one algorithm's keys. Hashed with aHash under per-process random
/// keys: clients choose the keys (IPs, user ids), so the hash must resist
/// flooding, and aHash does so at about half the cost of SipHash.
type Map<S> = DashMap<Box<str>, Slot<S>, ahash::RandomState>;

/// The [`StateFamily`] of [`Map`]s.
#[derive(Debug)]
struct Maps;

impl StateFamily for Maps {
    type Of<S: AlgorithmState> = Map<S>;

    fn make<S: AlgorithmState>(_: &Policy) -> Map<S> {
        DashMap::default()
    }
}

/// What is stored per key.
#[derive(Debug)]
struct Slot<S> {
    state: S,
    /// µs since the epoch from which the key may be dropped: the last
    /// admission's `time_us + reset_after`, plus the eviction delay.
    evict_at: u64,
}

impl<S: AlgorithmState> Slot<S> {
    #[inline]
    fn acquire(
        &mut self,
        policy: &Policy,
        now_us: u64,
        cost: u64,
        eviction_delay_us: u64,
    ) -> Result<Decision, Error> {
        let decision = self.state.acquire(policy, now_us, cost)?;
        if decision.allowed {
            // A denial changes nothing, the reset time included (docs/spec.md rule 2.1).
            self.evict_at = reset_time_us(&decision).saturating_add(eviction_delay_us);
        }
        Ok(decision)
    }
}

/// `time_us + reset_after`: the absolute time the key is back to its initial
/// state if nothing else arrives.
#[inline]
fn reset_time_us(decision: &Decision) -> u64 {
    // u64 arithmetic: `as_micros` works in u128, slow on the hot path.
    let reset_after = decision
        .reset_after
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(decision.reset_after.subsec_micros()));
    decision.time_us.saturating_add(reset_after)
}

/// When to sweep expired keys, kept off the hot path: only requests on keys
/// not held (which allocate anyway) touch it.
#[derive(Debug)]
struct Sweep {
    /// Requests on keys not held since the last sweep.
    new_key_requests: AtomicUsize,
    /// Sweep when `new_key_requests` reaches this: `max(held, MIN_SWEEP_INTERVAL)`
    /// after the last sweep.
    interval: AtomicUsize,
    /// A lower bound of every held key's `evict_at`: while the clock is
    /// below it, a sweep would find nothing and is skipped.
    earliest_evict_at: AtomicU64,
    /// One sweep at a time.
    lock: Mutex<()>,
}

impl MemoryLimiter {
    /// A limiter for `policy` on the [`AnchoredClock`](crate::AnchoredClock), with no cap on keys and
    /// the default eviction delay (see [`MemoryLimiterBuilder`]).
    pub fn new(policy: Policy) -> Self {
        Self::builder(policy).build()
    }

    /// A builder for a limiter of `policy`, to set the clock, a cap on keys
    /// or the eviction delay.
    pub fn builder(policy: Policy) -> MemoryLimiterBuilder {
        MemoryLimiterBuilder::new(policy)
    }

    pub(crate) fn from_builder(builder: MemoryLimiterBuilder) -> Self {
        let MemoryLimiterBuilder {
            policy,
            clock,
            max_keys,
            eviction_delay_us,
        } = builder;
        Self {
            keys: Keys::new(&policy),
            policy,
            clock,
            max_keys,
            eviction_delay_us,
            held: AtomicUsize::new(0),
            sweep: Sweep {
                new_key_requests: AtomicUsize::new(0),
                interval: AtomicUsize::new(MIN_SWEEP_INTERVAL),
                earliest_evict_at: AtomicU64::new(u64::MAX),
                lock: Mutex::new(()),
            },
        }
    }

    /// The policy every key is limited by.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The cap on keys held, if any (see [`MemoryLimiterBuilder::max_keys`]).
    pub fn max_keys(&self) -> Option<usize> {
        self.max_keys
    }

    /// How long past its reset time a key is kept before it may be evicted
    /// (see [`MemoryLimiterBuilder::eviction_delay`]).
    pub fn eviction_delay(&self) -> Duration {
        Duration::from_micros(self.eviction_delay_us)
    }

    /// Asks to admit a request of `cost` units on `key` now (by the
    /// limiter's clock), and commits it if admitted: the synchronous form of
    /// [`Limiter::acquire`], which it backs.
    ///
    /// On a key already held this is one clock read, one hash, the shard's
    /// write lock and the core's decision: no allocation. A key not held is
    /// allocated only when its first request is admitted.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`], [`Error::CostExceedsCapacity`] and
    /// [`Error::TimeOutOfRange`] as in the core, none of which writes; and
    /// [`Error::Backend`] wrapping [`KeyLimitReached`] for a new key when
    /// [`max_keys`](MemoryLimiterBuilder::max_keys) live keys are held.
    #[inline]
    pub fn try_acquire(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        let now_us = self.clock.now_us();
        with_state!(&self.keys, map => self.acquire_in(map, key, now_us, cost))
    }

    /// Answers what [`try_acquire`](Self::try_acquire) would, now, without
    /// writing anything (docs/spec.md rule 2.6); never allocates. The synchronous form
    /// of [`Limiter::peek`].
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), except that a full map is no
    /// error: a peek stores nothing.
    pub fn try_peek(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        let now_us = self.clock.now_us();
        with_state!(&self.keys, map => self.peek_in(map, key, now_us, cost))
    }

    /// Drops `key`'s state, so it starts again with a full quota; returns
    /// whether it was held. The synchronous form of [`Limiter::reset`].
    pub fn remove(&self, key: &str) -> bool {
        let removed = with_state!(&self.keys, map => map.remove(key).is_some());
        if removed {
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        removed
    }

    /// Drops every key's state.
    pub fn clear(&self) {
        let mut removed = 0;
        with_state!(&self.keys, map => map.retain(|_, _| {
            removed += 1;
            false
        }));
        self.held.fetch_sub(removed, Ordering::AcqRel);
    }

    /// The number of keys held (expired keys count until a sweep drops them).
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops now every key whose state has been back to its initial state
    /// for at least the eviction delay, and returns how many were dropped.
    ///
    /// The limiter already does this by itself, amortised over requests on
    /// new keys; call it to release memory at a moment of your choosing
    /// (say, from a periodic task after a burst of one-off keys). Dropping
    /// never changes a decision while the clock moves forward (docs/spec.md rule 2.5).
    pub fn sweep_expired(&self) -> usize {
        let _guard = self.sweep_lock();
        let removed = self.sweep_locked(self.clock.now_us());
        self.reschedule();
        removed
    }

    /// [`try_peek`](Self::try_peek) in the algorithm's map.
    fn peek_in<S: AlgorithmState>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        match map.get(key) {
            Some(slot) => slot.state.peek(&self.policy, now_us, cost),
            None => S::fresh(&self.policy).peek(&self.policy, now_us, cost),
        }
    }

    /// [`try_acquire`](Self::try_acquire) in the algorithm's map.
    #[inline]
    fn acquire_in<S: AlgorithmState>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        if let Some(mut slot) = map.get_mut(key) {
            return slot.acquire(&self.policy, now_us, cost, self.eviction_delay_us);
        }
        self.acquire_new_key(map, key, now_us, cost)
    }

    /// The slow path of [`try_acquire`](Self::try_acquire): `key` was not held.
    #[cold]
    #[inline(never)]
    fn acquire_new_key<S: AlgorithmState>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        // Requests that can never succeed neither allocate nor reserve.
        check_request(&self.policy, now_us, cost)?;
        let requests = self.sweep.new_key_requests.fetch_add(1, Ordering::Relaxed) + 1;
        if requests >= self.sweep.interval.load(Ordering::Relaxed) {
            self.scheduled_sweep(now_us);
        }
        self.reserve_key(now_us)?;
        let decision = match map.entry(Box::from(key)) {
            Entry::Occupied(mut held) => {
                // Another request inserted the key since our lookup.
                self.release_keys(1);
                return held
                    .get_mut()
                    .acquire(&self.policy, now_us, cost, self.eviction_delay_us);
            }
            Entry::Vacant(vacant) => {
                let mut slot = Slot {
                    state: S::fresh(&self.policy),
                    evict_at: 0,
                };
                let decision = slot.acquire(&self.policy, now_us, cost, self.eviction_delay_us);
                match decision {
                    // A fresh key admits every valid cost; should it ever
                    // not, a denial stores nothing (docs/spec.md rule 2.1).
                    Ok(decision) if decision.allowed => {
                        let evict_at = slot.evict_at;
                        drop(vacant.insert(slot));
                        self.note_evict_at(evict_at);
                        return Ok(decision);
                    }
                    decision => decision,
                }
            }
        };
        self.release_keys(1);
        decision
    }

    /// Counts one more key held, if the cap allows, sweeping expired keys
    /// first when it does not.
    fn reserve_key(&self, now_us: u64) -> Result<(), Error> {
        let Some(max_keys) = self.max_keys else {
            self.held.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        };
        let try_reserve = || {
            self.held
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                    (held < max_keys).then_some(held + 1)
                })
                .is_ok()
        };
        if try_reserve() {
            return Ok(());
        }
        {
            let _guard = self.sweep_lock();
            // Waiting for the lock may have let another sweep make room.
            if try_reserve() {
                return Ok(());
            }
            // Expired keys make room before a new key is refused. The scan
            // runs only when a key may have expired: `earliest_evict_at`
            // is a lower bound of every key's eviction time, and after a
            // sweep it is the earliest kept key's, so refusals at one time
            // scan at most once (then the bound is above the clock).
            if now_us >= self.sweep.earliest_evict_at.load(Ordering::SeqCst) {
                self.sweep_locked(now_us);
                self.reschedule();
            }
        }
        if try_reserve() {
            Ok(())
        } else {
            Err(Error::Backend(Box::new(KeyLimitReached { max_keys })))
        }
    }

    fn release_keys(&self, count: usize) {
        self.held.fetch_sub(count, Ordering::AcqRel);
    }

    /// Keeps `earliest_evict_at` a lower bound after an insert.
    fn note_evict_at(&self, evict_at: u64) {
        let earliest = &self.sweep.earliest_evict_at;
        if evict_at < earliest.load(Ordering::SeqCst) {
            earliest.fetch_min(evict_at, Ordering::SeqCst);
        }
    }

    /// The amortised sweep: at most one at a time, skipped by whoever finds
    /// another running.
    fn scheduled_sweep(&self, now_us: u64) {
        let _guard = match self.sweep.lock.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let requests = self.sweep.new_key_requests.load(Ordering::Relaxed);
        if requests >= self.sweep.interval.load(Ordering::Relaxed) {
            self.sweep_locked(now_us);
            self.reschedule();
        }
    }

    /// Starts a new sweep period: the next scheduled sweep comes after as
    /// many new keys as are held now (at least [`MIN_SWEEP_INTERVAL`]), so
    /// each key is scanned O(1) times per key inserted.
    fn reschedule(&self) {
        self.sweep.new_key_requests.store(0, Ordering::Relaxed);
        let interval = self.len().max(MIN_SWEEP_INTERVAL);
        self.sweep.interval.store(interval, Ordering::Relaxed);
    }

    fn sweep_lock(&self) -> MutexGuard<'_, ()> {
        self.sweep
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the keys whose `evict_at` has passed; the caller holds the
    /// sweep lock.
    fn sweep_locked(&self, now_us: u64) -> usize {
        let earliest = &self.sweep.earliest_evict_at;
        if now_us < earliest.load(Ordering::SeqCst) {
            return 0; // nothing can have expired yet
        }
        // Inserts during the sweep lower the bound themselves; the keys kept
        // lower it below.
        earliest.store(u64::MAX, Ordering::SeqCst);
        let mut removed = 0;
        let mut earliest_kept = u64::MAX;
        with_state!(&self.keys, map => map.retain(|_, slot| {
            if slot.evict_at <= now_us {
                removed += 1;
                false
            } else {
                earliest_kept = earliest_kept.min(slot.evict_at);
                true
            }
        }));
        earliest.fetch_min(earliest_kept, Ordering::SeqCst);
        if removed > 0 {
            self.release_keys(removed);
            // Give memory back after a burst of one-off keys, with enough
            // slack that a steady population does not shrink and regrow.
            let held = self.len();
            with_state!(&self.keys, map => {
                if map.capacity() > 4 * held.max(MIN_SWEEP_INTERVAL) {
                    map.shrink_to_fit();
                }
            });
        }
        removed
    }
}

impl fmt::Debug for MemoryLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLimiter")
            .field("policy", &self.policy)
            .field("clock", &self.clock)
            .field("keys_held", &self.len())
            .field("max_keys", &self.max_keys)
            .field("eviction_delay", &self.eviction_delay())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Limiter for MemoryLimiter {
    fn policy(&self) -> &Policy {
        &self.policy
    }

    async fn acquire(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        self.try_acquire(key, cost)
    }

    async fn peek(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        self.try_peek(key, cost)
    }

    async fn reset(&self, key: &str) -> Result<(), Error> {
        self.remove(key);
        Ok(())
    }

    /// Always `Some`: [`try_acquire`](Self::try_acquire), without a future.
    #[inline]
    fn acquire_now(&self, key: &str, cost: u64) -> Option<Result<Decision, Error>> {
        Some(self.try_acquire(key, cost))
    }

    /// Always `Some`: [`try_peek`](Self::try_peek), without a future.
    #[inline]
    fn peek_now(&self, key: &str, cost: u64) -> Option<Result<Decision, Error>> {
        Some(self.try_peek(key, cost))
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;
    use std::sync::Arc;

    use limiter_core::backend::{
        FixedWindow, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
    };
    use limiter_core::{ManualClock, Rate};

    use super::*;

    #[test]
    fn entries_are_small() {
        // A boxed key (16 bytes), the algorithm's state, the eviction time.
        assert_eq!(size_of::<Box<str>>(), 16);
        assert_eq!(size_of::<(Box<str>, Slot<FixedWindow>)>(), 40);
        assert_eq!(size_of::<(Box<str>, Slot<TokenBucket>)>(), 40);
        assert_eq!(size_of::<(Box<str>, Slot<LeakyBucket>)>(), 40);
        assert_eq!(size_of::<(Box<str>, Slot<SlidingCounter>)>(), 48);
        // The log's deque and running total: one cache line with the key.
        assert_eq!(size_of::<(Box<str>, Slot<SlidingLog>)>(), 64);
    }

    #[test]
    fn the_count_of_keys_held_matches_the_map_after_concurrent_churn() {
        let clock = ManualClock::new(0);
        let policy = Policy::fixed_window(Rate::per_second(3)).unwrap();
        let limiter = Arc::new(
            MemoryLimiter::builder(policy)
                .clock(clock.clone())
                .eviction_delay(Duration::ZERO)
                .build(),
        );
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let limiter = Arc::clone(&limiter);
                let clock = clock.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000u64 {
                        let key = format!("k{}", (i * 7 + thread) % 3_000);
                        limiter.try_acquire(&key, 1).unwrap();
                        if i % 97 == 0 {
                            limiter.remove(&key);
                        }
                        if thread == 0 && i % 1_000 == 0 {
                            clock.advance(Duration::from_millis(700));
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let map_len = || with_state!(&limiter.keys, map => map.len());
        assert_eq!(limiter.len(), map_len());
        clock.advance(Duration::from_secs(2));
        limiter.sweep_expired();
        assert_eq!(limiter.len(), 0);
        assert_eq!(map_len(), 0);
    }

    #[test]
    fn a_sweep_is_skipped_while_no_key_can_have_expired() {
        let clock = ManualClock::new(0);
        let policy = Policy::sliding_log(Rate::per_second(3)).unwrap();
        let limiter = MemoryLimiter::builder(policy)
            .clock(clock.clone())
            .eviction_delay(Duration::ZERO)
            .build();
        assert_eq!(
            limiter.sweep.earliest_evict_at.load(Ordering::SeqCst),
            u64::MAX
        );
        limiter.try_acquire("a", 1).unwrap();
        clock.set(500_000);
        limiter.try_acquire("b", 1).unwrap();
        // "a" resets at 1 s, "b" at 1.5 s.
        assert_eq!(
            limiter.sweep.earliest_evict_at.load(Ordering::SeqCst),
            1_000_000
        );
        clock.set(999_999);
        assert_eq!(limiter.sweep_expired(), 0);
        clock.set(1_000_000);
        assert_eq!(limiter.sweep_expired(), 1);
        assert_eq!(
            limiter.sweep.earliest_evict_at.load(Ordering::SeqCst),
            1_500_000
        );
        assert!(format!("{limiter:?}").contains("keys_held: 1"));
    }
}

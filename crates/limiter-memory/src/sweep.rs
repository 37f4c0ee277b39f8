//! Eviction: dropping the keys whose state has been back to its initial
//! state for the eviction delay, amortised over requests on new keys
//! (docs/spec.md rule 2.5).

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use crate::limiter::MemoryLimiter;
use crate::map::with_map;

/// Without a cap, a sweep runs after this many new keys at the least (more
/// when more keys are held), so that sweeping stays amortised O(1) per key.
pub(crate) const MIN_SWEEP_INTERVAL: usize = 1024;

/// A sweep is put off until it frees at least this fraction of the keys
/// held (1/64): a scan costs every key, and under steady churn at the cap
/// (a key expiring every few µs) a scan whenever one key had expired cost
/// a whole scan per new key, 3 ms at 100,000 keys. So a new key at the cap
/// may be refused while expired keys wait: until that many have expired,
/// or until that many new keys have been refused since the last sweep,
/// whichever comes first (the bound can be late: a key inserted after a
/// sweep that expires before the bound does not move it).
pub(crate) const SWEEP_BATCH_DIVISOR: usize = 64;

/// When to sweep expired keys, kept off the hot path: only requests on keys
/// not held (which allocate anyway) touch it.
#[derive(Debug)]
pub(crate) struct Sweep {
    /// Requests on keys not held since the last sweep.
    pub(crate) new_key_requests: AtomicUsize,
    /// Sweep when `new_key_requests` reaches this: `max(held, MIN_SWEEP_INTERVAL)`
    /// after the last sweep.
    pub(crate) interval: AtomicUsize,
    /// When a sweep next has enough to free: after a sweep, the eviction
    /// time by which a [`SWEEP_BATCH_DIVISOR`]-th of the keys it kept have
    /// expired; the first insert into a map with nothing to sweep sets it
    /// to its own. While the clock is below it, a sweep is skipped.
    pub(crate) earliest_evict_at: AtomicU64,
    /// A lower bound of every held key's eviction time: after a sweep,
    /// the earliest of the keys it kept, lowered by every insert since.
    /// The scheduled sweep (at most one per `interval` new keys, so
    /// amortised whatever it frees) is due once the clock passes it: a
    /// key living long (a bucket drained to the bottom) then puts off no
    /// sweep of the short-lived keys inserted after it.
    pub(crate) lowest_evict_at: AtomicU64,
    /// New keys refused at the cap since the last sweep: a batch of them
    /// makes a sweep due, however late the bound.
    pub(crate) refused: AtomicUsize,
    /// One sweep at a time.
    pub(crate) lock: Mutex<()>,
}

impl Sweep {
    /// No sweep due, no key held.
    pub(crate) fn new() -> Self {
        Self {
            new_key_requests: AtomicUsize::new(0),
            interval: AtomicUsize::new(MIN_SWEEP_INTERVAL),
            earliest_evict_at: AtomicU64::new(u64::MAX),
            lowest_evict_at: AtomicU64::new(u64::MAX),
            refused: AtomicUsize::new(0),
            lock: Mutex::new(()),
        }
    }
}

impl MemoryLimiter {
    /// After an insert: a map that had nothing to sweep (`u64::MAX`) has
    /// something once this key expires. The batch bound already set stays:
    /// lowering it to every short-lived key's time would bring back a scan
    /// per expired key at the cap; a key that expires before it is swept
    /// by the next scheduled sweep ([`Sweep::lowest_evict_at`]).
    pub(crate) fn note_evict_at(&self, evict_at: u64) {
        self.sweep
            .lowest_evict_at
            .fetch_min(evict_at, Ordering::SeqCst);
        let earliest = &self.sweep.earliest_evict_at;
        if earliest.load(Ordering::SeqCst) == u64::MAX {
            earliest.fetch_min(evict_at, Ordering::SeqCst);
        }
    }

    /// The amortised sweep, after `interval` new keys: at most one at a
    /// time, skipped by whoever finds another running, or while no key can
    /// have expired (without touching the lock).
    pub(crate) fn scheduled_sweep(&self, now_us: u64) {
        if !self.scheduled_sweep_is_due(now_us) {
            return;
        }
        let _guard = match self.sweep.lock.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let requests = self.sweep.new_key_requests.load(Ordering::Relaxed);
        if requests >= self.sweep.interval.load(Ordering::Relaxed)
            && self.scheduled_sweep_is_due(now_us)
        {
            self.sweep_locked(now_us);
            self.reschedule();
        }
    }

    /// Sweeps if a sweep is due (at the cap: `earliest_evict_at`, so that a
    /// flood of new keys at one time scans at most once, and a sweep waits
    /// until it frees a batch); returns how many keys it dropped. The
    /// caller holds no entry of the map.
    pub(crate) fn sweep_if_due(&self, now_us: u64) -> usize {
        let _guard = self.sweep_lock();
        if !self.sweep_is_due(now_us) {
            return 0;
        }
        let removed = self.sweep_locked(now_us);
        self.reschedule();
        removed
    }

    /// Whether a sweep would free enough to be worth its scan: a batch of
    /// keys has expired, or a batch of new keys has been refused.
    fn sweep_is_due(&self, now_us: u64) -> bool {
        now_us >= self.sweep.earliest_evict_at.load(Ordering::SeqCst)
            || self.sweep.refused.load(Ordering::Relaxed) >= self.sweep_batch()
    }

    /// Whether the scheduled sweep has anything to free: some key may have
    /// expired (it runs once per `interval` new keys, so each of its scans
    /// is paid for however little it frees), or a sweep is due anyway.
    fn scheduled_sweep_is_due(&self, now_us: u64) -> bool {
        now_us >= self.sweep.lowest_evict_at.load(Ordering::SeqCst) || self.sweep_is_due(now_us)
    }

    /// A batch: a [`SWEEP_BATCH_DIVISOR`]-th of the keys held, at least one.
    fn sweep_batch(&self) -> usize {
        (self.len() / SWEEP_BATCH_DIVISOR).max(1)
    }

    /// Counts a new key refused at the cap.
    pub(crate) fn note_refused(&self) {
        self.sweep.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts a new sweep period: the next scheduled sweep comes after as
    /// many new keys as are held now (at least [`MIN_SWEEP_INTERVAL`]), so
    /// each key is scanned O(1) times per key inserted.
    pub(crate) fn reschedule(&self) {
        self.sweep.new_key_requests.store(0, Ordering::Relaxed);
        let interval = self.len().max(MIN_SWEEP_INTERVAL);
        self.sweep.interval.store(interval, Ordering::Relaxed);
    }

    pub(crate) fn sweep_lock(&self) -> MutexGuard<'_, ()> {
        self.sweep
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the keys whose eviction time has passed, all of them; the
    /// caller holds the sweep lock.
    pub(crate) fn sweep_locked(&self, now_us: u64) -> usize {
        let earliest = &self.sweep.earliest_evict_at;
        // Inserts during the sweep lower the bound themselves; the keys kept
        // lower it below.
        earliest.store(u64::MAX, Ordering::SeqCst);
        let lowest = &self.sweep.lowest_evict_at;
        lowest.store(u64::MAX, Ordering::SeqCst);
        self.sweep.refused.store(0, Ordering::Relaxed);
        let mut removed = 0;
        let mut kept = 0;
        let mut next = NextSweep::new(self.sweep_batch());
        with_map!(&self.keys, map => map.retain(|_, slot| {
            let evict_at = self.evict_at(slot);
            if evict_at <= now_us {
                removed += 1;
                false
            } else {
                kept += 1;
                next.keep(evict_at);
                true
            }
        }));
        earliest.fetch_min(
            next.at((kept / SWEEP_BATCH_DIVISOR).max(1)),
            Ordering::SeqCst,
        );
        lowest.fetch_min(next.at(1), Ordering::SeqCst);
        if removed > 0 {
            self.release_keys(removed);
            // Give memory back after a burst of one-off keys, with enough
            // slack that a steady population does not shrink and regrow.
            let held = self.len();
            with_map!(&self.keys, map => {
                if map.capacity() > 4 * held.max(MIN_SWEEP_INTERVAL) {
                    map.shrink_to_fit();
                }
            });
        }
        removed
    }
}

/// The time by which a batch of the kept keys will have expired: the
/// `batch`-th smallest eviction time seen, `batch` a 64th of the keys kept,
/// at most the `capacity` given before the scan (a 64th of the keys held
/// then). A max-heap of the smallest.
struct NextSweep {
    capacity: usize,
    smallest: BinaryHeap<u64>,
}

impl NextSweep {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            smallest: BinaryHeap::new(),
        }
    }

    #[inline]
    fn keep(&mut self, evict_at: u64) {
        if self.smallest.len() < self.capacity {
            self.smallest.push(evict_at);
        } else if self
            .smallest
            .peek()
            .is_some_and(|&largest| evict_at < largest)
        {
            self.smallest.pop();
            self.smallest.push(evict_at);
        }
    }

    /// The `batch`-th smallest time seen (1 for the smallest); with fewer
    /// seen, the latest of them (all have expired by then); never
    /// (`u64::MAX`) with none.
    fn at(&self, batch: usize) -> u64 {
        let mut smallest = self.smallest.clone().into_sorted_vec();
        smallest.truncate(batch.max(1));
        smallest.last().copied().unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use limiter_core::{Clock, ManualClock, Policy, Rate};

    use super::*;

    /// A sliding log of 3 a second on a clock at 0, keys dropped as soon
    /// as they expire.
    fn three_a_second() -> (MemoryLimiter, ManualClock) {
        let clock = ManualClock::new(0);
        let policy = Policy::sliding_log(Rate::per_second(3)).unwrap();
        let limiter = MemoryLimiter::builder(policy)
            .clock(clock.clone())
            .eviction_delay(Duration::ZERO)
            .build();
        (limiter, clock)
    }

    #[test]
    fn a_sweep_is_skipped_while_no_key_can_have_expired() {
        let (limiter, clock) = three_a_second();
        assert_eq!(
            limiter.sweep.earliest_evict_at.load(Ordering::SeqCst),
            u64::MAX
        );
        limiter.try_acquire(b"a", 1).unwrap();
        clock.set(500_000);
        limiter.try_acquire(b"b", 1).unwrap();
        // "a" resets at 1 s, "b" at 1.5 s.
        assert_eq!(
            limiter.sweep.earliest_evict_at.load(Ordering::SeqCst),
            1_000_000
        );
        clock.set(999_999);
        assert_eq!(limiter.sweep_if_due(clock.now_us()), 0);
        clock.set(1_000_000);
        assert_eq!(limiter.sweep_if_due(clock.now_us()), 1);
        assert_eq!(
            limiter.sweep.earliest_evict_at.load(Ordering::SeqCst),
            1_500_000
        );
        assert!(format!("{limiter:?}").contains("keys_held: 1"));
    }

    #[test]
    fn a_sweep_waits_until_it_frees_a_batch() {
        // 1,280 keys, one admitted every µs: each resets 1 s after it.
        let (limiter, clock) = three_a_second();
        for k in 0..1_280u64 {
            clock.set(k);
            limiter.try_acquire(format!("k{k}").as_bytes(), 1).unwrap();
        }
        // The first key expires at 1 s: that sweep frees it alone, and the
        // next is put off until a 64th of the 1,279 it kept (19) have
        // expired.
        clock.set(1_000_000);
        assert_eq!(limiter.sweep_if_due(clock.now_us()), 1);
        assert_eq!(
            limiter.sweep.earliest_evict_at.load(Ordering::SeqCst),
            1_000_019
        );
        clock.set(1_000_018);
        assert_eq!(
            limiter.sweep_if_due(clock.now_us()),
            0,
            "fewer than a batch: skipped"
        );
        clock.set(1_000_019);
        assert_eq!(limiter.sweep_if_due(clock.now_us()), 19);
    }

    #[test]
    fn the_next_sweep_is_the_batch_th_smallest_eviction_time() {
        let mut next = NextSweep::new(3);
        assert_eq!(next.at(3), u64::MAX, "nothing kept: never");
        next.keep(50);
        next.keep(10);
        assert_eq!(next.at(3), 50, "fewer than a batch: once all expired");
        for evict_at in [40, 30, 20, 60] {
            next.keep(evict_at);
        }
        assert_eq!(next.at(3), 30);
        assert_eq!(next.at(1), 10, "a smaller batch: fewer kept than held");
    }
}

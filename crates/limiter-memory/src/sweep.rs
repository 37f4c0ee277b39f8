//! Eviction: dropping the keys whose state has been back to its initial
//! state for the eviction delay, amortised over requests on new keys
//! (docs/spec.md rule 2.5).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use crate::limiter::MemoryLimiter;
use crate::map::with_map;

/// Without a cap, a sweep runs after this many new keys at the least (more
/// when more keys are held), so that sweeping stays amortised O(1) per key.
pub(crate) const MIN_SWEEP_INTERVAL: usize = 1024;

/// When to sweep expired keys, kept off the hot path: only requests on keys
/// not held (which allocate anyway) touch it.
#[derive(Debug)]
pub(crate) struct Sweep {
    /// Requests on keys not held since the last sweep.
    pub(crate) new_key_requests: AtomicUsize,
    /// Sweep when `new_key_requests` reaches this: `max(held, MIN_SWEEP_INTERVAL)`
    /// after the last sweep.
    pub(crate) interval: AtomicUsize,
    /// A lower bound of every held key's eviction time: while the clock is
    /// below it, a sweep would find nothing and is skipped.
    pub(crate) earliest_evict_at: AtomicU64,
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
            lock: Mutex::new(()),
        }
    }
}

impl MemoryLimiter {
    /// Keeps `earliest_evict_at` a lower bound after an insert.
    pub(crate) fn note_evict_at(&self, evict_at: u64) {
        let earliest = &self.sweep.earliest_evict_at;
        if evict_at < earliest.load(Ordering::SeqCst) {
            earliest.fetch_min(evict_at, Ordering::SeqCst);
        }
    }

    /// The amortised sweep: at most one at a time, skipped by whoever finds
    /// another running.
    pub(crate) fn scheduled_sweep(&self, now_us: u64) {
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

    /// Drops the keys whose eviction time has passed; the caller holds the
    /// sweep lock.
    pub(crate) fn sweep_locked(&self, now_us: u64) -> usize {
        let earliest = &self.sweep.earliest_evict_at;
        if now_us < earliest.load(Ordering::SeqCst) {
            return 0; // nothing can have expired yet
        }
        // Inserts during the sweep lower the bound themselves; the keys kept
        // lower it below.
        earliest.store(u64::MAX, Ordering::SeqCst);
        let mut removed = 0;
        let mut earliest_kept = u64::MAX;
        with_map!(&self.keys, map => map.retain(|_, slot| {
            let evict_at = self.evict_at(slot);
            if evict_at <= now_us {
                removed += 1;
                false
            } else {
                earliest_kept = earliest_kept.min(evict_at);
                true
            }
        }));
        earliest.fetch_min(earliest_kept, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use limiter_core::{ManualClock, Policy, Rate};

    use super::*;

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

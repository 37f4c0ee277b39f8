//! [`Sweeper`]: when to drop the keys whose state has been back to its
//! initial state for the eviction delay, amortised over requests on new
//! keys (docs/spec.md rule 2.5). The map's owner scans the keys in a
//! [`Sweep`] the sweeper hands it, and the sweeper learns from the scan
//! when the next one is worth its cost.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use crate::key_cap::KeyCap;

/// Without a cap, a sweep runs after this many new keys at the least (more
/// when more keys are held), so that sweeping stays amortised O(1) per key.
pub(crate) const MIN_SWEEP_INTERVAL: usize = 1024;

/// A sweep is put off until it frees at least this fraction of the keys
/// held (1/64): a scan costs every key, and under steady churn at the cap
/// (a key expiring every few µs) a scan whenever one key has expired would
/// cost a whole scan per new key. So a new key at the cap
/// may be refused while expired keys wait: until that many have expired,
/// or until that many new keys have been refused since the last sweep,
/// whichever comes first (the bound can be late: a key inserted after a
/// sweep that expires before the bound does not move it).
const SWEEP_BATCH_DIVISOR: usize = 64;

/// When to sweep expired keys, kept off the hot path: only requests on keys
/// not held (which allocate anyway) touch it.
#[derive(Debug)]
pub(crate) struct Sweeper {
    /// Requests on keys not held since the last sweep.
    new_key_requests: AtomicUsize,
    /// Sweep when `new_key_requests` reaches this: `max(held, MIN_SWEEP_INTERVAL)`
    /// after the last sweep.
    interval: AtomicUsize,
    /// When a sweep next has enough to free: after a sweep, the eviction
    /// time by which a [`SWEEP_BATCH_DIVISOR`]-th of the keys it kept have
    /// expired; the first insert into a map with nothing to sweep sets it
    /// to its own. While the clock is below it, a sweep is skipped.
    earliest_evict_at: AtomicU64,
    /// A lower bound of every held key's eviction time: after a sweep,
    /// the earliest of the keys it kept, lowered by every insert since.
    /// The scheduled sweep (at most one per `interval` new keys, so
    /// amortised whatever it frees) is due once the clock passes it: a
    /// key living long (a bucket drained to the bottom) then puts off no
    /// sweep of the short-lived keys inserted after it.
    lowest_evict_at: AtomicU64,
    /// New keys refused at the cap since the last sweep: a batch of them
    /// makes a sweep due, however late the bound.
    refused: AtomicUsize,
    /// One sweep at a time.
    lock: Mutex<()>,
}

impl Sweeper {
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

    /// After an insert: a map that had nothing to sweep (`u64::MAX`) has
    /// something once this key expires. The batch bound already set stays:
    /// lowering it to every short-lived key's time would bring back a scan
    /// per expired key at the cap; a key that expires before it is swept
    /// by the next scheduled sweep ([`Sweeper::lowest_evict_at`]).
    pub(crate) fn note_evict_at(&self, evict_at: u64) {
        self.lowest_evict_at.fetch_min(evict_at, Ordering::SeqCst);
        let earliest = &self.earliest_evict_at;
        if earliest.load(Ordering::SeqCst) == u64::MAX {
            earliest.fetch_min(evict_at, Ordering::SeqCst);
        }
    }

    /// Counts a new key refused at the cap.
    pub(crate) fn note_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request on a key not held, and starts the amortised sweep
    /// once `interval` of them have come since the last: at most one at a
    /// time, skipped by whoever finds another running, or while no key can
    /// have expired (without touching the lock).
    pub(crate) fn on_new_key_request<'a>(
        &'a self,
        now_us: u64,
        keys_held: &'a KeyCap,
    ) -> Option<Sweep<'a>> {
        let requests = self.new_key_requests.fetch_add(1, Ordering::Relaxed) + 1;
        if requests < self.interval.load(Ordering::Relaxed)
            || !self.scheduled_sweep_is_due(now_us, keys_held)
        {
            return None;
        }
        let lock = match self.lock.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let requests = self.new_key_requests.load(Ordering::Relaxed);
        (requests >= self.interval.load(Ordering::Relaxed)
            && self.scheduled_sweep_is_due(now_us, keys_held))
        .then(|| Sweep::start(self, lock, keys_held))
    }

    /// A sweep if one is due (at the cap: `earliest_evict_at`, so that a
    /// flood of new keys at one time scans at most once, and a sweep waits
    /// until it frees a batch), after any sweep running.
    pub(crate) fn due<'a>(&'a self, now_us: u64, keys_held: &'a KeyCap) -> Option<Sweep<'a>> {
        let lock = self.lock();
        self.sweep_is_due(now_us, keys_held)
            .then(|| Sweep::start(self, lock, keys_held))
    }

    /// A sweep, due or not, after any sweep running.
    pub(crate) fn now<'a>(&'a self, keys_held: &'a KeyCap) -> Sweep<'a> {
        Sweep::start(self, self.lock(), keys_held)
    }

    /// Whether a sweep would free enough to be worth its scan: a batch of
    /// keys has expired, or a batch of new keys has been refused.
    fn sweep_is_due(&self, now_us: u64, keys_held: &KeyCap) -> bool {
        now_us >= self.earliest_evict_at.load(Ordering::SeqCst)
            || self.refused.load(Ordering::Relaxed) >= batch(keys_held.held())
    }

    /// Whether the scheduled sweep has anything to free: some key may have
    /// expired (it runs once per `interval` new keys, so each of its scans
    /// is paid for however little it frees), or a sweep is due anyway.
    fn scheduled_sweep_is_due(&self, now_us: u64, keys_held: &KeyCap) -> bool {
        now_us >= self.lowest_evict_at.load(Ordering::SeqCst)
            || self.sweep_is_due(now_us, keys_held)
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The batch bound, for tests of when a sweep is due.
    #[cfg(test)]
    pub(crate) fn earliest_evict_at(&self) -> u64 {
        self.earliest_evict_at.load(Ordering::SeqCst)
    }
}

/// A batch of `keys`: a [`SWEEP_BATCH_DIVISOR`]-th of them, at least one.
fn batch(keys: usize) -> usize {
    (keys / SWEEP_BATCH_DIVISOR).max(1)
}

/// One sweep, holding the sweeper's lock: the map's owner drops every key
/// whose eviction time has passed, tells the sweep the eviction time of
/// each key it [`keep`](Self::keep)s, and [`finish`](Self::finish)es it
/// once the keys dropped are no longer counted as held.
pub(crate) struct Sweep<'a> {
    sweeper: &'a Sweeper,
    keys_held: &'a KeyCap,
    _lock: MutexGuard<'a, ()>,
    next: NextSweep,
    kept: usize,
}

impl<'a> Sweep<'a> {
    fn start(sweeper: &'a Sweeper, lock: MutexGuard<'a, ()>, keys_held: &'a KeyCap) -> Self {
        // Inserts during the sweep lower the bounds themselves; the keys
        // kept lower them when it finishes.
        sweeper.earliest_evict_at.store(u64::MAX, Ordering::SeqCst);
        sweeper.lowest_evict_at.store(u64::MAX, Ordering::SeqCst);
        sweeper.refused.store(0, Ordering::Relaxed);
        Self {
            sweeper,
            keys_held,
            _lock: lock,
            next: NextSweep::new(batch(keys_held.held())),
            kept: 0,
        }
    }

    /// Counts a key kept, which may be dropped from `evict_at` (µs).
    #[inline]
    pub(crate) fn keep(&mut self, evict_at: u64) {
        self.kept += 1;
        self.next.keep(evict_at);
    }

    /// Sets when the next sweep is due, and starts a new sweep period: the
    /// next scheduled sweep comes after as many new keys as are held now
    /// (at least [`MIN_SWEEP_INTERVAL`]), so each key is scanned O(1)
    /// times per key inserted.
    pub(crate) fn finish(self) {
        let sweeper = self.sweeper;
        sweeper
            .earliest_evict_at
            .fetch_min(self.next.at(batch(self.kept)), Ordering::SeqCst);
        sweeper
            .lowest_evict_at
            .fetch_min(self.next.at(1), Ordering::SeqCst);
        sweeper.new_key_requests.store(0, Ordering::Relaxed);
        let interval = self.keys_held.held().max(MIN_SWEEP_INTERVAL);
        sweeper.interval.store(interval, Ordering::Relaxed);
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
    use super::*;

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

    #[test]
    fn a_sweep_is_scheduled_after_as_many_new_keys_as_are_held() {
        let keys = KeyCap::new(None);
        let sweeper = Sweeper::new();
        sweeper.note_evict_at(0);
        for _ in 1..MIN_SWEEP_INTERVAL {
            assert!(sweeper.on_new_key_request(1, &keys).is_none());
        }
        let sweep = sweeper
            .on_new_key_request(1, &keys)
            .expect("the interval's end");
        // Held at the sweep's end: the next one waits for as many new keys.
        for _ in 0..2 * MIN_SWEEP_INTERVAL {
            assert!(keys.try_reserve());
        }
        sweep.finish();
        assert_eq!(
            sweeper.interval.load(Ordering::Relaxed),
            2 * MIN_SWEEP_INTERVAL
        );
        assert!(
            sweeper.on_new_key_request(1, &keys).is_none(),
            "one new key since"
        );
        // Nothing kept and nothing inserted since: nothing can expire.
        assert!(sweeper.due(u64::MAX - 1, &keys).is_none());
    }
}

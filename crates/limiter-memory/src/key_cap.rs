//! The cap on keys held ([`MemoryLimiterBuilder::max_keys`](crate::MemoryLimiterBuilder::max_keys)):
//! the count of keys held, and the refusal of a new key when it is full.

use std::sync::atomic::Ordering;

use limiter_core::Error;

use crate::limiter::MemoryLimiter;
use limiter_core::KeyLimitReached;

impl MemoryLimiter {
    /// Counts one more key held, if the cap allows, sweeping expired keys
    /// first when it does not.
    pub(crate) fn reserve_key(&self, now_us: u64) -> Result<(), Error> {
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
            Err(Error::Backend(Box::new(KeyLimitReached::new(max_keys))))
        }
    }

    pub(crate) fn release_keys(&self, count: usize) {
        self.held.fetch_sub(count, Ordering::AcqRel);
    }
}

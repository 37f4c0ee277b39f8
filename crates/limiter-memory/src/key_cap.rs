//! The cap on keys held ([`MemoryLimiterBuilder::max_keys`](crate::MemoryLimiterBuilder::max_keys)):
//! the count of keys held, and the refusal of a new key when it is full.

use std::sync::atomic::Ordering;

use limiter_core::Error;

use crate::limiter::MemoryLimiter;
use limiter_core::KeyLimitReached;

impl MemoryLimiter {
    /// Counts one more key held if the cap allows. The caller holds the
    /// new key's vacant entry, so that no other request on that key can
    /// hold a reservation it has not yet used: a key refused is a key no
    /// one holds.
    #[inline]
    pub(crate) fn try_reserve_key(&self) -> bool {
        let Some(max_keys) = self.max_keys else {
            self.held.fetch_add(1, Ordering::AcqRel);
            return true;
        };
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < max_keys).then_some(held + 1)
            })
            .is_ok()
    }

    /// The refusal of a new key at the cap.
    pub(crate) fn key_limit_reached(&self) -> Error {
        Error::from(KeyLimitReached::new(self.max_keys.unwrap_or(0)))
    }

    pub(crate) fn release_keys(&self, count: usize) {
        self.held.fetch_sub(count, Ordering::AcqRel);
    }
}

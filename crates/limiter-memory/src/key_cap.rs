//! [`KeyCap`]: the count of keys held, the cap on it
//! ([`MemoryLimiterBuilder::max_keys`](crate::MemoryLimiterBuilder::max_keys)),
//! and the refusal of a new key when it is full.

use std::sync::atomic::{AtomicUsize, Ordering};

use limiter_core::{Error, KeyLimitReached};

/// The keys held, counted when a slot is reserved (just before its
/// insert), and the most that may be held, if capped.
#[derive(Debug)]
pub(crate) struct KeyCap {
    max_keys: Option<usize>,
    held: AtomicUsize,
}

impl KeyCap {
    /// No key held, at most `max_keys`.
    pub(crate) fn new(max_keys: Option<usize>) -> Self {
        Self {
            max_keys,
            held: AtomicUsize::new(0),
        }
    }

    /// The cap, if any.
    pub(crate) fn max_keys(&self) -> Option<usize> {
        self.max_keys
    }

    /// The number of keys held.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Counts one more key held if the cap allows. The caller holds the
    /// new key's vacant entry, so that no other request on that key can
    /// hold a reservation it has not yet used: a key refused is a key no
    /// one holds.
    #[inline]
    pub(crate) fn try_reserve(&self) -> bool {
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

    /// Counts `count` keys no longer held.
    pub(crate) fn release(&self, count: usize) {
        self.held.fetch_sub(count, Ordering::AcqRel);
    }

    /// The refusal of a new key at the cap.
    pub(crate) fn refusal(&self) -> Error {
        Error::from(KeyLimitReached::new(self.max_keys.unwrap_or(0)))
    }
}

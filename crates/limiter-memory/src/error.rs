//! [`KeyLimitReached`]: the error of a new key when the map is full.

use std::fmt;

/// A new key was refused because the limiter already holds
/// [`max_keys`](crate::MemoryLimiterBuilder::max_keys) keys whose state has
/// not expired.
///
/// It reaches callers as [`limiter_core::Error::Backend`], like a Redis
/// outage, so one fail-open or fail-closed decision covers both. Keys already
/// held keep being decided exactly. To tell it apart:
///
/// ```
/// use limiter_core::{Error, Policy, Rate};
/// use limiter_memory::{KeyLimitReached, MemoryLimiter};
///
/// let limiter = MemoryLimiter::builder(Policy::fixed_window(Rate::per_hour(5))?)
///     .max_keys(1)
///     .build();
/// limiter.try_acquire("alice", 1)?;
/// match limiter.try_acquire("bob", 1) {
///     Err(Error::Backend(e)) => assert!(e.is::<KeyLimitReached>()),
///     other => panic!("expected KeyLimitReached, got {other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyLimitReached {
    /// The configured maximum number of keys.
    pub max_keys: usize,
}

impl fmt::Display for KeyLimitReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the in-memory limiter already holds its maximum of {} live keys; \
             a new key can be admitted once another key's state expires",
            self.max_keys
        )
    }
}

impl std::error::Error for KeyLimitReached {}

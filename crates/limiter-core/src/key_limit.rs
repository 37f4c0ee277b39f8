//! [`KeyLimitReached`]: the error of a new key when a backend holds as many
//! keys as it may (limiter-memory's `max_keys`).

use std::fmt;

/// A new key was refused because the limiter already holds as many keys
/// whose state has not expired as it may (limiter-memory's `max_keys`).
///
/// It reaches callers as [`Error::Backend`](crate::Error::Backend), so that
/// one failure policy covers it and a Redis outage alike; but it refuses
/// that one request, not the backend: under a
/// [`Resilient`](crate::Resilient) limiter the policy answers it and the
/// keys already held keep being decided exactly (no outage starts). To tell
/// it apart ([`Error::is_key_limit`](crate::Error::is_key_limit)):
///
/// ```
/// use limiter_core::{Error, KeyLimitReached};
///
/// // What a backend at its cap answers (limiter-memory's `max_keys`).
/// let refused = Error::from(KeyLimitReached::new(10_000));
/// assert!(refused.is_backend() && refused.is_key_limit());
/// match &refused {
///     Error::Backend(e) => assert!(e.is::<KeyLimitReached>()),
///     _ => unreachable!(),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyLimitReached {
    /// The configured maximum number of keys.
    pub max_keys: usize,
}

impl KeyLimitReached {
    /// The refusal of a backend that holds at most `max_keys` keys.
    pub fn new(max_keys: usize) -> Self {
        Self { max_keys }
    }
}

impl fmt::Display for KeyLimitReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the in-memory limiter already holds its maximum of {} keys (live, or \
             expired and awaiting a sweep); a new key can be admitted once others expire",
            self.max_keys
        )
    }
}

impl std::error::Error for KeyLimitReached {}

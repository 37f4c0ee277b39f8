//! [`Overloaded`]: the error of a request a backend that answers could not
//! take in time (limiter-redis: queued behind calls Redis answers slower
//! than requests arrive).

use std::fmt;
use std::time::Duration;

/// The backend answers, but this request waited its whole timeout for its
/// turn and was never sent: nothing was counted for it.
///
/// Like [`KeyLimitReached`](crate::KeyLimitReached) it reaches callers as
/// [`Error::Backend`](crate::Error::Backend) (usually as the
/// [`source`](std::error::Error::source) of the backend's own error), and
/// it refuses that one request, not the backend: under a
/// [`Resilient`](crate::Resilient) limiter the policy answers it and the
/// next requests are still asked of the backend (an outage would answer
/// every key by the policy for a probe interval, for one hot key's flood).
/// To tell it apart: [`Error::is_overloaded`](crate::Error::is_overloaded).
///
/// ```
/// use std::time::Duration;
/// use limiter_core::{Error, Overloaded};
///
/// let refused = Error::from(Overloaded::new(Duration::from_secs(1)));
/// assert!(refused.is_backend() && refused.is_overloaded() && !refused.is_key_limit());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overloaded {
    /// How long the request waited for its turn.
    pub waited: Duration,
}

impl Overloaded {
    /// A request refused after waiting `waited` for its turn.
    pub fn new(waited: Duration) -> Self {
        Self { waited }
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "overloaded: the request waited {:?} for its turn and was not sent; nothing counted",
            self.waited
        )
    }
}

impl std::error::Error for Overloaded {}

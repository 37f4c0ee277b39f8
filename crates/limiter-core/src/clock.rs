//! [`Clock`]: where time comes from, so tests and replays can inject it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of time in microseconds since the Unix epoch (docs/spec.md section 1).
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time in µs since the Unix epoch.
    fn now_us(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_us(&self) -> u64 {
        (**self).now_us()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_us(&self) -> u64 {
        (**self).now_us()
    }
}

/// Wall-clock time, so fixed windows align to the epoch (a one-minute window
/// starts on the minute).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now_us(&self) -> u64 {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        // u64 arithmetic: `as_micros` works in u128, which costs more than
        // the clock read itself on the hot path.
        since_epoch
            .as_secs()
            .saturating_mul(1_000_000)
            .saturating_add(u64::from(since_epoch.subsec_micros()))
    }
}

/// A clock that moves only when told to: for tests and replays.
///
/// Clones share the same time, so a test can keep one handle and give
/// another to a limiter.
///
/// ```
/// use limiter_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_millis(2));
/// assert_eq!(clock.now_us(), 3_000);
/// clock.set(10);
/// assert_eq!(clock.now_us(), 10);
/// clock.advance(Duration::MAX);
/// assert_eq!(clock.now_us(), u64::MAX, "saturates, never wraps");
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_us: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start_us` µs since the epoch.
    pub fn new(start_us: u64) -> Self {
        Self {
            now_us: Arc::new(AtomicU64::new(start_us)),
        }
    }

    /// Moves the clock forward by `by` (whole microseconds), stopping at
    /// `u64::MAX` rather than wrapping to a time far in the past.
    pub fn advance(&self, by: Duration) {
        let micros = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        // The closure always returns `Some`: the update cannot fail.
        let _ = self
            .now_us
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(micros))
            });
    }

    /// Sets the clock to `now_us`, forwards or backwards.
    pub fn set(&self, now_us: u64) {
        self.now_us.store(now_us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }
}

//! [`ClockSource`]: an in-process store's clock, the default read inline.

use crate::anchored_clock::AnchoredClock;
use crate::clock::Clock;

/// An in-process store's clock: the default, [`AnchoredClock`], read
/// inline (no call through a vtable on the hot path), any other through
/// its vtable.
#[derive(Debug)]
pub enum ClockSource {
    /// The default: the process-wide [`AnchoredClock`].
    Anchored(AnchoredClock),
    /// A clock the user gave (a [`ManualClock`](crate::ManualClock) in tests).
    Custom(Box<dyn Clock>),
}

impl Default for ClockSource {
    fn default() -> Self {
        Self::Anchored(AnchoredClock::new())
    }
}

impl ClockSource {
    /// The current time in µs since the Unix epoch.
    #[inline]
    pub fn now_us(&self) -> u64 {
        match self {
            Self::Anchored(clock) => clock.now_us(),
            Self::Custom(clock) => clock.now_us(),
        }
    }
}

impl Clock for ClockSource {
    #[inline]
    fn now_us(&self) -> u64 {
        ClockSource::now_us(self)
    }
}

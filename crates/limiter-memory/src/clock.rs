//! [`AnchoredClock`]: wall-clock microseconds at the cost of a counter read.

use std::sync::OnceLock;

use limiter_core::{Clock, SystemClock};

/// Wall-clock time read once, then advanced by the CPU's monotonic counter
/// (the TSC through [`quanta`], or the OS monotonic clock where there is none).
///
/// The default clock of a [`MemoryLimiter`](crate::MemoryLimiter): reading
/// it costs a few nanoseconds where the system clock costs tens (a clock
/// read would otherwise be the largest part of an in-memory decision).
/// docs/spec.md section 1 allows it: "a monotonic clock anchored to the wall clock once".
/// It never runs backwards. It does not follow later adjustments of the
/// wall clock (NTP slews, a manual set), so over days it may drift from
/// [`SystemClock`] by milliseconds: fixed windows then align to the epoch
/// by that margin. Give the limiter [`SystemClock`] where exact wall-clock
/// alignment matters more than a few nanoseconds.
///
/// Every `AnchoredClock` in a process shares one anchor, so they agree.
#[derive(Debug, Clone)]
pub struct AnchoredClock {
    anchor: Anchor,
}

/// A wall-clock time and a counter reading taken together.
#[derive(Debug, Clone)]
struct Anchor {
    wall_us: u64,
    raw: u64,
    counter: quanta::Clock,
}

impl AnchoredClock {
    /// The process-wide anchored clock (calibrated on first use).
    pub fn new() -> Self {
        static ANCHOR: OnceLock<Anchor> = OnceLock::new();
        let anchor = ANCHOR.get_or_init(|| {
            let counter = quanta::Clock::new();
            Anchor {
                wall_us: SystemClock.now_us(),
                raw: counter.raw(),
                counter,
            }
        });
        Self {
            anchor: anchor.clone(),
        }
    }
}

impl Default for AnchoredClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for AnchoredClock {
    #[inline]
    fn now_us(&self) -> u64 {
        let Anchor {
            wall_us,
            raw,
            counter,
        } = &self.anchor;
        let elapsed_ns = counter.delta_as_nanos(*raw, counter.raw());
        wall_us.saturating_add(elapsed_ns / 1_000)
    }
}

/// The limiter's clock: the default read inline, any other through its vtable.
#[derive(Debug)]
pub(crate) enum ClockSource {
    Anchored(AnchoredClock),
    Custom(Box<dyn Clock>),
}

impl ClockSource {
    #[inline]
    pub(crate) fn now_us(&self) -> u64 {
        match self {
            Self::Anchored(clock) => clock.now_us(),
            Self::Custom(clock) => clock.now_us(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_a_few_milliseconds_of_the_wall_clock_and_never_goes_back() {
        let clock = AnchoredClock::new();
        let mut last = clock.now_us();
        for _ in 0..10_000 {
            let now = clock.now_us();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
        let wall = SystemClock.now_us();
        assert!(
            wall.abs_diff(AnchoredClock::new().now_us()) < 50_000,
            "more than 50 ms apart"
        );
    }
}

//! [`AnchoredClock`]: wall-clock microseconds at the cost of a counter read.

use std::sync::OnceLock;

use crate::clock::{Clock, SystemClock};

/// Wall-clock time read once, then advanced by the CPU's monotonic counter
/// (the TSC through [`quanta`], or the OS monotonic clock where there is none).
///
/// The default clock of the in-process stores (limiter-memory's
/// `MemoryLimiter`, limiter-lease's `Leased`, limiter-tower's ban list):
/// reading it costs a counter read and a multiply, far less than the system
/// clock (docs/backends.md, "The clock"), whose read would otherwise be the
/// largest part of an in-memory decision.
/// docs/spec.md section 1 allows it: "a monotonic clock anchored to the wall clock once".
/// It never runs backwards. It does not follow later adjustments of the
/// wall clock (NTP slews, a manual set), and its rate is the counter's as
/// calibrated at start, so it drifts from [`SystemClock`] (docs/backends.md,
/// "The clock", gives a measured rate); fixed windows then align to the
/// epoch by that margin. Give the limiter [`SystemClock`] where exact
/// wall-clock alignment matters more than a few nanoseconds.
///
/// Every `AnchoredClock` in a process shares one anchor, so they agree.
#[derive(Debug, Clone)]
pub struct AnchoredClock {
    anchor: Anchor,
}

/// A wall-clock time and a counter reading taken together, and the
/// counter's rate in µs.
#[derive(Debug, Clone)]
struct Anchor {
    wall_us: u64,
    raw: u64,
    counter: quanta::Clock,
    /// µs per counter tick, times 2^64: a reading's µs are one multiply
    /// away, where quanta's ns and a division by 1,000 took three steps.
    us_per_raw: u64,
}

/// Counter ticks over which the counter's rate is read: about six minutes
/// of a 3 GHz counter, so that the rate is exact to a few parts in 10^12
/// (a few µs a month).
const RATE_PROBE: u64 = 1 << 40;

impl AnchoredClock {
    /// The process-wide anchored clock (calibrated on first use).
    pub fn new() -> Self {
        static ANCHOR: OnceLock<Anchor> = OnceLock::new();
        let anchor = ANCHOR.get_or_init(|| {
            let counter = quanta::Clock::new();
            // ns(2^40) * 2^24 / 1000 = 2^64 µs per tick: below 2^64 for any
            // counter faster than 1 MHz (a TSC, or the OS clock's 1 GHz).
            let probe_ns = u128::from(counter.delta_as_nanos(0, RATE_PROBE));
            let us_per_raw =
                u64::try_from((probe_ns << (64 - RATE_PROBE.trailing_zeros())) / 1_000)
                    .unwrap_or(u64::MAX);
            Anchor {
                wall_us: SystemClock.now_us(),
                raw: counter.raw(),
                counter,
                us_per_raw,
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
        let anchor = &self.anchor;
        // A counter read on another core may be a little behind the
        // anchor's: no time has passed then.
        let elapsed = anchor.counter.raw().saturating_sub(anchor.raw);
        anchor.wall_us.saturating_add(anchor.micros(elapsed))
    }
}

impl Anchor {
    /// `ticks` of the counter in µs.
    #[inline]
    fn micros(&self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.us_per_raw)) >> u64::BITS) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_microseconds_quanta_counts() {
        let anchor = &AnchoredClock::new().anchor;
        for ticks in [0, 1, 999, 1_000_000, 3_000_000_000, RATE_PROBE, 1 << 48] {
            let quanta_us = anchor.counter.delta_as_nanos(0, ticks) / 1_000;
            let ours = anchor.micros(ticks);
            assert!(
                ours.abs_diff(quanta_us) <= 1 + quanta_us / 100_000_000_000,
                "{ticks} ticks: {ours} µs, quanta {quanta_us} µs"
            );
        }
    }

    #[test]
    fn stays_within_a_few_milliseconds_of_the_wall_clock_and_never_goes_back() {
        let clock = AnchoredClock::new();
        let mut last = clock.now_us();
        for _ in 0..10_000 {
            let now = clock.now_us();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
        // The wall clock read between two readings of ours: however long
        // a loaded machine stalls this thread between the reads, the wall
        // time lies between them, give or take the calibration's error.
        let before = clock.now_us();
        let wall = SystemClock.now_us();
        let after = clock.now_us();
        assert!(
            before.saturating_sub(50_000) <= wall && wall <= after + 50_000,
            "the wall clock {wall} µs is more than 50 ms outside [{before}, {after}]"
        );
    }
}

//! [`MonotonicClock`]: the default clock of a leased limiter, which times
//! lease lifetimes and so must never step back.

use std::time::Instant;

use limiter_core::{Clock, SystemClock};

/// Wall-clock µs read once, then advanced by [`Instant`]: a lease's
/// lifetime is measured on it, and a wall clock stepped back would stretch
/// every lease in hand (docs/spec.md section 8.1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MonotonicClock {
    anchor_us: u64,
    start: Instant,
}

impl MonotonicClock {
    pub(crate) fn new() -> Self {
        Self {
            anchor_us: SystemClock.now_us(),
            start: Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_us(&self) -> u64 {
        let elapsed = self.start.elapsed();
        let micros = elapsed
            .as_secs()
            .saturating_mul(1_000_000)
            .saturating_add(u64::from(elapsed.subsec_micros()));
        self.anchor_us.saturating_add(micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_back_and_starts_at_the_wall_clock() {
        let clock = MonotonicClock::new();
        let wall = SystemClock.now_us();
        let mut last = clock.now_us();
        assert!(last.abs_diff(wall) < 50_000, "{last} vs {wall}");
        for _ in 0..10_000 {
            let now = clock.now_us();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
    }
}

//! Durations as the headers and bodies say them: whole seconds (or
//! milliseconds), rounded up, and `Retry-After`'s bounds.

use std::time::Duration;

/// Whole seconds in `duration`, rounded up (`u64::MAX` at most).
pub(crate) fn ceil_secs(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// Milliseconds in `duration`, rounded up.
pub(crate) fn ceil_millis(duration: Duration) -> u128 {
    let nanos = duration.as_nanos();
    nanos.div_ceil(1_000_000)
}

/// The most seconds `Retry-After` says: 2^31 - 1. RFC 9111 (section 1.2.2)
/// has a recipient take any larger delta-seconds as 2^31, and a cache
/// may overflow on more; a wait that long is "not in this lifetime" anyway.
pub(crate) const MAX_RETRY_AFTER_SECS: u64 = (1 << 31) - 1;

/// `Retry-After` for a denial: whole seconds rounded up, at least 1, at
/// most [`MAX_RETRY_AFTER_SECS`].
pub(crate) fn retry_after_secs(duration: Duration) -> u64 {
    ceil_secs(duration).clamp(1, MAX_RETRY_AFTER_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up_and_retry_after_is_never_zero() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_micros(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(ceil_secs(Duration::from_millis(8_800)), 9);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(ceil_millis(Duration::from_micros(1_001)), 2);
    }
}

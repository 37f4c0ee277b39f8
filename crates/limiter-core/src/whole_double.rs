//! [`whole_double`]: the whole number a double carries, as Redis's
//! doubles (the Lua functions' numbers and packed states) carry them.

use crate::MAX_TIME_US;

/// A double that holds a whole number in [0, 2^53], as that number; `None`
/// for a negative, fractional or larger one, or NaN. Every whole number
/// the Redis states hold (counts, ticks, µs) is in that range, where a
/// double is exact.
///
/// ```
/// use limiter_core::backend::whole_double;
///
/// assert_eq!(whole_double(42.0), Some(42));
/// assert_eq!(whole_double(9_007_199_254_740_992.0), Some(1 << 53));
/// assert_eq!(whole_double(0.5), None);
/// assert_eq!(whole_double(-1.0), None);
/// ```
#[inline]
pub fn whole_double(value: f64) -> Option<u64> {
    // Non-negative, at most 2^53, and integral: the cast is exact, and
    // casting back is the integral test (`fract` calls libm's `trunc`).
    ((0.0..=MAX_TIME_US as f64).contains(&value) && value as u64 as f64 == value)
        .then_some(value as u64)
}

//! [`Divisor`]: exact division by a per-policy constant without a `div`
//! instruction.
//!
//! Every decision divides by the window or the limit, and a 64-bit `div`
//! costs tens of cycles: more than the rest of a token-bucket decision. All
//! numerators stay at or below 2^53 (docs/spec.md section 5), so a multiply by a
//! precomputed reciprocal and a shift is exact (Granlund and Montgomery's
//! round-up method): with `l = ceil(log2 d)`, `k = 53 + l` and
//! `m = ceil(2^k / d)`, the error `e = m*d - 2^k` is below `d <= 2^l`, so
//! `n*e < 2^k` for every `n <= 2^53`, which makes `floor(n*m / 2^k)` equal
//! `floor(n / d)`.
//!
//! The numerator's 10 spare bits (`n * 2^10 <= 2^63`) move the product's
//! binary point to bit 64: `floor(n*m / 2^k)` is the high word of
//! `(n * 2^10) * m`, shifted right by `l - 1` (or, for `l <= 1`, of
//! `(n * 2^10) * (m * 2^(1 - l))`, unshifted). One 64-bit multiply and two
//! shifts, where a 128-bit shift by `k` takes five instructions more. The
//! multiplier stays below 2^55: `m <= 2^54`.

use crate::MAX_TIME_US;

/// Bits of the largest numerator: 2^53 inclusive.
const NUMERATOR_BITS: u32 = 53;

/// Bits a numerator is shifted left by before it is multiplied: what is
/// left of 63 bits above the largest numerator.
const HEADROOM: u32 = 63 - NUMERATOR_BITS;

/// A divisor `d >= 1` with its reciprocal, for numerators `<= 2^53`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    divisor: u64,
    /// `m`, or `m * 2^(1 - l)` when `l <= 1`.
    multiplier: u64,
    /// `l - 1`, or 0 when `l <= 1`.
    shift: u32,
}

impl Divisor {
    pub(crate) fn new(divisor: u64) -> Self {
        assert!(divisor >= 1, "division by zero");
        let l = u64::BITS - (divisor - 1).leading_zeros(); // ceil(log2 d)
        let m = (1u128 << (NUMERATOR_BITS + l)).div_ceil(u128::from(divisor));
        // m < 2^(53 + l) / 2^(l - 1) + 1, so m <= 2^54.
        let m = u64::try_from(m).expect("m <= 2^54");
        let (multiplier, shift) = match l.checked_sub(1) {
            Some(shift) if shift > 0 => (m, shift),
            _ => (m << (1 - l), 0),
        };
        Self {
            divisor,
            multiplier,
            shift,
        }
    }

    /// `n div d`, for `n <= 2^53`.
    #[inline]
    pub(crate) fn div(self, n: u64) -> u64 {
        debug_assert!(n <= MAX_TIME_US, "numerator {n} beyond 2^53");
        let high = (u128::from(n << HEADROOM) * u128::from(self.multiplier)) >> u64::BITS;
        (high as u64) >> self.shift
    }

    /// `ceil(n / d)`, for `n <= 2^53`.
    #[inline]
    pub(crate) fn div_ceil(self, n: u64) -> u64 {
        let q = self.div(n);
        q + u64::from(q * self.divisor != n)
    }

    /// `n mod d`, for `n <= 2^53`.
    #[inline]
    pub(crate) fn rem(self, n: u64) -> u64 {
        n - self.div(n) * self.divisor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EDGES: [u64; 9] = [
        0,
        1,
        2,
        3,
        999_999,
        1_000_000,
        (1 << 52) + 1,
        MAX_TIME_US - 1,
        MAX_TIME_US,
    ];

    fn check(d: u64, n: u64) {
        let divisor = Divisor::new(d);
        assert_eq!(divisor.div(n), n / d, "{n} div {d}");
        assert_eq!(divisor.div_ceil(n), n.div_ceil(d), "ceil({n} / {d})");
        assert_eq!(divisor.rem(n), n % d, "{n} mod {d}");
    }

    #[test]
    fn exact_at_the_edges() {
        for d in [
            1,
            2,
            3,
            7,
            10,
            1_000_000,
            86_400_000_000,
            (1 << 51) - 1,
            1 << 51,
            MAX_TIME_US,
        ] {
            for n in EDGES {
                check(d, n);
            }
            for n in [
                d - 1,
                d,
                d + 1,
                2 * d - 1,
                MAX_TIME_US / d * d,
                MAX_TIME_US / d * d - 1,
            ] {
                check(d, n.min(MAX_TIME_US));
            }
        }
    }

    proptest! {
        #[test]
        fn exact_for_every_numerator_up_to_2_pow_53(d in 1u64..=MAX_TIME_US, n in 0u64..=MAX_TIME_US) {
            check(d, n);
        }

        #[test]
        fn exact_for_small_divisors(d in 1u64..=100_000, n in 0u64..=MAX_TIME_US) {
            check(d, n);
        }
    }
}

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

use crate::MAX_TIME_US;

/// Bits of the largest numerator: 2^53 inclusive.
const NUMERATOR_BITS: u32 = 53;

/// A divisor `d >= 1` with its reciprocal, for numerators `<= 2^53`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Divisor {
    divisor: u64,
    multiplier: u128,
    shift: u32,
}

impl Divisor {
    pub(crate) fn new(divisor: u64) -> Self {
        assert!(divisor >= 1, "division by zero");
        let l = u64::BITS - (divisor - 1).leading_zeros(); // ceil(log2 d)
        let shift = NUMERATOR_BITS + l;
        let multiplier = (1u128 << shift).div_ceil(u128::from(divisor));
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
        ((u128::from(n) * self.multiplier) >> self.shift) as u64
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

//! A log-bucketed latency histogram: bounded memory, quantiles within
//! 1/64 of the true value.

use std::time::Duration;

/// Latencies in nanoseconds, log-bucketed: exact below 64 ns, then 32
/// buckets per power of two, so a quantile (a bucket's midpoint) is within
/// 1/64 of the true value. 1152 counters (9 KiB) cover up to 2^40 ns
/// (18 minutes); longer values count in the last bucket.
#[derive(Debug, Clone)]
pub(super) struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    min: u64,
    max: u64,
}

impl Histogram {
    /// Buckets per power of two, as a power of two.
    const SUB_BITS: u32 = 5;
    const SUB: u64 = 1 << Self::SUB_BITS;
    /// The largest value kept exactly in range.
    const MAX_VALUE: u64 = (1 << 40) - 1;
    const BUCKETS: usize = Self::index(Self::MAX_VALUE) + 1;

    pub(super) fn new() -> Self {
        Self {
            counts: vec![0; Self::BUCKETS].into_boxed_slice(),
            total: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// The bucket of `value` (at most `MAX_VALUE`).
    const fn index(value: u64) -> usize {
        if value < Self::SUB {
            return value as usize;
        }
        let exponent = 63 - value.leading_zeros();
        let shift = exponent - Self::SUB_BITS;
        // value >> shift is in [SUB, 2 * SUB).
        (shift as u64 * Self::SUB + (value >> shift)) as usize
    }

    /// The smallest value of bucket `index` and the bucket's width.
    const fn bounds(index: usize) -> (u64, u64) {
        let index = index as u64;
        if index < 2 * Self::SUB {
            return (index, 1);
        }
        let shift = index / Self::SUB - 1;
        let mantissa = Self::SUB + index % Self::SUB;
        (mantissa << shift, 1 << shift)
    }

    pub(super) fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[Self::index(nanos.min(Self::MAX_VALUE))] += 1;
        self.total += 1;
        self.min = self.min.min(nanos);
        self.max = self.max.max(nanos);
    }

    pub(super) fn merge(&mut self, other: &Self) {
        for (count, more) in self.counts.iter_mut().zip(other.counts.iter()) {
            *count += more;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    pub(super) fn max(&self) -> Option<u64> {
        (self.total > 0).then_some(self.max)
    }

    /// The value below which a fraction `q` of the values lie (the
    /// `ceil(q·n)`-th smallest): its bucket's midpoint, kept within the
    /// smallest and largest value recorded. `None` when empty.
    pub(super) fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, width) = Self::bounds(index);
                return Some((low + (width - 1) / 2).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_their_values() {
        let mut expected_low = 0;
        for index in 0..Histogram::BUCKETS {
            let (low, width) = Histogram::bounds(index);
            assert_eq!(low, expected_low, "bucket {index}");
            assert_eq!(Histogram::index(low), index);
            assert_eq!(Histogram::index(low + width - 1), index);
            expected_low = low + width;
        }
        assert_eq!(expected_low, Histogram::MAX_VALUE + 1);
    }

    #[test]
    fn quantiles_are_within_two_percent() {
        let mut histogram = Histogram::new();
        for nanos in 1..=100_000u64 {
            histogram.record(Duration::from_nanos(nanos * 37));
        }
        for (q, exact) in [
            (0.5, 50_000u64 * 37),
            (0.99, 99_000 * 37),
            (0.999, 99_900 * 37),
        ] {
            let got = histogram.quantile(q).unwrap() as f64;
            let error = (got - exact as f64).abs() / exact as f64;
            assert!(error < 0.02, "q={q}: {got} vs {exact}");
        }
        assert_eq!(histogram.quantile(1.0), Some(100_000 * 37));
        assert_eq!(histogram.quantile(0.0), Some(37));
        assert_eq!(Histogram::new().quantile(0.5), None);
    }

    #[test]
    fn merging_adds_the_counts() {
        let (mut a, mut b) = (Histogram::new(), Histogram::new());
        a.record(Duration::from_micros(10));
        b.record(Duration::from_millis(10));
        b.record(Duration::from_secs(3600)); // beyond the range: the last bucket
        a.merge(&b);
        assert_eq!(a.total, 3);
        // 10 µs, within its bucket's half width (1/64).
        let p10 = a.quantile(0.1).unwrap();
        assert!((10_000..=10_000 + 10_000 / 64).contains(&p10), "{p10}");
        assert_eq!(a.max(), Some(3_600_000_000_000));
    }
}

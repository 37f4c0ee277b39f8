//! [`Algorithm`]: the algorithms by name, and [`PerAlgorithm`], a value for
//! each of them. This file and `backend.rs` are the only places that list
//! the algorithms: everything else goes through them, so a new algorithm
//! fails to compile wherever it needs code.

use std::fmt;
use std::ops::{Index, IndexMut};

/// The rate-limiting algorithms. See `docs/algorithms.md` for when to pick
/// which.
///
/// `#[non_exhaustive]`: more may come. Code that needs something per
/// algorithm (a script, a colour) builds a [`PerAlgorithm`] table instead
/// of matching, so a new algorithm is a compile error there, not a silent
/// `_ =>` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Algorithm {
    /// Count per aligned window. Cheapest; admits up to `2L` around a boundary.
    FixedWindow,
    /// Exact log of admissions in the trailing window. No boundary burst.
    SlidingLog,
    /// Weighted current and previous window counts. O(1), small burst.
    SlidingCounter,
    /// Bursts up to a capacity, then a steady refill rate.
    TokenBucket,
    /// A queue that drains at a constant rate: smooth output, no burst.
    LeakyBucket,
}

impl Algorithm {
    /// Every algorithm, in the order used by tables and plots. Outside this
    /// crate, use its `len()` rather than writing the count.
    pub const ALL: [Algorithm; 5] = [
        Self::FixedWindow,
        Self::SlidingLog,
        Self::SlidingCounter,
        Self::TokenBucket,
        Self::LeakyBucket,
    ];

    /// The kebab-case name used on the command line, in policy strings and
    /// in output, e.g. `"sliding-log"`.
    pub const fn name(self) -> &'static str {
        NAMES.get(self)
    }
}

/// The names, one per algorithm.
static NAMES: PerAlgorithm<&str> = PerAlgorithm {
    fixed_window: "fixed-window",
    sliding_log: "sliding-log",
    sliding_counter: "sliding-counter",
    token_bucket: "token-bucket",
    leaky_bucket: "leaky-bucket",
};

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One value per algorithm, a field each: a backend's script per
/// algorithm, a plot's colour per lane.
///
/// Written out as a struct literal, a table names every algorithm, so
/// adding an algorithm breaks the build at each table until it has its
/// entry; [`get`](Self::get) (or indexing) is the one `match`.
///
/// ```
/// use limiter_core::{backend::PerAlgorithm, Algorithm};
///
/// const SUFFIX: PerAlgorithm<&str> = PerAlgorithm {
///     fixed_window: "fw",
///     sliding_log: "sl",
///     sliding_counter: "sc",
///     token_bucket: "tb",
///     leaky_bucket: "lb",
/// };
/// assert_eq!(SUFFIX[Algorithm::SlidingLog], "sl");
/// assert_eq!(SUFFIX.iter().count(), Algorithm::ALL.len());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)] // one field per algorithm, named after it
pub struct PerAlgorithm<T> {
    pub fixed_window: T,
    pub sliding_log: T,
    pub sliding_counter: T,
    pub token_bucket: T,
    pub leaky_bucket: T,
}

impl<T> PerAlgorithm<T> {
    /// A table of `f(algorithm)` for every algorithm.
    pub fn from_fn(mut f: impl FnMut(Algorithm) -> T) -> Self {
        Self {
            fixed_window: f(Algorithm::FixedWindow),
            sliding_log: f(Algorithm::SlidingLog),
            sliding_counter: f(Algorithm::SlidingCounter),
            token_bucket: f(Algorithm::TokenBucket),
            leaky_bucket: f(Algorithm::LeakyBucket),
        }
    }

    /// The value for `algorithm`.
    #[inline]
    pub const fn get(&self, algorithm: Algorithm) -> &T {
        match algorithm {
            Algorithm::FixedWindow => &self.fixed_window,
            Algorithm::SlidingLog => &self.sliding_log,
            Algorithm::SlidingCounter => &self.sliding_counter,
            Algorithm::TokenBucket => &self.token_bucket,
            Algorithm::LeakyBucket => &self.leaky_bucket,
        }
    }

    /// The value for `algorithm`, to change it.
    #[inline]
    pub fn get_mut(&mut self, algorithm: Algorithm) -> &mut T {
        match algorithm {
            Algorithm::FixedWindow => &mut self.fixed_window,
            Algorithm::SlidingLog => &mut self.sliding_log,
            Algorithm::SlidingCounter => &mut self.sliding_counter,
            Algorithm::TokenBucket => &mut self.token_bucket,
            Algorithm::LeakyBucket => &mut self.leaky_bucket,
        }
    }

    /// Every algorithm with its value, in [`Algorithm::ALL`] order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (Algorithm, &T)> + '_ {
        Algorithm::ALL.into_iter().map(move |a| (a, self.get(a)))
    }
}

impl<T> Index<Algorithm> for PerAlgorithm<T> {
    type Output = T;

    #[inline]
    fn index(&self, algorithm: Algorithm) -> &T {
        self.get(algorithm)
    }
}

impl<T> IndexMut<Algorithm> for PerAlgorithm<T> {
    #[inline]
    fn index_mut(&mut self, algorithm: Algorithm) -> &mut T {
        self.get_mut(algorithm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_round_trip_through_their_names() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert_eq!(
            "Token_Bucket".parse::<Algorithm>().unwrap(),
            Algorithm::TokenBucket
        );
    }

    #[test]
    fn a_table_has_one_value_per_algorithm_in_order() {
        let table = PerAlgorithm::from_fn(Algorithm::name);
        let listed: Vec<_> = table.iter().map(|(a, name)| (a, *name)).collect();
        let expected: Vec<_> = Algorithm::ALL.map(|a| (a, a.name())).to_vec();
        assert_eq!(listed, expected);
        let mut counts = PerAlgorithm::<u32>::default();
        counts[Algorithm::LeakyBucket] += 2;
        assert_eq!(counts.leaky_bucket, 2);
    }
}

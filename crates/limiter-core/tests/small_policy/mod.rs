//! The policies the property tests draw: small numbers with a 1 µs tick,
//! so that ticks are µs and every edge is reached.

use std::time::Duration;

use limiter_core::{Algorithm, Policy, Rate};
use proptest::prelude::*;

/// A policy of `algorithm` of small numbers with a 1 µs tick.
pub(crate) fn small_policy(algorithm: Algorithm) -> impl Strategy<Value = Policy> {
    (1u64..=12, 1u64..=40, 1u64..=12).prop_map(move |(limit, window, extra)| {
        let rate = Rate::new(limit, Duration::from_micros(window));
        let policy = Policy::new(algorithm, rate).unwrap();
        match algorithm {
            Algorithm::TokenBucket => policy.with_capacity(extra).unwrap(),
            Algorithm::LeakyBucket => policy.with_queue(extra).unwrap(),
            _ => policy,
        }
    })
}

/// [`small_policy`] of any algorithm.
pub(crate) fn any_small_policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Algorithm::ALL.to_vec()).prop_flat_map(small_policy)
}

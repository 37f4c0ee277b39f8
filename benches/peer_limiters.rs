//! The limiters of the `peers` bench outside criterion, for the two
//! harnesses that compare them more finely than a criterion run on a
//! shared machine can (`memory_instructions.rs`: instructions per decision
//! under callgrind; `peers_interleaved.rs`: time per decision, ours and
//! governor's in alternating blocks). Each is built as the `peers` bench
//! builds it: the same policy, the same governor quota, hasher and clock,
//! and it answers one request on one `String` key per call, keeping the
//! whole answer (`black_box`), as a caller would.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::QuantaClock;
use governor::state::keyed::{DashMapStateStore, DefaultKeyedStateStore};
use governor::{Quota, RateLimiter};
use limiter_core::{Algorithm, ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

/// The keys every limiter holds: `user:0` to `user:9999`.
pub(crate) fn keys() -> Vec<String> {
    (0..10_000).map(|i| format!("user:{i}")).collect()
}

/// A limiter that answers one request: admitted or not.
pub(crate) trait Decide {
    // `&String`: governor's limiter keyed by `String` is checked with one.
    #[allow(clippy::ptr_arg)]
    fn decide(&mut self, key: &String) -> bool;
}

/// What runs a limiter, whatever its type (each is compiled for each).
pub(crate) trait Visit {
    type Output;
    fn visit<D: Decide>(self, limiter: D) -> Self::Output;
}

/// The limiters' names, by index; the first is the reference.
pub(crate) const VARIANTS: &[&str] = &[
    "governor-gcra/ahash",
    "governor-gcra/siphash-default",
    "limiter-memory/token-bucket",
    "limiter-memory/fixed-window",
    "limiter-memory/sliding-counter",
    "limiter-memory/leaky-bucket",
    "limiter-memory/sliding-log",
    "limiter-memory-allowed-only/token-bucket",
    "limiter-memory-allowed-only/fixed-window",
    "limiter-memory-manual-clock/token-bucket",
];

/// Builds limiter `index` of [`VARIANTS`], fills it with every key (each
/// admitted once, as in the `peers` bench) and hands it to `visit`.
pub(crate) fn visit<V: Visit>(index: usize, keys: &[String], visit: V) -> V::Output {
    let ours = |algorithm| MemoryLimiter::new(generous(algorithm));
    match index {
        0 => visit.visit(filled(governor_ahash(), keys)),
        1 => visit.visit(filled(
            GovernorSipHash(RateLimiter::keyed(governor_quota())),
            keys,
        )),
        2 => visit.visit(filled(Full(ours(Algorithm::TokenBucket)), keys)),
        3 => visit.visit(filled(Full(ours(Algorithm::FixedWindow)), keys)),
        4 => visit.visit(filled(Full(ours(Algorithm::SlidingCounter)), keys)),
        5 => visit.visit(filled(Full(ours(Algorithm::LeakyBucket)), keys)),
        6 => visit.visit(filled(Full(ours(Algorithm::SlidingLog)), keys)),
        7 => visit.visit(filled(AllowedOnly(ours(Algorithm::TokenBucket)), keys)),
        8 => visit.visit(filled(AllowedOnly(ours(Algorithm::FixedWindow)), keys)),
        9 => visit.visit(filled(
            Full(
                MemoryLimiter::builder(generous(Algorithm::TokenBucket))
                    .clock(ManualClock::new(1_000_000))
                    .build(),
            ),
            keys,
        )),
        _ => panic!("no variant {index} (see `list`)"),
    }
}

/// `limiter` after one admitted request on every key.
pub(crate) fn filled<D: Decide>(mut limiter: D, keys: &[String]) -> D {
    for key in keys {
        assert!(limiter.decide(key), "every request admitted");
    }
    limiter
}

/// The peers bench's policy: a million per millisecond, every request admitted.
fn generous(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, Rate::new(1_000_000, Duration::from_millis(1))).unwrap()
}

fn governor_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap())
}

/// governor on limiter-memory's hasher and a quanta clock: the reference.
pub(crate) struct GovernorAHash(
    RateLimiter<String, DashMapStateStore<String, ahash::RandomState>, QuantaClock>,
);

pub(crate) fn governor_ahash() -> GovernorAHash {
    GovernorAHash(RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(),
        QuantaClock::default(),
        ahash::RandomState::new(),
    ))
}

impl Decide for GovernorAHash {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        black_box(self.0.check_key(key)).is_ok()
    }
}

/// governor's default keyed limiter (SipHash).
struct GovernorSipHash(RateLimiter<String, DefaultKeyedStateStore<String>, QuantaClock>);

impl Decide for GovernorSipHash {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        black_box(self.0.check_key(key)).is_ok()
    }
}

/// `try_acquire`: the full `Decision`.
struct Full(MemoryLimiter);

impl Decide for Full {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        black_box(self.0.try_acquire(key, 1).unwrap()).allowed
    }
}

/// `try_acquire_allowed`: the decision without its numbers.
struct AllowedOnly(MemoryLimiter);

impl Decide for AllowedOnly {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        black_box(self.0.try_acquire_allowed(key, 1).unwrap())
    }
}

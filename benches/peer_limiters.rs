//! The limiters of the `peers` bench outside criterion, for the two
//! harnesses that compare them more finely than a criterion run on a
//! shared machine can (`memory_instructions.rs`: instructions per decision
//! under callgrind; `peers_interleaved.rs`: time per decision, ours and
//! governor's in alternating blocks). Each is built as the `peers` bench
//! builds it: the same policy, the same governor quota, hasher and clock,
//! and it answers one request on one `String` key per call, its whole
//! answer (ours a `Result<Decision, _>`, governor's a `Result<(), _>`)
//! made where the caller could read it (`black_box(&answer)`: in memory,
//! once, every field written).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::QuantaClock;
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::{DashMapStateStore, DefaultKeyedStateStore, KeyedStateStore};
use governor::{Quota, RateLimiter};
use limiter_core::{Algorithm, ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

/// The harness's arguments (cargo's `--bench` left out), or `None` when
/// the first is `list`, after listing the variants.
pub(crate) fn args_unless_list() -> Option<Vec<String>> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("list") {
        for (index, name) in VARIANTS.iter().enumerate() {
            println!("{index}: {name}");
        }
        return None;
    }
    Some(args)
}

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
    "governor-gcra-state-information/ahash",
    "limiter-memory/token-bucket",
    "limiter-memory/fixed-window",
    "limiter-memory/sliding-counter",
    "limiter-memory/leaky-bucket",
    "limiter-memory/sliding-log",
    "limiter-memory-allowed-only/token-bucket",
    "limiter-memory-allowed-only/fixed-window",
    "limiter-memory-manual-clock/token-bucket",
    "limiter-memory-allowed-only/sliding-counter",
    "limiter-memory-allowed-only/leaky-bucket",
    "limiter-memory-allowed-only/sliding-log",
];

/// Builds limiter `index` of [`VARIANTS`], fills it with every key (each
/// admitted once, as in the `peers` bench) and hands it to `visit`.
pub(crate) fn visit<V: Visit>(index: usize, keys: &[String], visit: V) -> V::Output {
    let ours = limiter_memory;
    match index {
        0 => visit.visit(filled(governor_ahash(), keys)),
        1 => visit.visit(filled(governor_siphash(), keys)),
        2 => visit.visit(filled(governor_state_information(), keys)),
        3 => visit.visit(filled(Full(ours(Algorithm::TokenBucket)), keys)),
        4 => visit.visit(filled(Full(ours(Algorithm::FixedWindow)), keys)),
        5 => visit.visit(filled(Full(ours(Algorithm::SlidingCounter)), keys)),
        6 => visit.visit(filled(Full(ours(Algorithm::LeakyBucket)), keys)),
        7 => visit.visit(filled(Full(ours(Algorithm::SlidingLog)), keys)),
        8 => visit.visit(filled(AllowedOnly(ours(Algorithm::TokenBucket)), keys)),
        9 => visit.visit(filled(AllowedOnly(ours(Algorithm::FixedWindow)), keys)),
        10 => visit.visit(filled(
            Full(
                MemoryLimiter::builder(generous(Algorithm::TokenBucket))
                    .eviction_delay(Duration::from_secs(3600))
                    .clock(ManualClock::new(1_000_000))
                    .build(),
            ),
            keys,
        )),
        11 => visit.visit(filled(AllowedOnly(ours(Algorithm::SlidingCounter)), keys)),
        12 => visit.visit(filled(AllowedOnly(ours(Algorithm::LeakyBucket)), keys)),
        13 => visit.visit(filled(AllowedOnly(ours(Algorithm::SlidingLog)), keys)),
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

/// limiter-memory under [`generous`] for `algorithm`, holding every key
/// for the whole bench as governor does (which never evicts): keys are
/// evicted an hour after their reset, not a second, so filling a million
/// keys (seconds, on a slow machine) drops none of them. Only new keys
/// look at the eviction schedule: a held key's decision is the default's.
pub(crate) fn limiter_memory(algorithm: Algorithm) -> MemoryLimiter {
    MemoryLimiter::builder(generous(algorithm))
        .eviction_delay(Duration::from_secs(3600))
        .build()
}

/// A policy that admits every request of the benches (the allowed path):
/// a million per millisecond, so a sliding log holds only the last
/// millisecond's admissions (at most a thousand ticks, on one hot key).
pub(crate) fn generous(algorithm: Algorithm) -> Policy {
    Policy::new(algorithm, Rate::new(1_000_000, Duration::from_millis(1))).unwrap()
}

/// The quota every governor limiter runs under: a billion per second, so
/// every request is admitted, as under [`generous`].
fn governor_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap())
}

/// governor's keyed limiter on the map limiter-memory uses: a DashMap of
/// `String` keys hashed by aHash (a `RandomState` keyed at random per
/// process, as limiter-memory's), on governor's quanta clock (one TSC read
/// scaled to ns, as limiter-memory's `AnchoredClock`: one TSC read scaled
/// to µs). The equal-terms reference.
pub(crate) type GovernorAHash =
    RateLimiter<String, DashMapStateStore<String, ahash::RandomState>, QuantaClock>;

pub(crate) fn governor_ahash() -> GovernorAHash {
    RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(),
        QuantaClock::default(),
        ahash::RandomState::new(),
    )
}

/// Either plain governor (aHash or SipHash): admitted or not.
impl<S: KeyedStateStore<String>> Decide for RateLimiter<String, S, QuantaClock> {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        let answer = self.check_key(key);
        black_box(&answer);
        answer.is_ok()
    }
}

/// The reference with governor's `StateInformationMiddleware`, answering
/// the remaining burst capacity too: how a governor user gets the numbers
/// a `RateLimit` header needs (tower_governor's headers do this), as
/// `try_acquire` answers them.
pub(crate) type GovernorStateInformation = RateLimiter<
    String,
    DashMapStateStore<String, ahash::RandomState>,
    QuantaClock,
    StateInformationMiddleware,
>;

pub(crate) fn governor_state_information() -> GovernorStateInformation {
    governor_ahash().with_middleware()
}

impl Decide for GovernorStateInformation {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        let answer = self
            .check_key(key)
            .map(|snapshot| snapshot.remaining_burst_capacity());
        black_box(&answer);
        answer.is_ok()
    }
}

/// governor's default keyed limiter (`RateLimiter::keyed`): the same
/// DashMap and quanta clock, hashed by std's SipHash. Shown beside the
/// equal-terms rows, labelled: limiter-memory does not use SipHash.
pub(crate) type GovernorSipHash = RateLimiter<String, DefaultKeyedStateStore<String>, QuantaClock>;

pub(crate) fn governor_siphash() -> GovernorSipHash {
    RateLimiter::keyed(governor_quota())
}

/// `try_acquire`: the full `Decision`, read where it was answered, as a
/// caller reads its fields (moving it out of the `Result` that
/// `black_box` pinned in memory would copy it, a cost of this harness).
struct Full(MemoryLimiter);

impl Decide for Full {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        let answer = self.0.try_acquire(key.as_bytes(), 1);
        black_box(&answer);
        answer.as_ref().is_ok_and(|decision| decision.allowed)
    }
}

/// `try_acquire_allowed`: the decision without its numbers.
struct AllowedOnly(MemoryLimiter);

impl Decide for AllowedOnly {
    #[inline]
    fn decide(&mut self, key: &String) -> bool {
        let answer = self.0.try_acquire_allowed(key.as_bytes(), 1);
        black_box(&answer);
        answer.unwrap()
    }
}

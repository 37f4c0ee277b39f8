//! Memory per key of limiter-memory and of governor's keyed limiter, by
//! the same method (docs/benchmarks.md, "Memory per key").
//!
//! ```sh
//! cargo bench -p limiter-benches --bench bytes_per_key -- [KEYS]
//! ```
//!
//! As limiter-memory's `bytes_per_key` example, whose resident-set reading
//! it shares: each variant runs in a fresh child process (this binary),
//! which reads its resident set size (`VmRSS`, Linux) before and after one
//! admitted request on each of `KEYS` distinct 12-byte `String` keys
//! (default 1,000,000), under glibc's `MALLOC_MMAP_THRESHOLD_=65536` and
//! `MALLOC_ARENA_MAX=1`, and prints the difference divided by `KEYS`.
//! governor is keyed by `String` on a DashMap (aHash, as limiter-memory's
//! map, and its default SipHash), as the `peers` benches build it.
#![allow(missing_docs)]

#[path = "../crates/limiter-memory/examples/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::QuantaClock;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use limiter_core::{Algorithm, ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;
use support::{resident_bytes, run_child};

/// The variants, by index: governor's two maps, then limiter-memory's
/// algorithms (a sliding log with one entry per key).
const VARIANTS: [&str; 7] = [
    "governor-gcra/ahash",
    "governor-gcra/siphash-default",
    "limiter-memory/fixed-window",
    "limiter-memory/sliding-counter",
    "limiter-memory/token-bucket",
    "limiter-memory/leaky-bucket",
    "limiter-memory/sliding-log",
];

fn main() {
    let mut args = std::env::args().skip(1).filter(|arg| arg != "--bench");
    match args.next().as_deref() {
        Some("--child") => {
            let variant: usize = args.next().and_then(|v| v.parse().ok()).expect("variant");
            let keys: u64 = args.next().and_then(|v| v.parse().ok()).expect("keys");
            println!("{}", held_by(variant, keys));
        }
        keys => parent(keys.map_or(1_000_000, |k| k.parse().expect("KEYS is a number"))),
    }
}

fn parent(keys: u64) {
    assert!(
        resident_bytes().is_some(),
        "bytes_per_key reads /proc/self/status: Linux only"
    );
    println!("{keys} String keys of 12 bytes, one admitted request each:");
    println!("{:<32} {:>13} {:>10}", "variant", "bytes held", "per key");
    for (index, name) in VARIANTS.iter().enumerate() {
        let output = run_child(&["--child", &index.to_string(), &keys.to_string()], name);
        let held: u64 = output.trim().parse().expect("the child prints a number");
        println!("{name:<32} {held:>13} {:>10.1}", held as f64 / keys as f64);
    }
}

/// The resident bytes variant `variant` holds after one admitted request
/// on each of `keys` keys.
fn held_by(variant: usize, keys: u64) -> u64 {
    let key = |i: u64| {
        let mut key = String::with_capacity(12);
        write!(key, "user:{i:07}").unwrap();
        key
    };
    let quota = Quota::per_hour(NonZeroU32::new(100).unwrap());
    let before = resident_bytes().unwrap();
    let after = match variant {
        0 => {
            let governor: RateLimiter<String, DashMapStateStore<String, ahash::RandomState>, _> =
                RateLimiter::dashmap_with_clock_and_hasher(
                    quota,
                    QuantaClock::default(),
                    ahash::RandomState::new(),
                );
            (0..keys).for_each(|i| governor.check_key(&key(i)).unwrap());
            assert_eq!(governor.len() as u64, keys);
            resident_bytes().unwrap()
        }
        1 => {
            let governor = RateLimiter::<String, _, QuantaClock>::keyed(quota);
            (0..keys).for_each(|i| governor.check_key(&key(i)).unwrap());
            assert_eq!(governor.len() as u64, keys);
            resident_bytes().unwrap()
        }
        _ => {
            let algorithm = [
                Algorithm::FixedWindow,
                Algorithm::SlidingCounter,
                Algorithm::TokenBucket,
                Algorithm::LeakyBucket,
                Algorithm::SlidingLog,
            ][variant - 2];
            let policy = Policy::new(algorithm, Rate::new(100, Duration::from_secs(3600))).unwrap();
            let limiter = MemoryLimiter::builder(policy)
                .clock(ManualClock::new(1_700_000_000_000_000))
                .build();
            (0..keys)
                .for_each(|i| assert!(limiter.try_acquire(key(i).as_bytes(), 1).unwrap().allowed));
            assert_eq!(limiter.len() as u64, keys);
            resident_bytes().unwrap()
        }
    };
    after.saturating_sub(before)
}

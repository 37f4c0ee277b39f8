//! Measures the memory a `MemoryLimiter` holds per key, for each algorithm.
//!
//! ```sh
//! cargo run --release -p limiter-memory --example bytes_per_key [KEYS]
//! ```
//!
//! Each measurement runs in a fresh child process (this same binary), which
//! reads its resident set size (`VmRSS`, Linux) before and after admitting
//! one request on each of `KEYS` distinct 12-byte keys (default 1,000,000),
//! and prints the difference divided by `KEYS`. The child runs with glibc's
//! `MALLOC_MMAP_THRESHOLD_=65536`, so the hash tables outgrown on the way
//! are handed back to the system instead of lingering in the heap: what is
//! left is what the limiter holds, allocator overhead included.
//!
//! The figures depend on how full the hash tables are (hashbrown grows by
//! doubling, so between 7/16 and 7/8 of its buckets are used): try several
//! key counts to see the range.

use std::fmt::Write as _;
use std::time::Duration;

use limiter_core::{Algorithm, ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

mod support;
use support::{resident_bytes, run_child};

/// The variants measured: an algorithm, and how many distinct ticks each
/// key admits at (only a sliding log stores one entry per tick).
const VARIANTS: [(&str, Algorithm, u64); 7] = [
    ("fixed-window", Algorithm::FixedWindow, 1),
    ("sliding-counter", Algorithm::SlidingCounter, 1),
    ("token-bucket", Algorithm::TokenBucket, 1),
    ("leaky-bucket", Algorithm::LeakyBucket, 1),
    ("sliding-log", Algorithm::SlidingLog, 1),
    ("sliding-log-4", Algorithm::SlidingLog, 4),
    ("sliding-log-16", Algorithm::SlidingLog, 16),
];

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("--child") => {
            let variant: usize = args.next().and_then(|v| v.parse().ok()).expect("variant");
            let keys: u64 = args.next().and_then(|v| v.parse().ok()).expect("keys");
            child(variant, keys);
        }
        keys => parent(keys.map_or(1_000_000, |k| k.parse().expect("KEYS is a number"))),
    }
}

fn parent(keys: u64) {
    if resident_bytes().is_none() {
        println!("bytes_per_key reads /proc/self/status (Linux only); nothing measured here");
        return;
    }
    println!("{keys} keys of 12 bytes, one admission per distinct tick:");
    println!("{:<16} {:>13} {:>10}", "variant", "bytes held", "per key");
    for (index, (name, _, _)) in VARIANTS.iter().enumerate() {
        let output = run_child(&["--child", &index.to_string(), &keys.to_string()], name);
        let held: u64 = output.trim().parse().expect("the child prints a number");
        println!("{name:<16} {held:>13} {:>10.1}", held as f64 / keys as f64);
    }
}

fn child(variant: usize, keys: u64) {
    let (_, algorithm, ticks) = VARIANTS[variant];
    let policy = Policy::new(algorithm, Rate::new(100, Duration::from_secs(3600))).unwrap();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let before = resident_bytes().unwrap();
    let limiter = MemoryLimiter::builder(policy).clock(clock.clone()).build();
    let mut key = String::with_capacity(32);
    for tick in 0..ticks {
        clock.advance(Duration::from_micros(1));
        for i in 0..keys {
            key.clear();
            write!(key, "user:{i:07}").unwrap();
            assert!(
                limiter.try_acquire(key.as_bytes(), 1).unwrap().allowed,
                "{tick} {key}"
            );
        }
    }
    let after = resident_bytes().unwrap();
    assert_eq!(limiter.len() as u64, keys);
    println!("{}", after.saturating_sub(before));
}

//! A warm lease's decision in instructions beside the memory backend's
//! (docs/benchmarks.md, the leased section): the limiters of the `lease`
//! bench (`lease/warm/10000-keys`) at their defaults, one decision per
//! call, round-robin over 10,000 keys whose leases are warm, on one
//! thread. An awaited decision is one poll of `Limiter::acquire`'s future
//! on a no-op waker, as a caller's `.await` of a ready future is, without
//! a runtime's own work. `scripts/instructions lease` runs it under
//! callgrind, counting only the measured loop (not the warm-up, nor the
//! clock's calibration), for N and 2N decisions, and prints the
//! difference per decision: a figure the machine's load does not move.
//!
//! Callgrind runs the code some fifty times slower, so a key's turn comes
//! about every 0.2 s instead of every few ms: at the default lifetime its
//! leases would lapse between turns, and most decisions would fetch one.
//! The leased limiter here leases for a minute instead, so that, as in a
//! native run, about one decision in a lease's size fetches the next
//! (the lease requests are printed on stderr); the warm path's code is
//! the same at any lifetime.
//!
//! `cargo bench -p limiter-benches --bench lease_instructions -- VARIANT DECISIONS`
//! (`VARIANT` is an index, `list` lists them).
#![allow(missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use limiter_core::{Limiter, Policy, Rate};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;

/// The variants, by index: how a decision is asked of which limiter.
const VARIANTS: &[&str] = &[
    "memory/try_acquire",
    "memory/acquire_now",
    "memory/acquire-await",
    "leased/acquire_now",
    "leased/acquire-await",
];

/// Keys decided round-robin, as `lease/warm/10000-keys`.
const KEYS: usize = 10_000;

/// Passes over the keys before the measured loop: enough for every key's
/// lease to grow to its steady size.
const WARM_UP_PASSES: usize = 20;

/// Never denies at bench speed: every decision is an admission.
fn generous() -> Policy {
    Policy::token_bucket(Rate::per_second(1_000_000_000)).unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("list") {
        for (index, name) in VARIANTS.iter().enumerate() {
            println!("{index}: {name}");
        }
        return;
    }
    let usage = "usage: lease_instructions VARIANT DECISIONS";
    let index: usize = args.first().expect(usage).parse().expect(usage);
    let decisions: u64 = args.get(1).expect(usage).parse().expect(usage);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("tenant:{i}")).collect();
    let memory = MemoryLimiter::new(generous());
    // The defaults, but for room for every key and the lifetime.
    let leased = Leased::builder(MemoryLimiter::new(generous()))
        .max_keys(2 * KEYS)
        .lifetime(Duration::from_secs(60))
        .build();
    let admitted = match VARIANTS[index] {
        "memory/try_acquire" => run(&keys, decisions, |key| {
            memory.try_acquire(key, 1).unwrap().allowed
        }),
        "memory/acquire_now" => run(&keys, decisions, |key| now(&memory, key)),
        "memory/acquire-await" => run(&keys, decisions, |key| awaited(&memory, key)),
        "leased/acquire_now" => run(&keys, decisions, |key| now(&leased, key)),
        "leased/acquire-await" => run(&keys, decisions, |key| awaited(&leased, key)),
        _ => unreachable!("a variant of the list"),
    };
    assert_eq!(admitted, decisions, "every request admitted");
    eprintln!("leased: {:?}", leased.stats());
    println!("{}: {decisions} decisions", VARIANTS[index]);
}

/// Warms every key up, then `n` decisions, measured.
fn run(keys: &[String], n: u64, mut decide: impl FnMut(&[u8]) -> bool) -> u64 {
    for _ in 0..WARM_UP_PASSES {
        for key in keys {
            assert!(decide(key.as_bytes()), "every request admitted");
        }
    }
    measured(keys, n, &mut decide)
}

/// `n` decisions round-robin over `keys`: the only part callgrind counts
/// (`--toggle-collect`).
#[inline(never)]
fn measured(keys: &[String], n: u64, decide: &mut impl FnMut(&[u8]) -> bool) -> u64 {
    let mut admitted = 0;
    let mut i = 0;
    for _ in 0..n {
        i += 1;
        if i == keys.len() {
            i = 0;
        }
        admitted += u64::from(decide(black_box(keys[i].as_bytes())));
    }
    admitted
}

/// `acquire_now` through the trait object, or the awaited `acquire` when
/// it answers `None` (a lease to fetch), as the `lease` bench's
/// `acquire_now` rows decide.
fn now(limiter: &dyn Limiter, key: &[u8]) -> bool {
    match limiter.acquire_now(key, 1) {
        Some(decided) => decided.unwrap().allowed,
        None => awaited(limiter, key),
    }
}

/// `acquire(key, 1).await` through the trait object: its future polled
/// on a no-op waker until ready (a warm decision is ready at once; a
/// global `MemoryLimiter` never leaves it pending).
fn awaited(limiter: &dyn Limiter, key: &[u8]) -> bool {
    let mut future = pin!(limiter.acquire(key, 1));
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(decided) = future.as_mut().poll(&mut cx) {
            return black_box(decided).unwrap().allowed;
        }
    }
}

//! A warm lease beside the memory backend, per decision, single thread
//! (docs/lease.md): `lease/warm/{1,1000,10000}-keys`.
//!
//! The leased limiter wraps a `MemoryLimiter` as its global limiter, so a
//! lease costs no round trip here: what is measured is the decision taken
//! from the units in hand (the refill, one in many, included), beside the
//! memory backend deciding the same policy itself. Both through the
//! synchronous fast path and through `acquire().await`, each with its
//! defaults (both read the `AnchoredClock`); `leased-tuned` is the leased
//! limiter with a larger `max_lease`, named as such.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use limiter_core::{Limiter, Policy, Rate};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;

/// Never denies at bench speed: every decision is an admission.
fn generous() -> Policy {
    Policy::token_bucket(Rate::per_second(1_000_000_000)).unwrap()
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tenant:{i}")).collect()
}

/// `acquire_now`, or `acquire().await` on the runtime when it answers
/// `None` (a lease to fetch): the hot path of a caller holding a limiter.
fn decide(limiter: &dyn Limiter, runtime: &tokio::runtime::Runtime, key: &str) -> bool {
    let decided = match limiter.acquire_now(key.as_bytes(), 1) {
        Some(decided) => decided,
        None => runtime.block_on(limiter.acquire(key.as_bytes(), 1)),
    };
    decided.unwrap().allowed
}

fn warm(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for key_count in [1, 1_000, 10_000] {
        let keys = keys(key_count);
        let memory = MemoryLimiter::new(generous());
        // The defaults, but for room for every key.
        let leased = Leased::builder(MemoryLimiter::new(generous()))
            .max_keys(2 * key_count)
            .build();
        let tuned = Leased::builder(MemoryLimiter::new(generous()))
            .max_lease(1_000)
            .max_keys(2 * key_count)
            .build();
        let mut group = c.benchmark_group(format!("lease/warm/{key_count}-keys"));
        group.throughput(Throughput::Elements(1));
        for (name, limiter) in [
            ("memory", &memory as &dyn Limiter),
            ("leased", &leased as &dyn Limiter),
            ("leased-tuned", &tuned as &dyn Limiter),
        ] {
            let mut i = 0;
            group.bench_function(format!("{name}-acquire_now"), |b| {
                b.iter(|| {
                    i = (i + 1) % keys.len();
                    black_box(decide(limiter, &runtime, &keys[i]))
                })
            });
            let mut i = 0;
            group.bench_function(format!("{name}-acquire-await"), |b| {
                b.to_async(&runtime).iter(|| {
                    i = (i + 1) % keys.len();
                    let key = &keys[i];
                    async move { black_box(limiter.acquire(key.as_bytes(), 1).await.unwrap().allowed) }
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, warm);
criterion_main!(benches);

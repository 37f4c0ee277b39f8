//! Sprays a million distinct keys, lets them go idle, sprays a million more:
//! the limiter's memory stays bounded by the keys live at once.
//!
//! ```sh
//! MALLOC_MMAP_THRESHOLD_=65536 cargo run --release -p limiter-memory --example key_spray
//! ```
//!
//! Time is a manual clock, so the run takes seconds while the trace spans
//! minutes. Each wave admits one request on each of 1,000,000 new keys
//! within one second (policy: 10 per second, token bucket); between waves
//! the clock moves on by a minute, past every key's reset time. Printed
//! after each step: keys held and the process's resident memory (Linux).
//! `MALLOC_MMAP_THRESHOLD_` lets glibc hand freed tables back to the system.

use std::fmt::Write as _;
use std::time::Duration;

use limiter_core::{ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

mod support;
use support::resident_bytes;

const WAVE: u64 = 1_000_000;

fn main() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let policy = Policy::token_bucket(Rate::per_second(10)).unwrap();
    let limiter = MemoryLimiter::builder(policy).clock(clock.clone()).build();
    report("start", &limiter);
    let mut key = String::with_capacity(32);
    for wave in 0..3u64 {
        for i in 0..WAVE {
            clock.advance(Duration::from_micros(1));
            key.clear();
            write!(key, "ip:{wave}:{i:07}").unwrap();
            assert!(limiter.try_acquire(key.as_bytes(), 1).unwrap().allowed);
        }
        report(
            &format!("after wave {} of {WAVE} new keys", wave + 1),
            &limiter,
        );
        clock.advance(Duration::from_secs(60));
    }
    let dropped = limiter.sweep_expired();
    report(
        &format!("idle a minute, sweep_expired() dropped {dropped}"),
        &limiter,
    );
    assert!(limiter.is_empty());
}

fn report(step: &str, limiter: &MemoryLimiter) {
    let rss = resident_bytes().map_or("?".into(), |b| format!("{} MiB", b >> 20));
    println!(
        "{step:<52} keys held {:>9}   resident {rss:>8}",
        limiter.len()
    );
}

//! `max_bytes`: the resident memory a capped limiter takes, however long
//! the keys and however full their states, stays within `max_keys ×
//! max_bytes_per_key`.
//!
//! Each case runs in a child process (this same binary with `--child`),
//! which reads its resident set size (`VmRSS`) before building a limiter
//! and after filling it, as `bytes_per_key` does: glibc's
//! `MALLOC_MMAP_THRESHOLD_=65536` hands the tables outgrown on the way
//! back to the system, so what is left is what the limiter holds.

use std::time::Duration;

use limiter_core::{ManualClock, Policies, Policy, Rate};
use limiter_memory::MemoryLimiter;

#[path = "../examples/support/mod.rs"]
mod support;
use support::{resident_bytes, run_child};

/// Keys at the cap.
const MAX_KEYS: usize = 10_000;

/// A case: its name, its policies, the length of its keys, and how many
/// admissions (at distinct ticks) each key gets.
struct Case {
    name: &'static str,
    policies: fn() -> Policies,
    key_len: usize,
    admissions: u64,
}

const CASES: [Case; 5] = [
    Case {
        name: "fixed-window, keys at the 256-byte bound",
        policies: || Policy::fixed_window(Rate::per_hour(100)).unwrap().into(),
        key_len: 256,
        admissions: 1,
    },
    Case {
        name: "token-bucket, 4 KB keys (held as digests)",
        policies: || Policy::token_bucket(Rate::per_hour(100)).unwrap().into(),
        key_len: 4_096,
        admissions: 1,
    },
    Case {
        name: "sliding-log:32/1h, keys at the bound, every log full",
        policies: || Policy::sliding_log(Rate::per_hour(32)).unwrap().into(),
        key_len: 256,
        admissions: 32,
    },
    Case {
        name: "sliding-log:32/1h, 1 KB keys (held as digests), every log full",
        policies: || Policy::sliding_log(Rate::per_hour(32)).unwrap().into(),
        key_len: 1_024,
        admissions: 32,
    },
    Case {
        name: "tiered sliding-counter and sliding-log, keys at the bound, logs full",
        policies: || {
            Policies::new([
                Policy::sliding_counter(Rate::per_second(200)).unwrap(),
                Policy::sliding_log(Rate::per_hour(32)).unwrap(),
            ])
            .unwrap()
        },
        key_len: 256,
        admissions: 32,
    },
];

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--child") {
        let case: usize = args.next().and_then(|c| c.parse().ok()).expect("a case");
        child(&CASES[case]);
        return;
    }
    if resident_bytes().is_none() {
        panic!("memory_bound reads /proc/self/status: Linux only");
    }
    for (index, case) in CASES.iter().enumerate() {
        let stdout = run_child(&["--child", &index.to_string()], case.name);
        let numbers: Vec<u64> = stdout
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        let [held, bound] = numbers[..] else {
            panic!("{}: {stdout:?}", case.name)
        };
        println!(
            "{}: {held} bytes resident for {MAX_KEYS} keys, bound {bound}",
            case.name
        );
        assert!(held <= bound, "{}: {held} > {bound}", case.name);
    }
    println!("memory_bound: {} passed, 0 failed", CASES.len());
}

/// Fills a limiter of `case` to its cap (and one key past it, refused);
/// prints the resident bytes it took and its bound.
fn child(case: &Case) {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let mut key = String::with_capacity(case.key_len);
    let before = resident_bytes().unwrap();
    let limiter = MemoryLimiter::builder((case.policies)())
        .clock(clock.clone())
        .max_keys(MAX_KEYS)
        .build();
    for k in 0..=MAX_KEYS {
        key.clear();
        key.push_str(&format!("{k}:"));
        key.extend(std::iter::repeat_n('k', case.key_len - key.len()));
        for _ in 0..case.admissions {
            clock.advance(Duration::from_micros(1));
            match limiter.try_acquire(key.as_bytes(), 1) {
                Ok(decision) => assert!(decision.allowed, "{k}"),
                Err(error) => assert!(k == MAX_KEYS && error.is_key_limit(), "{error}"),
            }
        }
    }
    assert_eq!(limiter.len(), MAX_KEYS);
    let after = resident_bytes().unwrap();
    println!(
        "{} {}",
        after.saturating_sub(before),
        limiter.max_bytes().unwrap()
    );
}

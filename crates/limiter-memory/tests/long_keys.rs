//! Keys longer than `max_key_bytes` are stored as their digest: decided
//! exactly as the keys themselves, never sharing a state with another key.

use std::time::Duration;

use limiter_core::{Algorithm, ManualClock, Policies, Policy, Rate};
use limiter_memory::{MemoryLimiter, MemoryLimiterBuilder};

const DEFAULT_MAX_KEY_BYTES: usize = MemoryLimiterBuilder::DEFAULT_MAX_KEY_BYTES;

const T0: u64 = 1_700_000_000_000_000;

/// Every algorithm at 2 an hour, and a tiered set.
fn policy_sets() -> Vec<Policies> {
    let mut sets: Vec<Policies> = Algorithm::ALL
        .into_iter()
        .map(|algorithm| Policy::new(algorithm, Rate::per_hour(2)).unwrap().into())
        .collect();
    sets.push(
        Policies::new([
            Policy::token_bucket(Rate::per_hour(2)).unwrap(),
            Policy::sliding_log(Rate::per_day(5)).unwrap(),
        ])
        .unwrap(),
    );
    sets
}

fn limiter(policies: &Policies, max_key_bytes: usize) -> MemoryLimiter {
    MemoryLimiter::builder(policies.clone())
        .clock(ManualClock::new(T0))
        .max_key_bytes(max_key_bytes)
        .build()
}

/// Spends `key`'s quota of 2: both admitted, the third denied.
fn drain(limiter: &MemoryLimiter, key: &str) {
    for n in 0..2 {
        assert!(
            limiter.try_acquire(key.as_bytes(), 1).unwrap().allowed,
            "request {n}"
        );
    }
    assert!(!limiter.try_acquire(key.as_bytes(), 1).unwrap().allowed);
}

#[test]
fn the_default_bound_is_256_bytes() {
    assert_eq!(DEFAULT_MAX_KEY_BYTES, 256);
    let policy = Policy::fixed_window(Rate::per_hour(2)).unwrap();
    assert_eq!(MemoryLimiter::new(policy).max_key_bytes(), 256);
}

#[test]
fn two_different_long_keys_never_share_a_state() {
    for policies in policy_sets() {
        let limiter = limiter(&policies, 64);
        // Long keys alike but for their last byte, their first, or their length.
        let base = "k".repeat(1_000);
        let last = format!("{}x", &base[1..]);
        let first = format!("x{}", &base[1..]);
        let longer = format!("{base}k");
        drain(&limiter, &base);
        for other in [&last, &first, &longer] {
            let decision = limiter.try_acquire(other.as_bytes(), 1).unwrap();
            assert!(decision.allowed, "{policies}");
            assert_eq!(decision.remaining, 1, "{policies}: a fresh key");
        }
        assert!(!limiter.try_acquire(base.as_bytes(), 1).unwrap().allowed);
        assert_eq!(limiter.len(), 4);
    }
}

#[test]
fn the_boundary_at_exactly_the_bound_decides_as_every_other_key() {
    for policies in policy_sets() {
        for max in [0, 1, 22, 23, 33, 64, DEFAULT_MAX_KEY_BYTES] {
            let limiter = limiter(&policies, max);
            // At the bound (stored whole), one past it and two past it (as
            // digests): three keys, each its own quota.
            let keys: Vec<String> = (max..max + 3)
                .map(|len| "é".repeat(len / 2) + &"a".repeat(len % 2))
                .collect();
            for key in &keys {
                drain(&limiter, key);
            }
            assert_eq!(limiter.len(), 3, "{policies} max {max}");
            // Each is the same key again: denied, read and removed as one.
            for key in &keys {
                assert!(!limiter.try_peek(key.as_bytes(), 1).unwrap().allowed);
                assert!(limiter.remove(key.as_bytes()), "{policies} max {max}");
                assert!(limiter.try_acquire(key.as_bytes(), 1).unwrap().allowed);
            }
        }
    }
}

/// A limiter that hashes long keys decides every request as one that keeps
/// them whole: the same decisions, request by request.
#[test]
fn long_keys_decide_as_keys_kept_whole() {
    for policies in policy_sets() {
        let clock = ManualClock::new(T0);
        let build = |max| {
            MemoryLimiter::builder(policies.clone())
                .clock(clock.clone())
                .max_key_bytes(max)
                .build()
        };
        let (hashing, whole) = (build(8), build(usize::MAX));
        let keys: Vec<String> = (0..6).map(|k| format!("{k}").repeat(4 + k * 3)).collect();
        for step in 0..200usize {
            let key = &keys[(step * 7 + step / 5) % keys.len()];
            assert_eq!(
                hashing.try_acquire(key.as_bytes(), 1).unwrap(),
                whole.try_acquire(key.as_bytes(), 1).unwrap(),
                "{policies} step {step}"
            );
            clock.advance(Duration::from_secs(60 * (step as u64 % 7)));
        }
    }
}

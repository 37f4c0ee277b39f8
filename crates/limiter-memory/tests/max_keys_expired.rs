//! At the `max_keys` cap, keys that have expired make room before a new key
//! is refused.

use std::time::Duration;

use limiter_core::{ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

const T0: u64 = 1_700_000_000_000_000;

/// A limiter of `policy` holding at most `max_keys`, on a clock at `T0`,
/// keys dropped as soon as they expire.
fn capped(policy: Policy, max_keys: usize) -> (MemoryLimiter, ManualClock) {
    let clock = ManualClock::new(T0);
    let limiter = MemoryLimiter::builder(policy)
        .clock(clock.clone())
        .eviction_delay(Duration::ZERO)
        .max_keys(max_keys)
        .build();
    (limiter, clock)
}

/// 20,000 keys fill the cap; once all have expired, each of 20,000 new keys
/// is admitted: none is refused while expired keys wait for a sweep.
#[test]
fn max_keys_full_of_expired_keys_admits_every_new_key() {
    let max_keys = 20_000;
    let (limiter, clock) = capped(
        Policy::fixed_window(Rate::new(3, Duration::from_secs(1))).unwrap(),
        max_keys,
    );
    for k in 0..max_keys {
        let decision = limiter
            .try_acquire(format!("old:{k}").as_bytes(), 1)
            .unwrap();
        assert!(decision.allowed, "old key {k}");
    }
    assert_eq!(limiter.len(), max_keys);
    // Still live: a new key is refused.
    assert!(refused_at_the_cap(limiter.try_acquire(b"early", 1)));

    // Every old key's window has passed: all of them may go.
    clock.set(T0 + 1_000_000);
    let mut refused = 0;
    for k in 0..max_keys {
        match limiter.try_acquire(format!("new:{k}").as_bytes(), 1) {
            Ok(decision) => assert!(decision.allowed, "new key {k}"),
            Err(e) => {
                assert!(e.is_key_limit(), "{e:?}");
                refused += 1;
            }
        }
    }
    assert_eq!(
        refused, 0,
        "new keys refused while expired keys held the cap"
    );
    assert_eq!(limiter.len(), max_keys);
    // Now every held key is live again: the cap refuses once more.
    assert!(refused_at_the_cap(limiter.try_acquire(b"late", 1)));
}

/// A sweep waits for a batch of expired keys (a 64th of them), measured
/// from the keys it knew of: keys inserted after it that expire sooner do
/// not make it due. Refusals do: after a batch of new keys refused, the
/// next one sweeps, however late the bound.
#[test]
fn a_batch_of_refused_new_keys_makes_a_sweep_due() {
    let max_keys = 1_000;
    let (limiter, clock) = capped(
        Policy::token_bucket(Rate::new(100, Duration::from_secs(1))).unwrap(),
        max_keys,
    );
    // One key back to full in 1 s, then 999 back to full in 10 ms.
    assert!(limiter.try_acquire(b"slow", 100).unwrap().allowed);
    for k in 1..max_keys {
        assert!(
            limiter
                .try_acquire(format!("fast:{k}").as_bytes(), 1)
                .unwrap()
                .allowed
        );
    }
    clock.set(T0 + 20_000);
    let batch = max_keys / 64;
    let refused = (0..=batch)
        .take_while(|k| refused_at_the_cap(limiter.try_acquire(format!("new:{k}").as_bytes(), 1)))
        .count();
    assert_eq!(refused, batch, "a batch refused, then a sweep makes room");
    assert_eq!(limiter.len(), 2, "the slow key and the one just admitted");
}

/// Whether `result` is the refusal of a new key at the cap, and no other
/// error.
fn refused_at_the_cap(result: Result<limiter_core::Decision, limiter_core::Error>) -> bool {
    match result {
        Ok(_) => false,
        Err(e) => {
            assert!(e.is_key_limit(), "another error than the cap's: {e:?}");
            true
        }
    }
}

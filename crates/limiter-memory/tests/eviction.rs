//! Memory-specific behaviour: eviction is invisible, `max_keys` refuses
//! rather than evicts, and spraying keys keeps the map bounded.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use limiter_core::backend::KeyState;
use limiter_core::{Algorithm, Error, ManualClock, Policy, Rate};
use limiter_memory::{KeyLimitReached, MemoryLimiter};
use limiter_test::Rng;

const T0: u64 = 1_700_000_000_000_000;

fn policies() -> Vec<Policy> {
    vec![
        Policy::fixed_window(Rate::new(5, Duration::from_secs(1))).unwrap(),
        Policy::sliding_log(Rate::new(4, Duration::from_millis(500))).unwrap(),
        Policy::sliding_counter(Rate::new(6, Duration::from_secs(1))).unwrap(),
        Policy::token_bucket(Rate::new(3, Duration::from_secs(1)))
            .unwrap()
            .with_capacity(8)
            .unwrap(),
        Policy::leaky_bucket(Rate::new(4, Duration::from_secs(1)))
            .unwrap()
            .with_queue(6)
            .unwrap(),
        // A tick of 100 µs (docs/spec.md section 5).
        Policy::sliding_counter(Rate::per_day(1_000_000)).unwrap(),
    ]
}

fn limiter(policy: &Policy, clock: &ManualClock, delay: Duration) -> MemoryLimiter {
    MemoryLimiter::builder(policy.clone())
        .clock(clock.clone())
        .eviction_delay(delay)
        .build()
}

fn is_key_limit(result: &Result<limiter_core::Decision, Error>) -> bool {
    matches!(result, Err(Error::Backend(e)) if e.is::<KeyLimitReached>())
}

#[test]
fn evicted_keys_decide_exactly_as_kept_ones() {
    for policy in policies() {
        let clock = ManualClock::new(T0);
        let evicting = limiter(&policy, &clock, Duration::ZERO);
        let mut kept: HashMap<String, KeyState> = HashMap::new();
        let mut rng = Rng::new(policy.window_us() ^ policy.limit());
        let mut now = T0;
        let (mut evictions, mut requests) = (0, 0);
        for _ in 0..3_000 {
            // Forward time only: quiet spells longer than a window let keys expire.
            now += match rng.below(10) {
                0..=5 => rng.below(policy.window_us() / 20 + 1),
                6..=8 => rng.below(policy.window_us() / 2 + 1),
                _ => policy.window_us() * (1 + rng.below(3)),
            };
            clock.set(now);
            let key = format!("k{}", rng.below(12));
            let cost = 1 + rng.below(policy.max_cost().min(4));
            let expected = kept
                .entry(key.clone())
                .or_insert_with(|| KeyState::fresh(&policy))
                .acquire(&policy, now, cost)
                .unwrap();
            assert_eq!(
                evicting.try_acquire(key.as_bytes(), cost).unwrap(),
                expected,
                "{policy} at {now} on {key}"
            );
            assert_eq!(
                evicting.try_peek(key.as_bytes(), 1).unwrap(),
                kept[&key].peek(&policy, now, 1).unwrap()
            );
            evictions += evicting.sweep_expired();
            requests += 1;
        }
        assert!(evictions > 0, "{policy}: the trace never let a key expire");
        assert_eq!(requests, 3_000);
        // Long after every reset, nothing is held.
        clock.set(now + policy.window_us() * 3);
        evicting.sweep_expired();
        assert!(
            evicting.is_empty(),
            "{policy}: {} keys left",
            evicting.len()
        );
    }
}

#[test]
fn a_key_is_kept_until_its_reset_time_plus_the_eviction_delay() {
    let policy = Policy::token_bucket(Rate::per_second(10)).unwrap();
    let clock = ManualClock::new(T0);
    let limiter = limiter(&policy, &clock, Duration::from_secs(1));
    assert_eq!(limiter.eviction_delay(), Duration::from_secs(1));
    let decision = limiter.try_acquire(b"a", 3).unwrap();
    assert_eq!(decision.reset_after, Duration::from_millis(300));
    let evictable_at = T0 + 300_000 + 1_000_000;
    clock.set(evictable_at - 1);
    assert_eq!(limiter.sweep_expired(), 0);
    assert_eq!(limiter.len(), 1);
    clock.set(evictable_at);
    assert_eq!(limiter.sweep_expired(), 1);
    assert!(limiter.is_empty());
}

#[test]
fn a_denied_request_does_not_extend_a_key_life() {
    let policy = Policy::fixed_window(Rate::new(1, Duration::from_secs(10))).unwrap();
    let clock = ManualClock::new(T0);
    let limiter = limiter(&policy, &clock, Duration::ZERO);
    assert!(limiter.try_acquire(b"a", 1).unwrap().allowed);
    clock.set(T0 + 9_999_999);
    assert!(!limiter.try_acquire(b"a", 1).unwrap().allowed);
    assert_eq!(limiter.sweep_expired(), 0);
    clock.set(T0 + 10_000_000); // the window's end: the key is back to its initial state
    assert_eq!(limiter.sweep_expired(), 1);
}

#[test]
fn requests_that_cannot_succeed_store_nothing() {
    let policy = Policy::sliding_log(Rate::per_minute(3)).unwrap();
    let limiter = MemoryLimiter::new(policy);
    assert!(matches!(limiter.try_acquire(b"a", 0), Err(Error::ZeroCost)));
    assert!(matches!(
        limiter.try_acquire(b"a", 4),
        Err(Error::CostExceedsCapacity {
            cost: 4,
            max_cost: 3
        })
    ));
    assert!(limiter.try_peek(b"a", 1).unwrap().allowed);
    assert!(limiter.is_empty());
}

#[test]
fn max_keys_refuses_new_keys_and_never_evicts_a_live_one() {
    let policy = Policy::fixed_window(Rate::new(2, Duration::from_secs(10))).unwrap();
    let clock = ManualClock::new(T0);
    let limiter = MemoryLimiter::builder(policy.clone())
        .clock(clock.clone())
        .eviction_delay(Duration::ZERO)
        .max_keys(2)
        .build();
    assert_eq!(limiter.max_keys(), Some(2));
    assert!(limiter.try_acquire(b"a", 2).unwrap().allowed);
    assert!(limiter.try_acquire(b"b", 1).unwrap().allowed);
    let refused = limiter.try_acquire(b"c", 1);
    assert!(is_key_limit(&refused), "{refused:?}");
    let message = refused.unwrap_err().chain().to_string();
    assert!(message.contains("maximum of 2 keys"), "{message}");
    // Held keys are still decided exactly: "a" keeps its spent quota.
    let a = limiter.try_acquire(b"a", 1).unwrap();
    assert!(!a.allowed);
    assert_eq!(a.retry_after, Duration::from_secs(10));
    assert!(limiter.try_acquire(b"b", 1).unwrap().allowed);
    // A peek stores nothing, so a full map is no error for it.
    assert!(limiter.try_peek(b"c", 1).unwrap().allowed);
    assert_eq!(limiter.len(), 2);
    // Once "a" and "b" have reset, a new key makes room by sweeping them.
    clock.set(T0 + 10_000_000);
    let c = limiter.try_acquire(b"c", 1).unwrap();
    assert!(c.allowed && c.remaining == 1);
    assert_eq!(limiter.len(), 1);
    // Removing a key frees its place at once.
    assert!(limiter.try_acquire(b"d", 1).unwrap().allowed);
    assert!(is_key_limit(&limiter.try_acquire(b"e", 1)));
    assert!(limiter.remove(b"d"));
    assert!(!limiter.remove(b"d"));
    assert!(limiter.try_acquire(b"e", 1).unwrap().allowed);
    limiter.clear();
    assert!(limiter.is_empty());
}

#[test]
fn max_keys_holds_under_concurrent_new_keys() {
    let policy = Policy::token_bucket(Rate::per_hour(5)).unwrap();
    let limiter = Arc::new(
        MemoryLimiter::builder(policy)
            .clock(ManualClock::new(T0))
            .max_keys(100)
            .build(),
    );
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                let (mut admitted, mut refused) = (0, 0);
                for i in 0..500 {
                    let result = limiter.try_acquire(format!("t{thread}-{i}").as_bytes(), 1);
                    if is_key_limit(&result) {
                        refused += 1;
                    } else {
                        assert!(result.unwrap().allowed);
                        admitted += 1;
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    let (admitted, refused) = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .fold((0, 0), |(a, r), (a2, r2)| (a + a2, r + r2));
    assert_eq!(admitted, 100);
    assert_eq!(refused, 1_900);
    assert_eq!(limiter.len(), 100);
}

#[test]
fn spraying_distinct_keys_keeps_the_map_bounded() {
    // One new key per ms, each reset within `horizon` of its only admission
    // (one window; two for the sliding counter, whose count weighs on the
    // next window), so at most `live` keys are live at any time. A sweep
    // comes after max(held, 1,024) new keys, so the map holds at most
    // `live + max(live, 1,024)`, however many keys are sprayed.
    for algorithm in Algorithm::ALL {
        let policy = Policy::new(algorithm, Rate::new(5, Duration::from_secs(1))).unwrap();
        let horizon = match algorithm {
            Algorithm::SlidingCounter => Duration::from_secs(2),
            _ => Duration::from_secs(1),
        };
        let live = horizon.as_millis() as usize + 1;
        let clock = ManualClock::new(T0);
        let limiter = limiter(&policy, &clock, Duration::ZERO);
        let mut most_held = 0;
        for i in 0..50_000u64 {
            clock.set(T0 + i * 1_000);
            let decision = limiter
                .try_acquire(format!("ip:{i}").as_bytes(), 5)
                .unwrap();
            assert!(decision.allowed);
            assert!(decision.reset_after <= horizon, "{algorithm}: {decision:?}");
            most_held = most_held.max(limiter.len());
        }
        let bound = live + live.max(1_024);
        assert!(
            most_held <= bound,
            "{algorithm}: {most_held} keys held, bound {bound}"
        );
        assert!(
            most_held >= live - 1,
            "{algorithm}: sweeping dropped live keys?"
        );
    }
}

/// Keys of different lifetimes: a first key drained to the bottom (its
/// reset a day away) must not put off the sweeps of the short-lived keys
/// sprayed after it, each reset within 37 s of its only admission. The map
/// stays within `live + max(live, 1,024)` of them, plus the long key, as
/// when every key lives alike.
#[test]
fn a_long_lived_first_key_does_not_put_off_sweeping_short_lived_ones() {
    let policy = Policy::token_bucket(Rate::per_hour(100))
        .unwrap()
        .with_capacity(2_400)
        .unwrap();
    let clock = ManualClock::new(T0);
    let limiter = limiter(&policy, &clock, Duration::from_secs(1));
    let drained = limiter.try_acquire(b"heavy", 2_400).unwrap();
    assert!(drained.allowed && drained.reset_after == Duration::from_secs(86_400));
    // 100 new keys a second, each resetting 36 s after its admission and
    // evictable a second later: 3,700 live at a time.
    let live = 3_700 + 1;
    let mut most_held = 0;
    for i in 0..100_000u64 {
        clock.set(T0 + i * 10_000);
        let decision = limiter
            .try_acquire(format!("ip:{i}").as_bytes(), 1)
            .unwrap();
        assert!(decision.allowed && decision.reset_after == Duration::from_secs(36));
        most_held = most_held.max(limiter.len());
    }
    let bound = live + live.max(1_024) + 1;
    assert!(most_held <= bound, "{most_held} keys held, bound {bound}");
    assert!(
        limiter.try_peek(b"heavy", 1).unwrap().remaining < 100,
        "the long key is kept"
    );
}

#[test]
fn spraying_distinct_keys_never_exceeds_max_keys() {
    let policy = Policy::sliding_log(Rate::new(5, Duration::from_secs(1))).unwrap();
    let clock = ManualClock::new(T0);
    let limiter = MemoryLimiter::builder(policy)
        .clock(clock.clone())
        .eviction_delay(Duration::ZERO)
        .max_keys(300)
        .build();
    let mut refused = 0;
    for i in 0..20_000u64 {
        clock.set(T0 + i * 1_000);
        match limiter.try_acquire(format!("ip:{i}").as_bytes(), 1) {
            Ok(decision) => assert!(decision.allowed),
            Err(Error::Backend(e)) if e.is::<KeyLimitReached>() => refused += 1,
            Err(e) => panic!("{e}"),
        }
        assert!(limiter.len() <= 300);
    }
    // 1,000 keys a second are live but only 300 fit: most are refused, and
    // sweeps keep making room as keys reset.
    assert!(refused > 10_000, "{refused} refused");
    assert!(
        refused < 20_000 - 300,
        "{refused} refused: no room was ever made"
    );
}

/// Requests racing on one new key for the last slot: the one that loses
/// the slot finds the key held by the winner and is decided on it, never
/// refused for a key that is held.
#[test]
fn requests_racing_on_a_new_key_at_the_cap_are_all_decided() {
    const THREADS: usize = 4;
    let mut refused = 0;
    for round in 0..500 {
        let limiter = Arc::new(
            MemoryLimiter::builder(Policy::fixed_window(Rate::per_minute(100)).unwrap())
                .clock(ManualClock::new(T0))
                .max_keys(1)
                .build(),
        );
        let start = Arc::new(std::sync::Barrier::new(THREADS));
        let racers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (limiter, start) = (Arc::clone(&limiter), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    limiter.try_acquire(b"new", 1)
                })
            })
            .collect();
        for racer in racers {
            let result = racer.join().unwrap();
            if is_key_limit(&result) {
                refused += 1;
            } else {
                assert!(result.unwrap().allowed, "round {round}");
            }
        }
        assert_eq!(limiter.len(), 1);
    }
    assert_eq!(
        refused, 0,
        "requests refused for a key another request held"
    );
}

//! Changing a memory limiter's policies while it serves (docs/spec.md
//! section 9): each key keeps what it used, exactly as the core's rule
//! says, and no request is decided under a mix of old and new policies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use limiter_core::backend::SetState;
use limiter_core::{Algorithm, ManualClock, Policies, Policy, Rate};
use limiter_memory::MemoryLimiter;
use limiter_test::Rng;

const T0: u64 = 1_700_000_000_000_000;

fn limiter(policies: impl Into<Policies>, clock: &ManualClock) -> MemoryLimiter {
    MemoryLimiter::builder(policies)
        .clock(clock.clone())
        .eviction_delay(Duration::ZERO)
        .build()
}

fn per_minute(algorithm: Algorithm, limit: u64) -> Policy {
    Policy::new(algorithm, Rate::per_minute(limit)).unwrap()
}

/// 90 of 100 used this minute: a plan of 50 a minute refuses, a plan of
/// 1,000 a minute admits 910 more and no more, on every algorithm.
#[test]
fn ninety_of_a_hundred_carry_to_fifty_and_to_a_thousand() {
    for algorithm in Algorithm::ALL {
        for (plan, left) in [(50, 0), (1_000, 910)] {
            let clock = ManualClock::new(T0);
            let limiter = limiter(per_minute(algorithm, 100), &clock);
            assert!(limiter.try_acquire(b"client", 90).unwrap().allowed);
            clock.advance(Duration::from_micros(1));
            limiter.set_policies(per_minute(algorithm, plan));
            assert_eq!(limiter.policies().max_cost(), plan);
            let peek = limiter.try_peek(b"client", 1).unwrap();
            assert_eq!(peek.allowed, left > 0, "{algorithm} to {plan}");
            if left > 0 {
                assert!(!limiter.try_acquire(b"client", left + 1).unwrap().allowed);
                assert!(limiter.try_acquire(b"client", left).unwrap().allowed);
            }
            let refused = limiter.try_acquire(b"client", 1).unwrap();
            assert!(!refused.allowed, "{algorithm} to {plan}: {refused:?}");
            assert_eq!(refused.limit, plan);
            assert_eq!(limiter.len(), 1);
        }
    }
}

/// A key with no request since the change stays under the old policy
/// until it expires there: a peek answers what the new policy takes over
/// and writes nothing, and the key is dropped at its old reset time.
#[test]
fn a_key_not_requested_since_the_change_expires_under_the_old_policy() {
    let clock = ManualClock::new(T0);
    let limiter = limiter(per_minute(Algorithm::SlidingLog, 100), &clock);
    assert!(limiter.try_acquire(b"quiet", 60).unwrap().allowed);
    limiter.set_policies(per_minute(Algorithm::SlidingLog, 80));
    for _ in 0..3 {
        assert_eq!(limiter.try_peek(b"quiet", 1).unwrap().remaining, 19);
    }
    assert_eq!(limiter.len(), 1);
    clock.advance(Duration::from_secs(60) - Duration::from_micros(1));
    assert_eq!(limiter.sweep_expired(), 0);
    clock.advance(Duration::from_micros(1));
    assert_eq!(limiter.sweep_expired(), 1);
    assert_eq!(limiter.len(), 0);
    assert_eq!(limiter.try_peek(b"quiet", 1).unwrap().remaining, 79);
}

/// A tiered set gaining a day: the day starts from the minute's count.
#[test]
fn a_set_gaining_a_part_counts_what_the_nearest_part_counted() {
    let clock = ManualClock::new(T0);
    let free: Policies = "sliding-log:5/1s;sliding-log:100/1m".parse().unwrap();
    let limiter = limiter(free, &clock);
    for _ in 0..4 {
        assert!(limiter.try_acquire(b"client", 5).unwrap().allowed);
        clock.advance(Duration::from_secs(1));
    }
    limiter.set_policies(
        "sliding-log:5/1s;sliding-log:100/1m;sliding-log:29/1d"
            .parse::<Policies>()
            .unwrap(),
    );
    let decision = limiter.try_acquire(b"client", 5).unwrap();
    assert!(decision.allowed);
    assert_eq!(decision.parts()[2].remaining, 4);
    clock.advance(Duration::from_secs(1));
    let refused = limiter.try_acquire(b"client", 5).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.bound_by, 2);
}

/// Random requests on a few keys with random changes of policy between
/// them decide exactly as the core does when each key's state is taken
/// over by the rule at its first request after a change.
#[test]
fn decides_as_the_core_across_random_changes() {
    let sets: Vec<Policies> = [
        "fixed-window:5/1s",
        "fixed-window:8/2s",
        "sliding-log:4/500ms",
        "sliding-log:9/1s",
        "sliding-counter:6/1s",
        "token-bucket:3/1s,capacity=8",
        "token-bucket:6/1s,capacity=4",
        "leaky-bucket:4/1s,queue=6",
        "sliding-log:3/200ms;sliding-counter:7/1s",
        "token-bucket:5/1s;fixed-window:9/2s;sliding-log:4/300ms",
        "sliding-counter:1000000/1d",
    ]
    .iter()
    .map(|text| text.parse().unwrap())
    .collect();
    let mut rng = Rng::new(54);
    let mut decisions = 0;
    for _ in 0..20 {
        let clock = ManualClock::new(T0);
        let mut policies = sets[rng.below(sets.len() as u64) as usize].clone();
        let limiter = limiter(policies.clone(), &clock);
        // Each key's state in the core, and the set it was made under.
        let mut model: HashMap<u64, (SetState, Policies)> = HashMap::new();
        let mut now = T0;
        for _ in 0..400 {
            if rng.below(25) == 0 {
                policies = sets[rng.below(sets.len() as u64) as usize].clone();
                limiter.set_policies(policies.clone());
            }
            now += match rng.below(10) {
                0..=5 => rng.below(50_000),
                6..=8 => rng.below(500_000),
                _ => 1_000_000 + rng.below(2_000_000),
            };
            clock.set(now);
            let key = rng.below(4);
            let cost = 1 + rng.below(4);
            let (held, made_under) = model
                .remove(&key)
                .unwrap_or_else(|| (SetState::fresh(&policies), policies.clone()));
            let mut state = if made_under == policies {
                held.clone()
            } else {
                held.change_policies(&made_under, &policies, now)
            };
            let name = format!("k{key}");
            if rng.below(5) == 0 {
                // A peek takes nothing over: the key stays as it was.
                let expected = state.peek(&policies, now, cost).ok();
                assert_eq!(limiter.try_peek(name.as_bytes(), cost).ok(), expected);
                model.insert(key, (held, made_under));
            } else {
                let expected = state.acquire(&policies, now, cost).ok();
                assert_eq!(
                    limiter.try_acquire(name.as_bytes(), cost).ok(),
                    expected,
                    "{policies} at {now}"
                );
                // An error is no decision: it takes nothing over either.
                if expected.is_some() {
                    decisions += 1;
                    model.insert(key, (state, policies.clone()));
                } else {
                    model.insert(key, (held, made_under));
                }
            }
        }
    }
    assert!(decisions > 5_000, "{decisions}");
}

/// Threads race on one key while its window flips between an hour and
/// two, at 2,000 a window: every decision is one policy's (an admission
/// leaves less than its limit), and the units counted carry exactly (no
/// count is above the other policy's limit, so none is clamped by rule
/// 9.2.5), so once the key is exhausted exactly 2,000 were admitted in
/// all: a request decided on a state of one policy in the store of the
/// other would have lost or added units.
#[test]
fn no_request_is_decided_under_a_mix_of_policies() {
    let hour = Duration::from_secs(3_600);
    let (small, large) = (
        Policy::fixed_window(Rate::new(2_000, hour)).unwrap(),
        Policy::fixed_window(Rate::new(2_000, 2 * hour)).unwrap(),
    );
    let clock = ManualClock::new(T0);
    let limiter = Arc::new(limiter(small.clone(), &clock));
    // The flips start with the requests and go on until they end, so
    // that requests and changes meet however fast the machine is.
    let start = Arc::new(std::sync::Barrier::new(5));
    let working = Arc::new(std::sync::atomic::AtomicUsize::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (limiter, start, working) = (
                Arc::clone(&limiter),
                Arc::clone(&start),
                Arc::clone(&working),
            );
            std::thread::spawn(move || {
                start.wait();
                let mut admitted = 0u64;
                for _ in 0..3_000 {
                    let decision = limiter.try_acquire(b"shared", 1).unwrap();
                    assert_eq!(decision.limit, 2_000, "{decision:?}");
                    if decision.allowed {
                        assert!(decision.remaining < decision.limit, "{decision:?}");
                        admitted += 1;
                    }
                }
                working.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                admitted
            })
        })
        .collect();
    start.wait();
    let mut flips = 0;
    while working.load(std::sync::atomic::Ordering::Relaxed) > 0 || flips < 200 {
        limiter.set_policies(if flips % 2 == 0 { &large } else { &small });
        flips += 1;
        std::thread::yield_now();
    }
    let mut admitted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    limiter.set_policies(&large);
    while limiter.try_acquire(b"shared", 1).unwrap().allowed {
        admitted += 1;
    }
    assert_eq!(admitted, 2_000);
    assert_eq!(limiter.len(), 1);
}

/// The policy-change vectors (docs/spec.md section 6a), replayed with
/// `set_policies` before each row from which a case changes the policies.
#[tokio::test]
async fn the_policy_change_vectors_replay_byte_for_byte() {
    limiter_test::cases::policy_change_vectors_replay_byte_for_byte(
        |policies, clock| async { MemoryLimiter::builder(policies).clock(clock).build() },
        |limiter, policies| limiter.set_policies(policies),
    )
    .await;
}

/// The bound on bytes per key covers the keys still held under earlier
/// policies: a log of 1,000 entries stays held after a change to a fixed
/// window, until it is taken over or expires.
#[test]
fn the_bytes_per_key_bound_covers_keys_of_earlier_policies() {
    let clock = ManualClock::new(T0);
    let log = Policy::sliding_log(Rate::per_minute(1_000)).unwrap();
    let window = Policy::fixed_window(Rate::per_minute(1_000)).unwrap();
    let limiter = limiter(log.clone(), &clock);
    let bound_of = |policy: &Policy| MemoryLimiter::new(policy.clone()).max_bytes_per_key();
    assert!(limiter.try_acquire(b"client", 1).unwrap().allowed);
    limiter.set_policies(window.clone());
    assert_eq!(limiter.max_bytes_per_key(), bound_of(&log));
    assert!(limiter.try_acquire(b"client", 1).unwrap().allowed);
    clock.advance(Duration::from_secs(1));
    limiter.set_policies(log);
    limiter.set_policies(window.clone());
    assert_eq!(limiter.max_bytes_per_key(), bound_of(&window));
}

//! Charges after the fact on the memory backend (docs/spec.md section 10):
//! counted as the core counts them, on keys held or not.

use std::collections::HashMap;
use std::time::Duration;

use limiter_core::backend::SetState;
use limiter_core::{Error, ManualClock, Policies};
use limiter_memory::{KeyLimitReached, MemoryLimiter};
use limiter_test::Rng;

const T0: u64 = 1_700_000_000_000_000;

/// Random requests, peeks and charges on a few keys decide exactly as the
/// core's states do with the same charges, under one policy and sets.
#[test]
fn charges_decide_as_the_core() {
    let sets: Vec<Policies> = [
        "fixed-window:5/1s",
        "sliding-log:4/500ms",
        "sliding-counter:6/1s",
        "sliding-counter:5000000000/1h",
        "token-bucket:3/1s,capacity=8",
        "leaky-bucket:4/1s,queue=6",
        "sliding-log:3/200ms;token-bucket:7/1s",
    ]
    .iter()
    .map(|text| text.parse().unwrap())
    .collect();
    let mut rng = Rng::new(10);
    let mut charges = 0;
    for policies in &sets {
        let clock = ManualClock::new(T0);
        let limiter = MemoryLimiter::builder(policies.clone())
            .clock(clock.clone())
            .eviction_delay(Duration::ZERO)
            .build();
        let mut model: HashMap<u64, SetState> = HashMap::new();
        let mut now = T0;
        for _ in 0..600 {
            now += match rng.below(10) {
                0..=6 => rng.below(80_000),
                7..=8 => rng.below(600_000),
                _ => 1_000_000 + rng.below(2_000_000),
            };
            clock.set(now);
            let key = rng.below(3);
            let name = format!("k{key}");
            let state = model
                .entry(key)
                .or_insert_with(|| SetState::fresh(policies));
            match rng.below(4) {
                0 => {
                    let units = 1 + rng.below(20);
                    state.charge(policies, now, units).unwrap();
                    limiter.charge(name.as_bytes(), units).unwrap();
                    charges += 1;
                }
                1 => assert_eq!(
                    limiter.try_peek(name.as_bytes(), 1).ok(),
                    state.peek(policies, now, 1).ok()
                ),
                _ => {
                    let cost = 1 + rng.below(3);
                    assert_eq!(
                        limiter.try_acquire(name.as_bytes(), cost).ok(),
                        state.acquire(policies, now, cost).ok(),
                        "{policies} at {now}"
                    );
                }
            }
        }
    }
    assert!(charges > 700, "{charges}");
}

/// A charge on a key not held stores it, counted; at the cap on keys it is
/// refused with the cap's error, and 0 units is an error.
#[test]
fn a_charge_on_a_new_key_stores_it_unless_the_cap_is_reached() {
    let clock = ManualClock::new(T0);
    let limiter = MemoryLimiter::builder("sliding-log:10/1m".parse::<Policies>().unwrap())
        .clock(clock.clone())
        .max_keys(1)
        .build();
    limiter.charge(b"first", 25).unwrap();
    assert_eq!(limiter.len(), 1);
    let refused = limiter.try_acquire(b"first", 1).unwrap();
    assert_eq!((refused.allowed, refused.remaining), (false, 0));
    assert_eq!(refused.retry_after, Duration::from_secs(60));
    let capped = limiter.charge(b"second", 1);
    assert!(matches!(capped, Err(Error::Backend(e)) if e.is::<KeyLimitReached>()));
    assert!(matches!(limiter.charge(b"first", 0), Err(Error::ZeroCost)));
}

/// Through `Arc<dyn Limiter>`, as a service holds it, and through a
/// failure policy's wrapper: the same charge as the inherent method.
#[tokio::test]
async fn a_charge_through_the_trait_is_counted() {
    use std::sync::Arc;

    use limiter_core::{FailurePolicy, Limiter, LimiterExt as _, Policy};

    let clock = ManualClock::new(T0);
    let memory = MemoryLimiter::builder("token-bucket:100/1m".parse::<Policy>().unwrap())
        .clock(clock.clone())
        .build();
    let limiter: Arc<dyn Limiter> = Arc::new(memory.on_failure(FailurePolicy::FailOpen));
    assert!(limiter.acquire(b"k", 10).await.unwrap().allowed);
    limiter.charge(b"k", 140).await.unwrap();
    // 150 units used of 100: 50 owed, the bucket empty until they are paid
    // back, at 100 a minute: 30 s, then one more unit's 0.6 s.
    let denied = limiter.peek(b"k", 1).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Duration::from_millis(30_600));
    assert!(matches!(
        limiter.charge(b"k", 0).await,
        Err(Error::ZeroCost)
    ));
}

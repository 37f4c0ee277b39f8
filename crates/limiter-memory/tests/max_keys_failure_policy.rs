//! A new key refused at `max_keys` under a failure policy is answered by
//! the policy alone: it starts no outage, so the keys held keep being
//! decided exactly, their quota spent or not (a fail-open outage would
//! admit them all, unlimited).

use std::time::Duration;

use limiter_core::{DecisionSource, FailurePolicy, Limiter, LimiterExt, ManualClock, Policy, Rate};
use limiter_memory::MemoryLimiter;

const T0: u64 = 1_700_000_000_000_000;

fn full_map(failure: FailurePolicy) -> impl Limiter {
    let policy = Policy::fixed_window(Rate::new(1, Duration::from_secs(60))).unwrap();
    MemoryLimiter::builder(policy)
        .clock(ManualClock::new(T0))
        .max_keys(1)
        .build()
        .on_failure(failure)
}

#[tokio::test]
async fn held_keys_stay_exact_while_new_keys_are_answered_by_fail_open() {
    let limiter = full_map(FailurePolicy::FailOpen);
    let held = limiter.acquire(b"a", 1).await.unwrap();
    assert!(held.allowed && held.source == DecisionSource::Backend);
    for _ in 0..3 {
        // The new key: answered by the policy, marked so.
        let new = limiter.acquire(b"b", 1).await.unwrap();
        assert!(
            new.allowed && new.source == DecisionSource::FailOpen,
            "{new:?}"
        );
        // The held key, its one unit spent: denied by the backend, on
        // both paths.
        let held = limiter.acquire(b"a", 1).await.unwrap();
        assert!(
            !held.allowed && held.source == DecisionSource::Backend,
            "{held:?}"
        );
        let held = limiter.acquire_now(b"a", 1).unwrap().unwrap();
        assert!(
            !held.allowed && held.source == DecisionSource::Backend,
            "{held:?}"
        );
    }
}

#[tokio::test]
async fn the_sync_path_answers_a_new_key_by_the_policy_too() {
    let limiter = full_map(FailurePolicy::FailClosed);
    assert!(limiter.acquire_now(b"a", 1).unwrap().unwrap().allowed);
    let new = limiter.acquire_now(b"b", 1).unwrap().unwrap();
    assert!(
        !new.allowed && new.source == DecisionSource::FailClosed,
        "{new:?}"
    );
    // Retry in a probe interval (1 s by default), not at once.
    assert_eq!(new.retry_after, Duration::from_secs(1));
    let held = limiter.acquire_now(b"a", 1).unwrap().unwrap();
    assert!(
        !held.allowed && held.source == DecisionSource::Backend,
        "{held:?}"
    );
}

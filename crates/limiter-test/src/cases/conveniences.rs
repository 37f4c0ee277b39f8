//! The conveniences every `Limiter` gets from `LimiterExt`: `acquire_fast`
//! and `until_ready`.

use std::time::Duration;

use limiter_core::{Decision, Error, LimiterExt, Policy, Rate};

use super::{secs, Subject, T0};
use crate::Harness;

/// `until_ready` on key `k`, its sleeps advancing the subject's manual clock
/// (as a test's would); returns the decision and every sleep asked for.
async fn until_ready_on_the_manual_clock(s: &Subject, cost: u64) -> (Decision, Vec<Duration>) {
    let mut slept = Vec::new();
    let decision = s
        .limiter
        .until_ready(b"k", cost, |d: Duration| {
            slept.push(d);
            s.clock.advance(d);
            std::future::ready(())
        })
        .await
        .unwrap();
    (decision, slept)
}

/// `acquire_fast` decides and commits as `acquire` does, through the fast
/// path where the backend has one.
pub async fn acquire_fast_answers_what_acquire_does<H: Harness>(harness: &H) {
    let policy = Policy::fixed_window(Rate::new(3, secs(10))).unwrap();
    let s = Subject::new(harness, &policy).await;
    s.clock.set(T0);
    for step in 0..4 {
        let fast = s.limiter.acquire_fast(b"fast", 1).await.unwrap();
        let slow = s.limiter.acquire(b"slow", 1).await.unwrap();
        assert_eq!(fast, slow, "step {step}");
        assert_eq!(fast.allowed, step < 3, "step {step}");
    }
    assert_eq!(s.limiter.peek(b"fast", 1).await.unwrap().remaining, 0);
}

/// `until_ready` sleeps for `retry_after` while denied, then for the leaky
/// bucket's `wait`, and returns the admitting decision; errors come back at
/// once. Its sleep here advances the limiter's manual clock, as a test's
/// would.
pub async fn until_ready_sleeps_retry_after_then_wait<H: Harness>(harness: &H) {
    // Leaky bucket, 2 per second, queue 2: two units queue up; the third
    // must wait 0.5 s for room, then 0.5 s more for the unit ahead of it.
    let policy = Policy::leaky_bucket(Rate::per_second(2)).unwrap();
    let s = Subject::new(harness, &policy).await;
    s.clock.set(T0);
    assert!(s.limiter.acquire(b"k", 1).await.unwrap().allowed);
    assert!(s.limiter.acquire(b"k", 1).await.unwrap().allowed);

    let (decision, slept) = until_ready_on_the_manual_clock(&s, 1).await;
    assert!(decision.allowed);
    assert_eq!(
        slept,
        [Duration::from_millis(500), Duration::from_millis(500)]
    );
    assert_eq!(decision.wait, Duration::from_millis(500));

    // A sliding log denies until its oldest entry leaves; no wait after.
    let policy = Policy::sliding_log(Rate::new(1, secs(3))).unwrap();
    let s = Subject::new(harness, &policy).await;
    s.clock.set(T0);
    assert!(s.limiter.acquire(b"k", 1).await.unwrap().allowed);
    s.clock.set(T0 + 1_000_000);
    let (decision, slept) = until_ready_on_the_manual_clock(&s, 1).await;
    assert!(decision.allowed);
    assert_eq!(slept, [secs(2)]);

    // A cost that can never fit is returned at once, never slept on.
    let result = s
        .limiter
        .until_ready(b"k", 2, |_: Duration| -> std::future::Ready<()> {
            panic!("until_ready slept on a request that can never be admitted")
        })
        .await;
    assert!(matches!(
        result,
        Err(Error::CostExceedsCapacity {
            cost: 2,
            max_cost: 1
        })
    ));
}

//! [`Resilient`] on the backend under test, made to fail on demand with
//! [`Flaky`]: what each [`FailurePolicy`] answers, the decision's source,
//! the fallback's decisions, and the return to the backend.

use std::sync::Arc;
use std::time::Duration;

use limiter_core::{
    Clock, DecisionSource, Error, ErrorKind, FailurePolicy, Limiter, ManualClock, Policy, Rate,
    Resilient,
};

use super::{secs, T0};
use crate::{Flaky, Harness};

/// A probe interval no case waits for.
const NEVER: Duration = Duration::from_secs(3600);

fn policy(limit: u64) -> Policy {
    Policy::fixed_window(Rate::new(limit, secs(10))).expect("valid policy")
}

/// The backend (3 per 10 s) behind [`Flaky`], wrapped with `on_failure`.
async fn wrapped<H: Harness>(
    harness: &H,
    on_failure: FailurePolicy,
    probe_interval: Duration,
) -> (Arc<Flaky>, Resilient<Arc<Flaky>>, ManualClock) {
    let clock = ManualClock::new(T0);
    let flaky = Arc::new(Flaky::new(harness.limiter(policy(3), clock.clone()).await));
    let limiter = Resilient::new(Arc::clone(&flaky), on_failure)
        .probe_interval(probe_interval)
        .clock(clock.clone());
    (flaky, limiter, clock)
}

/// Each policy's answer while the backend fails; request errors pass
/// through whatever the policy; the backend's state is untouched.
pub async fn failure_policies_answer_while_the_backend_fails<H: Harness>(harness: &H) {
    for on_failure in [
        FailurePolicy::ReturnError,
        FailurePolicy::FailOpen,
        FailurePolicy::FailClosed,
    ] {
        let name = on_failure.name();
        let (flaky, limiter, clock) = wrapped(harness, on_failure, NEVER).await;
        let first = limiter.acquire(b"k", 1).await.expect("backend answers");
        assert_eq!(
            (first.source, first.remaining),
            (DecisionSource::Backend, 2),
            "{name}"
        );
        flaky.set_failing(true);
        for _ in 0..3 {
            let answer = limiter.acquire(b"k", 1).await;
            match name {
                "return-error" => {
                    let error = answer.expect_err("the error is returned");
                    assert_eq!(error.kind(), ErrorKind::Backend, "{name}");
                    assert!(!limiter.is_failing(), "{name}: no outage state");
                }
                "fail-open" => {
                    let open = answer.expect("fail open answers");
                    assert!(open.allowed && open.is_degraded(), "{name}: {open:?}");
                    assert_eq!(open.source, DecisionSource::FailOpen);
                    assert_eq!((open.limit, open.remaining), (3, 0), "{name}");
                    assert_eq!(open.time_us, clock.now_us(), "{name}: stamped by the clock");
                }
                _ => {
                    let closed = answer.expect("fail closed answers");
                    assert!(!closed.allowed, "{name}: {closed:?}");
                    assert_eq!(closed.source, DecisionSource::FailClosed);
                    assert!(
                        closed.retry_after > Duration::ZERO && closed.retry_after <= NEVER,
                        "{name}: retry when the backend is tried again: {closed:?}"
                    );
                }
            }
            // Request errors are the request's, not the backend's.
            assert!(
                matches!(limiter.acquire(b"k", 0).await, Err(Error::ZeroCost)),
                "{name}"
            );
            assert!(
                matches!(
                    limiter.peek(b"k", 4).await,
                    Err(Error::CostExceedsCapacity {
                        cost: 4,
                        max_cost: 3
                    })
                ),
                "{name}"
            );
        }
        // A failed reset is an error whatever the policy.
        assert!(limiter.reset(b"k").await.expect_err(name).is_backend());
        let calls = flaky.calls();
        match name {
            // Every call reached the backend: 1 + 3 acquires and the reset.
            "return-error" => assert_eq!(calls, 5, "{name}"),
            // One failure started the outage; the others were not tried
            // (the failed reset went through).
            _ => assert_eq!(calls, 3, "{name}: the backend was left alone"),
        }
        flaky.set_failing(false);
        // Nothing answered while failing was counted by the backend.
        let after = flaky.peek(b"k", 1).await.expect("backend answers");
        assert_eq!(after.remaining, 1, "{name}: {after:?}");
    }
}

/// A fallback decides (on its own state and limit) while the backend fails;
/// the first probe the backend answers ends the outage.
pub async fn fallback_decides_until_the_backend_answers_again<H: Harness>(harness: &H) {
    let fallback_clock = ManualClock::new(T0);
    let fallback = harness.limiter(policy(1), fallback_clock).await;
    // Long enough that the three fallback answers below (round trips on a
    // Redis fallback, on a loaded machine) come within one interval.
    let interval = Duration::from_millis(500);
    let (flaky, limiter, _clock) =
        wrapped(harness, FailurePolicy::Fallback(fallback), interval).await;
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, 2);
    flaky.set_failing(true);

    let admitted = limiter
        .acquire(b"k", 1)
        .await
        .expect("the fallback answers");
    assert_eq!(admitted.source, DecisionSource::Fallback);
    assert_eq!(
        (admitted.allowed, admitted.limit, admitted.remaining),
        (true, 1, 0)
    );
    assert!(limiter.is_failing());
    let denied = limiter
        .acquire(b"k", 1)
        .await
        .expect("the fallback answers");
    assert_eq!(denied.source, DecisionSource::Fallback);
    assert!(!denied.allowed, "the fallback's own limit: {denied:?}");
    assert_eq!(
        limiter.peek(b"other", 1).await.unwrap().source,
        DecisionSource::Fallback
    );
    assert_eq!(
        flaky.calls(),
        2,
        "within the interval the backend is not tried"
    );

    // Still failing at the next probe: one call, the fallback answers.
    tokio::time::sleep(interval + Duration::from_millis(10)).await;
    let during = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(during.source, DecisionSource::Fallback);
    assert_eq!(flaky.calls(), 3, "one probe per interval");

    // The backend answers the next probe and takes over again.
    flaky.set_failing(false);
    tokio::time::sleep(interval + Duration::from_millis(10)).await;
    let back = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(back.source, DecisionSource::Backend);
    assert_eq!(
        (back.allowed, back.limit, back.remaining),
        (true, 3, 1),
        "{back:?}"
    );
    assert!(!limiter.is_failing());
    let next = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!((next.source, next.remaining), (DecisionSource::Backend, 0));
    // Reset reaches both.
    limiter.reset(b"k").await.unwrap();
    assert_eq!(limiter.peek(b"k", 1).await.unwrap().remaining, 2);
}

//! The rules every algorithm shares (docs/spec.md section 2) and the meaning of each
//! decision field (section 1), checked on every algorithm.

use std::collections::HashMap;
use std::time::Duration;

use limiter_core::backend::KeyState;
use limiter_core::{Error, Policy, Rate, MAX_TIME_US};

use super::{micros, outcome, policies, secs, Subject, T0};
use crate::Harness;

/// What `key` would answer at several times and costs: a fingerprint of its
/// state that peeks take without writing.
async fn fingerprint(subject: &Subject, key: &str, t_us: u64) -> Vec<super::Outcome> {
    let w = subject.policy.window_us();
    let max = subject.policy.max_cost();
    let mut answers = Vec::new();
    for t in [t_us, t_us + 1, t_us + w / 3, t_us + w, t_us + 2 * w + 1] {
        for cost in [1, max.div_ceil(2), max] {
            answers.push(outcome(subject.try_peek(t, key, cost).await));
        }
    }
    answers
}

/// docs/spec.md rule 2.1: a denied request changes nothing; only an admission writes.
pub async fn denied_request_changes_nothing<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let max = policy.max_cost();
        let t = T0 + 1_000;
        assert!(s.acquire(t, "denied", max).await.allowed, "{policy}");
        assert!(s.acquire(t, "twin", max).await.allowed, "{policy}");
        let before = fingerprint(&s, "denied", t + 1).await;
        for cost in [1, max] {
            let denied = s.acquire(t + 1, "denied", cost).await;
            assert!(
                !denied.allowed,
                "{policy}: cost {cost} after spending {max}"
            );
        }
        assert_eq!(
            fingerprint(&s, "denied", t + 1).await,
            before,
            "{policy}: a denial wrote state"
        );
        // And later requests decide exactly as on a key that saw no denial.
        let retry = s.peek(t + 1, "twin", 1).await.retry_after;
        for (dt, cost) in [
            (micros(retry), 1),
            (policy.window_us(), max),
            (policy.window_us() * 3, 1),
        ] {
            let at = t + 1 + dt;
            assert_eq!(
                s.acquire(at, "denied", cost).await,
                s.acquire(at, "twin", cost).await,
                "{policy}: at +{dt}µs cost {cost}"
            );
        }
    }
}

/// docs/spec.md rule 2.2: a cost above the limit (capacity, queue) is a typed error,
/// never a denial, on a fresh key and on a used one, and writes nothing.
pub async fn cost_above_the_maximum_is_an_error<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let max = policy.max_cost();
        for cost in [max + 1, max * 2, u64::MAX] {
            for key in ["fresh", "used"] {
                if key == "used" {
                    s.acquire(T0, "used", 1).await;
                }
                for result in [
                    s.try_acquire(T0 + 1, key, cost).await,
                    s.try_peek(T0 + 1, key, cost).await,
                ] {
                    match result {
                        Err(Error::CostExceedsCapacity { cost: c, max_cost: m }) => {
                            assert_eq!((c, m), (cost, max), "{policy}");
                        }
                        other => panic!("{policy}: cost {cost} on {key}: expected CostExceedsCapacity, got {other:?}"),
                    }
                }
            }
        }
        // Nothing was written: the fresh key still grants its whole quota.
        let first = s.acquire(T0 + 2, "fresh", max).await;
        assert!(first.allowed && first.remaining == 0, "{policy}: {first:?}");
    }
}

/// Every request costs at least one unit: cost 0 is an error that writes nothing.
pub async fn zero_cost_is_an_error<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        s.acquire(T0, "used", 1).await;
        for key in ["fresh", "used"] {
            assert!(
                matches!(s.try_acquire(T0 + 1, key, 0).await, Err(Error::ZeroCost)),
                "{policy}"
            );
            assert!(
                matches!(s.try_peek(T0 + 1, key, 0).await, Err(Error::ZeroCost)),
                "{policy}"
            );
        }
        let first = s.acquire(T0 + 2, "fresh", policy.max_cost()).await;
        assert!(first.allowed, "{policy}: {first:?}");
    }
}

/// Times are exact up to 2^53 µs (docs/spec.md rule 2.4): a request at 2^53 is
/// decided, one beyond it is an error that writes nothing.
pub async fn time_beyond_2_pow_53_is_an_error<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let beyond = MAX_TIME_US + 1;
        for result in [
            s.try_acquire(beyond, "k", 1).await,
            s.try_peek(beyond, "k", 1).await,
        ] {
            assert!(
                matches!(result, Err(Error::TimeOutOfRange { time_us }) if time_us == beyond),
                "{policy}: {result:?}"
            );
        }
        let mut model = KeyState::fresh(&policy);
        for t in [MAX_TIME_US - 1, MAX_TIME_US, MAX_TIME_US] {
            let expected = model.acquire(&policy, t, policy.max_cost()).unwrap();
            assert_eq!(
                s.acquire(t, "k", policy.max_cost()).await,
                expected,
                "{policy} at {t}"
            );
        }
    }
}

/// docs/spec.md rule 2.3: a request stamped before the key's last admission is
/// decided at that admission's time, never earlier.
pub async fn time_never_runs_backwards_inside_a_key<H: Harness>(harness: &H) {
    // Fixed window of 1 per 10 s: admitted in [T0+10s, T0+20s), a request
    // stamped T0+5s is decided in that window, not in a fresh earlier one.
    let policy = Policy::fixed_window(Rate::new(1, secs(10))).unwrap();
    let s = Subject::new(harness, &policy).await;
    assert!(s.acquire(T0 + 15_000_000, "k", 1).await.allowed);
    let late = s.acquire(T0 + 5_000_000, "k", 1).await;
    assert!(!late.allowed);
    assert_eq!(late.retry_after, secs(15), "retry until T0+20s, from T0+5s");
    assert_eq!(late.reset_after, secs(15));
    assert!(
        s.acquire(T0 + 5_000_000, "other", 1).await.allowed,
        "keys keep their own time"
    );

    // Token bucket of 1 per second: emptied at T0+10s, a request stamped
    // T0+5s waits for the refill due at T0+11s.
    let policy = Policy::token_bucket(Rate::per_second(1)).unwrap();
    let s = Subject::new(harness, &policy).await;
    assert!(s.acquire(T0 + 10_000_000, "k", 1).await.allowed);
    let late = s.acquire(T0 + 5_000_000, "k", 1).await;
    assert!(!late.allowed);
    assert_eq!(late.retry_after, secs(6));

    // Every algorithm, against the core, on a clock that jumps around.
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let w = policy.window_us();
        let mut model = KeyState::fresh(&policy);
        let times = [
            T0 + 5 * w / 2,
            T0 + w / 2,
            T0 + 3 * w,
            T0 + w,
            T0 + 3 * w + 1,
            T0,
            T0 + 7 * w,
        ];
        for (i, t) in times.into_iter().enumerate() {
            let cost = if i % 2 == 0 { policy.max_cost() } else { 1 };
            let expected = model.acquire(&policy, t, cost).unwrap();
            assert_eq!(
                s.acquire(t, "k", cost).await,
                expected,
                "{policy}: request {i} at {t}"
            );
        }
    }
}

/// docs/spec.md rule 2.6: a peek writes nothing, even a peek far in the future (which
/// would move the key's time forward if it wrote).
pub async fn peek_writes_nothing<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let w = policy.window_us();
        let max = policy.max_cost();
        let requests = [
            (T0, max),
            (T0 + 1, 1),
            (T0 + w / 2, 1),
            (T0 + w, max),
            (T0 + w + 1, 1),
        ];
        for (i, &(t, cost)) in requests.iter().enumerate() {
            for (dt, peek_cost) in [(0, 1), (0, max), (w * 5, 1), (1, max)] {
                s.peek(t + dt, "peeked", peek_cost).await;
            }
            let _ = s.try_peek(t, "peeked", 0).await;
            let _ = s.try_peek(t, "peeked", max + 1).await;
            let peeked = s.acquire(t, "peeked", cost).await;
            let plain = s.acquire(t, "plain", cost).await;
            assert_eq!(peeked, plain, "{policy}: request {i}");
        }
    }
}

/// A peek answers exactly what an acquire at the same moment would.
pub async fn peek_answers_what_acquire_would<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let w = policy.window_us();
        let max = policy.max_cost();
        let mut t = T0;
        let mut denials = 0;
        for i in 0..12u64 {
            t += (w / 5) * (i % 3);
            let cost = [1, max, max.div_ceil(3)][(i % 3) as usize];
            let peeked = s.peek(t, "k", cost).await;
            let acquired = s.acquire(t, "k", cost).await;
            assert_eq!(peeked, acquired, "{policy}: request {i} at {t} cost {cost}");
            denials += u64::from(!acquired.allowed);
        }
        assert!(denials > 0, "{policy}: the sequence should see denials too");
    }
}

/// docs/spec.md rule 2.6: a reset drops the key's state, so it starts again with a
/// full quota; other keys are untouched, and resetting an unknown key is fine.
pub async fn reset_restores_the_full_quota<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let max = policy.max_cost();
        let fresh = s.peek(T0 + 1, "never-used", max).await;
        assert!(s.acquire(T0, "k", max).await.allowed);
        assert!(s.acquire(T0, "other", max).await.allowed);
        assert!(!s.acquire(T0 + 1, "k", 1).await.allowed, "{policy}");
        s.reset(b"k").await;
        s.reset(b"never-used").await;
        assert_eq!(
            s.peek(T0 + 1, "k", max).await,
            fresh,
            "{policy}: reset key peeks as new"
        );
        assert_eq!(
            s.acquire(T0 + 1, "k", max).await,
            fresh,
            "{policy}: reset key admits as new"
        );
        assert!(
            !s.acquire(T0 + 1, "other", 1).await.allowed,
            "{policy}: reset touched another key"
        );
        // A reset also drops the key's time: a request stamped earlier than
        // its last admission is decided at its own time again.
        s.reset(b"k").await;
        assert_eq!(s.acquire(T0 + 1, "k", max).await, fresh, "{policy}");
    }
}

/// docs/spec.md section 1: `retry_after` is exact. At `t + retry_after` the same
/// request is allowed, at `t + retry_after - 1` it is not (and there its
/// `retry_after` is 1 µs).
pub async fn retry_after_is_exact<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let max = policy.max_cost();
        let w = policy.window_us();
        for cost in [1, max.div_ceil(2), max] {
            let key = format!("cost-{cost}");
            let mut t = T0 + 7;
            assert!(s.acquire(t, &key, max).await.allowed);
            let mut denials = 0;
            for round in 0..5u64 {
                t += 1 + (w / 7) * (round % 2);
                let denied = s.acquire(t, &key, cost).await;
                if denied.allowed {
                    continue;
                }
                denials += 1;
                let retry = micros(denied.retry_after);
                assert!(retry > 0, "{policy}: denied with retry_after 0");
                let early = s.peek(t + retry - 1, &key, cost).await;
                assert!(
                    !early.allowed,
                    "{policy}: cost {cost} allowed 1µs before t + retry_after ({denied:?})"
                );
                assert_eq!(
                    early.retry_after,
                    Duration::from_micros(1),
                    "{policy}: cost {cost}, 1µs early"
                );
                let on_time = s.peek(t + retry, &key, cost).await;
                assert!(on_time.allowed, "{policy}: cost {cost} denied at t + retry_after ({denied:?}, then {on_time:?})");
                t += retry;
                assert!(s.acquire(t, &key, cost).await.allowed);
            }
            assert!(denials > 0, "{policy}: cost {cost} never denied");
        }
    }
}

/// docs/spec.md section 1: `reset_after` is exact. At `t + reset_after` the key
/// answers as a key that never saw a request; 1 µs earlier it does not yet
/// grant its whole quota.
pub async fn reset_after_is_exact<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let max = policy.max_cost();
        let mut t = T0 + 3;
        for (i, cost) in [1, max, max.div_ceil(2), 1].into_iter().enumerate() {
            let decision = s.acquire(t, "k", cost).await;
            assert!(
                decision.reset_after > Duration::ZERO,
                "{policy}: request {i} {decision:?}"
            );
            let reset_at = t + micros(decision.reset_after);
            let early = s.peek(reset_at - 1, "k", max).await;
            assert!(
                !early.allowed,
                "{policy}: request {i}: full quota 1µs before reset_after"
            );
            assert_eq!(
                s.peek(reset_at, "k", max).await,
                s.peek(reset_at, "never-used", max).await,
                "{policy}: request {i}: not back to the initial state at reset_after"
            );
            assert_eq!(
                s.peek(reset_at, "k", 1).await,
                s.peek(reset_at, "never-used", 1).await,
                "{policy}: request {i}"
            );
            t += policy.window_us() / 3 + 1;
        }
    }
}

/// Keys do not share state: spending one key's quota leaves the others whole.
pub async fn keys_are_independent<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let max = policy.max_cost();
        let mut expected: HashMap<&str, KeyState> = HashMap::new();
        for (i, key) in ["a", "b", "a:b", "b:a", "ä", "a b", "a", "{a}", "b"]
            .into_iter()
            .enumerate()
        {
            let t = T0 + i as u64;
            let cost = if i % 2 == 0 { max } else { 1 };
            let model = expected
                .entry(key)
                .or_insert_with(|| KeyState::fresh(&policy));
            let want = model.acquire(&policy, t, cost).unwrap();
            assert_eq!(
                s.acquire(t, key, cost).await,
                want,
                "{policy}: request {i} on {key:?}"
            );
        }
    }
}

/// Every decision reports the policy's limit (capacity, queue), a
/// `remaining` within it, and a `wait` only for the leaky bucket.
pub async fn decisions_report_the_policy_limit<H: Harness>(harness: &H) {
    for policy in policies() {
        let s = Subject::new(harness, &policy).await;
        let max = policy.max_cost();
        let mut t = T0;
        for i in 0..8u64 {
            t += policy.window_us() / 4 * (i % 2);
            let cost = if i % 3 == 0 { max } else { 1 };
            for decision in [s.peek(t, "k", cost).await, s.acquire(t, "k", cost).await] {
                assert_eq!(decision.limit, max, "{policy}");
                assert!(decision.remaining <= max, "{policy}: {decision:?}");
                assert_eq!(
                    decision.allowed,
                    decision.retry_after.is_zero(),
                    "{policy}: {decision:?}"
                );
                if policy.algorithm() != limiter_core::Algorithm::LeakyBucket {
                    assert_eq!(decision.wait, Duration::ZERO, "{policy}: {decision:?}");
                }
            }
        }
    }
}

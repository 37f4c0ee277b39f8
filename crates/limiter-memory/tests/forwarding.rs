//! `Arc<L>`, `Box<L>` and `&L` are limiters wherever a `Limiter` is
//! expected, and a fake limiter can be written from public constructors
//! only (as an application's tests would).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use limiter_core::{
    Decision, DecisionSource, Error, FailurePolicy, Limiter, LimiterExt, ManualClock, Policies,
    Policy, Rate,
};
use limiter_memory::MemoryLimiter;

/// A fake that admits the first `budget` requests of any key and denies the
/// rest for a minute: built only from `Policy::new`-style constructors and
/// `Decision::admit` / `Decision::deny`.
#[derive(Debug)]
struct Fake {
    policy: Policy,
    policies: Policies,
    used: AtomicU64,
}

impl Fake {
    fn new(budget: u64) -> Self {
        let policy = Policy::fixed_window(Rate::per_minute(budget)).unwrap();
        Self {
            policies: Policies::from(&policy),
            policy,
            used: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl Limiter for Fake {
    fn policies(&self) -> &Policies {
        &self.policies
    }

    async fn acquire(&self, _key: &[u8], cost: u64) -> Result<Decision, Error> {
        let limit = self.policy.limit();
        let used = self.used.load(Ordering::SeqCst);
        if used + cost <= limit {
            self.used.fetch_add(cost, Ordering::SeqCst);
            Ok(Decision::admit(limit, limit - used - cost, 0)
                .with_reset_after(Duration::from_secs(60)))
        } else {
            Ok(
                Decision::deny(limit, limit - used, Duration::from_secs(60), 0)
                    .with_reset_after(Duration::from_secs(60)),
            )
        }
    }

    async fn peek(&self, _key: &[u8], _cost: u64) -> Result<Decision, Error> {
        let limit = self.policy.limit();
        let left = limit - self.used.load(Ordering::SeqCst);
        Ok(Decision::admit(limit, left, 0))
    }

    async fn reset(&self, _key: &[u8]) -> Result<(), Error> {
        self.used.store(0, Ordering::SeqCst);
        Ok(())
    }
}

/// Takes any limiter by value, as a service constructor would.
async fn admitted(limiter: impl Limiter, requests: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..requests {
        if limiter.acquire(b"k", 1).await.unwrap().allowed {
            admitted += 1;
        }
    }
    admitted
}

/// Takes a limiter by reference, generically.
async fn remaining<L: Limiter + ?Sized>(limiter: &L) -> u64 {
    limiter.peek(b"k", 1).await.unwrap().remaining
}

fn memory(limit: u64) -> MemoryLimiter {
    MemoryLimiter::builder(Policy::fixed_window(Rate::per_minute(limit)).unwrap())
        .clock(ManualClock::new(0))
        .build()
}

#[tokio::test]
async fn arc_box_and_references_are_limiters() {
    let shared = Arc::new(memory(3));
    assert_eq!(admitted(Arc::clone(&shared), 2).await, 2);
    assert_eq!(admitted(&*shared, 2).await, 1, "the same state behind &L");
    assert_eq!(remaining(&shared).await, 0);

    let boxed: Box<dyn Limiter> = Box::new(memory(2));
    assert_eq!(
        remaining(&boxed).await,
        1,
        "a peek reports what would be left"
    );
    assert_eq!(admitted(&boxed, 1).await, 1);
    assert_eq!(admitted(boxed, 5).await, 1);

    let dynamic: Arc<dyn Limiter> = Arc::new(memory(4));
    assert_eq!(admitted(&dynamic, 3).await, 3);
    assert_eq!(remaining(&*dynamic).await, 0);

    // The synchronous fast path goes through every wrapper.
    let direct = memory(1);
    assert!(
        Limiter::acquire_now(&&direct, b"k", 1)
            .unwrap()
            .unwrap()
            .allowed
    );
    assert!(!dynamic.acquire_now(b"k", 2).unwrap().unwrap().allowed);
    assert!(Box::new(Fake::new(1)).acquire_now(b"k", 1).is_none());
}

#[tokio::test]
async fn a_fake_from_public_constructors_stands_in_for_a_backend() {
    let fake = Arc::new(Fake::new(2));
    let limiter: Arc<dyn Limiter> = fake.clone();
    assert_eq!(admitted(&limiter, 3).await, 2);
    let denied = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(
        (
            denied.allowed,
            denied.limit,
            denied.remaining,
            denied.retry_after
        ),
        (false, 2, 0, Duration::from_secs(60))
    );
    assert_eq!(denied.source, DecisionSource::Backend);
    limiter.reset(b"k").await.unwrap();
    let waited = limiter
        .until_ready(b"k", 1, |_| async {
            unreachable!("no denial after a reset")
        })
        .await
        .unwrap();
    assert!(waited.allowed);
    assert_eq!(fake.used.load(Ordering::SeqCst), 1);
}

#[test]
fn the_failure_wrapper_keeps_the_fast_path() {
    // A full map refuses new keys with `Error::Backend`: a backend failure
    // without a server (of that request alone: no outage starts).
    let full = MemoryLimiter::builder(Policy::fixed_window(Rate::per_minute(5)).unwrap())
        .clock(ManualClock::new(0))
        .max_keys(1)
        .build();
    let limiter = full.on_failure(FailurePolicy::fallback(memory(1)));
    let held = limiter.acquire_now(b"held", 1).unwrap().unwrap();
    assert_eq!((held.source, held.remaining), (DecisionSource::Backend, 4));
    let refused = limiter.acquire_now(b"new", 1).unwrap().unwrap();
    assert_eq!(
        (refused.source, refused.limit),
        (DecisionSource::Fallback, 1)
    );
    assert!(!limiter.is_failing());
    let again = limiter.acquire_now(b"new", 1).unwrap().unwrap();
    assert!(!again.allowed && again.is_degraded());
    assert!(matches!(
        limiter.acquire_now(b"new", 0),
        Some(Err(Error::ZeroCost))
    ));
}

#[test]
fn a_fallback_that_answered_fail_open_is_not_told_as_counted() {
    // The fallback holds no key at all and answers fail open: nothing was
    // counted, and the answer must say so, not `Fallback` (counted against
    // the fallback's policy).
    let nothing_held = MemoryLimiter::builder(Policy::fixed_window(Rate::per_minute(5)).unwrap())
        .clock(ManualClock::new(0))
        .max_keys(0)
        .build()
        .on_failure(FailurePolicy::FailOpen);
    let full = MemoryLimiter::builder(Policy::fixed_window(Rate::per_minute(5)).unwrap())
        .clock(ManualClock::new(0))
        .max_keys(0)
        .build();
    let limiter = full.on_failure(FailurePolicy::fallback(nothing_held));
    let answer = limiter.acquire_now(b"new", 1).unwrap().unwrap();
    assert!(answer.allowed);
    assert_eq!(answer.source, DecisionSource::FailOpen);
}

#[tokio::test]
async fn a_probe_interval_of_duration_max_means_never_probe_again() {
    // A century at most: `Instant` + `Duration::MAX` would panic on the
    // first failure, and on every one after it.
    let flaky = Arc::new(limiter_test::Flaky::new(Arc::new(memory(5))));
    let limiter = Arc::clone(&flaky)
        .on_failure(FailurePolicy::FailClosed)
        .probe_interval(Duration::MAX);
    flaky.set_failing(true);
    let first = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(first.source, DecisionSource::FailClosed);
    assert!(limiter.is_failing());
    let calls = flaky.calls();
    flaky.set_failing(false);
    let later = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(later.source, DecisionSource::FailClosed);
    assert_eq!(flaky.calls(), calls, "no probe within the interval");
}

/// A limiter that does not count charges after the fact says so, as a
/// configuration error, through every wrapper, and counts nothing.
#[tokio::test]
async fn a_limiter_without_charges_refuses_them_as_a_configuration_error() {
    let fake = Arc::new(Fake::new(3));
    let error = fake.charge(b"k", 2).await.unwrap_err();
    assert_eq!(error.kind(), limiter_core::ErrorKind::Config);
    let why = std::error::Error::source(&error).unwrap().to_string();
    assert!(why.contains("counts no charge after the fact"), "{why}");
    let wrapped = Arc::clone(&fake).on_failure(FailurePolicy::FailOpen);
    assert_eq!(
        wrapped.charge(b"k", 2).await.unwrap_err().kind(),
        limiter_core::ErrorKind::Config
    );
    assert_eq!(admitted(fake, 5).await, 3);
}

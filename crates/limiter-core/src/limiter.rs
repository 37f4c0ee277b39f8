//! The [`Limiter`] trait every backend implements, and [`LimiterExt`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::all_of::SetDecision;
use crate::decision::Decision;
use crate::error::Error;
use crate::failure::{FailurePolicy, Resilient};
use crate::policies::Policies;

/// A keyed rate limiter under one [`Policy`](crate::Policy) or a tiered set
/// of them ([`Policies`], docs/spec.md section 7).
///
/// Object safe, so application code can hold an `Arc<dyn Limiter>` and be
/// given the in-memory backend in tests and Redis in production: both decide
/// identically (docs/spec.md sections 2 and 3). `Arc<L>`, `Box<L>` and `&L`
/// are limiters too, so a function taking `impl Limiter` takes any of them.
///
/// # The synchronous fast path
///
/// [`acquire`](Self::acquire) returns a boxed future (the price of
/// `dyn Limiter`). A backend that decides without I/O also answers
/// [`acquire_now`](Self::acquire_now) and [`peek_now`](Self::peek_now)
/// (`Some`), which cost no allocation through an `Arc<dyn Limiter>`; the
/// others answer `None`. On a hot path:
///
/// ```
/// # use limiter_core::{Decision, Error, Limiter};
/// async fn decide(limiter: &dyn Limiter, key: &str) -> Result<Decision, Error> {
///     match limiter.acquire_now(key, 1) {
///         Some(decided) => decided,
///         None => limiter.acquire(key, 1).await,
///     }
/// }
/// ```
///
/// [`LimiterExt::until_ready`] does so.
#[async_trait]
pub trait Limiter: Send + Sync + fmt::Debug {
    /// The policies every key is limited by: one policy, or a tiered set
    /// whose parts must all admit a request.
    fn policies(&self) -> &Policies;

    /// Asks to admit a request of `cost` units on `key`; commits it if admitted.
    ///
    /// A denial is `Ok` with `allowed == false`. Errors are for requests that
    /// can never succeed (cost 0 or above the maximum) and for backend failures.
    async fn acquire(&self, key: &str, cost: u64) -> Result<Decision, Error>;

    /// Answers what [`acquire`](Self::acquire) would, without writing anything.
    async fn peek(&self, key: &str, cost: u64) -> Result<Decision, Error>;

    /// Drops `key`'s state: it starts again with a full quota.
    async fn reset(&self, key: &str) -> Result<(), Error>;

    /// [`acquire`](Self::acquire), with every part's decision beside the
    /// combined one (see [`SetDecision`]): what to list each policy of a
    /// tiered set by (an HTTP layer's `RateLimit-Policy`).
    ///
    /// The default makes a [`SetDecision::single`] of `acquire`'s decision,
    /// right for a limiter of one policy; a limiter of a set overrides it.
    async fn acquire_parts(&self, key: &str, cost: u64) -> Result<SetDecision, Error> {
        self.acquire(key, cost).await.map(SetDecision::single)
    }

    /// [`peek`](Self::peek), with every part's decision (see
    /// [`acquire_parts`](Self::acquire_parts)).
    async fn peek_parts(&self, key: &str, cost: u64) -> Result<SetDecision, Error> {
        self.peek(key, cost).await.map(SetDecision::single)
    }

    /// [`acquire`](Self::acquire) with a cost of one unit.
    async fn acquire_one(&self, key: &str) -> Result<Decision, Error> {
        self.acquire(key, 1).await
    }

    /// [`acquire`](Self::acquire), answered now without a future if this
    /// limiter can (it decides in process): `Some(result)`, exactly what
    /// `acquire` would have returned, the request committed if admitted.
    /// `None` (the default) means nothing was done: call `acquire`.
    fn acquire_now(&self, key: &str, cost: u64) -> Option<Result<Decision, Error>> {
        let _ = (key, cost);
        None
    }

    /// [`peek`](Self::peek), answered now without a future if this limiter
    /// can; `None` (the default) means call `peek`.
    fn peek_now(&self, key: &str, cost: u64) -> Option<Result<Decision, Error>> {
        let _ = (key, cost);
        None
    }
}

/// Forwards every method, the fast paths included, to the limiter behind it.
macro_rules! forward_limiter {
    ($($wrapper:ty),+) => {$(
        #[async_trait]
        impl<L: Limiter + ?Sized> Limiter for $wrapper {
            fn policies(&self) -> &Policies {
                (**self).policies()
            }

            async fn acquire_parts(&self, key: &str, cost: u64) -> Result<SetDecision, Error> {
                (**self).acquire_parts(key, cost).await
            }

            async fn peek_parts(&self, key: &str, cost: u64) -> Result<SetDecision, Error> {
                (**self).peek_parts(key, cost).await
            }

            async fn acquire(&self, key: &str, cost: u64) -> Result<Decision, Error> {
                (**self).acquire(key, cost).await
            }

            async fn peek(&self, key: &str, cost: u64) -> Result<Decision, Error> {
                (**self).peek(key, cost).await
            }

            async fn reset(&self, key: &str) -> Result<(), Error> {
                (**self).reset(key).await
            }

            async fn acquire_one(&self, key: &str) -> Result<Decision, Error> {
                (**self).acquire_one(key).await
            }

            #[inline]
            fn acquire_now(&self, key: &str, cost: u64) -> Option<Result<Decision, Error>> {
                (**self).acquire_now(key, cost)
            }

            #[inline]
            fn peek_now(&self, key: &str, cost: u64) -> Option<Result<Decision, Error>> {
                (**self).peek_now(key, cost)
            }
        }
    )+};
}

forward_limiter!(Arc<L>, Box<L>, &L);

/// Conveniences for every [`Limiter`].
#[async_trait]
pub trait LimiterExt: Limiter {
    /// Acquires `cost` on `key`, sleeping for `retry_after` while denied and
    /// then for the leaky bucket's `wait`, and returns the admitting decision.
    ///
    /// `sleep` is the runtime's timer (`tokio::time::sleep`, or a function
    /// that advances a [`ManualClock`](crate::ManualClock) in tests); the core
    /// depends on no runtime. Errors (including cost above the maximum) are
    /// returned at once, never retried.
    async fn until_ready<S, F>(&self, key: &str, cost: u64, mut sleep: S) -> Result<Decision, Error>
    where
        S: FnMut(Duration) -> F + Send,
        F: Future<Output = ()> + Send,
    {
        loop {
            let decision = match self.acquire_now(key, cost) {
                Some(decided) => decided?,
                None => self.acquire(key, cost).await?,
            };
            if decision.allowed {
                if !decision.wait.is_zero() {
                    sleep(decision.wait).await;
                }
                return Ok(decision);
            }
            sleep(decision.retry_after).await;
        }
    }

    /// Wraps this limiter in [`Resilient`]: while it fails with
    /// [`Error::Backend`], `policy` answers (fail open, fail closed, return
    /// the error, or ask a fallback limiter).
    ///
    /// ```
    /// # use limiter_core::{FailurePolicy, LimiterExt, Limiter};
    /// # fn wrap(redis: impl Limiter) -> impl Limiter {
    /// redis.on_failure(FailurePolicy::FailOpen)
    /// # }
    /// ```
    fn on_failure(self, policy: FailurePolicy) -> Resilient<Self>
    where
        Self: Sized,
    {
        Resilient::new(self, policy)
    }
}

impl<L: Limiter + ?Sized> LimiterExt for L {}

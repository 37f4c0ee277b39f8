//! The [`Limiter`] trait every backend implements, and [`LimiterExt`].

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::decision::Decision;
use crate::error::Error;
use crate::policy::Policy;

/// A keyed rate limiter under one [`Policy`].
///
/// Object safe, so application code can hold an `Arc<dyn Limiter>` and be
/// given the in-memory backend in tests and Redis in production: both decide
/// identically (docs/spec.md sections 2 and 3).
#[async_trait]
pub trait Limiter: Send + Sync + fmt::Debug {
    /// The policy every key is limited by.
    fn policy(&self) -> &Policy;

    /// Asks to admit a request of `cost` units on `key`; commits it if admitted.
    ///
    /// A denial is `Ok` with `allowed == false`. Errors are for requests that
    /// can never succeed (cost 0 or above the maximum) and for backend failures.
    async fn acquire(&self, key: &str, cost: u64) -> Result<Decision, Error>;

    /// Answers what [`acquire`](Self::acquire) would, without writing anything.
    async fn peek(&self, key: &str, cost: u64) -> Result<Decision, Error>;

    /// Drops `key`'s state: it starts again with a full quota.
    async fn reset(&self, key: &str) -> Result<(), Error>;

    /// [`acquire`](Self::acquire) with a cost of one unit.
    async fn acquire_one(&self, key: &str) -> Result<Decision, Error> {
        self.acquire(key, 1).await
    }
}

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
            let decision = self.acquire(key, cost).await?;
            if decision.allowed {
                if !decision.wait.is_zero() {
                    sleep(decision.wait).await;
                }
                return Ok(decision);
            }
            sleep(decision.retry_after).await;
        }
    }
}

impl<L: Limiter + ?Sized> LimiterExt for L {}

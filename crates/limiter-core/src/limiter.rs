//! The [`Limiter`] trait every backend implements, and [`LimiterExt`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

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
/// # Keys
///
/// A key is bytes, not text: Redis keys are binary-safe, and a key built
/// from an address or an integer id costs no formatting and no allocation.
///
/// ```
/// # use limiter_core::{Decision, Error, Limiter};
/// # use std::net::IpAddr;
/// async fn by_user(limiter: &dyn Limiter, user: &str) -> Result<Decision, Error> {
///     limiter.acquire(user.as_bytes(), 1).await
/// }
/// async fn by_account(limiter: &dyn Limiter, account: u64) -> Result<Decision, Error> {
///     limiter.acquire(&account.to_be_bytes(), 1).await
/// }
/// async fn by_address(limiter: &dyn Limiter, client: IpAddr) -> Result<Decision, Error> {
///     match client {
///         IpAddr::V4(v4) => limiter.acquire(&v4.octets(), 1).await,
///         IpAddr::V6(v6) => limiter.acquire(&v6.octets(), 1).await,
///     }
/// }
/// ```
///
/// Keys of different kinds that share one limiter need a prefix that keeps
/// them apart (a 4-byte address and a 4-byte id are the same key).
///
/// # Tiered sets
///
/// A tiered set's [`Decision`] carries every part's decision
/// ([`Decision::parts`]); under one policy `parts()` is the decision
/// itself, so callers of either use the same calls.
///
/// # The synchronous fast path
///
/// [`acquire`](Self::acquire) returns a boxed future (the price of
/// `dyn Limiter`). A backend that decides without I/O also answers
/// [`acquire_now`](Self::acquire_now) and [`peek_now`](Self::peek_now)
/// (`Some`), which cost no allocation through an `Arc<dyn Limiter>`; the
/// others answer `None`. On a hot path, [`LimiterExt::acquire_fast`] tries
/// the one, then the other.
#[async_trait]
pub trait Limiter: Send + Sync + fmt::Debug {
    /// The policies every key is limited by: one policy, or a tiered set
    /// whose parts must all admit a request.
    fn policies(&self) -> &Policies;

    /// Asks to admit a request of `cost` units on `key`; commits it if admitted.
    ///
    /// A denial is `Ok` with `allowed == false`. Errors are for requests that
    /// can never succeed (cost 0 or above the maximum) and for backend failures.
    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error>;

    /// Answers what [`acquire`](Self::acquire) would, without writing anything.
    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error>;

    /// Drops `key`'s state: it starts again with a full quota.
    async fn reset(&self, key: &[u8]) -> Result<(), Error>;

    /// Counts `units` on `key` after the fact, never refused: a cost known
    /// only once the response is out (docs/spec.md section 10). It may take
    /// the key into debt, which refuses it until time has paid it back.
    ///
    /// The default answers [`Error::InvalidConfig`]: a limiter that does
    /// not count charges says so rather than dropping them.
    async fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
        let _ = (key, units);
        Err(Error::InvalidConfig(
            format!("{self:?} counts no charge after the fact (docs/spec.md section 10)").into(),
        ))
    }

    /// [`acquire`](Self::acquire), answered now without a future if this
    /// limiter can (it decides in process): `Some(result)`, exactly what
    /// `acquire` would have returned, the request committed if admitted.
    /// `None` (the default) means nothing was done: call `acquire`.
    fn acquire_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        let _ = (key, cost);
        None
    }

    /// [`peek`](Self::peek), answered now without a future if this limiter
    /// can; `None` (the default) means call `peek`.
    fn peek_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
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

            async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
                (**self).acquire(key, cost).await
            }

            async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
                (**self).peek(key, cost).await
            }

            async fn reset(&self, key: &[u8]) -> Result<(), Error> {
                (**self).reset(key).await
            }

            async fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
                (**self).charge(key, units).await
            }

            #[inline]
            fn acquire_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
                (**self).acquire_now(key, cost)
            }

            #[inline]
            fn peek_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
                (**self).peek_now(key, cost)
            }
        }
    )+};
}

forward_limiter!(Arc<L>, Box<L>, &L);

/// Conveniences for every [`Limiter`].
#[async_trait]
pub trait LimiterExt: Limiter {
    /// [`acquire_now`](Limiter::acquire_now) if this limiter answers it,
    /// else [`acquire`](Limiter::acquire): the hot path's call, which
    /// allocates no future on a backend that decides in process.
    ///
    /// ```
    /// # use limiter_core::{Decision, Error, Limiter, LimiterExt};
    /// async fn decide(limiter: &dyn Limiter, key: &[u8]) -> Result<Decision, Error> {
    ///     limiter.acquire_fast(key, 1).await
    /// }
    /// ```
    fn acquire_fast<'a>(
        &'a self,
        key: &'a [u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        // Decided before the future exists: the future boxes nothing then.
        let now = self.acquire_now(key, cost);
        async move {
            match now {
                Some(decided) => decided,
                None => self.acquire(key, cost).await,
            }
        }
    }

    /// Acquires `cost` on `key`, sleeping for `retry_after` while denied and
    /// then for the leaky bucket's `wait`, and returns the admitting decision.
    ///
    /// `sleep` is the runtime's timer (`tokio::time::sleep`, or a function
    /// that advances a [`ManualClock`](crate::ManualClock) in tests); the core
    /// depends on no runtime. Errors (including cost above the maximum) are
    /// returned at once, never retried.
    async fn until_ready<S, F>(
        &self,
        key: &[u8],
        cost: u64,
        mut sleep: S,
    ) -> Result<Decision, Error>
    where
        S: FnMut(Duration) -> F + Send,
        F: Future<Output = ()> + Send,
    {
        loop {
            let decision = self.acquire_fast(key, cost).await?;
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

//! [`Flaky`]: a limiter that fails on demand, to test what is built on
//! top of a backend ([`Resilient`](limiter_core::Resilient)) without
//! stopping a server.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use limiter_core::backend::check_policies;
use limiter_core::{Decision, Error, FailureReach, Limiter, Policies};

/// Forwards to `inner` until told to fail; then every call fails with
/// [`Error::Backend`] (an `io::Error` "injected outage") and writes
/// nothing, after checking the request as a backend does first (a cost of
/// 0 or above the max cost is still that error). Counts the calls that
/// reached it.
#[derive(Debug)]
pub struct Flaky {
    inner: Arc<dyn Limiter>,
    failing: AtomicBool,
    calls: AtomicU64,
}

impl Flaky {
    /// `inner`, answering.
    pub fn new(inner: Arc<dyn Limiter>) -> Self {
        Self {
            inner,
            failing: AtomicBool::new(false),
            calls: AtomicU64::new(0),
        }
    }

    /// Fails every call from now on (`true`) or answers again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// Calls that reached this limiter past the request checks (failed
    /// ones included).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// The error of a call while failing, or `None` when answering.
    fn outage(&self) -> Option<Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.failing
            .load(Ordering::SeqCst)
            .then(|| Error::backend(FailureReach::Backend, io::Error::other("injected outage")))
    }
}

#[async_trait]
impl Limiter for Flaky {
    fn policies(&self) -> &Policies {
        self.inner.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        check_policies(self.inner.policies(), 0, cost)?;
        match self.outage() {
            Some(error) => Err(error),
            None => self.inner.acquire(key, cost).await,
        }
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        check_policies(self.inner.policies(), 0, cost)?;
        match self.outage() {
            Some(error) => Err(error),
            None => self.inner.peek(key, cost).await,
        }
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        match self.outage() {
            Some(error) => Err(error),
            None => self.inner.reset(key).await,
        }
    }
}

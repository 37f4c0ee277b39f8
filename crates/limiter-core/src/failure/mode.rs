//! [`Mode`]: whether a [`Resilient`](super::Resilient) call commits.

use std::future::Future;
use std::pin::Pin;

use crate::decision::Decision;
use crate::error::Error;
use crate::limiter::Limiter;

/// Whether a call commits (`acquire`) or not (`peek`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Acquire,
    Peek,
}

impl Mode {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Peek => "peek",
        }
    }

    /// `limiter`'s answer to this call.
    pub(super) fn ask<'a, L: Limiter + ?Sized>(
        self,
        limiter: &'a L,
        key: &'a [u8],
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>> {
        match self {
            Self::Acquire => limiter.acquire(key, cost),
            Self::Peek => limiter.peek(key, cost),
        }
    }

    /// `limiter`'s answer to this call now, if it decides without a future.
    pub(super) fn ask_now<L: Limiter + ?Sized>(
        self,
        limiter: &L,
        key: &[u8],
        cost: u64,
    ) -> Option<Result<Decision, Error>> {
        match self {
            Self::Acquire => limiter.acquire_now(key, cost),
            Self::Peek => limiter.peek_now(key, cost),
        }
    }
}

//! What a [`Resilient`](super::Resilient) call asks of its backend: an
//! acquire or a peek, answered by one decision or by every part's.

use std::future::Future;
use std::pin::Pin;

use crate::all_of::SetDecision;
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
}

/// What a [`Resilient`](super::Resilient) call answers: a [`Decision`], or a [`SetDecision`]
/// with every part's.
pub(super) trait Answer: From<Decision> + Send {
    /// The backend's answer.
    fn ask<'a, L: Limiter>(
        inner: &'a L,
        key: &'a str,
        cost: u64,
        mode: Mode,
    ) -> Pin<Box<dyn Future<Output = Result<Self, Error>> + Send + 'a>>;
}

impl Answer for Decision {
    fn ask<'a, L: Limiter>(
        inner: &'a L,
        key: &'a str,
        cost: u64,
        mode: Mode,
    ) -> Pin<Box<dyn Future<Output = Result<Self, Error>> + Send + 'a>> {
        match mode {
            Mode::Acquire => inner.acquire(key, cost),
            Mode::Peek => inner.peek(key, cost),
        }
    }
}

impl Answer for SetDecision {
    fn ask<'a, L: Limiter>(
        inner: &'a L,
        key: &'a str,
        cost: u64,
        mode: Mode,
    ) -> Pin<Box<dyn Future<Output = Result<Self, Error>> + Send + 'a>> {
        match mode {
            Mode::Acquire => inner.acquire_parts(key, cost),
            Mode::Peek => inner.peek_parts(key, cost),
        }
    }
}

//! [`BackendError`]: the source of every [`Error::Backend`](limiter_core::Error::Backend)
//! this crate returns.

use std::fmt;

/// What kind of failure a [`BackendError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The limiter's configuration is invalid (a bad URL, a zero pool size
    /// or timeout, a key prefix with braces). Reported by
    /// [`RedisLimiterBuilder::build`](crate::RedisLimiterBuilder::build) as
    /// [`Error::InvalidConfig`](limiter_core::Error::InvalidConfig), before
    /// any round trip; never subject to the failure policy.
    Config,
    /// No connection to Redis could be made (refused, unreachable, or not
    /// within the connection timeout).
    Connect,
    /// Redis did not answer within the command timeout.
    Timeout,
    /// Redis answered with an error or an unexpected reply, or the
    /// connection broke while waiting for the answer.
    Redis,
}

/// A Redis backend failure, with what the limiter was doing and, when the
/// Redis client reported it, the underlying [`redis::RedisError`] as
/// [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct BackendError {
    kind: BackendErrorKind,
    message: String,
    source: Option<redis::RedisError>,
}

impl BackendError {
    pub(crate) fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(mut self, source: redis::RedisError) -> Self {
        self.source = Some(source);
        self
    }

    /// Prepends what the limiter was doing: `"{context}: {message}"`.
    pub(crate) fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::new(BackendErrorKind::Config, message)
    }

    /// As [`Error::InvalidConfig`](limiter_core::Error::InvalidConfig): the
    /// caller's to fix, not a backend failure.
    pub(crate) fn into_config_error(self) -> limiter_core::Error {
        limiter_core::Error::InvalidConfig(Box::new(self))
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

impl From<BackendError> for limiter_core::Error {
    fn from(e: BackendError) -> Self {
        limiter_core::Error::Backend(Box::new(e))
    }
}

//! [`BackendError`]: the source of every [`Error::Backend`](limiter_core::Error::Backend)
//! this crate returns.

use std::fmt;
use std::sync::Arc;

/// What kind of failure a [`BackendError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The limiter's configuration is invalid: a bad URL, a zero pool size
    /// or timeout (reported by
    /// [`RedisBackendBuilder::build`](crate::RedisBackendBuilder::build)
    /// before any round trip), a key prefix with braces (by
    /// [`RedisLimiterBuilder::build`](crate::RedisLimiterBuilder::build)),
    /// a single-server backend pointed at a Redis Cluster node (on
    /// connecting), or credentials the server refuses (a wrong password or
    /// user, or none where one is required: on connecting, and at once
    /// while a probe checks whether the server accepts them again); or a
    /// call from outside any Tokio runtime
    /// finds none to run on (the backend never met one, or the first it
    /// met has shut down). Always
    /// [`Error::InvalidConfig`](limiter_core::Error::InvalidConfig), never
    /// subject to the failure policy.
    Config,
    /// No connection to Redis could be made (refused, unreachable, or not
    /// within the connection timeout).
    Connect,
    /// Redis did not answer within the command timeout.
    Timeout,
    /// Redis is known to be down (a connection or a command failed a
    /// moment ago, or the server answered that it serves no decision now:
    /// a replica, or loading its data): the decision failed at once,
    /// without a round trip,
    /// while a background probe checks the server.
    Unavailable,
    /// Redis answered with an error or an unexpected reply, or the
    /// connection broke while waiting for the answer.
    Redis,
}

/// A Redis backend failure, with what the limiter was doing and, when the
/// Redis client reported it, the underlying [`redis::RedisError`] as
/// [`source`](std::error::Error::source). Cheap to clone: the decisions
/// of one batch (see `batch.rs`) share its failure.
#[derive(Debug, Clone)]
pub struct BackendError {
    kind: BackendErrorKind,
    /// Whether one cluster node failed, not the whole backend.
    on_node: bool,
    message: String,
    /// What the Redis client reported, or (for a request never sent) the
    /// core's [`Overloaded`](limiter_core::Overloaded).
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl BackendError {
    pub(crate) fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            on_node: false,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(mut self, source: redis::RedisError) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// A request not sent because Redis answers slower than requests
    /// arrive: an [`Overloaded`](limiter_core::Overloaded) cause, which a
    /// failure policy answers for this request alone.
    pub(crate) fn overloaded(message: impl Into<String>, waited: std::time::Duration) -> Self {
        Self {
            kind: BackendErrorKind::Timeout,
            on_node: false,
            message: message.into(),
            source: Some(Arc::new(limiter_core::Overloaded::new(waited))),
        }
    }

    /// The same failure, met on one cluster node: it reaches that node's
    /// keys, not the backend's.
    pub(crate) fn on_node(mut self) -> Self {
        self.on_node = true;
        self
    }

    /// The Redis client's error behind this one, if any.
    fn redis_source(&self) -> Option<&redis::RedisError> {
        self.source.as_deref()?.downcast_ref()
    }

    /// The same failure, told as what the limiter was doing.
    pub(crate) fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::new(BackendErrorKind::Config, message)
    }

    /// A call task dropped before it answered: its runtime is shutting
    /// down.
    pub(crate) fn dropped() -> Self {
        Self::new(
            BackendErrorKind::Redis,
            "the decision was dropped unanswered (the runtime is shutting down)",
        )
    }

    /// As [`Error::InvalidConfig`](limiter_core::Error::InvalidConfig): the
    /// caller's to fix, not a backend failure.
    pub(crate) fn into_config_error(self) -> limiter_core::Error {
        limiter_core::Error::InvalidConfig(Box::new(self))
    }

    /// Whether Redis could not be reached, did not answer, or answered
    /// that it serves no decision now ([`is_not_serving`]), as opposed to
    /// answering this request with an error, or a configuration error.
    pub(crate) fn is_outage(&self) -> bool {
        matches!(
            self.kind,
            BackendErrorKind::Connect | BackendErrorKind::Timeout | BackendErrorKind::Unavailable
        ) || self.redis_source().is_some_and(is_not_serving)
    }

    /// Whether Redis refused the backend's credentials ([`is_refused_credentials`]).
    pub(crate) fn is_refused_credentials(&self) -> bool {
        self.redis_source().is_some_and(is_refused_credentials)
    }

    /// Whether Redis refused for want of memory (`OOM`: `maxmemory` reached
    /// under `noeviction`): the server answers, it only writes nothing.
    pub(crate) fn is_out_of_memory(&self) -> bool {
        self.redis_source().is_some_and(is_out_of_memory)
    }

    /// Whether Redis does not know the command it was sent: a server
    /// without limiter-redis-module, sent the module's command.
    pub(crate) fn is_unknown_command(&self) -> bool {
        self.redis_source()
            .is_some_and(|e| e.to_string().contains("unknown command"))
    }

    /// Whether a Redis Cluster answered `ASK` (the key's slot is half-way
    /// through a migration) and the command did not follow it.
    pub(crate) fn is_ask(&self) -> bool {
        self.redis_source()
            .is_some_and(|e| matches!(e.retry_method(), redis::RetryMethod::AskRedirect))
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }

    /// How far this failure reaches: no answer from the server, or an
    /// answer that it serves no decision now (`READONLY`, `LOADING`,
    /// `MASTERDOWN`), is the whole backend's (one node's, on a cluster);
    /// any other answer with an error, or a request not sent for want of a
    /// turn, is this request's alone.
    pub fn reach(&self) -> limiter_core::FailureReach {
        use limiter_core::FailureReach;
        let not_sent = self
            .source
            .as_deref()
            .is_some_and(|source| source.is::<limiter_core::Overloaded>());
        match (self.is_outage() && !not_sent, self.on_node) {
            (true, false) => FailureReach::Backend,
            (true, true) => FailureReach::Node,
            (false, _) => FailureReach::Request,
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The cause is `source()`'s to tell: a chain reporter prints each
        // cause once.
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

impl From<BackendError> for limiter_core::Error {
    /// A [`Config`](BackendErrorKind::Config) error is the caller's to fix
    /// ([`Error::InvalidConfig`](limiter_core::Error::InvalidConfig)), so
    /// that no failure policy answers it; any other is
    /// [`Error::Backend`](limiter_core::Error::Backend), as far as it
    /// [reaches](BackendError::reach).
    fn from(e: BackendError) -> Self {
        match e.kind {
            BackendErrorKind::Config => e.into_config_error(),
            _ => limiter_core::Error::backend(e.reach(), e),
        }
    }
}

/// `OOM command not allowed when used memory > 'maxmemory'`: a full server
/// refuses every command that may grow its memory (`FCALL` of a writing
/// function, `FUNCTION LOAD`), and answers the rest.
pub(crate) fn is_out_of_memory(error: &redis::RedisError) -> bool {
    error.code() == Some("OOM")
}

/// The server serves no decision now, whatever the key: it is a replica
/// (`READONLY`: a primary demoted by a failover; `MASTERDOWN`: a replica
/// cut from its primary) or it is loading its data (`LOADING`). An outage
/// of the server, not of one request: only a new connection, once the
/// address serves a writable primary again, ends it. Not `MISCONF` (writes
/// refused after a failed save) nor `OOM`: that server still answers peeks,
/// and starts writing again in place, so each request is answered alone.
pub(crate) fn is_not_serving(error: &redis::RedisError) -> bool {
    matches!(error.code(), Some("READONLY" | "LOADING" | "MASTERDOWN"))
}

/// The server refused the backend's credentials: a wrong password or user
/// (`WRONGPASS`, which the client reports as failed authentication), or
/// none where one is required (`NOAUTH`). A configuration error: no
/// failure policy answers it.
pub(crate) fn is_refused_credentials(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
}

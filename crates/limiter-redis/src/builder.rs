//! [`RedisLimiterBuilder`] and [`FailurePolicy`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use limiter_core::{Algorithm, Clock, Error, Policy, PolicyError};

use crate::error::BackendError;
use crate::limiter::RedisLimiter;
use crate::pool::{Manager, Pool};
use crate::scripts;

/// What a decision answers when Redis cannot be reached or does not answer
/// in time (or answers with an error).
///
/// Request errors (cost 0, cost above the maximum, time out of range) are
/// returned as errors whatever the policy, and so is a failed
/// [`reset`](limiter_core::Limiter::reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Return [`Error::Backend`]: the caller decides. The default.
    #[default]
    ReturnError,
    /// Admit the request (with `remaining` 0) and log a `tracing` warning
    /// (at most one per second): an outage of the limiter does not become
    /// an outage of the service.
    FailOpen,
    /// Deny the request (with `remaining` 0 and a `retry_after` of one
    /// second, or the window if shorter) and log a `tracing` warning (at
    /// most one per second): nothing passes unlimited.
    FailClosed,
}

/// Builds a [`RedisLimiter`]; made by [`RedisLimiter::builder`].
///
/// Every option has a default, documented on its method.
#[must_use = "a builder does nothing until `.build().await`"]
pub struct RedisLimiterBuilder {
    pub(crate) url: String,
    pub(crate) policy: Policy,
    pub(crate) key_prefix: String,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) pool_size: u32,
    pub(crate) connection_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) on_failure: FailurePolicy,
    pub(crate) max_sliding_log_limit: u64,
    pub(crate) ttl_floor: Duration,
}

impl RedisLimiterBuilder {
    /// The default [`key_prefix`](Self::key_prefix).
    pub const DEFAULT_KEY_PREFIX: &'static str = "limiter";
    /// The default [`pool_size`](Self::pool_size).
    pub const DEFAULT_POOL_SIZE: u32 = 10;
    /// The default [`connection_timeout`](Self::connection_timeout).
    pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default [`command_timeout`](Self::command_timeout).
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default [`max_sliding_log_limit`](Self::max_sliding_log_limit).
    pub const DEFAULT_MAX_SLIDING_LOG_LIMIT: u64 = 10_000;
    /// The default [`ttl_floor`](Self::ttl_floor).
    pub const DEFAULT_TTL_FLOOR: Duration = Duration::from_secs(60);

    pub(crate) fn new(url: String, policy: Policy) -> Self {
        Self {
            url,
            policy,
            key_prefix: Self::DEFAULT_KEY_PREFIX.to_owned(),
            clock: None,
            pool_size: Self::DEFAULT_POOL_SIZE,
            connection_timeout: Self::DEFAULT_CONNECTION_TIMEOUT,
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
            on_failure: FailurePolicy::default(),
            max_sliding_log_limit: Self::DEFAULT_MAX_SLIDING_LOG_LIMIT,
            ttl_floor: Self::DEFAULT_TTL_FLOOR,
        }
    }

    /// The prefix of every Redis key: a user key `k` lives at
    /// `{prefix}:{k}:{algorithm}` (e.g. `limiter:{user:42}:sl`). Must not
    /// contain `{` or `}` (the user key is the cluster hash tag). Defaults
    /// to `"limiter"`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Takes request times from `clock` and passes them to the scripts
    /// (caller time), as tests and trace replays need. Keys then live at
    /// least [`ttl_floor`](Self::ttl_floor), since the server's TTL clock
    /// is not the caller's.
    ///
    /// Defaults to none: each script reads Redis `TIME`, so every client of
    /// one server shares one clock, whatever their own clocks say.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The most connections kept open (each decision holds one for its
    /// round trip). Must be at least 1. Defaults to 10.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// How long getting a connection may take, including connecting: past
    /// it the decision fails (see [`on_failure`](Self::on_failure)). While
    /// Redis is unreachable, decisions fail at once, except one probe per
    /// second. Must not be zero. Defaults to 1 second.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long Redis may take to answer one decision: past it the decision
    /// fails (see [`on_failure`](Self::on_failure)) and the connection is
    /// replaced. Must not be zero. Defaults to 1 second.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// What decisions answer when Redis fails. Defaults to
    /// [`FailurePolicy::ReturnError`].
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.on_failure = policy;
        self
    }

    /// The largest limit accepted for a sliding-log policy, whose key holds
    /// up to one sorted-set entry per admission in the window: a guard
    /// against a policy that would hold millions of entries per key (use a
    /// sliding window counter for such limits). Defaults to 10 000.
    pub fn max_sliding_log_limit(mut self, limit: u64) -> Self {
        self.max_sliding_log_limit = limit;
        self
    }

    /// With a caller [`clock`](Self::clock), the least TTL given to a key
    /// (docs/spec.md rule 2.5: a replay's time runs faster or slower than the
    /// server's, so a key must outlive its `reset_after` in server time).
    /// Unused with Redis `TIME`, where a key's TTL is its `reset_after`.
    /// Defaults to 60 seconds.
    pub fn ttl_floor(mut self, floor: Duration) -> Self {
        self.ttl_floor = floor;
        self
    }

    /// The TTL floor in ms the scripts apply: 0 with Redis time (the TTL is
    /// then exactly `reset_after`); with a caller clock, capped where Lua's
    /// doubles and `PEXPIRE` stay exact (285 years).
    fn ttl_floor_ms(&self) -> u64 {
        match self.clock {
            Some(_) => u64::try_from(self.ttl_floor.as_millis())
                .unwrap_or(u64::MAX)
                .min(limiter_core::MAX_TIME_US / 1000),
            None => 0,
        }
    }

    /// Checks every option, then connects once (bounded by the connection
    /// timeout) and loads the policy's script.
    ///
    /// A bad option or policy is an error before any round trip: a
    /// sliding-log limit above
    /// [`max_sliding_log_limit`](Self::max_sliding_log_limit) is
    /// [`Error::InvalidPolicy`] with [`PolicyError::Unsupported`]; a bad URL,
    /// a zero pool size or timeout, or a prefix with braces is
    /// [`Error::InvalidConfig`] (a [`BackendError`] of kind
    /// [`Config`](crate::BackendErrorKind::Config)).
    ///
    /// If Redis cannot be reached, [`FailurePolicy::ReturnError`] (the
    /// default) returns [`Error::Backend`] within the connection timeout;
    /// the other policies log a warning and return the limiter, which
    /// connects when Redis comes back.
    ///
    /// Must be called within a Tokio runtime.
    pub async fn build(self) -> Result<RedisLimiter, Error> {
        if self.policy.algorithm() == Algorithm::SlidingLog
            && self.policy.limit() > self.max_sliding_log_limit
        {
            return Err(PolicyError::Unsupported {
                reason: format!(
                    "a Redis sliding log keeps one entry per admission, and a limit of {} is \
                     above the maximum of {} (raise it with `max_sliding_log_limit`, or use \
                     sliding-counter, which keeps three numbers per key)",
                    self.policy.limit(),
                    self.max_sliding_log_limit
                ),
            }
            .into());
        }
        if self.pool_size == 0 {
            return Err(
                BackendError::config("pool size must be at least 1, got 0").into_config_error()
            );
        }
        if self.connection_timeout.is_zero() || self.command_timeout.is_zero() {
            return Err(
                BackendError::config("timeouts must be longer than zero").into_config_error()
            );
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(BackendError::config(format!(
                "key prefix {:?} contains a brace; braces are reserved for the user key's \
                 cluster hash tag",
                self.key_prefix
            ))
            .into_config_error());
        }
        let shown_url = redact(&self.url);
        let client = redis::Client::open(self.url.as_str()).map_err(|e| {
            BackendError::config(format!("invalid Redis URL {shown_url:?}"))
                .with_source(e)
                .into_config_error()
        })?;
        let manager = Manager::new(client, self.connection_timeout, self.command_timeout);
        let pool = Pool::new(manager, self.pool_size, self.connection_timeout);
        let script = scripts::script(&self.policy, self.ttl_floor_ms());
        let ready = async {
            let mut conn = pool.connect_now().await?;
            let loaded = tokio::time::timeout(
                self.command_timeout,
                script.prepare_invoke().load_async(&mut conn.inner),
            )
            .await;
            match loaded {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => {
                    conn.record(&e);
                    Err(crate::limiter::command_error(e))
                }
                Err(_) => {
                    conn.mark_broken();
                    Err(crate::limiter::timeout_error(self.command_timeout))
                }
            }
        };
        if let Err(e) = ready.await {
            let e = e.context(format_args!("Redis at {shown_url}"));
            match self.on_failure {
                FailurePolicy::ReturnError => return Err(e.into()),
                FailurePolicy::FailOpen | FailurePolicy::FailClosed => {
                    tracing::warn!(
                        error = %e,
                        on_failure = ?self.on_failure,
                        "Redis limiter built while Redis is unavailable; it connects when Redis is back"
                    );
                }
            }
        }
        Ok(RedisLimiter::new(self, pool, shown_url, script))
    }
}

impl fmt::Debug for RedisLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiterBuilder")
            .field("url", &redact(&self.url))
            .field("policy", &self.policy)
            .field("key_prefix", &self.key_prefix)
            .field("clock", &self.clock)
            .field("pool_size", &self.pool_size)
            .field("connection_timeout", &self.connection_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("on_failure", &self.on_failure)
            .field("max_sliding_log_limit", &self.max_sliding_log_limit)
            .field("ttl_floor", &self.ttl_floor)
            .finish()
    }
}

/// The URL without its password, for messages: `redis://user:***@host/`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
        assert_eq!(
            redact("redis://app:s3cret@cache:6379/0"),
            "redis://app:***@cache:6379/0"
        );
        assert_eq!(redact("rediss://:s3cret@cache/"), "rediss://:***@cache/");
        assert_eq!(redact("not a url"), "not a url");
    }
}

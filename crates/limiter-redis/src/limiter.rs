//! [`RedisLimiter`]: the [`Limiter`] on Redis.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use limiter_core::{
    check_request, Clock, Decision, Error, Limiter, Policy, SystemClock, TickDecision,
};
use redis::RedisError;

use crate::builder::{FailurePolicy, RedisLimiterBuilder};
use crate::error::{BackendError, BackendErrorKind};
use crate::keys::state_key;
use crate::pool::Pool;
use crate::scripts::{self, Mode};
use redis::Script;

/// A keyed rate limiter whose state lives in Redis: each decision is one
/// atomic Lua script (one round trip), deciding exactly as `limiter-core`.
///
/// Build one with [`RedisLimiter::builder`]. Clones are not needed: share it
/// behind an `Arc` (it is `Send + Sync`, and `Arc<dyn Limiter>` works).
pub struct RedisLimiter {
    policy: Policy,
    key_prefix: String,
    clock: Option<Arc<dyn Clock>>,
    pool: Pool,
    command_timeout: Duration,
    on_failure: FailurePolicy,
    /// The policy's script, with its constants written in.
    script: Script,
    url: String,
    warnings: WarningThrottle,
}

impl RedisLimiter {
    /// Starts building a limiter for `policy` on the Redis server at `url`
    /// (`redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS
    /// if the `redis` crate is built with it).
    pub fn builder(url: impl Into<String>, policy: Policy) -> RedisLimiterBuilder {
        RedisLimiterBuilder::new(url.into(), policy)
    }

    pub(crate) fn new(
        builder: RedisLimiterBuilder,
        pool: Pool,
        url: String,
        script: Script,
    ) -> Self {
        Self {
            policy: builder.policy,
            key_prefix: builder.key_prefix,
            clock: builder.clock,
            pool,
            command_timeout: builder.command_timeout,
            on_failure: builder.on_failure,
            script,
            url,
            warnings: WarningThrottle::default(),
        }
    }

    /// The Redis key holding `key`'s state, e.g. `limiter:{user:42}:sl`:
    /// what to inspect with `redis-cli`.
    pub fn redis_key(&self, key: &str) -> String {
        state_key(&self.key_prefix, self.policy.algorithm(), key)
    }

    /// The key prefix (see [`RedisLimiterBuilder::key_prefix`]).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// Checks that Redis answers, within the timeouts.
    pub async fn ping(&self) -> Result<(), Error> {
        self.command::<String>(&redis::cmd("PING"))
            .await
            .map(drop)
            .map_err(|e| e.context(format_args!("Redis at {}", self.url)).into())
    }

    /// Runs one command on a pooled connection, within the command timeout.
    async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, BackendError> {
        let mut conn = self.pool.get().await?;
        let call = cmd.query_async::<T>(&mut conn.inner);
        match tokio::time::timeout(self.command_timeout, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                conn.record(&e);
                Err(command_error(e))
            }
            Err(_) => {
                conn.mark_broken();
                Err(timeout_error(self.command_timeout))
            }
        }
    }

    /// One decision: validate, run the script (one round trip), convert.
    async fn decide(&self, key: &str, cost: u64, mode: Mode) -> Result<Decision, Error> {
        let time_us = self.clock.as_ref().map(|clock| clock.now_us());
        // With Redis TIME the time is checked by the server's clock, which
        // stays below 2^53 µs until the year 2255.
        check_request(&self.policy, time_us.unwrap_or(0), cost)?;
        match self.run(key, cost, time_us, mode).await {
            Ok(decision) => Ok(decision),
            Err(e) => self.fallback(
                key,
                e.context(format_args!("Redis at {}", self.url)),
                time_us,
            ),
        }
    }

    async fn run(
        &self,
        key: &str,
        cost: u64,
        time_us: Option<u64>,
        mode: Mode,
    ) -> Result<Decision, BackendError> {
        let mut invocation = self.script.prepare_invoke();
        invocation.key(self.redis_key(key));
        for arg in scripts::args(mode, cost, time_us) {
            invocation.arg(arg);
        }
        let mut conn = self.pool.get().await?;
        // EVALSHA, and on NOSCRIPT (a restarted or flushed server) SCRIPT
        // LOAD and EVALSHA again.
        let call = invocation.invoke_async::<Vec<u64>>(&mut conn.inner);
        let reply = match tokio::time::timeout(self.command_timeout, call).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                conn.record(&e);
                return Err(command_error(e));
            }
            Err(_) => {
                conn.mark_broken();
                return Err(timeout_error(self.command_timeout));
            }
        };
        scripts::decision(&self.policy, &reply).ok_or_else(|| {
            BackendError::new(
                BackendErrorKind::Redis,
                format!("unexpected script reply {reply:?}"),
            )
        })
    }

    /// What a failed decision answers, per the failure policy.
    fn fallback(
        &self,
        key: &str,
        error: BackendError,
        time_us: Option<u64>,
    ) -> Result<Decision, Error> {
        let allowed = match self.on_failure {
            FailurePolicy::ReturnError => return Err(error.into()),
            FailurePolicy::FailOpen => true,
            FailurePolicy::FailClosed => false,
        };
        // One warning per second at most, counting the failures in between:
        // an outage must not flood the logs at the request rate.
        if let Some(suppressed) = self.warnings.admit() {
            tracing::warn!(
                error = %error,
                key,
                on_failure = ?self.on_failure,
                suppressed,
                "rate limiter backend failed; {} the request ({suppressed} more failures since the last warning)",
                if allowed { "admitting" } else { "denying" }
            );
        } else {
            tracing::debug!(error = %error, key, "rate limiter backend failed");
        }
        let policy = &self.policy;
        let time_us = time_us
            .unwrap_or_else(|| SystemClock.now_us())
            .min(limiter_core::MAX_TIME_US);
        let tick = policy.tick_us();
        let retry_after = if allowed {
            0
        } else {
            policy.window_us().min(1_000_000).div_ceil(tick)
        };
        let decision = TickDecision {
            allowed,
            remaining: 0,
            retry_after,
            reset_after: retry_after,
            wait: 0,
            t_eff: time_us / tick,
        };
        Ok(decision.into_decision(policy, time_us))
    }
}

/// Lets through one warning per [`WarningThrottle::PERIOD`].
#[derive(Debug, Default)]
struct WarningThrottle {
    state: Mutex<Option<(Instant, u64)>>,
}

impl WarningThrottle {
    const PERIOD: Duration = Duration::from_secs(1);

    /// `Some(failures suppressed since the last warning)` if a warning may
    /// be logged now, else `None` (and the failure is counted).
    fn admit(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *state {
            Some((last, suppressed)) if last.elapsed() < Self::PERIOD => {
                *suppressed += 1;
                None
            }
            _ => {
                let suppressed = state.map_or(0, |(_, n)| n);
                *state = Some((Instant::now(), 0));
                Some(suppressed)
            }
        }
    }
}

/// A failed command, classified.
pub(crate) fn command_error(e: RedisError) -> BackendError {
    let (kind, what) = if e.is_timeout() {
        (BackendErrorKind::Timeout, "no answer in time")
    } else if e.is_io_error() || e.is_connection_dropped() {
        (BackendErrorKind::Connect, "connection lost")
    } else {
        (BackendErrorKind::Redis, "command failed")
    };
    BackendError::new(kind, what).with_source(e)
}

/// A command that did not finish within `timeout`.
pub(crate) fn timeout_error(timeout: Duration) -> BackendError {
    BackendError::new(
        BackendErrorKind::Timeout,
        format!("no answer within {timeout:?}"),
    )
}

#[async_trait]
impl Limiter for RedisLimiter {
    fn policy(&self) -> &Policy {
        &self.policy
    }

    async fn acquire(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Acquire).await
    }

    async fn peek(&self, key: &str, cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Peek).await
    }

    /// Deletes the key's state (`DEL`). Fails with [`Error::Backend`] if
    /// Redis fails, whatever the failure policy.
    async fn reset(&self, key: &str) -> Result<(), Error> {
        let mut del = redis::cmd("DEL");
        del.arg(self.redis_key(key));
        self.command::<u64>(&del)
            .await
            .map(drop)
            .map_err(|e| e.context(format_args!("Redis at {}", self.url)).into())
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("url", &self.url)
            .field("policy", &self.policy)
            .field("key_prefix", &self.key_prefix)
            .field(
                "time",
                &match &self.clock {
                    Some(clock) => format!("caller clock {clock:?}"),
                    None => "Redis TIME".to_owned(),
                },
            )
            .field("on_failure", &self.on_failure)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_throttled_and_counted() {
        let throttle = WarningThrottle::default();
        assert_eq!(throttle.admit(), Some(0));
        assert_eq!(throttle.admit(), None);
        assert_eq!(throttle.admit(), None);
        let mut state = throttle.state.lock().unwrap();
        let (last, _) = state.as_mut().unwrap();
        *last -= WarningThrottle::PERIOD;
        drop(state);
        assert_eq!(throttle.admit(), Some(2));
        assert_eq!(throttle.admit(), None);
    }
}

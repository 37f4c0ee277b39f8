//! [`RedisLimiter`]: the [`Limiter`] on Redis.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use limiter_core::backend::{check_request, TickDecision};
use limiter_core::{Clock, Decision, Error, Limiter, Policy, SystemClock};

use crate::backend::RedisBackend;
use crate::builder::{FailurePolicy, RedisLimiterBuilder};
use crate::error::{BackendError, BackendErrorKind};
use crate::keys::KeyLayout;
use crate::scripts::{self, LuaScript, Mode};

/// A keyed rate limiter whose state lives in Redis: each decision is one
/// atomic Lua script (one round trip), deciding exactly as `limiter-core`.
///
/// Build one with [`RedisLimiter::builder`] on a shared [`RedisBackend`].
/// Share it behind an `Arc` (it is `Send + Sync`, and `Arc<dyn Limiter>`
/// works).
pub struct RedisLimiter {
    policy: Policy,
    backend: RedisBackend,
    keys: KeyLayout,
    key_prefix: String,
    clock: Option<Arc<dyn Clock>>,
    on_failure: FailurePolicy,
    /// The policy's script, with its constants written in.
    script: LuaScript,
    warnings: WarningThrottle,
}

impl RedisLimiter {
    /// Starts building a limiter for `policy` on `backend` (its connections
    /// are shared with every other limiter built on it).
    pub fn builder(backend: &RedisBackend, policy: Policy) -> RedisLimiterBuilder {
        RedisLimiterBuilder::new(backend.clone(), policy)
    }

    pub(crate) fn new(builder: RedisLimiterBuilder, script: LuaScript) -> Self {
        Self {
            keys: KeyLayout::new(&builder.key_prefix, &builder.policy),
            policy: builder.policy,
            backend: builder.backend,
            key_prefix: builder.key_prefix,
            clock: builder.clock,
            on_failure: builder.on_failure,
            script,
            warnings: WarningThrottle::default(),
        }
    }

    /// The Redis key holding `key`'s state, e.g.
    /// `limiter:{user:42}:sl-e77675966f00`: what to inspect with `redis-cli`.
    pub fn redis_key(&self, key: &str) -> String {
        self.keys.state_key(key)
    }

    /// The key prefix (see [`RedisLimiterBuilder::key_prefix`]).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The backend this limiter decides on.
    pub fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// One decision: validate, run the script (one round trip), convert.
    async fn decide(&self, key: &str, cost: u64, mode: Mode) -> Result<Decision, Error> {
        let time_us = self.clock.as_ref().map(|clock| clock.now_us());
        // With Redis TIME the time is checked by the server's clock, which
        // stays below 2^53 µs until the year 2255.
        check_request(&self.policy, time_us.unwrap_or(0), cost)?;
        match self.run(key, cost, time_us, mode).await {
            Ok(decision) => Ok(decision),
            Err(e) => self.fallback(key, e, time_us),
        }
    }

    async fn run(
        &self,
        key: &str,
        cost: u64,
        time_us: Option<u64>,
        mode: Mode,
    ) -> Result<Decision, BackendError> {
        let cmd = self
            .script
            .decide(&self.keys.state_key(key), mode, cost, time_us);
        let reply = self.backend.query(&cmd, Some(&self.script)).await?;
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
        self.backend
            .query(&del, None)
            .await
            .map(drop)
            .map_err(Into::into)
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("backend", &self.backend)
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

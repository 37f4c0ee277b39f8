//! [`RedisLimiter`]: the [`Limiter`] on Redis.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use limiter_core::backend::check_request;
use limiter_core::{Clock, Decision, Error, Limiter, Policy};

use crate::backend::RedisBackend;
use crate::builder::RedisLimiterBuilder;
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
    /// The policy's script, with its constants written in.
    script: LuaScript,
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
            script,
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
        Ok(self.run(key, cost, time_us, mode).await?)
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
            .finish_non_exhaustive()
    }
}

//! [`RedisLimiter`]: the [`Limiter`] on Redis.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use limiter_core::backend::check_policies;
use limiter_core::{Clock, Decision, Error, Limiter, Policies};

use crate::builder::RedisLimiterBuilder;
use crate::connection::backend::RedisBackend;
use crate::engine::Engine;
use crate::protocol::batch::Decider;
use crate::protocol::keys::KeyLayout;
use crate::protocol::scripts::LuaFunction;
use crate::protocol::wire::{Mode, Request};

/// A keyed rate limiter whose state lives in Redis: each decision is one
/// atomic Lua function call (one round trip), deciding exactly as `limiter-core`.
///
/// Under a tiered set (several policies), one call decides every part:
/// each part's state is its own Redis key, all under the user key's hash
/// tag (one slot, so the set is atomic on a cluster too); a denial writes
/// nothing, an admission commits every part.
///
/// Build one with [`RedisLimiter::builder`] on a shared [`RedisBackend`].
/// Share it behind an `Arc` (it is `Send + Sync`, and `Arc<dyn Limiter>`
/// works).
pub struct RedisLimiter {
    decider: Arc<Decider>,
    key_prefix: String,
    clock: Option<Arc<dyn Clock>>,
}

impl RedisLimiter {
    /// Starts building a limiter for `policies` (a [`Policy`](limiter_core::Policy)
    /// or a tiered set) on `backend` (its connections are shared with every
    /// other limiter built on it).
    pub fn builder(backend: &RedisBackend, policies: impl Into<Policies>) -> RedisLimiterBuilder {
        RedisLimiterBuilder::new(backend.clone(), policies.into())
    }

    pub(crate) fn new(builder: RedisLimiterBuilder, function: LuaFunction) -> Self {
        let keys = KeyLayout::for_set(&builder.key_prefix, &builder.policies);
        Self {
            decider: Arc::new(Decider::new(
                builder.policies,
                builder.backend,
                keys,
                function,
            )),
            key_prefix: builder.key_prefix,
            clock: builder.clock,
        }
    }

    /// The Redis key holding `key`'s state (under the first policy of a
    /// set), e.g. `limiter:{user:42}:sl-3f50e54ee2b6`: what to inspect with
    /// `redis-cli`. Bytes, as the key is.
    pub fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        self.decider.keys[0].state_key(key)
    }

    /// The Redis keys holding `key`'s state, one per policy of the set, in
    /// its order (all in one cluster slot).
    pub fn redis_keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        self.decider
            .keys
            .iter()
            .map(|layout| layout.state_key(key))
            .collect()
    }

    /// The key prefix (see [`RedisLimiterBuilder::key_prefix`]).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// What decides on the server for this limiter now: [`Engine::Module`]
    /// or [`Engine::Lua`] (never [`Engine::Detect`], which chooses one).
    pub fn engine(&self) -> Engine {
        match self.decider.function.is_on_module() {
            true => Engine::Module,
            false => Engine::Lua,
        }
    }

    /// The backend this limiter decides on.
    pub fn backend(&self) -> &RedisBackend {
        &self.decider.backend
    }

    /// One decision: validate, then decide in the limiter's next call (one
    /// round trip, shared with the decisions that arrived meanwhile: see
    /// `batch.rs`).
    async fn decide(&self, key: &[u8], cost: u64, mode: Mode) -> Result<Decision, Error> {
        let time_us = self.clock.as_ref().map(|clock| clock.now_us());
        // With Redis TIME the time is checked by the server's clock, which
        // stays below 2^53 µs until the year 2255.
        check_policies(&self.decider.policies, time_us.unwrap_or(0), cost)?;
        let request = Request {
            key: key.into(),
            cost,
            mode,
            time_us,
        };
        Ok(self.decider.decide(request).await?)
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    fn policies(&self) -> &Policies {
        &self.decider.policies
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Acquire).await
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Peek).await
    }

    /// Deletes the key's state under every part (`DEL`, one command: the
    /// keys share a slot). Fails with [`Error::Backend`] if Redis fails,
    /// whatever the failure policy.
    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let mut del = redis::cmd("DEL");
        del.arg(self.redis_keys(key));
        self.decider
            .backend
            .query(&del, None)
            .await
            .map(drop)
            .map_err(Into::into)
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("backend", &self.decider.backend)
            .field("policies", &self.decider.policies)
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

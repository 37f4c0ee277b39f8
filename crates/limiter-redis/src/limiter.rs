//! [`RedisLimiter`]: the [`Limiter`] on Redis.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use limiter_core::backend::{check_policies, PolicyHistory};
use limiter_core::{Algorithm, Clock, Decision, Error, Limiter, Policies, PolicyError};

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
/// A key's state is named by the limiter's key prefix and the user key,
/// never by the policies' numbers: limiters of one prefix share each key's
/// state whatever their policies (plans), and a request decided under
/// other policies than the state was made under takes it over by
/// docs/spec.md section 9 (see [`set_policies`](Self::set_policies)).
///
/// Build one with [`RedisLimiter::builder`] on a shared [`RedisBackend`].
/// Share it behind an `Arc` (it is `Send + Sync`, and `Arc<dyn Limiter>`
/// works).
pub struct RedisLimiter {
    /// The decider of each distinct policy set put in force.
    deciders: PolicyHistory<Decider>,
    key_prefix: String,
    clock: Option<Arc<dyn Clock>>,
    ttl_floor_ms: u64,
    max_sliding_log_limit: u64,
}

/// What a [`RedisLimiter`] keeps of its builder's options.
pub(crate) struct LimiterOptions {
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) ttl_floor_ms: u64,
    pub(crate) max_sliding_log_limit: u64,
}

impl RedisLimiter {
    /// The limiter of `policies` on `backend` under `key_prefix`, deciding
    /// with `function`; its options as its builder sets them.
    pub(crate) fn new(
        policies: Policies,
        backend: RedisBackend,
        key_prefix: String,
        function: LuaFunction,
        options: LimiterOptions,
    ) -> Self {
        let keys = KeyLayout::for_set(&key_prefix, &policies);
        Self {
            deciders: PolicyHistory::new(Decider::new(policies, backend, keys, function)),
            key_prefix,
            clock: options.clock,
            ttl_floor_ms: options.ttl_floor_ms,
            max_sliding_log_limit: options.max_sliding_log_limit,
        }
    }

    /// Puts `policies` in force for every request that begins from now on,
    /// while the limiter serves: each request is decided entirely under the
    /// policies in force when it began, and each key keeps what it used
    /// (docs/spec.md section 9). A key's state is taken over by the new
    /// policies at its first request under them, in the call that decides
    /// it (a key that sees none expires under the old ones), so the change
    /// itself sends nothing to Redis; the new policies' library is loaded
    /// by their first call. A change to the policies in force changes
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPolicy`] for a sliding log above the builder's
    /// [`max_sliding_log_limit`](crate::RedisLimiterBuilder::max_sliding_log_limit);
    /// the policies in force stay.
    pub fn set_policies(&self, policies: impl Into<Policies>) -> Result<(), Error> {
        let policies = policies.into();
        check_sliding_log_limit(&policies, self.max_sliding_log_limit)?;
        self.deciders.put_in_force(&policies, || {
            let current = self.deciders.in_force();
            let function = LuaFunction::for_parts(policies.parts(), self.ttl_floor_ms)
                .on_engine_of(&current.function, policies.parts());
            current.backend.remember(function.library());
            let keys = KeyLayout::for_set(&self.key_prefix, &policies);
            Decider::new(policies.clone(), current.backend.clone(), keys, function)
        });
        Ok(())
    }

    /// The Redis key holding `key`'s state (under the first policy of a
    /// set), e.g. `limiter:{user:42}:0`: what to inspect with `redis-cli`.
    /// Bytes, as the key is.
    pub fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        self.deciders.in_force().keys[0].state_key(key)
    }

    /// The Redis keys holding `key`'s state, one per policy of the set, in
    /// its order (all in one cluster slot; a repeated policy's is its
    /// first occurrence's).
    pub fn redis_keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        let keys = &self.deciders.in_force().keys;
        keys[..keys.len() - 1]
            .iter()
            .map(|layout| layout.state_key(key))
            .collect()
    }

    /// The Redis key beside `key`'s state holding the record of the
    /// policies it was made under, e.g. `limiter:{user:42}:p`
    /// (docs/backends.md, "Key layout").
    pub fn redis_record_key(&self, key: &[u8]) -> Vec<u8> {
        let keys = &self.deciders.in_force().keys;
        keys[keys.len() - 1].state_key(key)
    }

    /// The key prefix (see [`RedisLimiterBuilder::key_prefix`](crate::RedisLimiterBuilder::key_prefix)).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// What decides on the server for this limiter now: [`Engine::Module`]
    /// or [`Engine::Lua`] (never [`Engine::Detect`], which chooses one).
    pub fn engine(&self) -> Engine {
        match self.deciders.in_force().function.is_on_module() {
            true => Engine::Module,
            false => Engine::Lua,
        }
    }

    /// The backend this limiter decides on.
    pub fn backend(&self) -> &RedisBackend {
        &self.deciders.in_force().backend
    }

    /// One decision: validate, then decide in the limiter's next call (one
    /// round trip, shared with the decisions that arrived meanwhile: see
    /// `batch.rs`).
    async fn decide(&self, key: &[u8], cost: u64, mode: Mode) -> Result<Decision, Error> {
        let time_us = self.clock.as_ref().map(|clock| clock.now_us());
        // With Redis TIME the time is checked by the server's clock, which
        // stays below 2^53 µs until the year 2255. A charge has no maximum:
        // its time is checked as a request of 1's.
        let decider = self.deciders.in_force();
        let checked_cost = match mode {
            Mode::Charge if cost == 0 => return Err(Error::ZeroCost),
            Mode::Charge => 1,
            _ => cost,
        };
        check_policies(&decider.policies, time_us.unwrap_or(0), checked_cost)?;
        let request = Request {
            key: key.into(),
            cost,
            mode,
            time_us,
        };
        Ok(decider.decide(request).await?)
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    fn policies(&self) -> &Policies {
        &self.deciders.in_force().policies
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Acquire).await
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Peek).await
    }

    /// Counts `units` on every part of `key`'s state after the fact, never
    /// refused (docs/spec.md section 10): one atomic call, batched with the
    /// decisions beside it, on either engine. A state made under other
    /// policies is taken over first (section 9), as by an acquire.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCost`] for 0 units and [`Error::TimeOutOfRange`] for a
    /// caller's time beyond 2^53 µs, before anything is sent;
    /// [`Error::Backend`] if Redis fails, as for
    /// [`acquire`](Limiter::acquire).
    async fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
        self.decide(key, units, Mode::Charge).await.map(drop)
    }

    /// Deletes the key's state under every part and its record (`DEL`, one
    /// command: the keys share a slot). Fails with [`Error::Backend`] if
    /// Redis fails, whatever the failure policy.
    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let mut del = redis::cmd("DEL");
        let decider = self.deciders.in_force();
        for layout in decider.keys.iter() {
            del.arg(layout.state_key(key));
        }
        decider
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
            .field("backend", &self.deciders.in_force().backend)
            .field("policies", &self.deciders.in_force().policies)
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

/// Refuses a sliding log of `policies` above `max` (see
/// [`RedisLimiterBuilder::max_sliding_log_limit`](crate::RedisLimiterBuilder::max_sliding_log_limit)).
pub(crate) fn check_sliding_log_limit(policies: &Policies, max: u64) -> Result<(), Error> {
    match policies
        .iter()
        .find(|p| p.algorithm() == Algorithm::SlidingLog && p.limit() > max)
    {
        Some(log) => Err(PolicyError::Unsupported {
            reason: format!(
                "a Redis sliding log keeps one entry per admission, and a limit of {} is \
                 above the maximum of {max} (raise it with `max_sliding_log_limit`, or use \
                 sliding-counter, which keeps three numbers per key)",
                log.limit(),
            ),
        }
        .into()),
        None => Ok(()),
    }
}

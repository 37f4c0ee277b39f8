//! [`RedisLimiterBuilder`]: the options of one policy (or policy set) on a
//! [`RedisBackend`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use limiter_core::{Clock, Error, Policies};

use crate::connection::backend::RedisBackend;
use crate::engine::Engine;
use crate::error::BackendError;
use crate::limiter::{check_sliding_log_limit, LimiterOptions, RedisLimiter};
use crate::protocol::scripts::LuaFunction;
use crate::protocol::wire::MODULE_DECIDE;

/// Builds a [`RedisLimiter`]; made by [`RedisLimiter::builder`].
///
/// Every option has a default, documented on its method. The connection
/// options are the [`RedisBackend`]'s, shared by every limiter on it.
#[must_use = "a builder does nothing until `.build().await`"]
pub struct RedisLimiterBuilder {
    pub(crate) backend: RedisBackend,
    pub(crate) policies: Policies,
    pub(crate) key_prefix: String,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    pub(crate) max_sliding_log_limit: u64,
    pub(crate) ttl_floor: Duration,
    pub(crate) engine: Engine,
}

impl RedisLimiterBuilder {
    /// The default [`key_prefix`](Self::key_prefix).
    pub const DEFAULT_KEY_PREFIX: &'static str = "limiter";
    /// The default [`max_sliding_log_limit`](Self::max_sliding_log_limit).
    pub const DEFAULT_MAX_SLIDING_LOG_LIMIT: u64 = 10_000;
    /// The default [`ttl_floor`](Self::ttl_floor).
    pub const DEFAULT_TTL_FLOOR: Duration = Duration::from_secs(60);

    pub(crate) fn new(backend: RedisBackend, policies: Policies) -> Self {
        Self {
            backend,
            policies,
            key_prefix: Self::DEFAULT_KEY_PREFIX.to_owned(),
            clock: None,
            max_sliding_log_limit: Self::DEFAULT_MAX_SLIDING_LOG_LIMIT,
            ttl_floor: Self::DEFAULT_TTL_FLOOR,
            engine: Engine::default(),
        }
    }

    /// The prefix of every Redis key: a user key `k` lives at
    /// `{prefix}:{k}:{position}` (e.g. `limiter:{user:42}:0`), beside the
    /// record of the policies its state was made under,
    /// `{prefix}:{k}:p`. The prefix names the limiter: limiters of one
    /// prefix share each key's state whatever their policies (plans, a
    /// change of limits: docs/spec.md section 9), limiters of two never
    /// do. Must not contain `{` or `}` (the user key is the cluster hash
    /// tag). Defaults to `"limiter"`.
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
    /// one server shares one clock, whatever their own clocks say. Caller
    /// clocks skewed between processes over-admit (see `docs/backends.md`).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The largest limit accepted for a sliding-log policy (each part of a
    /// set), whose key holds up to one entry per admission in the window
    /// (a sorted set's member; a 14-byte record of a string, for a limit up
    /// to 128): a guard
    /// against a policy that would hold millions of entries per key (use a
    /// sliding window counter for such limits). Defaults to 10 000.
    pub fn max_sliding_log_limit(mut self, limit: u64) -> Self {
        self.max_sliding_log_limit = limit;
        self
    }

    /// With a caller [`clock`](Self::clock), the least TTL given to a key
    /// (docs/spec.md rule 2.5: a replay's time runs faster or slower than
    /// the server's, so a key must outlive its `reset_after` in server
    /// time). Unused with Redis `TIME`, where server time is the decisions'
    /// time and a key's TTL covers its `reset_after` (docs/backends.md,
    /// "Expiry"). Defaults to 60 seconds.
    pub fn ttl_floor(mut self, floor: Duration) -> Self {
        self.ttl_floor = floor;
        self
    }

    /// What decides on the server: limiter-redis-module while the server
    /// has it, else the Lua functions ([`Engine::Detect`], the
    /// default); the Lua functions alone ([`Engine::Lua`]); or the module
    /// alone ([`Engine::Module`]), which [`build`](Self::build) checks the
    /// server has. Both decide alike on the same keys (docs/backends.md,
    /// "The Redis module").
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    /// The TTL floor in ms the scripts apply: 0 with Redis time (the TTL
    /// then follows `reset_after` alone); with a caller clock, capped where Lua's
    /// doubles and `PEXPIRE` stay exact (285 years).
    pub(crate) fn ttl_floor_ms(&self) -> u64 {
        match self.clock {
            Some(_) => u64::try_from(self.ttl_floor.as_millis())
                .unwrap_or(u64::MAX)
                .min(limiter_core::MAX_TIME_US / 1000),
            None => 0,
        }
    }

    /// Checks every option, then loads the policy's function library (it
    /// is loaded again on every new connection of the backend).
    ///
    /// A bad option or policy is an error before any round trip: a
    /// sliding-log limit above
    /// [`max_sliding_log_limit`](Self::max_sliding_log_limit) is
    /// [`Error::InvalidPolicy`] with [`PolicyError::Unsupported`](limiter_core::PolicyError::Unsupported); a prefix
    /// with braces is [`Error::InvalidConfig`] (a [`BackendError`] of kind
    /// [`Config`](crate::BackendErrorKind::Config)).
    ///
    /// An outage does not fail the build: while Redis is down the library
    /// waits to be loaded with the next connection, and decisions fail
    /// (see [`limiter_core::FailurePolicy`] for what they answer then).
    /// Redis refusing the library (a server older than 7.0, or an ACL
    /// without `FUNCTION`) is [`Error::Backend`]. With
    /// [`Engine::Module`], a server that answers without the module's
    /// command is [`Error::InvalidConfig`]; with [`Engine::Detect`], one
    /// that does not answer gets the Lua functions.
    pub async fn build(self) -> Result<RedisLimiter, Error> {
        check_sliding_log_limit(&self.policies, self.max_sliding_log_limit)?;
        if self.key_prefix.contains(['{', '}']) {
            return Err(BackendError::config(format!(
                "key prefix {:?} contains a brace; braces are reserved for the user key's \
                 cluster hash tag",
                self.key_prefix
            ))
            .into_config_error());
        }
        let mut function = LuaFunction::for_parts(self.policies.parts(), self.ttl_floor_ms());
        self.backend.register(function.library()).await?;
        match self.engine {
            Engine::Lua => {}
            Engine::Detect => {
                let watched = self.backend.watch_command(MODULE_DECIDE).await;
                function =
                    function.on_module(self.policies.parts(), self.ttl_floor_ms(), Some(watched));
            }
            Engine::Module => {
                if self.has_module().await == Some(false) {
                    return Err(self.no_module());
                }
                function = function.on_module(self.policies.parts(), self.ttl_floor_ms(), None);
            }
        }
        let options = LimiterOptions {
            ttl_floor_ms: self.ttl_floor_ms(),
            clock: self.clock,
            max_sliding_log_limit: self.max_sliding_log_limit,
        };
        Ok(RedisLimiter::new(
            self.policies,
            self.backend,
            self.key_prefix,
            function,
            options,
        ))
    }
}

impl RedisLimiter {
    /// Starts building a limiter for `policies` (a [`Policy`](limiter_core::Policy)
    /// or a tiered set) on `backend` (its connections are shared with every
    /// other limiter built on it).
    pub fn builder(backend: &RedisBackend, policies: impl Into<Policies>) -> RedisLimiterBuilder {
        RedisLimiterBuilder::new(backend.clone(), policies.into())
    }
}

impl RedisLimiterBuilder {
    /// Whether the server has limiter-redis-module's command (`None`: it
    /// did not answer, in an outage).
    async fn has_module(&self) -> Option<bool> {
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg(MODULE_DECIDE);
        let commands = self
            .backend
            .command::<Vec<redis::Value>>(&info)
            .await
            .ok()?;
        Some(!matches!(commands.first(), Some(redis::Value::Nil) | None))
    }

    /// The error of a forced module on a server without it, naming the
    /// line that loads it.
    fn no_module(&self) -> Error {
        BackendError::config(format!(
            "the engine is the module, but Redis at {} has no {MODULE_DECIDE}: load \
             limiter-redis-module (`redis-server --loadmodule \
             /path/to/liblimiter_redis_module.so`, or `MODULE LOAD` of it)",
            self.backend.url()
        ))
        .into_config_error()
    }
}

impl fmt::Debug for RedisLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiterBuilder")
            .field("backend", &self.backend)
            .field("policies", &self.policies)
            .field("key_prefix", &self.key_prefix)
            .field("clock", &self.clock)
            .field("max_sliding_log_limit", &self.max_sliding_log_limit)
            .field("ttl_floor", &self.ttl_floor)
            .field("engine", &self.engine)
            .finish()
    }
}

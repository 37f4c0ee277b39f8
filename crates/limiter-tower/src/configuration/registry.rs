//! [`Registry`]: one [`LimiterLayer`] per named policy of a [`Config`],
//! on one backend, so routes refer to policies by name.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use limiter_core::Limiter;

use crate::bans::ban::BanList;
use crate::configuration::config::{Config, ConfigError, ConfigErrorKind};
use crate::configuration::config_error::toml_key;
use crate::configuration::live::Live;
use crate::configuration::policy_limiters::PolicyLimiters;
use crate::middleware::layer::LimiterLayer;

/// The layers of a [`Config`]'s named policies, built once on a backend.
///
/// Each name has its own limiter, so two names with the same limits and
/// key still count apart, and its layer is [named](LimiterLayer::name)
/// after it in metrics and `tracing` events. A name that is not
/// configured is an error at startup, where the router is built, never an
/// unlimited route.
///
/// ```
/// use axum::{routing::{get, post}, Router};
/// use limiter_tower::{Config, Registry};
///
/// let config = Config::from_toml("limits.toml", r#"
///     [policies.default]
///     limits = ["sliding-log:100/10s"]
///     [policies.login]
///     limits = ["sliding-log:10/5m"]
/// "#)?;
/// let registry = Registry::memory(&config);
/// let app: Router = Router::new()
///     .route("/login", post(|| async { "welcome" }))
///     .route_layer(registry.layer("login")?)
///     .route("/", get(|| async { "ok" }))
///     .layer(registry.layer("default")?);
///
/// let error = registry.layer("signup").unwrap_err();
/// assert_eq!(error.to_string(), "limits.toml: policies.signup: not configured (the file has: default, login)");
/// # Ok::<(), limiter_tower::ConfigError>(())
/// ```
///
/// Available with the `config` feature.
#[derive(Debug, Clone)]
pub struct Registry {
    file: String,
    layers: BTreeMap<String, LimiterLayer>,
    bans: BTreeMap<String, BanList>,
    /// The configuration in force and what a reload changes.
    live: Arc<Live>,
}

impl Registry {
    /// Each policy on its own in-process
    /// [`MemoryLimiter`](limiter_memory::MemoryLimiter) (its ban list and
    /// penalty counts in process too), holding at most the policy's
    /// `max_keys` keys ([`Config::DEFAULT_MAX_KEYS`](crate::Config::DEFAULT_MAX_KEYS) by
    /// default) of at most `max_key_bytes` each, so clients' keys cost at
    /// most its [`max_bytes`](limiter_memory::MemoryLimiter::max_bytes);
    /// its ban list holds at most `max_keys` bans too, each under at most
    /// 256 bytes of key (see [`BanList::memory`]).
    ///
    /// A new key while the limiter holds `max_keys` live keys is its one
    /// failure, answered by the policy's `on_failure` for that request
    /// alone (keys already held are decided as ever): `return-error` (the
    /// default) answers 503 with `Retry-After: 1`, `fail-open` lets it
    /// through uncounted and marked, `fail-closed` answers 503 marked;
    /// `fallback`, having no other in-process limiter to ask, answers as
    /// `return-error`.
    pub fn memory(config: &Config) -> Self {
        let mut registry = Self::empty(config);
        for (name, policy) in config.iter() {
            let bounds = policy.memory;
            let limiters = PolicyLimiters::memory(policy);
            // In process: made at once, and limits the file checked are
            // never refused.
            let made = now(limiters.plans(config, name, policy));
            let Some(Ok((default, plans))) = made else {
                unreachable!("an in-process limiter is made at once, of any checked limits")
            };
            let bans = policy
                .bans
                .then(|| BanList::memory_with_max_bans(bounds.max_keys));
            let counter = policy
                .penalty
                .as_ref()
                .map(|(counter, _)| Arc::new(bounds.limiter(counter.clone())) as Arc<dyn Limiter>);
            let layer = policy.layer(default, bans.clone(), counter).plans(plans);
            registry.add(name, layer, bans, limiters);
        }
        registry
    }

    /// No layers yet, for `config`'s file; warns of what `config` most
    /// likely does not mean (see `startup_warnings`).
    fn empty(config: &Config) -> Self {
        crate::configuration::startup_warnings::warn_about(config);
        Self {
            file: config.file().to_owned(),
            layers: BTreeMap::new(),
            bans: BTreeMap::new(),
            live: Arc::new(Live::new(config.clone())),
        }
    }

    /// Policy `name`'s layer, named after it, its ban list if any, and the
    /// maker of its limiters, for a reload.
    fn add(
        &mut self,
        name: &str,
        layer: LimiterLayer,
        bans: Option<BanList>,
        limiters: PolicyLimiters,
    ) {
        let layer = layer.name(name);
        if let Some(switch) = layer.plan_switch() {
            let live =
                Arc::get_mut(&mut self.live).expect("not shared while the registry is built");
            live.add(name, Arc::clone(switch), limiters);
        }
        self.layers.insert(name.to_owned(), layer);
        if let Some(bans) = bans {
            self.bans.insert(name.to_owned(), bans);
        }
    }

    /// Each policy on Redis, every one over `backend`'s shared
    /// connections (feature `redis`), so every instance of the service
    /// shares the counts. Policy `NAME`'s keys live under the prefix
    /// `{key_prefix}:NAME` (`limiter:login`, say), so two names never share
    /// a count and two services on one Redis keep apart with two prefixes;
    /// its plans' limiters share that prefix, so a client moving between
    /// plans keeps what it used.
    /// A policy the backend refuses (a sliding log above its maximum limit,
    /// a brace in the prefix or the name) is an error naming that policy.
    ///
    /// While Redis fails, each layer answers as its `on_failure` says (a
    /// `fallback` holds at most the policy's `max_keys`, as an in-process
    /// limiter does under [`memory`](Self::memory)). Its bans are the Redis keys `{key_prefix}:NAME:bans:KEY` (a ban made by
    /// one instance holds on all), its penalty's denials are counted under
    /// `{key_prefix}:NAME:penalty`.
    ///
    /// Available with the `redis` feature.
    #[cfg(feature = "redis")]
    pub async fn redis(
        config: &Config,
        backend: &limiter_redis::RedisBackend,
        key_prefix: &str,
    ) -> Result<Self, ConfigError> {
        use limiter_redis::RedisLimiter;

        let mut registry = Self::empty(config);
        for (name, policy) in config.iter() {
            let prefix = format!("{key_prefix}:{name}");
            let limiters = PolicyLimiters::redis(policy, backend, prefix.clone());
            let (default, plans) = limiters.plans(config, name, policy).await?;
            let bans = policy
                .bans
                .then(|| BanList::redis(backend, format!("{prefix}:bans")));
            let counter = match &policy.penalty {
                None => None,
                Some((counter, _)) => {
                    let counter = RedisLimiter::builder(backend, counter.clone())
                        .key_prefix(format!("{prefix}:penalty"))
                        .build()
                        .await
                        .map_err(|error| {
                            let entry = format!("policies.{}.penalty.denials", toml_key(name));
                            let reason = error.chain().to_string();
                            ConfigError::new(config.file(), entry, ConfigErrorKind::Backend, reason)
                        })?;
                    Some(Arc::new(counter) as Arc<dyn Limiter>)
                }
            };
            let layer = policy.layer(default, bans.clone(), counter).plans(plans);
            registry.add(name, layer, bans, limiters);
        }
        Ok(registry)
    }

    /// The ban list of policy `name`, if it checks one (`bans = true`, or
    /// a `penalty`): [`ban`](BanList::ban) and [`unban`](BanList::unban)
    /// keys there. `None` for a name without one, or not configured.
    pub fn bans(&self, name: &str) -> Option<&BanList> {
        self.bans.get(name)
    }

    /// The layer of policy `name` (a clone: every clone shares the
    /// limiter), or an error naming the file and the missing entry.
    pub fn layer(&self, name: &str) -> Result<LimiterLayer, ConfigError> {
        self.layers.get(name).cloned().ok_or_else(|| {
            let names: Vec<&str> = self.layers.keys().map(String::as_str).collect();
            ConfigError::new(
                &self.file,
                format!("policies.{}", toml_key(name)),
                ConfigErrorKind::NotConfigured,
                format!("not configured (the file has: {})", names.join(", ")),
            )
        })
    }
}

/// The output of `future` if it is ready at its first poll: an in-process
/// limiter's making, which awaits nothing.
fn now<F: Future>(future: F) -> Option<F::Output> {
    let mut context = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut context) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

impl Registry {
    /// What a reload changes.
    pub(crate) fn live(&self) -> &Live {
        &self.live
    }
}

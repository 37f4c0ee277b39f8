//! [`Registry`]: one [`RateLimitLayer`] per named policy of a [`Config`],
//! on one backend, so routes refer to policies by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use limiter_memory::MemoryLimiter;

use crate::config::{Config, ConfigError, ConfigErrorKind};
use crate::layer::RateLimitLayer;

/// The layers of a [`Config`]'s named policies, built once on a backend.
///
/// Each name has its own limiter, so two names with the same limits and
/// key still count apart, and its layer is [named](RateLimitLayer::name)
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
#[derive(Debug, Clone)]
pub struct Registry {
    file: String,
    layers: BTreeMap<String, RateLimitLayer>,
}

impl Registry {
    /// Each policy on its own in-process [`MemoryLimiter`].
    pub fn memory(config: &Config) -> Self {
        let layers = config
            .iter()
            .map(|(name, policy)| {
                let limiter = MemoryLimiter::new(policy.policies.clone());
                (name.to_owned(), policy.layer(Arc::new(limiter)).name(name))
            })
            .collect();
        Self {
            file: config.file().to_owned(),
            layers,
        }
    }

    /// Each policy on Redis, every one over `backend`'s shared
    /// connections (feature `redis`), so every instance of the service
    /// shares the counts. Policy `NAME`'s keys live under the prefix
    /// `{key_prefix}:NAME` (`limiter:login`, say), so two names never share
    /// a count and two services on one Redis keep apart with two prefixes.
    /// A policy the backend refuses (a sliding log above its maximum limit,
    /// a brace in the prefix or the name) is an error naming that policy.
    #[cfg(feature = "redis")]
    pub async fn redis(
        config: &Config,
        backend: &limiter_redis::RedisBackend,
        key_prefix: &str,
    ) -> Result<Self, ConfigError> {
        use limiter_redis::RedisLimiter;

        let mut layers = BTreeMap::new();
        for (name, policy) in config.iter() {
            let prefix = format!("{key_prefix}:{name}");
            let limiter = RedisLimiter::builder(backend, policy.policies.clone())
                .key_prefix(prefix)
                .build()
                .await
                .map_err(|error| {
                    let entry = format!("policies.{}", crate::config::toml_key(name));
                    let reason = error.chain().to_string();
                    ConfigError::new(config.file(), entry, ConfigErrorKind::Backend, reason)
                })?;
            layers.insert(name.to_owned(), policy.layer(Arc::new(limiter)).name(name));
        }
        Ok(Self {
            file: config.file().to_owned(),
            layers,
        })
    }

    /// The layer of policy `name` (a clone: every clone shares the
    /// limiter), or an error naming the file and the missing entry.
    pub fn layer(&self, name: &str) -> Result<RateLimitLayer, ConfigError> {
        self.layers.get(name).cloned().ok_or_else(|| {
            let names: Vec<&str> = self.layers.keys().map(String::as_str).collect();
            ConfigError::new(
                &self.file,
                format!("policies.{}", crate::config::toml_key(name)),
                ConfigErrorKind::NotConfigured,
                format!("not configured (the file has: {})", names.join(", ")),
            )
        })
    }
}

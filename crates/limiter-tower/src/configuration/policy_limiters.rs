//! [`PolicyLimiters`]: how a configured policy's limiters are made, one
//! per plan and one per reload, all on the policy's keys, so that a
//! client moving between plans, or across a reload, keeps what it used
//! (docs/spec.md section 9).

use std::sync::Arc;

use limiter_core::{Error, Limiter, LimiterExt as _, Policies};
use limiter_memory::MemoryLimiter;

use crate::configuration::config::{Config, ConfigError, ConfigErrorKind};
use crate::configuration::config_error::toml_key;
use crate::configuration::named_policy::{NamedPolicy, OnFailure};
use crate::middleware::plans::Plans;

/// The maker of one configured policy's limiters, each answering as the
/// policy's `on_failure` says while its backend fails.
#[derive(Debug)]
pub(crate) enum PolicyLimiters {
    /// In process: every limiter a [`MemoryLimiter::plan`] of `keys`, the
    /// policy's key space.
    Memory {
        keys: MemoryLimiter,
        on_failure: OnFailure,
    },
    /// On Redis, under the policy's key prefix: state named by the prefix
    /// and the key, never by the limits, is shared by every limiter.
    #[cfg(feature = "redis")]
    Redis {
        backend: limiter_redis::RedisBackend,
        prefix: String,
        on_failure: OnFailure,
        /// The key space of the in-process fallbacks (`on_failure =
        /// "fallback"`), one per limiter.
        fallback_keys: MemoryLimiter,
    },
}

impl PolicyLimiters {
    /// In process, within `policy`'s memory bounds.
    pub(crate) fn memory(policy: &NamedPolicy) -> Self {
        Self::Memory {
            keys: policy.memory.limiter(policy.policies.clone()),
            on_failure: policy.on_failure,
        }
    }

    /// On `backend`, under `prefix`.
    #[cfg(feature = "redis")]
    pub(crate) fn redis(
        policy: &NamedPolicy,
        backend: &limiter_redis::RedisBackend,
        prefix: String,
    ) -> Self {
        Self::Redis {
            backend: backend.clone(),
            prefix,
            on_failure: policy.on_failure,
            fallback_keys: policy.memory.limiter(policy.policies.clone()),
        }
    }

    /// The default plan's limiter of `policy` (named `name` in `config`)
    /// and its plans, each plan's limiter made on the policy's keys; an
    /// error names the entry whose limits the backend refused.
    pub(crate) async fn plans(
        &self,
        config: &Config,
        name: &str,
        policy: &NamedPolicy,
    ) -> Result<(Arc<dyn Limiter>, Plans), ConfigError> {
        let refused = |entry: String| {
            move |error: Error| {
                let reason = error.chain().to_string();
                ConfigError::new(config.file(), entry, ConfigErrorKind::Backend, reason)
            }
        };
        let own = format!("policies.{}.limits", toml_key(name));
        let default = self.limiter(&policy.policies).await.map_err(refused(own))?;
        let mut plans = Plans::new(policy.default_plan.clone());
        if let Some(header) = &policy.plan_header {
            plans = plans.from_header(header.clone());
        }
        for (plan, limits) in config.plans_of(policy) {
            let limiter = match limits {
                Some(limits) => {
                    let entry = format!("plans.{}.{}", toml_key(plan), toml_key(name));
                    self.limiter(limits).await.map_err(refused(entry))?
                }
                None => Arc::clone(&default),
            };
            plans = plans.plan_arc(plan.to_owned(), limiter);
        }
        for (key, plan) in config.key_plans() {
            plans = plans.key_plan(key.clone(), plan.clone());
        }
        if !config.has_plans() {
            plans = plans.unnamed_in_headers();
        }
        Ok((default, plans))
    }

    /// A limiter of `policies` on the policy's keys.
    pub(crate) async fn limiter(&self, policies: &Policies) -> Result<Arc<dyn Limiter>, Error> {
        match self {
            Self::Memory { keys, on_failure } => Ok(memory_limiter(keys, *on_failure, policies)),
            #[cfg(feature = "redis")]
            Self::Redis {
                backend,
                prefix,
                on_failure,
                fallback_keys,
            } => {
                let limiter = limiter_redis::RedisLimiter::builder(backend, policies.clone())
                    .key_prefix(prefix.clone())
                    .build()
                    .await?;
                let fallback = || Some(fallback_keys.plan(policies.clone()));
                Ok(Arc::new(limiter.on_failure(on_failure.policy(fallback))))
            }
        }
    }
}

/// A limiter of `policies` on `keys`, answering as `on_failure` says. A
/// `MemoryLimiter` fails only at its cap on keys, which has no other
/// in-process limiter to fall back to.
fn memory_limiter(
    keys: &MemoryLimiter,
    on_failure: OnFailure,
    policies: &Policies,
) -> Arc<dyn Limiter> {
    Arc::new(
        keys.plan(policies.clone())
            .on_failure(on_failure.policy(|| None)),
    )
}

//! [`Registry::reload`]: a new configuration put in force while the
//! service serves, every request decided entirely under the old limits or
//! the new, each key keeping what it used (docs/spec.md section 9).

use std::collections::BTreeMap;
use std::path::Path;

use crate::configuration::config::{Config, ConfigError, ConfigErrorKind};
use crate::configuration::config_error::toml_key;
use crate::configuration::registry::Registry;

impl Registry {
    /// Puts `config`'s limits and plans in force while the service serves:
    /// each layer decides every request that begins from now on under the
    /// new limits (a request already being decided finishes under the
    /// old, never under a mix), and each key keeps what it used, taken
    /// over by the new limits at its next request (docs/spec.md section
    /// 9), on every plan, in process and on Redis alike.
    ///
    /// A reload changes `limits`, `default_plan`, `plan_header`, `[plans]`
    /// and `[key_plans]`. A configuration that changes anything else (a
    /// policy added or removed, a key, an allowlist, a cost) is refused
    /// with an error naming the first such entry, and so is one the
    /// backend refuses: the configuration in force stays, whole. Each
    /// reload is logged (`info`, or `warn` when refused, target
    /// `limiter_tower`) and counted in
    /// [`METRIC_CONFIG_RELOADS`](crate::metrics::METRIC_CONFIG_RELOADS).
    ///
    /// ```
    /// use limiter_tower::{Config, Registry};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), limiter_tower::ConfigError> {
    /// let registry = Registry::memory(&Config::from_toml("limits.toml", r#"
    ///     [policies.api]
    ///     limits = ["sliding-log:100/1m"]
    /// "#)?);
    /// registry.reload(&Config::from_toml("limits.toml", r#"
    ///     [policies.api]
    ///     limits = ["sliding-log:1000/1m"]
    /// "#)?).await?;
    ///
    /// let refused = registry.reload(&Config::from_toml("limits.toml", r#"
    ///     [policies.api]
    ///     limits = ["sliding-log:1000/1m"]
    ///     key = "global"
    /// "#)?).await.unwrap_err();
    /// assert_eq!(refused.entry(), "policies.api.key");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] of kind [`Reload`](ConfigErrorKind::Reload) for a
    /// change only a restart makes, or [`Backend`](ConfigErrorKind::Backend)
    /// for limits the backend refuses.
    pub async fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        let mut in_force = self.live().in_force.lock().await;
        match self.switch_to(&in_force, config).await {
            Ok(changed) => {
                tracing::info!(
                    target: "limiter_tower",
                    file = config.file(),
                    policies_changed = changed,
                    "rate limits reloaded"
                );
                count_reload("applied");
                *in_force = config.clone();
                Ok(())
            }
            Err(error) => Err(refused(error)),
        }
    }

    /// Reads the TOML file at `path` and [reloads](Self::reload) it: a file
    /// that cannot be read, parsed or checked is refused as a reload is,
    /// logged and counted, the configuration in force kept.
    ///
    /// # Errors
    ///
    /// As [`Config::from_file`] and [`reload`](Self::reload).
    pub async fn reload_file(&self, path: impl AsRef<Path>) -> Result<(), ConfigError> {
        match Config::from_file(path) {
            Ok(config) => self.reload(&config).await,
            Err(error) => Err(refused(error)),
        }
    }

    /// Reloads the TOML file at `path` ([`reload_file`](Self::reload_file))
    /// on each `SIGHUP` the process receives, in a task of the Tokio
    /// runtime: `kill -HUP PID` after editing the file puts its limits and
    /// plans in force. Each reload is logged and counted as
    /// [`reload`](Self::reload) says. The task runs until the runtime
    /// stops; abort its handle to stop reloading.
    ///
    /// # Errors
    ///
    /// If the signal handler cannot be installed (from outside a Tokio
    /// runtime, or where the system refuses it).
    #[cfg(unix)]
    pub fn reload_on_sighup(
        &self,
        path: impl Into<std::path::PathBuf>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{signal, SignalKind};

        let mut hangups = signal(SignalKind::hangup())?;
        let (registry, path) = (self.clone(), path.into());
        Ok(tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                // Logged and counted by `reload_file`, whatever its outcome.
                let _ = registry.reload_file(&path).await;
            }
        }))
    }

    /// Checks `config` against `in_force`, makes every new plan table,
    /// then puts them all in force; returns how many policies' limits or
    /// plans changed.
    async fn switch_to(&self, in_force: &Config, config: &Config) -> Result<usize, ConfigError> {
        check_reloadable(in_force, config)?;
        let mut tables = Vec::new();
        for (name, policy) in config.iter() {
            let live = &self.live().policies[name];
            let (default, plans) = live.limiters.plans(config, name, policy).await?;
            tables.push((&live.switch, plans.table(default)));
        }
        let before: Vec<_> = in_force
            .iter()
            .map(|(_, policy)| policy.limits_and_plans())
            .collect();
        let after = config.iter().map(|(_, policy)| policy.limits_and_plans());
        let changed = before.iter().zip(after).filter(|(a, b)| **a != *b).count()
            + usize::from(in_force.key_plans() != config.key_plans()) * tables.len();
        for (switch, table) in tables {
            switch.store(table);
        }
        Ok(changed.min(before.len()))
    }
}

/// `error`, logged and counted as a refused reload.
fn refused(error: ConfigError) -> ConfigError {
    tracing::warn!(
        target: "limiter_tower",
        error = %error,
        "a rate-limit reload was refused; the configuration in force stays"
    );
    count_reload("refused");
    error
}

/// Counts a reload by its outcome.
fn count_reload(outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::metrics::METRIC_CONFIG_RELOADS, "outcome" => outcome).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = outcome;
}

/// Refuses a `config` that changes what only a restart changes.
fn check_reloadable(in_force: &Config, config: &Config) -> Result<(), ConfigError> {
    let error = |entry: String, reason: String| {
        Err(ConfigError::new(
            config.file(),
            entry,
            ConfigErrorKind::Reload,
            reason,
        ))
    };
    let restart = "a reload changes only `limits`, `default_plan`, `plan_header`, `[plans]` and \
                   `[key_plans]`; restart the service";
    for name in in_force.names() {
        if !config.names().any(|new| new == name) {
            return error(
                format!("policies.{}", toml_key(name)),
                format!("removed: {restart} to remove a policy"),
            );
        }
    }
    let old: BTreeMap<&str, _> = in_force.iter().collect();
    for (name, policy) in config.iter() {
        let Some(before) = old.get(name) else {
            return error(
                format!("policies.{}", toml_key(name)),
                format!("added: {restart} to add a policy"),
            );
        };
        let (was, is) = (&before.restart_fields, &policy.restart_fields);
        let fields = was.keys().chain(is.keys());
        if let Some(field) = fields
            .filter(|field| was.get(*field) != is.get(*field))
            .min()
        {
            let shown =
                |value: Option<&toml::Value>| value.map_or_else(|| "unset".to_owned(), inline);
            return error(
                format!("policies.{}.{}", toml_key(name), toml_key(field)),
                format!(
                    "changed from {} to {}: {restart} to change it",
                    shown(was.get(field)),
                    shown(is.get(field))
                ),
            );
        }
    }
    Ok(())
}

/// `value` as a file writes it inline: `"ip"`, `10`, `["10.0.0.0/8"]`.
fn inline(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => format!("{text:?}"),
        toml::Value::Integer(number) => number.to_string(),
        toml::Value::Float(number) => number.to_string(),
        toml::Value::Boolean(flag) => flag.to_string(),
        toml::Value::Datetime(time) => time.to_string(),
        toml::Value::Array(items) => {
            let items: Vec<String> = items.iter().map(inline).collect();
            format!("[{}]", items.join(", "))
        }
        toml::Value::Table(fields) => {
            let fields: Vec<String> = (fields.iter())
                .map(|(name, value)| format!("{} = {}", toml_key(name), inline(value)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
    }
}

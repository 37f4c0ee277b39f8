//! [`Config`]: named policies read from a TOML file and checked whole at
//! startup, and [`ConfigError`], which names the file, the entry and the
//! reason of the first thing wrong.
//!
//! Available with the `config` feature.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::path::Path;

use http::{HeaderName, StatusCode};
use limiter_core::{Policies, Policy};
use serde::Deserialize;

use crate::answer::headers::HeaderStyle;
use crate::client::cidr::IpNet;
use crate::client::key::{is_route_key, Fallback, KeyExtractor, KeyKindError};
use crate::configuration::config_error::{line_and_column, toml_key};
pub use crate::configuration::config_error::{ConfigError, ConfigErrorKind};
use crate::configuration::named_policy::{MemoryBounds, NamedPolicy, OnFailure};
use crate::costs::charge_after::ChargeAfter;
use crate::costs::cost::Cost;
use crate::middleware::plans::is_plan_name;

/// Named policies, each a [`LimiterLayer`](crate::LimiterLayer) to be:
/// read from TOML, every entry checked before anything is served, so a
/// typo fails the startup instead of leaving a route unlimited.
///
/// ```toml
/// [defaults]                          # any policy field: every policy inherits it
/// trusted_proxies = ["10.0.0.0/8"]
/// allow_ips = ["192.0.2.10"]
///
/// [policies.login]
/// limits = ["sliding-log:10/5m"]      # one policy string, or several: a tiered set
/// key = "ip"                          # ip (default), global, route, header:NAME
/// trusted_proxies = ["10.0.0.0/8"]    # whose X-Forwarded-For / Forwarded is believed
///
/// [policies.user]
/// limits = ["token-bucket:300/1m,capacity=50", "sliding-log:10000/1d"]
/// key = "header:x-user-id"
/// fallback = "ip"                     # without the header: reject (401, default), ip or skip
/// ipv6_prefix = 64                    # group IPv6 clients by network (ip keys)
/// headers = "ietf"                    # none, legacy, ietf, both (default)
/// allow_ips = ["192.0.2.10", "10.1.0.0/16"] # never limited nor banned
/// allow_keys = ["header:monitor"]    # likewise, by the whole key (x-user-id: monitor)
/// on_failure = "fail-open"            # the backend down: return-error (default),
///                                     # fail-open, fail-closed, fallback
/// penalty = { denials = "5/1m", ban_for = "15m" } # ban a key denied 5 times a minute
/// ban_status = 429                    # a banned request's status: 403 (default) or 429
/// max_keys = 100000                   # keys held in process at once (the default)
/// max_key_bytes = 256                 # longer keys held as their SHA-256 (the default)
/// mask_addresses = true               # debug logs show a client's /24 or /48 only
///
/// [policies.upload]
/// limits = ["fixed-window:1000/1m"]
/// cost = "content-length:1024"        # what a request costs: 1 (default), a weight (10),
///                                     # content-length:UNIT_BYTES, header:NAME
///                                     # (either with ,or=UNITS for a chunked body, no header)
///
/// [policies.completions]
/// limits = ["token-bucket:100000/1d"]
/// cost = 500                          # the estimate each request reserves
/// charge_after = "actual-cost"        # then the handler's ActualCost above it, or
///                                     # response-bytes:UNIT_BYTES (the body sent)
/// ```
///
/// A policy inherits every field of `[defaults]` it does not set itself,
/// and a field it sets replaces the default whole (a list is not merged:
/// `allow_ips = []` allows no one). An error in an inherited field is
/// named `defaults.FIELD`. `fallback` and `ipv6_prefix` apply only where
/// the key takes them: an inherited `fallback` to the header keys, an
/// inherited `ipv6_prefix` to the keys by address (`ip`, or a header
/// falling back to `ip`); the other policies leave them, and only a
/// policy's own table setting one its key cannot take is an error. A policy whose own table says `trusted_proxies
/// = []` trusts no proxy on purpose, and is left out of the startup
/// warning of policies that trust different proxies.
///
/// `on_failure` applies when the backend fails (Redis down): `fallback`
/// decides meanwhile with this instance's own in-process limiter of the
/// same limits (each instance then counts alone). `penalty` (or `bans =
/// true`, for bans made only through [`Registry::bans`](crate::Registry::bans))
/// checks a ban list before the limiter, kept where the limiter is (in
/// process, or in Redis so that a ban holds on every instance).
///
/// `max_keys` and `max_key_bytes` bound what clients' keys can cost each
/// in-process limiter of the policy (its `MemoryLimiter` under
/// [`Registry::memory`](crate::Registry::memory), its penalty's counts,
/// and a `fallback`'s): at most [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS) keys, each at most
/// [`DEFAULT_MAX_KEY_BYTES`](limiter_memory::MemoryLimiterBuilder::DEFAULT_MAX_KEY_BYTES) bytes
/// long (a longer one is held as its digest), unless the file says
/// otherwise. A new key while the cap is full is a failure of the
/// limiter, answered by `on_failure` (docs/http.md, "What clients' keys
/// can cost").
///
/// `cost` weighs each request ([`Cost`], whose text forms it
/// takes): a weight (`cost = 10`, at most the limits' max cost), the
/// body's length in units of so many bytes (`"content-length:1024"`, a
/// body of unknown length answered 411) or a header's value
/// (`"header:x-request-cost"`, a request without it answered 400); the
/// last two with `,or=UNITS`, the cost of a request that does not state
/// its own (a body of unknown length, no header) instead of its 411 or 400.
///
/// `charge_after` charges an admitted request's true cost once its
/// response is complete, less the estimate its `cost` reserved
/// ([`ChargeAfter`], whose text forms it takes): the
/// [`ActualCost`](crate::ActualCost) its handler wrote (`"actual-cost"`)
/// or its body's bytes in units of so many (`"response-bytes:1024"`).
///
/// A [`Registry`](crate::Registry) builds the layers on a backend.
///
/// ```
/// use limiter_tower::Config;
///
/// let config = Config::from_toml("limits.toml", r#"
///     [policies.login]
///     limits = ["sliding-log:10/5m"]
/// "#)?;
/// assert_eq!(config.names().collect::<Vec<_>>(), ["login"]);
///
/// let error = Config::from_toml("limits.toml", r#"
///     [policies.login]
///     limits = ["sliding-lgo:10/5m"]
/// "#).unwrap_err();
/// assert_eq!(error.entry(), "policies.login.limits[0]");
/// assert!(error.to_string().starts_with("limits.toml: policies.login.limits[0]: unknown algorithm"));
/// # Ok::<(), limiter_tower::ConfigError>(())
/// ```
///
/// Available with the `config` feature.
#[derive(Debug, Clone)]
pub struct Config {
    file: String,
    policies: BTreeMap<String, NamedPolicy>,
    /// Each `[key_plans]` entry: a whole key and its plan.
    key_plans: Vec<(String, String)>,
}

impl Config {
    /// The keys each in-process limiter of a configured policy holds at
    /// most, unless its `max_keys` says otherwise.
    pub const DEFAULT_MAX_KEYS: usize = 100_000;

    /// Reads and checks the TOML file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::new(&file, "", ConfigErrorKind::Io, error.to_string()))?;
        Self::from_toml(file, &text)
    }

    /// Checks `text`; errors name it `file` (a path, or where the text
    /// came from).
    pub fn from_toml(file: impl Into<String>, text: &str) -> Result<Self, ConfigError> {
        let file = file.into();
        let table: toml::Table = toml::from_str(text).map_err(|error| {
            let entry = error
                .span()
                .map(|span| line_and_column(text, span.start))
                .unwrap_or_default();
            ConfigError::new(&file, entry, ConfigErrorKind::Syntax, error.message())
        })?;
        let mut defaults = toml::Table::new();
        let mut named = toml::Table::new();
        let mut plans = toml::Table::new();
        let mut key_plans = toml::Table::new();
        for (name, value) in table {
            let (toml::Value::Table(value), "policies" | "defaults" | "plans" | "key_plans") =
                (value, name.as_str())
            else {
                let reason = match name.as_str() {
                    "policies" => "expected a table of named policies ([policies.NAME])",
                    "defaults" => "expected a table of fields every policy inherits ([defaults])",
                    "plans" => "expected a table of plans ([plans.NAME])",
                    "key_plans" => "expected a table of keys and their plans ([key_plans])",
                    _ => "unknown table; expected `defaults`, `policies`, `plans` or `key_plans`",
                };
                return Err(ConfigError::new(
                    &file,
                    name,
                    ConfigErrorKind::Schema,
                    reason,
                ));
            };
            match name.as_str() {
                "defaults" => defaults = value,
                "policies" => named = value,
                "plans" => plans = value,
                _ => key_plans = value,
            }
        }
        if let Some(unknown) = defaults
            .keys()
            .find(|field| !POLICY_FIELDS.contains(&field.as_str()))
        {
            let fields: Vec<String> = POLICY_FIELDS.iter().map(|f| format!("`{f}`")).collect();
            let reason = format!(
                "unknown field `{unknown}`, expected one of {}",
                fields.join(", ")
            );
            let entry = format!("defaults.{}", toml_key(unknown));
            return Err(ConfigError::new(
                &file,
                entry,
                ConfigErrorKind::Schema,
                reason,
            ));
        }
        let mut policies = BTreeMap::new();
        for (name, value) in named {
            let entry = format!("policies.{}", toml_key(&name));
            let toml::Value::Table(own) = value else {
                let reason = "expected a table of fields ([policies.NAME])";
                return Err(ConfigError::new(
                    &file,
                    entry,
                    ConfigErrorKind::Schema,
                    reason,
                ));
            };
            // The table or `defaults` a field at fault came from.
            let entry_of = |path: &str| {
                let root = path.split(['.', '[']).next().unwrap_or(path);
                if !own.contains_key(root) && defaults.contains_key(root) {
                    format!("defaults.{path}")
                } else {
                    format!("{entry}.{path}")
                }
            };
            let trusts_none_on_purpose = own
                .get("trusted_proxies")
                .and_then(toml::Value::as_array)
                .is_some_and(Vec::is_empty);
            let mut merged = defaults.clone();
            merged.extend(own.clone());
            let mut restart_fields = merged.clone();
            for reloadable in ["limits", "default_plan", "plan_header"] {
                restart_fields.remove(reloadable);
            }
            let raw: RawPolicy = serde_path_to_error::deserialize(toml::Value::Table(merged))
                .map_err(|error: serde_path_to_error::Error<toml::de::Error>| {
                    // The field at fault, when the error is in one.
                    let entry = match error.path().to_string().as_str() {
                        "." | "" => entry.clone(),
                        path => entry_of(path),
                    };
                    let reason = error.inner().message().to_owned();
                    ConfigError::new(&file, entry, ConfigErrorKind::Schema, reason)
                })?;
            let inherited = |field: &str| !own.contains_key(field) && defaults.contains_key(field);
            let mut policy = raw.check(inherited).map_err(|(field, kind, reason)| {
                ConfigError::new(&file, entry_of(&field), kind, reason)
            })?;
            policy.trusts_none_on_purpose = trusts_none_on_purpose;
            policy.restart_fields = restart_fields;
            policies.insert(name, policy);
        }
        let error = |entry: String, reason: String| {
            ConfigError::new(&file, entry, ConfigErrorKind::Plan, reason)
        };
        plan_limits(plans, &mut policies).map_err(|(entry, reason)| error(entry, reason))?;
        let key_plans =
            key_plans_of(key_plans, &policies).map_err(|(entry, reason)| error(entry, reason))?;
        Ok(Self {
            file,
            policies,
            key_plans,
        })
    }

    /// The file the configuration came from, as errors name it.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The names of the policies, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.policies.keys().map(String::as_str)
    }

    /// Each name with its checked policy.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &NamedPolicy)> {
        self.policies
            .iter()
            .map(|(name, policy)| (name.as_str(), policy))
    }

    /// Each plan of the file but `policy`'s default, with `policy`'s
    /// limits under it: `None` for a plan that does not list it, which
    /// decides it by its own limits. Every policy has every plan.
    pub(crate) fn plans_of<'a>(
        &'a self,
        policy: &'a NamedPolicy,
    ) -> impl Iterator<Item = (&'a str, Option<&'a Policies>)> + 'a {
        (self.plan_names().into_iter())
            .filter(|name| *name != policy.default_plan)
            .map(|name| (name, policy.plans.get(name)))
    }

    /// Whether the file names plans: a `[plans]` table, a `default_plan`
    /// or a `plan_header`.
    pub(crate) fn has_plans(&self) -> bool {
        self.plan_names().len() > 1
            || (self.policies.values())
                .any(|policy| policy.default_plan != "default" || policy.plan_header.is_some())
    }

    /// Each `[key_plans]` entry: a whole key and its plan.
    pub(crate) fn key_plans(&self) -> &[(String, String)] {
        &self.key_plans
    }

    /// Every plan the file names: each `[plans.NAME]` and each policy's
    /// `default_plan`, once each, in order.
    fn plan_names(&self) -> BTreeSet<&str> {
        let listed = self.policies.values().flat_map(|p| p.plans.keys());
        let defaults = self.policies.values().map(|p| &p.default_plan);
        listed.chain(defaults).map(String::as_str).collect()
    }
}

/// Puts each `[plans.NAME]` table's limits into the policies it lists:
/// `plans.pro.api = ["sliding-log:1000/1m"]` gives policy `api` those
/// limits under plan `pro`. A plan listing a policy the file does not
/// have, or its default plan (whose limits are its own `limits`), or with
/// limits a policy's weight cannot pay, is an error naming the entry.
fn plan_limits(
    plans: toml::Table,
    policies: &mut BTreeMap<String, NamedPolicy>,
) -> Result<(), (String, String)> {
    for (plan, value) in plans {
        let entry = format!("plans.{}", toml_key(&plan));
        if !is_plan_name(&plan) {
            let reason =
                "not a plan name: one or more printable ASCII characters but `\"` and `\\`";
            return Err((entry, reason.to_owned()));
        }
        let toml::Value::Table(limits) = value else {
            let reason = "expected a table of policies and their limits ([plans.NAME])";
            return Err((entry, reason.to_owned()));
        };
        for (name, value) in limits {
            let entry = format!("{entry}.{}", toml_key(&name));
            let names = policies.keys().cloned().collect::<Vec<_>>().join(", ");
            let Some(policy) = policies.get_mut(&name) else {
                let reason = format!("no policy is named {name:?} (the file has: {names})");
                return Err((entry, reason));
            };
            if policy.default_plan == plan {
                let reason = format!(
                    "{plan:?} is the policy's default plan, whose limits are its own \
                     `limits` (policies.{}.limits)",
                    toml_key(&name)
                );
                return Err((entry, reason));
            }
            let texts: Vec<String> = toml::Value::try_into(value).map_err(|_| {
                let reason = "expected a list of policy strings, as `limits` takes";
                (entry.clone(), reason.to_owned())
            })?;
            let mut parts = Vec::with_capacity(texts.len());
            for (index, text) in texts.iter().enumerate() {
                let part = text
                    .parse::<Policy>()
                    .map_err(|error| (format!("{entry}[{index}]"), error.to_string()))?;
                parts.push(part);
            }
            let set = Policies::new(parts).map_err(|error| (entry.clone(), error.to_string()))?;
            if let Some(units) = policy.cost.weight_units() {
                if units > set.max_cost() {
                    let reason = format!(
                        "a request of this policy weighs {units} units, above the most a \
                         request of these limits may cost, {}: every request would be refused",
                        set.max_cost()
                    );
                    return Err((entry, reason));
                }
            }
            policy.plans.insert(plan.clone(), set);
        }
    }
    Ok(())
}

/// The `[key_plans]` entries: each a whole key (as the layer writes it,
/// `header:acme-key-1`) and the plan its requests are decided under, a
/// plan the file names.
fn key_plans_of(
    table: toml::Table,
    policies: &BTreeMap<String, NamedPolicy>,
) -> Result<Vec<(String, String)>, (String, String)> {
    let mut known: BTreeSet<&str> = policies
        .values()
        .flat_map(|p| p.plans.keys())
        .map(String::as_str)
        .collect();
    known.extend(policies.values().map(|p| p.default_plan.as_str()));
    table
        .into_iter()
        .map(|(key, plan)| {
            let entry = format!("key_plans.{}", toml_key(&key));
            let Some(plan) = plan.as_str() else {
                return Err((entry, "expected a plan's name".to_owned()));
            };
            if !known.contains(plan) {
                let names: Vec<&str> = known.iter().copied().collect();
                let reason = format!(
                    "no plan is named {plan:?} (the file has: {})",
                    names.join(", ")
                );
                return Err((entry, reason));
            }
            Ok((key, plan.to_owned()))
        })
        .collect()
}

/// The fields of a policy, which `[defaults]` may set for every policy.
const POLICY_FIELDS: [&str; 19] = [
    "limits",
    "key",
    "fallback",
    "trusted_proxies",
    "ipv6_prefix",
    "headers",
    "allow_ips",
    "allow_keys",
    "on_failure",
    "bans",
    "penalty",
    "ban_status",
    "max_keys",
    "max_key_bytes",
    "mask_addresses",
    "cost",
    "charge_after",
    "default_plan",
    "plan_header",
];

/// One `[policies.NAME]` table as written, over the `[defaults]` table's
/// fields it does not set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    limits: Vec<String>,
    key: Option<String>,
    fallback: Option<String>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    /// Any TOML integer, so that one out of range is named by this field
    /// (a `u8` would fail the whole table).
    ipv6_prefix: Option<i64>,
    headers: Option<String>,
    #[serde(default)]
    allow_ips: Vec<String>,
    #[serde(default)]
    allow_keys: Vec<String>,
    on_failure: Option<String>,
    #[serde(default)]
    bans: bool,
    penalty: Option<RawPenalty>,
    ban_status: Option<u16>,
    /// Any TOML integer, so that one out of range is named by this field.
    max_keys: Option<i64>,
    /// Likewise.
    max_key_bytes: Option<i64>,
    #[serde(default)]
    mask_addresses: bool,
    /// A weight (an integer) or a text form: checked whole by `cost`.
    cost: Option<toml::Value>,
    /// A text form of [`ChargeAfter`].
    charge_after: Option<String>,
    default_plan: Option<String>,
    plan_header: Option<String>,
}

/// `penalty = { denials = "5/1m", ban_for = "15m" }` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPenalty {
    denials: String,
    ban_for: String,
}

/// What is wrong with one field: its name (and index), the kind, the reason.
type FieldError = (String, ConfigErrorKind, String);

impl RawPolicy {
    /// The policy, checked; `inherited` tells the fields taken from
    /// `[defaults]`, which apply only where the key takes them.
    fn check(self, inherited: impl Fn(&str) -> bool) -> Result<NamedPolicy, FieldError> {
        let mut parts = Vec::with_capacity(self.limits.len());
        for (index, text) in self.limits.iter().enumerate() {
            let policy = text.parse::<Policy>().map_err(|error| {
                let field = format!("limits[{index}]");
                (field, ConfigErrorKind::Policy, error.to_string())
            })?;
            parts.push(policy);
        }
        let policies = Policies::new(parts).map_err(|error| {
            let reason = error.to_string();
            ("limits".to_owned(), ConfigErrorKind::Policy, reason)
        })?;

        let key_error =
            |field: &str, reason: String| Err((field.to_owned(), ConfigErrorKind::Key, reason));
        let kind = self.key.as_deref().unwrap_or("ip");
        let mut key: KeyExtractor = kind.parse().map_err(|error: KeyKindError| {
            ("key".to_owned(), ConfigErrorKind::Key, error.to_string())
        })?;
        let header_key = kind.starts_with("header:");
        // A default a key cannot take is not its: `[defaults]` serves
        // policies of every kind of key.
        let fallback = self
            .fallback
            .as_deref()
            .filter(|_| header_key || !inherited("fallback"));
        if let Some(fallback) = fallback {
            if !header_key {
                let reason = format!("a fallback is for a header key, and the key is {kind:?}");
                return key_error("fallback", reason);
            }
            key = key.fallback(match fallback {
                "reject" => Fallback::Reject,
                "ip" => Fallback::Ip,
                "skip" => Fallback::Skip,
                other => {
                    let reason = format!("unknown fallback {other:?}; expected reject, ip or skip");
                    return key_error("fallback", reason);
                }
            });
        }
        let by_ip_too = header_key && fallback == Some("ip");
        if let Some(prefix) = self.ipv6_prefix {
            let Some(prefix) = u8::try_from(prefix).ok().filter(|&bits| bits <= 128) else {
                let reason = format!("{prefix} is not a prefix length: expected 0 to 128 bits");
                return key_error("ipv6_prefix", reason);
            };
            let by_ip = kind == "ip" || by_ip_too;
            if by_ip {
                key = key.ipv6_prefix(prefix);
            } else if !inherited("ipv6_prefix") {
                let reason = format!("an IPv6 prefix groups ip keys, and the key is {kind:?}");
                return key_error("ipv6_prefix", reason);
            }
        }

        for (index, entry) in self.allow_keys.iter().enumerate() {
            if !key_may_be(kind, by_ip_too, entry, &key) {
                let reason = format!(
                    "{entry:?} is never a key of {kind:?}, whose keys are {}",
                    key_forms(kind, by_ip_too)
                );
                return key_error(&format!("allow_keys[{index}]"), reason);
            }
        }

        let trusted = nets("trusted_proxies", &self.trusted_proxies)?;
        let allow_ips = nets("allow_ips", &self.allow_ips)?;

        let failure_error =
            |reason: String| ("on_failure".to_owned(), ConfigErrorKind::Failure, reason);
        let on_failure = match self.on_failure.as_deref() {
            None | Some("return-error") => OnFailure::ReturnError,
            Some("fail-open") => OnFailure::FailOpen,
            Some("fail-closed") => OnFailure::FailClosed,
            Some("fallback") => OnFailure::Fallback,
            Some(other) => {
                return Err(failure_error(format!(
                    "unknown failure policy {other:?}; expected return-error, fail-open, \
                     fail-closed or fallback"
                )))
            }
        };

        let ban_error =
            |field: &str, reason: String| (field.to_owned(), ConfigErrorKind::Bans, reason);
        let penalty = match self.penalty {
            None => None,
            Some(RawPenalty { denials, ban_for }) => {
                let counter = format!("sliding-log:{denials}")
                    .parse::<Policy>()
                    .map_err(|error| ban_error("penalty.denials", error.to_string()))?;
                let ban_for = limiter_core::parse_duration(&ban_for)
                    .map_err(|error| ban_error("penalty.ban_for", error.to_string()))?;
                if ban_for.is_zero() {
                    return Err(ban_error(
                        "penalty.ban_for",
                        "a ban of no time bans no one".to_owned(),
                    ));
                }
                Some((counter, ban_for))
            }
        };
        let bans = self.bans || penalty.is_some();
        let ban_status_unused = self.ban_status.is_some() && !bans && !inherited("ban_status");
        let ban_status = match self.ban_status {
            None | Some(403) => StatusCode::FORBIDDEN,
            Some(429) => StatusCode::TOO_MANY_REQUESTS,
            Some(other) => {
                return Err(ban_error(
                    "ban_status",
                    format!("{other} is not a ban's status; expected 403 or 429"),
                ))
            }
        };

        let memory = MemoryBounds {
            max_keys: count("max_keys", self.max_keys, 1, Config::DEFAULT_MAX_KEYS)?,
            max_key_bytes: count(
                "max_key_bytes",
                self.max_key_bytes,
                0,
                limiter_memory::MemoryLimiterBuilder::DEFAULT_MAX_KEY_BYTES,
            )?,
        };

        let cost = cost(self.cost.as_ref(), policies.max_cost())?;
        let charge_after = match self.charge_after.as_deref().map(str::parse::<ChargeAfter>) {
            None => None,
            Some(Ok(charge)) => Some(charge),
            Some(Err(reason)) => {
                let field = "charge_after".to_owned();
                return Err((field, ConfigErrorKind::Cost, reason.to_string()));
            }
        };

        let headers = match self.headers.as_deref() {
            None | Some("both") => HeaderStyle::Both,
            Some("none") => HeaderStyle::None,
            Some("legacy") => HeaderStyle::Legacy,
            Some("ietf") => HeaderStyle::Ietf,
            Some(other) => {
                let reason =
                    format!("unknown header style {other:?}; expected none, legacy, ietf or both");
                return Err(("headers".to_owned(), ConfigErrorKind::Headers, reason));
            }
        };
        let default_plan = self.default_plan.unwrap_or_else(|| "default".to_owned());
        if !is_plan_name(&default_plan) {
            let reason = format!(
                "{default_plan:?} is not a plan name: one or more printable ASCII characters \
                 but `\"` and `\\`"
            );
            return Err(("default_plan".to_owned(), ConfigErrorKind::Plan, reason));
        }
        let plan_header = match self.plan_header {
            None => None,
            Some(text) => Some(text.parse::<HeaderName>().map_err(|_| {
                let reason = format!("{text:?} is not a header name");
                ("plan_header".to_owned(), ConfigErrorKind::Plan, reason)
            })?),
        };
        Ok(NamedPolicy {
            default_plan,
            plan_header,
            plans: BTreeMap::new(),
            restart_fields: toml::Table::new(),
            policies,
            key,
            trusted,
            headers,
            allow_ips,
            allow_keys: self.allow_keys,
            on_failure,
            bans,
            penalty,
            ban_status,
            ban_status_unused,
            memory,
            trusts_none_on_purpose: false,
            mask_addresses: self.mask_addresses,
            cost,
            charge_after,
        })
    }
}

/// The cost of field `cost` (a weight or a text form of [`Cost`]), one
/// when unset; a weight above `max_cost`, which no request could pay, is
/// an error.
fn cost(value: Option<&toml::Value>, max_cost: u64) -> Result<Cost, FieldError> {
    let error = |reason: String| Err(("cost".to_owned(), ConfigErrorKind::Cost, reason));
    let parsed = match value {
        None => return Ok(Cost::one()),
        Some(toml::Value::Integer(weight)) => {
            match u64::try_from(*weight).ok().and_then(NonZeroU64::new) {
                Some(units) => Ok(Cost::weight(units)),
                None => {
                    return error(format!(
                        "{weight} is not a weight: expected a whole number from 1"
                    ))
                }
            }
        }
        Some(toml::Value::String(text)) => text.parse::<Cost>(),
        Some(other) => {
            let shown = match other {
                toml::Value::Float(number) => number.to_string(),
                toml::Value::Boolean(flag) => flag.to_string(),
                other => format!("a TOML {}", other.type_str()),
            };
            return error(format!(
                "{shown} is not a cost; expected a weight (a whole number from 1), \
                 \"content-length:UNIT_BYTES\" or \"header:NAME\""
            ));
        }
    };
    let cost = match parsed {
        Ok(cost) => cost,
        Err(reason) => return error(reason.to_string()),
    };
    match cost.weight_units() {
        Some(units) if units > max_cost => error(format!(
            "a weight of {units} is above the most a request of these limits may cost, \
             {max_cost}: every request would be refused"
        )),
        _ => Ok(cost),
    }
}

/// The number of field `field`, at least `min`, or `default` when unset.
fn count(field: &str, value: Option<i64>, min: i64, default: usize) -> Result<usize, FieldError> {
    let Some(value) = value else {
        return Ok(default);
    };
    match usize::try_from(value) {
        Ok(number) if value >= min => Ok(number),
        _ => Err((
            field.to_owned(),
            ConfigErrorKind::Memory,
            format!("{value} is not a {field}: expected {min} or more"),
        )),
    }
}

/// Whether the layer's key of kind `kind`, written by `key` (and, with
/// `by_ip_too`, its fallback by address) can be `entry`: an `allow_keys`
/// entry that never can is a mistake (`header:x-user-id:monitor` for the
/// key `header:x-user-id`, whose keys hold the value alone; `ip:10.0.0.0/8`,
/// a block, or an address not in the form the key writes it;
/// `route:/health`, without a method).
fn key_may_be(kind: &str, by_ip_too: bool, entry: &str, key: &KeyExtractor) -> bool {
    let by_ip = |entry: &str| key.writes_ip_key(entry);
    match kind {
        "ip" => by_ip(entry),
        "global" => entry == "global",
        "route" => is_route_key(entry),
        _ => {
            // `header:NAME:value` repeats the header's name, which the
            // key does not hold: taken for the mistake it nearly always is.
            let name = kind.trim_start_matches("header:");
            let names_the_header = entry
                .strip_prefix(kind)
                .is_some_and(|rest| rest.starts_with(':'))
                && !name.is_empty();
            (entry.starts_with("header:") && !names_the_header)
                || entry.starts_with("header-bytes:")
                || (by_ip_too && by_ip(entry))
        }
    }
}

/// What an address's key looks like, for an error.
const IP_KEYS: &str = "ip:ADDRESS (one address, as the key writes it: 10.0.0.1, 2001:db8::1, or \
                       its network under ipv6_prefix, 2001:db8::/64; blocks go in allow_ips)";

/// What a header's key looks like, for an error.
const HEADER_KEYS: &str = "header:VALUE (the header's value alone, without its name)";

/// What the keys of kind `kind` look like, for an error.
fn key_forms(kind: &str, by_ip_too: bool) -> String {
    match kind {
        "ip" => IP_KEYS.to_owned(),
        "global" => "\"global\"".to_owned(),
        "route" => "route:METHOD PATH (GET, POST, ..., or OTHER; HEAD is GET)".to_owned(),
        _ if by_ip_too => format!("{HEADER_KEYS}, or without it {IP_KEYS}"),
        _ => HEADER_KEYS.to_owned(),
    }
}

/// The address blocks of list `field`, or the first that does not parse.
fn nets(field: &str, texts: &[String]) -> Result<Vec<IpNet>, FieldError> {
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            text.parse::<IpNet>().map_err(|error| {
                let field = format!("{field}[{index}]");
                (field, ConfigErrorKind::Address, error.to_string())
            })
        })
        .collect()
}

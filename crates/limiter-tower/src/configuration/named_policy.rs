//! [`NamedPolicy`]: one `[policies.NAME]` table of a configuration,
//! checked, and the layer it makes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, StatusCode};
use limiter_core::{FailurePolicy, Limiter, Policies, Policy};
use limiter_memory::MemoryLimiter;

use crate::answer::headers::HeaderStyle;
use crate::bans::ban::{BanList, Penalty};
use crate::client::cidr::IpNet;
use crate::client::key::KeyExtractor;
use crate::costs::charge_after::ChargeAfter;
use crate::costs::cost::Cost;
use crate::middleware::layer::LimiterLayer;

/// What a configured policy's in-process limiters hold at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryBounds {
    pub(crate) max_keys: usize,
    pub(crate) max_key_bytes: usize,
}

impl MemoryBounds {
    /// An in-process limiter of `policies` within these bounds.
    pub(crate) fn limiter(self, policies: impl Into<Policies>) -> MemoryLimiter {
        MemoryLimiter::builder(policies)
            .max_keys(self.max_keys)
            .max_key_bytes(self.max_key_bytes)
            .build()
    }
}

/// What a policy's layer answers while its backend fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnFailure {
    ReturnError,
    FailOpen,
    FailClosed,
    /// This instance's own in-process limiter of the same limits.
    Fallback,
}

impl OnFailure {
    /// The core's failure policy; `fallback` makes the limiter of
    /// [`OnFailure::Fallback`], `None` where there is none to make.
    pub(crate) fn policy(self, fallback: impl FnOnce() -> Option<MemoryLimiter>) -> FailurePolicy {
        match self {
            Self::ReturnError => FailurePolicy::ReturnError,
            Self::FailOpen => FailurePolicy::FailOpen,
            Self::FailClosed => FailurePolicy::FailClosed,
            Self::Fallback => {
                fallback().map_or(FailurePolicy::ReturnError, FailurePolicy::fallback)
            }
        }
    }
}

/// One `[policies.NAME]` table, checked.
#[derive(Debug, Clone)]
pub(crate) struct NamedPolicy {
    pub(crate) policies: Policies,
    pub(crate) key: KeyExtractor,
    pub(crate) trusted: Vec<IpNet>,
    pub(crate) headers: HeaderStyle,
    pub(crate) allow_ips: Vec<IpNet>,
    pub(crate) allow_keys: Vec<String>,
    pub(crate) on_failure: OnFailure,
    /// Whether the layer checks a ban list.
    pub(crate) bans: bool,
    /// The denials that earn a ban (a sliding log's limit), and its length.
    pub(crate) penalty: Option<(Policy, Duration)>,
    pub(crate) ban_status: StatusCode,
    /// Whether its own table sets `ban_status` while it checks no ban
    /// list: no request is ever answered with it.
    pub(crate) ban_status_unused: bool,
    /// What each of its in-process limiters holds at most.
    pub(crate) memory: MemoryBounds,
    /// Whether its own table says `trusted_proxies = []`: it trusts no
    /// proxy on purpose, whatever the others trust.
    pub(crate) trusts_none_on_purpose: bool,
    /// Whether its layer logs client addresses masked to their network.
    pub(crate) mask_addresses: bool,
    /// What each request costs.
    pub(crate) cost: Cost,
    /// What an admitted request is charged once its response is complete.
    pub(crate) charge_after: Option<ChargeAfter>,
    /// The plan its own `limits` are, and a request naming none (or one
    /// the file does not name) is decided under.
    pub(crate) default_plan: String,
    /// The header a trusted gateway names a request's plan in.
    pub(crate) plan_header: Option<HeaderName>,
    /// Its limits under each plan that lists it.
    pub(crate) plans: BTreeMap<String, Policies>,
    /// Its fields as the file sets them (with `[defaults]`'), but its
    /// `limits`: what a reload may not change.
    pub(crate) restart_fields: toml::Table,
}

impl NamedPolicy {
    /// Its limits, default plan and plans: what a reload may change of it.
    pub(crate) fn limits_and_plans(&self) -> (&Policies, &str, &BTreeMap<String, Policies>) {
        (&self.policies, &self.default_plan, &self.plans)
    }

    /// The layer of this policy over `limiter` (a limiter of `policies`),
    /// with `bans` if it checks any and `penalty_counter` (a limiter of
    /// the penalty's denials) if it has a penalty.
    pub(crate) fn layer(
        &self,
        limiter: Arc<dyn Limiter>,
        bans: Option<BanList>,
        penalty_counter: Option<Arc<dyn Limiter>>,
    ) -> LimiterLayer {
        let mut layer = LimiterLayer::from_arc(limiter)
            .key(self.key.clone())
            .trusted_proxies(self.trusted.iter().copied())
            .headers(self.headers)
            .allow_ips(self.allow_ips.iter().copied())
            .allow_keys(self.allow_keys.iter().cloned())
            .ban_status(self.ban_status)
            .mask_addresses(self.mask_addresses)
            .cost(self.cost.clone());
        if let Some(charge) = self.charge_after {
            layer = layer.charge_after(charge);
        }
        if let Some(bans) = bans {
            layer = layer.bans(bans);
        }
        if let (Some(counter), Some((_, ban_for))) = (penalty_counter, &self.penalty) {
            layer = layer.penalty(Penalty::from_arc(counter, *ban_for));
        }
        layer
    }
}

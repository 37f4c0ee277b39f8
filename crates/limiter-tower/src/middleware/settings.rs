//! [`Settings`]: what a [`LimiterLayer`](crate::LimiterLayer) is built up
//! with, shared by every service it makes.

use std::fmt;
use std::sync::Arc;

use http::StatusCode;

use crate::answer::headers::HeaderStyle;
use crate::answer::limited::OnLimited;
use crate::bans::allow::Allowlist;
use crate::bans::ban::{BanList, Penalty};
use crate::client::cidr::IpNet;
use crate::client::key::KeyExtractor;
use crate::costs::charge_after::ChargeAfter;
use crate::costs::cost::Cost;
use crate::middleware::observe::Observer;
use crate::middleware::plans::{Limits, PlanSwitch};
use crate::middleware::shaping::Shaping;

/// What every [`LimiterService`] of a layer shares.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The limiter and what its policies fix, without plans: the
    /// default plan's with them.
    pub(crate) limits: Arc<Limits>,
    /// The plans a request's limits are chosen from, if any.
    pub(crate) plans: Option<Arc<PlanSwitch>>,
    pub(crate) key: KeyExtractor,
    /// What a request costs.
    pub(crate) cost: Cost,
    /// What an admitted request is charged once its response is complete.
    pub(crate) charge_after: Option<ChargeAfter>,
    pub(crate) trusted: Vec<IpNet>,
    pub(crate) style: HeaderStyle,
    pub(crate) allow: Allowlist,
    pub(crate) bans: Option<BanList>,
    pub(crate) ban_status: StatusCode,
    pub(crate) penalty: Option<Penalty>,
    pub(crate) shaping: Shaping,
    pub(crate) observer: Observer,
    pub(crate) on_limited: Option<OnLimited>,
    /// Whether the client address is logged masked to its network.
    pub(crate) mask_addresses: bool,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("name", &self.observer.policy())
            .field("limiter", &self.limits.limiter)
            .field("plans", &self.plans.is_some())
            .field("key", &self.key)
            .field("cost", &self.cost)
            .field("charge_after", &self.charge_after)
            .field("trusted", &self.trusted)
            .field("style", &self.style)
            .field("allow", &self.allow)
            .field("bans", &self.bans)
            .field("penalty", &self.penalty)
            .field("shaping", &self.shaping)
            .field("on_limited", &self.on_limited.is_some())
            .field("mask_addresses", &self.mask_addresses)
            .finish_non_exhaustive()
    }
}

//! [`LimiterLayer`]: the [`tower::Layer`] a route is limited with, and the
//! builder methods that set it up.

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use limiter_core::Limiter;
use tower::Layer;

use crate::answer::headers::HeaderStyle;
use crate::answer::limited::LimitedContext;
use crate::bans::allow::Allowlist;
use crate::bans::ban::{BanList, Penalty};
use crate::client::cidr::IpNet;
use crate::client::key::KeyExtractor;
use crate::costs::charge_after::ChargeAfter;
use crate::costs::cost::Cost;
use crate::middleware::observe::Observer;
use crate::middleware::plans::{Limits, PlanSwitch, Plans};
use crate::middleware::service::LimiterService;
use crate::middleware::settings::Settings;
use crate::middleware::shaping::Shaping;

/// A [`tower::Layer`] that rate limits HTTP requests with a [`Limiter`]
/// (one policy or a tiered set, any backend).
///
/// A denied request is answered `429 Too Many Requests` without reaching
/// the inner service; an admitted one reaches it and its response carries
/// the rate-limit headers (see [`HeaderStyle`]). Each request costs one
/// unit unless [`cost`](Self::cost) says otherwise. In order, a request
/// is: keyed, let through if [allowlisted](Self::allow_ips), weighed
/// ([`cost`](Self::cost)), refused if [banned](Self::bans), decided
/// by the limiter, and, if admitted with a leaky bucket's wait,
/// [shaped](Self::shaping).
///
/// ```
/// use std::sync::Arc;
/// use limiter_memory::MemoryLimiter;
/// use limiter_tower::{HeaderStyle, KeyExtractor, LimiterLayer};
///
/// let limiter = MemoryLimiter::new("sliding-log:100/10s".parse::<limiter_core::Policy>()?);
/// let layer = LimiterLayer::new(limiter)
///     .name("api")
///     .key(KeyExtractor::ip())
///     .trusted_proxies(["10.0.0.0/8".parse()?])
///     .allow_ips(["192.0.2.10".parse()?]) // the health checker
///     .headers(HeaderStyle::Both);
/// // axum: Router::new().route("/", get(handler)).layer(layer)
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct LimiterLayer {
    settings: Arc<Settings>,
}

impl LimiterLayer {
    /// Limits requests with `limiter` (an `Arc` of one is a limiter too),
    /// keyed by client address, with both header styles.
    pub fn new(limiter: impl Limiter + 'static) -> Self {
        Self::from_arc(Arc::new(limiter))
    }

    /// [`new`](Self::new) with a shared `Arc<dyn Limiter>`.
    pub fn from_arc(limiter: Arc<dyn Limiter>) -> Self {
        let observer = Observer::new(limiter.policies().to_string());
        Self {
            settings: Arc::new(Settings {
                limits: Arc::new(Limits::new(limiter, None, None)),
                plans: None,
                key: KeyExtractor::default(),
                cost: Cost::default(),
                charge_after: None,
                trusted: Vec::new(),
                style: HeaderStyle::default(),
                allow: Allowlist::default(),
                bans: None,
                ban_status: StatusCode::FORBIDDEN,
                penalty: None,
                shaping: Shaping::default(),
                observer,
                on_limited: None,
                mask_addresses: false,
            }),
        }
    }

    /// The name metrics and `tracing` events report this layer under (the
    /// `policy` label), e.g. `"login"`. Defaults to the limiter's policy
    /// string (`sliding-log:100/10s`).
    #[must_use]
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        Arc::make_mut(&mut self.settings).observer = Observer::new(name);
        self
    }

    /// Logs the client address masked to its network (an IPv4 address's
    /// /24, an IPv6 one's /48) in the layer's `debug` events, where logs
    /// may not hold whole addresses (unmasked by default).
    #[must_use]
    pub fn mask_addresses(mut self, mask: bool) -> Self {
        Arc::make_mut(&mut self.settings).mask_addresses = mask;
        self
    }

    /// Which key a request is limited under ([`KeyExtractor::ip`] by default).
    #[must_use]
    pub fn key(mut self, key: KeyExtractor) -> Self {
        Arc::make_mut(&mut self.settings).key = key;
        self
    }

    /// What each request costs the limiter ([`Cost::one`] by default): a
    /// weight, the body's length, a header's value, a function's. A cost
    /// the request states wrongly, or one above the most a request may
    /// cost, is answered 400, 411 or 413 with a body saying why, never
    /// counted (see [`Cost`]); the rate-limit headers report units.
    ///
    /// # Panics
    ///
    /// If `cost` is a [weight](Cost::weight) above the limiter's max cost
    /// (every request would be refused).
    #[must_use]
    pub fn cost(mut self, cost: Cost) -> Self {
        let settings = Arc::make_mut(&mut self.settings);
        if let Some(units) = cost.weight_units() {
            let max_cost = match &settings.plans {
                Some(plans) => plans.load().smallest_max_cost(),
                None => settings.limits.max_cost,
            };
            assert_weight_fits(units, max_cost);
        }
        settings.cost = cost;
        self
    }

    /// Decides each request under its plan's limiter, chosen from `plans`
    /// (this layer's limiter is the default plan's; see [`Plans`]); every
    /// other setting of the layer holds for every plan. Each response's
    /// `RateLimit-Policy` names the plan in force.
    ///
    /// # Panics
    ///
    /// If a key's plan ([`Plans::key_plan`]) is not one of the plans, or
    /// the layer's [weight](Cost::weight) is above a plan's max cost.
    #[must_use]
    pub fn plans(mut self, plans: Plans) -> Self {
        let settings = Arc::make_mut(&mut self.settings);
        let table = plans.table(Arc::clone(&settings.limits.limiter));
        if let Some(units) = settings.cost.weight_units() {
            assert_weight_fits(units, table.smallest_max_cost());
        }
        settings.limits = Arc::clone(table.default_limits());
        settings.plans = Some(Arc::new(PlanSwitch::new(table)));
        self
    }

    /// The plans this layer chooses from, for a reload to replace.
    #[cfg(feature = "config")]
    pub(crate) fn plan_switch(&self) -> Option<&Arc<PlanSwitch>> {
        self.settings.plans.as_ref()
    }

    /// Charges each admitted request's true cost once its response is
    /// complete (none by default): the [`ActualCost`](crate::ActualCost)
    /// its handler wrote in the response, or the bytes of its body (see
    /// [`ChargeAfter`]). The charge is the true cost **less the estimate**
    /// the request's [`cost`](Self::cost) reserved, when positive; a true
    /// cost below the estimate is not refunded (the admitted units stay
    /// counted). It is made on the request's key and limiter through
    /// [`Limiter::charge`], when the body ends or is dropped: always
    /// counted, it may take the key into debt, which refuses the key until
    /// time has paid it back (docs/spec.md section 10).
    ///
    /// Requests the layer refuses, lets through unlimited (allowlisted,
    /// no key) or passes while the backend fails are not charged. A charge
    /// that fails is logged at `warn` and counted in
    /// [`METRIC_CHARGE_ERRORS`](crate::metrics::METRIC_CHARGE_ERRORS); the
    /// response is out already.
    ///
    /// ```
    /// use limiter_memory::MemoryLimiter;
    /// use limiter_tower::{ActualCost, ChargeAfter, Cost, LimiterLayer};
    ///
    /// // 100,000 tokens a day; each request reserves 500, and is charged
    /// // what its handler says it used beyond that.
    /// let limiter = MemoryLimiter::new("token-bucket:100000/1d".parse::<limiter_core::Policy>()?);
    /// let layer = LimiterLayer::new(limiter)
    ///     .cost(Cost::weight(std::num::NonZeroU64::new(500).unwrap()))
    ///     .charge_after(ChargeAfter::actual_cost());
    /// // the handler: `(ActualCost(tokens_used), completion)`
    /// # let _ = (layer, ActualCost(0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn charge_after(mut self, charge: ChargeAfter) -> Self {
        Arc::make_mut(&mut self.settings).charge_after = Some(charge);
        self
    }

    /// The proxies whose `X-Forwarded-For` is believed (none by default):
    /// when the peer is one of them, the client is the right-most address
    /// of `X-Forwarded-For` that is not (see [`client_ip`](crate::client::client_address::client_ip)).
    #[must_use]
    pub fn trusted_proxies(mut self, proxies: impl IntoIterator<Item = IpNet>) -> Self {
        Arc::make_mut(&mut self.settings).trusted = proxies.into_iter().collect();
        self
    }

    /// Which rate-limit headers responses carry ([`HeaderStyle::Both`] by default).
    #[must_use]
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        Arc::make_mut(&mut self.settings).style = style;
        self
    }

    /// Client addresses (or blocks) that are never limited nor banned
    /// (none by default; calls add up). The client address is the one the
    /// layer resolved behind its trusted proxies, normalized: no port, an
    /// IPv4-mapped IPv6 address as its IPv4 address. A trusted proxy
    /// standing in for a client no header named (no header, headers that
    /// disagree) is never matched: a client behind it can bring that
    /// about. Their responses carry no rate-limit headers.
    #[must_use]
    pub fn allow_ips(mut self, nets: impl IntoIterator<Item = IpNet>) -> Self {
        Arc::make_mut(&mut self.settings).allow.add_nets(nets);
        self
    }

    /// Keys that are never limited nor banned (none by default; calls add
    /// up): the whole key, kind prefix included (`header:partner-key`, see
    /// [`KeyExtractor`]). An address key (`ip:10.0.0.1`) is matched as
    /// [`allow_ips`](Self::allow_ips) matches: never for a trusted proxy
    /// standing in for a client no header named.
    #[must_use]
    pub fn allow_keys<K: Into<String>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        Arc::make_mut(&mut self.settings).allow.add_keys(keys);
        self
    }

    /// Checks `bans` before the limiter (no ban list by default): a banned
    /// key is answered [`ban_status`](Self::ban_status) with `Retry-After`
    /// (whole seconds until the ban ends, rounded up, at least 1) and is
    /// not counted.
    ///
    /// A check that fails (Redis down: it fails at once while the backend
    /// knows Redis is down, or within its command timeout) bans no one:
    /// the request goes on to the limiter, whose failure policy then
    /// applies if it shares that Redis (fail-open passes and marks,
    /// fail-closed answers 503); the failure is counted in
    /// [`METRIC_BAN_CHECK_ERRORS`](crate::metrics::METRIC_BAN_CHECK_ERRORS).
    #[must_use]
    pub fn bans(mut self, bans: BanList) -> Self {
        Arc::make_mut(&mut self.settings).bans = Some(bans);
        self
    }

    /// The status of a banned request's answer: 403 Forbidden (the
    /// default) or 429 Too Many Requests.
    #[must_use]
    pub fn ban_status(mut self, status: StatusCode) -> Self {
        Arc::make_mut(&mut self.settings).ban_status = status;
        self
    }

    /// Bans a key that is denied too often (see [`Penalty`]), in the
    /// layer's [`bans`](Self::bans); a layer without a ban list gets an
    /// in-process one ([`BanList::memory`]). No penalty by default.
    #[must_use]
    pub fn penalty(mut self, penalty: Penalty) -> Self {
        let settings = Arc::make_mut(&mut self.settings);
        settings.penalty = Some(penalty);
        settings.bans.get_or_insert_with(BanList::memory);
        self
    }

    /// What a request admitted with a leaky bucket's wait does
    /// ([`Shaping::Wait`] by default: it waits, so output is smooth).
    #[must_use]
    pub fn shaping(mut self, shaping: Shaping) -> Self {
        Arc::make_mut(&mut self.settings).shaping = shaping;
        self
    }

    /// Answers the requests the layer refuses (denied 429, banned 403 or
    /// 429, unavailable 503) with `f`'s response instead of its own, so an
    /// API can answer in its own error format, or a gRPC service with a
    /// `grpc-status`. `f` sees why, the decision and the request's head
    /// ([`LimitedContext`]); its response gets the layer's `Retry-After`
    /// and rate-limit headers where it sets none. The layer's 401 (no key)
    /// and 500 (no peer address) are setup answers and stay the layer's.
    /// None by default; admitted requests never call it.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::{Response, StatusCode};
    /// use limiter_memory::MemoryLimiter;
    /// use limiter_tower::{LimitedContext, LimiterLayer};
    ///
    /// let limiter = MemoryLimiter::new("sliding-log:100/10s".parse::<limiter_core::Policy>()?);
    /// let layer = LimiterLayer::new(limiter).on_limited(|ctx: &LimitedContext<'_>| {
    ///     let body = format!(r#"{{"title":"slow down","retry_after":{}}}"#, ctx.retry_after.as_secs());
    ///     Response::builder()
    ///         .status(ctx.status)
    ///         .header("content-type", "application/problem+json")
    ///         .body(Bytes::from(body))
    ///         .unwrap_or_else(|_| Response::new(Bytes::new()))
    /// });
    /// # let _ = (layer, StatusCode::OK);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn on_limited<F>(mut self, f: F) -> Self
    where
        F: Fn(&LimitedContext<'_>) -> Response<Bytes> + Send + Sync + 'static,
    {
        Arc::make_mut(&mut self.settings).on_limited = Some(Arc::new(f));
        self
    }
}

impl<S> Layer<S> for LimiterLayer {
    type Service = LimiterService<S>;

    fn layer(&self, inner: S) -> LimiterService<S> {
        LimiterService::new(inner, Arc::clone(&self.settings))
    }
}

/// Panics unless a request weight of `units` fits `max_cost`: a heavier
/// one would refuse every request.
fn assert_weight_fits(units: u64, max_cost: u64) {
    assert!(
        units <= max_cost,
        "a request weight of {units} is above the limiter's max cost of {max_cost}: every \
         request would be refused"
    );
}

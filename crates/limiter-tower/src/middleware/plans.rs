//! Plans: the limits a request is decided under, chosen per request from a
//! named plan ([`Plan`], [`Plans`]), and the limits one plan decides with
//! ([`Limits`]), switched whole on a reload ([`PlanSwitch`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use http::{HeaderName, Request};
use limiter_core::Limiter;

use crate::answer::rate_headers::PolicyHeaders;
use crate::client::ip_key::from_text;

/// The plan a request is decided under: inserted into the request's
/// extensions by the application's own authentication layer, which knows
/// the customer (the usual axum pattern), before the limiter's layer.
///
/// ```
/// use limiter_tower::Plan;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Plan::new("pro"));
/// assert_eq!(request.extensions().get::<Plan>().unwrap().name(), "pro");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Plan(Arc<str>);

impl Plan {
    /// The plan named `name`.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// The plans a [`LimiterLayer`](crate::LimiterLayer) chooses among per
/// request, each with its own limiter, and how a request's plan is found:
/// in order, the key's own plan ([`key_plan`](Self::key_plan): one
/// customer's contract), a [`Plan`] in the request's extensions, the
/// header a trusted gateway sets ([`from_header`](Self::from_header)),
/// and otherwise the default plan, the layer's own limiter. A plan name
/// no plan has is answered by the default plan, and logged once per name
/// (at `warn`, target `limiter_tower`).
///
/// The plans' limiters should share their keys, so that a client moving
/// between plans keeps what it used (docs/spec.md section 9): on the
/// memory backend, make each from the default's with
/// [`MemoryLimiter::plan`](limiter_memory::MemoryLimiter::plan); on
/// Redis, give each the same key prefix. Limiters that do not share keys
/// count each plan apart: a client moved to another plan starts it full.
///
/// Each response's `RateLimit-Policy` names the plan in force, each item
/// `"<plan>/<policy>"`.
///
/// ```
/// use limiter_core::Policy;
/// use limiter_memory::MemoryLimiter;
/// use limiter_tower::{KeyExtractor, LimiterLayer, Plans};
///
/// let free = MemoryLimiter::new("sliding-log:100/1m".parse::<Policy>()?);
/// let pro = free.plan("sliding-log:1000/1m".parse::<Policy>()?);
/// let acme = free.plan("sliding-log:5000/1m".parse::<Policy>()?);
/// let layer = LimiterLayer::new(free)
///     .key(KeyExtractor::header("x-api-key"))
///     .plans(
///         Plans::new("free")
///             .plan("pro", pro)
///             .plan("acme", acme)
///             .key_plan("header:acme-key-1", "acme"),
///     );
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Plans {
    default: Arc<str>,
    named: Vec<(Arc<str>, Arc<dyn Limiter>)>,
    header: Option<HeaderName>,
    key_plans: Vec<(Vec<u8>, Arc<str>)>,
    /// Whether responses' `RateLimit-Policy` names the plan.
    named_in_headers: bool,
}

impl Plans {
    /// No plan but the default, named `default` (the layer's own limiter
    /// decides under it).
    ///
    /// # Panics
    ///
    /// If `default` is not a plan name (see [`plan`](Self::plan)).
    pub fn new(default: impl Into<Arc<str>>) -> Self {
        let default = default.into();
        assert_plan_name(&default);
        Self {
            default,
            named: Vec::new(),
            header: None,
            key_plans: Vec::new(),
            named_in_headers: true,
        }
    }

    /// Responses' `RateLimit-Policy` names the policies alone, not the
    /// plan: for a configuration without plans, whose layer reads plans
    /// only so that a reload may add some.
    #[cfg(feature = "config")]
    pub(crate) fn unnamed_in_headers(mut self) -> Self {
        self.named_in_headers = false;
        self
    }

    /// Plan `name`, decided by `limiter` (an `Arc` of one is a limiter too).
    ///
    /// # Panics
    ///
    /// If a plan of that name is already given (the default's included):
    /// two plans of one name is a mistake where the layer is built, not a
    /// choice made per request. If `name` is empty or holds other than
    /// printable ASCII, a `"` or a `\`: a response's `RateLimit-Policy`
    /// quotes it.
    #[must_use]
    pub fn plan(self, name: impl Into<Arc<str>>, limiter: impl Limiter + 'static) -> Self {
        self.plan_arc(name, Arc::new(limiter))
    }

    /// [`plan`](Self::plan) with a shared `Arc<dyn Limiter>`.
    ///
    /// # Panics
    ///
    /// As [`plan`](Self::plan).
    #[must_use]
    pub fn plan_arc(mut self, name: impl Into<Arc<str>>, limiter: Arc<dyn Limiter>) -> Self {
        let name = name.into();
        assert_plan_name(&name);
        assert!(
            !self.has(&name),
            "plan {name:?} is given twice: each plan has one limiter"
        );
        self.named.push((name, limiter));
        self
    }

    /// Reads a request's plan from the header `name`, as a gateway in
    /// front sets it (trust it only where clients reach the service
    /// through that gateway alone, and the gateway replaces what a client
    /// sends). A [`Plan`] in the request's extensions comes first.
    #[must_use]
    pub fn from_header(mut self, name: HeaderName) -> Self {
        self.header = Some(name);
        self
    }

    /// Decides the requests of `key` (a whole key in its text form, as
    /// `allow_keys` takes it: `header:acme-key-1`, `ip:203.0.113.7`) under
    /// plan `plan`, whatever the request says: one customer's contract.
    ///
    /// # Panics
    ///
    /// If no plan is named `plan` when the layer takes these plans (see
    /// [`LimiterLayer::plans`](crate::LimiterLayer::plans)).
    #[must_use]
    pub fn key_plan(mut self, key: impl Into<String>, plan: impl Into<Arc<str>>) -> Self {
        self.key_plans
            .push((from_text(&key.into()).to_vec(), plan.into()));
        self
    }

    /// The default plan's name.
    pub fn default_plan(&self) -> &str {
        &self.default
    }

    /// Whether a plan is named `name`, the default included.
    pub fn has(&self, name: &str) -> bool {
        *self.default == *name || self.named.iter().any(|(named, _)| **named == *name)
    }

    /// The table a layer decides with, `default` the layer's own limiter.
    ///
    /// # Panics
    ///
    /// If a key's plan is not one of the plans.
    pub(crate) fn table(&self, default: Arc<dyn Limiter>) -> PlanTable {
        let limits = |name: &Arc<str>, limiter: Arc<dyn Limiter>| {
            let named = self.named_in_headers.then_some(&**name);
            Arc::new(Limits::new(limiter, Some(name), named))
        };
        let default = limits(&self.default, default);
        let named: Vec<(Arc<str>, Arc<Limits>)> = (self.named.iter())
            .map(|(name, limiter)| (Arc::clone(name), limits(name, Arc::clone(limiter))))
            .collect();
        let find = |name: &Arc<str>| match named.iter().find(|(named, _)| named == name) {
            Some((_, found)) => Arc::clone(found),
            None if **name == *default.plan_name() => Arc::clone(&default),
            None => panic!(
                "a key's plan {name:?} is not one of the plans ({})",
                self.names().join(", ")
            ),
        };
        let key_plans = (self.key_plans.iter())
            .map(|(key, plan)| (key.clone().into_boxed_slice(), find(plan)))
            .collect();
        PlanTable {
            default,
            named,
            header: self.header.clone(),
            key_plans,
            unknown: UnknownPlans::default(),
        }
    }

    fn names(&self) -> Vec<&str> {
        let named = self.named.iter().map(|(name, _)| &**name);
        std::iter::once(&*self.default).chain(named).collect()
    }
}

/// Panics unless `name` can be a plan's: a response's `RateLimit-Policy`
/// writes it in a quoted string.
fn assert_plan_name(name: &str) {
    assert!(
        is_plan_name(name),
        "{name:?} is not a plan name: one or more printable ASCII characters but `\"` and `\\`"
    );
}

/// Whether `name` can be a plan's (see [`assert_plan_name`]).
pub(crate) fn is_plan_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl fmt::Debug for Plans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plans")
            .field("plans", &self.names())
            .field("header", &self.header)
            .field("key_plans", &self.key_plans.len())
            .finish()
    }
}

/// One plan's limiter, and what is computed once from its policies.
#[derive(Debug)]
pub(crate) struct Limits {
    /// The plan's name (`None` for a layer without plans).
    pub(crate) plan: Option<Arc<str>>,
    pub(crate) limiter: Arc<dyn Limiter>,
    /// The most a request may cost (the policies' max cost).
    pub(crate) max_cost: u64,
    pub(crate) policy_headers: PolicyHeaders,
}

impl Limits {
    /// The limits of `limiter`, plan `plan`'s if any, its headers naming
    /// `named_in_headers` if any.
    pub(crate) fn new(
        limiter: Arc<dyn Limiter>,
        plan: Option<&Arc<str>>,
        named_in_headers: Option<&str>,
    ) -> Self {
        let policies = limiter.policies();
        Self {
            plan: plan.cloned(),
            max_cost: policies.max_cost(),
            policy_headers: PolicyHeaders::named(policies, named_in_headers),
            limiter,
        }
    }

    fn plan_name(&self) -> &str {
        self.plan.as_deref().unwrap_or_default()
    }
}

/// The plans of a layer, as a request finds its own.
#[derive(Debug)]
pub(crate) struct PlanTable {
    default: Arc<Limits>,
    /// Looked through in order: a service has a few plans, fewer than it
    /// would take for hashing a name to cost less than comparing it.
    named: Vec<(Arc<str>, Arc<Limits>)>,
    header: Option<HeaderName>,
    key_plans: HashMap<Box<[u8]>, Arc<Limits>>,
    unknown: UnknownPlans,
}

impl PlanTable {
    /// The limits `request`, keyed `key`, is decided under.
    pub(crate) fn limits_for<B>(&self, request: &Request<B>, key: &[u8]) -> &Arc<Limits> {
        if !self.key_plans.is_empty() {
            if let Some(limits) = self.key_plans.get(key) {
                return limits;
            }
        }
        if let Some(plan) = request.extensions().get::<Plan>() {
            return self.named(plan.name());
        }
        let stated = self
            .header
            .as_ref()
            .and_then(|name| request.headers().get(name));
        match stated {
            Some(value) => match value.to_str() {
                Ok(name) => self.named(name.trim()),
                Err(_) => self.unknown(&String::from_utf8_lossy(value.as_bytes())),
            },
            None => &self.default,
        }
    }

    /// The default plan's limits.
    pub(crate) fn default_limits(&self) -> &Arc<Limits> {
        &self.default
    }

    /// The smallest of the plans' max costs: the most a weight may be.
    pub(crate) fn smallest_max_cost(&self) -> u64 {
        let named = self.named.iter().map(|(_, limits)| limits.max_cost);
        named.fold(self.default.max_cost, u64::min)
    }

    fn named(&self, name: &str) -> &Arc<Limits> {
        match self.named.iter().find(|(named, _)| **named == *name) {
            Some((_, limits)) => limits,
            None if name == self.default.plan_name() => &self.default,
            None => self.unknown(name),
        }
    }

    fn unknown(&self, name: &str) -> &Arc<Limits> {
        self.unknown.log_once(name, self.default.plan_name());
        &self.default
    }
}

/// The unknown plan names logged, each once, up to a bound: a name comes
/// from the request, so the set must not grow with what clients send.
#[derive(Debug, Default)]
struct UnknownPlans(Mutex<HashSet<String>>);

/// How many unknown plan names are logged, each once; the rest are not.
const MAX_UNKNOWN_PLANS_LOGGED: usize = 100;

impl UnknownPlans {
    fn log_once(&self, name: &str, default: &str) {
        let mut logged = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if logged.len() >= MAX_UNKNOWN_PLANS_LOGGED || logged.contains(name) {
            return;
        }
        logged.insert(name.to_owned());
        let last = logged.len() == MAX_UNKNOWN_PLANS_LOGGED;
        tracing::warn!(
            target: "limiter_tower",
            plan = name,
            default_plan = default,
            last_logged = last,
            "a request names a plan no plan has; it is decided under the default plan"
        );
    }
}

/// The plans in force, replaced whole on a reload: a request reads them
/// once, so it is decided entirely under the old plans or the new.
#[derive(Debug)]
pub(crate) struct PlanSwitch(RwLock<Arc<PlanTable>>);

impl PlanSwitch {
    pub(crate) fn new(table: PlanTable) -> Self {
        Self(RwLock::new(Arc::new(table)))
    }

    /// The plans in force now, read-locked until the guard is dropped: a
    /// reload waits for the requests reading them (no reference count
    /// moved per request).
    #[inline]
    pub(crate) fn load(&self) -> RwLockReadGuard<'_, Arc<PlanTable>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `table` in force for every request that begins from now on.
    #[cfg(feature = "config")]
    pub(crate) fn store(&self, table: PlanTable) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(table);
    }
}

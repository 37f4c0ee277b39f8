//! [`RateLimitLayer`] and the [`RateLimit`] service.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use limiter_core::{Decision, DecisionSource, Error, Limiter, SetDecision};
use pin_project_lite::pin_project;
use tower::{Layer, Service};
use tracing::Instrument;

use crate::allow::Allowlist;
use crate::ban::{BanList, Penalty};
use crate::body::RefusalBody;
use crate::decided::Decided;
use crate::grpc;
use crate::key::{peer_addr, resolve_client, Client, IpNet, KeyExtractor, Missing, RequestView};
use crate::key_text::KeyText;
use crate::limited::{Limited, LimitedContext, OnLimited, Refusal};
use crate::observe::{Observer, Outcome, Timer};
use crate::response::{
    accepts_json, banned, missing_key, missing_peer, verdict, HeaderStyle, PolicyHeaders,
    RateHeaders, Verdict, ERROR_RETRY_AFTER,
};
use crate::shaping::{self, Plan, Shaping};

/// What every [`RateLimit`] of a layer shares.
#[derive(Clone)]
struct Config {
    limiter: Arc<dyn Limiter>,
    /// Whether `limiter` enforces one policy (its answer is then a plain
    /// `Decision`, possibly given now): asked once here, not per request.
    single_policy: bool,
    key: KeyExtractor,
    trusted: Vec<IpNet>,
    style: HeaderStyle,
    policy_headers: PolicyHeaders,
    allow: Allowlist,
    bans: Option<BanList>,
    ban_status: StatusCode,
    penalty: Option<Penalty>,
    shaping: Shaping,
    observer: Observer,
    on_limited: Option<OnLimited>,
    /// Whether the client address is logged masked to its network.
    mask_addresses: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.observer.policy())
            .field("limiter", &self.limiter)
            .field("key", &self.key)
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

/// A [`tower::Layer`] that rate limits HTTP requests with a [`Limiter`]
/// (one policy or a tiered set, any backend).
///
/// A denied request is answered `429 Too Many Requests` without reaching
/// the inner service; an admitted one reaches it and its response carries
/// the rate-limit headers (see [`HeaderStyle`]). Each request costs one
/// unit. In order, a request is: keyed, let through if
/// [allowlisted](Self::allow_ips), refused if [banned](Self::bans), decided
/// by the limiter, and, if admitted with a leaky bucket's wait,
/// [shaped](Self::shaping).
///
/// ```
/// use std::sync::Arc;
/// use limiter_memory::MemoryLimiter;
/// use limiter_tower::{HeaderStyle, KeyExtractor, RateLimitLayer};
///
/// let limiter = MemoryLimiter::new("sliding-log:100/10s".parse::<limiter_core::Policy>()?);
/// let layer = RateLimitLayer::new(limiter)
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
pub struct RateLimitLayer {
    config: Arc<Config>,
}

impl RateLimitLayer {
    /// Limits requests with `limiter` (an `Arc` of one is a limiter too),
    /// keyed by client address, with both header styles.
    pub fn new(limiter: impl Limiter + 'static) -> Self {
        Self::from_arc(Arc::new(limiter))
    }

    /// [`new`](Self::new) with a shared `Arc<dyn Limiter>`.
    pub fn from_arc(limiter: Arc<dyn Limiter>) -> Self {
        let policy_headers = PolicyHeaders::new(limiter.policies());
        let observer = Observer::new(limiter.policies().to_string());
        Self {
            config: Arc::new(Config {
                single_policy: limiter.policies().single().is_some(),
                limiter,
                key: KeyExtractor::default(),
                trusted: Vec::new(),
                style: HeaderStyle::default(),
                policy_headers,
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
        Arc::make_mut(&mut self.config).observer = Observer::new(name);
        self
    }

    /// Logs the client address masked to its network (an IPv4 address's
    /// /24, an IPv6 one's /48) in the layer's `debug` events, where logs
    /// may not hold whole addresses (unmasked by default).
    #[must_use]
    pub fn mask_addresses(mut self, mask: bool) -> Self {
        Arc::make_mut(&mut self.config).mask_addresses = mask;
        self
    }

    /// Which key a request is limited under ([`KeyExtractor::ip`] by default).
    #[must_use]
    pub fn key(mut self, key: KeyExtractor) -> Self {
        Arc::make_mut(&mut self.config).key = key;
        self
    }

    /// The proxies whose `X-Forwarded-For` is believed (none by default):
    /// when the peer is one of them, the client is the right-most address
    /// of `X-Forwarded-For` that is not (see [`client_ip`](crate::client_ip)).
    #[must_use]
    pub fn trusted_proxies(mut self, proxies: impl IntoIterator<Item = IpNet>) -> Self {
        Arc::make_mut(&mut self.config).trusted = proxies.into_iter().collect();
        self
    }

    /// Which rate-limit headers responses carry ([`HeaderStyle::Both`] by default).
    #[must_use]
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        Arc::make_mut(&mut self.config).style = style;
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
        Arc::make_mut(&mut self.config).allow.add_nets(nets);
        self
    }

    /// Keys that are never limited nor banned (none by default; calls add
    /// up): the whole key, kind prefix included (`header:partner-key`, see
    /// [`KeyExtractor`]). An address key (`ip:10.0.0.1`) is matched as
    /// [`allow_ips`](Self::allow_ips) matches: never for a trusted proxy
    /// standing in for a client no header named.
    #[must_use]
    pub fn allow_keys<K: Into<String>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        Arc::make_mut(&mut self.config).allow.add_keys(keys);
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
    /// [`METRIC_BAN_CHECK_ERRORS`](crate::METRIC_BAN_CHECK_ERRORS).
    #[must_use]
    pub fn bans(mut self, bans: BanList) -> Self {
        Arc::make_mut(&mut self.config).bans = Some(bans);
        self
    }

    /// The status of a banned request's answer: 403 Forbidden (the
    /// default) or 429 Too Many Requests.
    #[must_use]
    pub fn ban_status(mut self, status: StatusCode) -> Self {
        Arc::make_mut(&mut self.config).ban_status = status;
        self
    }

    /// Bans a key that is denied too often (see [`Penalty`]), in the
    /// layer's [`bans`](Self::bans); a layer without a ban list gets an
    /// in-process one ([`BanList::memory`]). No penalty by default.
    #[must_use]
    pub fn penalty(mut self, penalty: Penalty) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.penalty = Some(penalty);
        config.bans.get_or_insert_with(BanList::memory);
        self
    }

    /// What a request admitted with a leaky bucket's wait does
    /// ([`Shaping::Wait`] by default: it waits, so output is smooth).
    #[must_use]
    pub fn shaping(mut self, shaping: Shaping) -> Self {
        Arc::make_mut(&mut self.config).shaping = shaping;
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
    /// use limiter_tower::{LimitedContext, RateLimitLayer};
    ///
    /// let limiter = MemoryLimiter::new("sliding-log:100/10s".parse::<limiter_core::Policy>()?);
    /// let layer = RateLimitLayer::new(limiter).on_limited(|ctx: &LimitedContext<'_>| {
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
        Arc::make_mut(&mut self.config).on_limited = Some(Arc::new(f));
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service of a [`RateLimitLayer`]: asks the limiter, then calls
/// `inner` or answers 429 (or 403, 503, 401, 500; see the crate docs).
#[derive(Debug, Clone)]
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RateLimit<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// A decision still to be made (a ban store or limiter out of process, a
/// penalty to count, a wait to sleep).
type Decide = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// One request's decision, with what it needs to answer: the layer's
/// [`Config`] borrowed while the request is decided synchronously (no
/// reference count moved between the cores on the hot path), an `Arc` of
/// it once the decision needs a future; and how to write a refusal
/// ([`Reply`]), read from the request's headers only when one is written.
struct Pending<C: Deref<Target = Config>, R: Reply> {
    config: C,
    key: KeyText,
    reply: R,
    timer: Timer,
}

/// How a refusal is written for a request: JSON or text, HTTP or gRPC.
trait Reply {
    /// Whether the client accepts JSON.
    fn json(&self) -> bool;
    /// Whether the request is a gRPC call: refused with a `grpc-status`,
    /// not an HTTP status.
    fn grpc(&self) -> bool;
}

/// While the request is at hand: asked of its headers when a refusal is
/// written, not on every admitted request.
impl Reply for &HeaderMap {
    fn json(&self) -> bool {
        accepts_json(self)
    }

    fn grpc(&self) -> bool {
        grpc::is_grpc(self)
    }
}

/// Read from the headers before the request goes on without them.
#[derive(Debug, Clone, Copy)]
struct ReplyFormat {
    json: bool,
    grpc: bool,
}

impl Reply for ReplyFormat {
    fn json(&self) -> bool {
        self.json
    }

    fn grpc(&self) -> bool {
        self.grpc
    }
}

impl Pending<&Config, &HeaderMap> {
    /// This request, its decision to be finished in a future.
    fn owned(self, config: &Arc<Config>) -> Pending<Arc<Config>, ReplyFormat> {
        Pending {
            config: Arc::clone(config),
            key: self.key,
            reply: ReplyFormat {
                json: self.reply.json(),
                grpc: self.reply.grpc(),
            },
            timer: self.timer,
        }
    }
}

impl<C: Deref<Target = Config>, R: Reply> Pending<C, R> {
    /// The answer to a banned request, or `None` to go on (not banned, or
    /// the check failed).
    fn ban_verdict(&self, check: Result<Option<Duration>, Error>) -> Option<Verdict> {
        match check {
            Ok(Some(left)) => {
                self.config.observer.record(Outcome::Banned, self.timer);
                let response = banned(self.config.ban_status, self.reply.json(), left);
                Some(self.refuse(response, Refusal::Banned, left, None))
            }
            Ok(None) => None,
            Err(e) => {
                self.config.observer.ban_check_failed(&e);
                None
            }
        }
    }

    /// The limiter's decision now, if it decides in process (one policy).
    fn acquire_now(&self) -> Option<Result<Decision, Error>> {
        if !self.config.single_policy {
            return None;
        }
        self.config.limiter.acquire_now(&self.key, 1)
    }

    /// Whether `result` needs more than a synchronous answer: a denial to
    /// count against a penalty, or a wait to sleep (or refuse).
    fn needs_follow_up(&self, result: &Result<Decision, Error>) -> bool {
        let Ok(decision) = result else { return false };
        if decision.allowed {
            // No wait (every algorithm but the leaky bucket): no plan.
            !decision.wait.is_zero() && self.config.shaping.plan(decision.wait) != Plan::Pass
        } else {
            self.config.penalty.is_some() && counts_as_denial(decision)
        }
    }

    /// The answer to `result`, counted.
    fn finish(&self, result: Result<impl Decided, Error>) -> Verdict {
        self.config
            .observer
            .record(Outcome::of(&result), self.timer);
        let config = &self.config;
        match verdict(
            &result,
            || self.reply.json(),
            config.style,
            &config.policy_headers,
        ) {
            Verdict::Respond(response) => {
                let (refusal, retry_after) = match &result {
                    Ok(answer) if answer.decision().source == DecisionSource::FailClosed => {
                        (Refusal::Unavailable, answer.decision().retry_after)
                    }
                    Ok(answer) => (Refusal::Denied, answer.decision().retry_after),
                    Err(error) => {
                        config.observer.decision_failed(error);
                        (Refusal::Unavailable, ERROR_RETRY_AFTER)
                    }
                };
                self.refuse(
                    *response,
                    refusal,
                    retry_after,
                    result.ok().map(Decided::into_set),
                )
            }
            pass => pass,
        }
    }

    /// The layer's own refusal, or, with an `on_limited` function, what
    /// that function needs to answer in its place.
    fn refuse(
        &self,
        own: Response<Bytes>,
        refusal: Refusal,
        retry_after: Duration,
        decision: Option<SetDecision>,
    ) -> Verdict {
        match &self.config.on_limited {
            None if self.reply.grpc() => {
                Verdict::Respond(Box::new(grpc::refusal(own, refusal, retry_after)))
            }
            None => Verdict::Respond(Box::new(own)),
            Some(on_limited) => Verdict::Limited(Box::new(Limited {
                refusal,
                retry_after,
                decision,
                own,
                on_limited: Arc::clone(on_limited),
            })),
        }
    }

    /// Everything from the ban check on (the ban check only if
    /// `check_bans`).
    async fn decide(self, check_bans: bool) -> Verdict {
        if check_bans {
            if let Some(bans) = &self.config.bans {
                let banned = bans.banned_for(&self.key).await;
                if let Some(verdict) = self.ban_verdict(banned) {
                    return verdict;
                }
            }
        }
        let result = match self.acquire_now() {
            Some(result) => result.map(SetDecision::single),
            None => self.config.limiter.acquire_parts(&self.key, 1).await,
        };
        self.follow_up(result).await
    }

    /// The answer to `result`, after counting a denial against the penalty
    /// and sleeping (or refusing) a wait.
    async fn follow_up(self, result: Result<SetDecision, Error>) -> Verdict {
        let config = &self.config;
        let mut set = match result {
            Ok(set) => set,
            Err(_) => return self.finish(result),
        };
        if !set.decision.allowed {
            if let (Some(penalty), Some(bans), true) = (
                &config.penalty,
                &config.bans,
                counts_as_denial(&set.decision),
            ) {
                match penalty.punish(bans, &self.key).await {
                    Ok(true) => {
                        tracing::info!(
                            target: "limiter_tower",
                            policy = config.observer.policy(),
                            ban_for_ms = penalty.ban_for().as_millis() as u64,
                            "a key denied too often is banned"
                        );
                        // Answered as the ban it earned: the limiter's own
                        // Retry-After (seconds) would send the client back
                        // into the ban (hours).
                        if let Some(verdict) = self.ban_verdict(Ok(Some(penalty.ban_for()))) {
                            return verdict;
                        }
                    }
                    Ok(false) => {}
                    // A key that may have earned a ban it did not get; at
                    // debug level, as a failed ban check: an outage would
                    // otherwise log one line per denial.
                    Err(e) => tracing::debug!(
                        target: "limiter_tower",
                        policy = config.observer.policy(),
                        error = %e.chain(),
                        "counting a denial for the penalty failed"
                    ),
                }
            }
            return self.finish(Ok(set));
        }
        match config.shaping.plan(set.decision.wait) {
            Plan::Pass => self.finish(Ok(set)),
            Plan::Sleep(wait) => {
                let verdict = self.finish(Ok(set));
                tokio::time::sleep(wait).await;
                verdict
            }
            Plan::Deny(max) => {
                // Admitted, but later than the layer may hold it: answered
                // as a denial, nothing left to take now.
                shaping::refuse(max, &mut set);
                self.finish(Ok(set))
            }
        }
    }
}

/// Whether a denial counts against a [`Penalty`]: one decided by the
/// backend or its fallback, not a fail-closed answer (nothing was counted).
fn counts_as_denial(decision: &Decision) -> bool {
    !decision.allowed
        && matches!(
            decision.source,
            DecisionSource::Backend | DecisionSource::Fallback
        )
}

impl<S, B, ResB> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    ResB: RefusalBody,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let timer = Timer::start();
        let config = &self.config;
        let client = peer_addr(req.extensions())
            .map(|peer| resolve_client(peer, req.headers(), &config.trusted));
        let ip: Option<IpAddr> = client.map(|client| client.ip);
        let allowlistable = client.and_then(Client::allowlistable);
        let view = RequestView {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            client_ip: ip,
        };
        let key = match config.key.key(&view) {
            Ok(key) => key,
            // An allowlisted address passes before its missing key is held
            // against it.
            Err(_) if config.allow.allows_ip(allowlistable) => {
                config.observer.record(Outcome::Allowlisted, timer);
                return ResponseFuture::calling(self.inner.call(req), RateHeaders::default());
            }
            Err(Missing::Skip) => {
                config.observer.record(Outcome::Skipped, timer);
                return ResponseFuture::calling(self.inner.call(req), RateHeaders::default());
            }
            Err(Missing::Key) => {
                config.observer.record(Outcome::MissingKey, timer);
                return ResponseFuture::done(missing_key(
                    accepts_json(req.headers()),
                    config.key.challenge(),
                ));
            }
            Err(Missing::PeerAddress) => {
                config.observer.missing_peer_address();
                config.observer.record(Outcome::MissingKey, timer);
                return ResponseFuture::done(missing_peer(accepts_json(req.headers())));
            }
        };
        config.observer.keyed(&key, ip, config.mask_addresses);
        if config.allow.allows(allowlistable, &key) {
            config.observer.record(Outcome::Allowlisted, timer);
            return ResponseFuture::calling(self.inner.call(req), RateHeaders::default());
        }
        let request = Pending {
            config: &**config,
            key,
            reply: req.headers(),
            timer,
        };
        // Synchronously as far as every part decides in process (no bans
        // or in-process bans, a limiter of one policy in process): no
        // future, no allocation beyond the key.
        let banned_now = match &config.bans {
            None => Some(None),
            Some(bans) => bans.banned_for_now(&request.key),
        };
        let decide: Decide = match banned_now {
            None => decide_later(config, request, true),
            Some(banned) => {
                if let Some(verdict) = request.ban_verdict(Ok(banned)) {
                    return answer_now(&mut self.inner, verdict, req);
                }
                match request.acquire_now() {
                    Some(result) if !request.needs_follow_up(&result) => {
                        let verdict = request.finish(result);
                        return answer_now(&mut self.inner, verdict, req);
                    }
                    Some(result) => follow_up_later(config, request, result),
                    None => decide_later(config, request, false),
                }
            }
        };
        // The ready service goes with the request; a clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            state: State::Deciding {
                decide,
                inner: Some(inner),
                req: Some(req),
            },
        }
    }
}

/// `request`'s decision from the ban check on (the ban check only if
/// `check_bans`), as a future. Out of line: its future is built on the
/// stack before it is boxed, which made `call`'s own frame kilobytes
/// larger for the requests decided at once.
#[inline(never)]
fn decide_later(
    config: &Arc<Config>,
    request: Pending<&Config, &HeaderMap>,
    check_bans: bool,
) -> Decide {
    boxed(config, request.owned(config).decide(check_bans))
}

/// `request`'s follow-up of `result`, as a future; out of line as
/// [`decide_later`].
#[inline(never)]
fn follow_up_later(
    config: &Arc<Config>,
    request: Pending<&Config, &HeaderMap>,
    result: Result<Decision, Error>,
) -> Decide {
    boxed(
        config,
        request
            .owned(config)
            .follow_up(result.map(SetDecision::single)),
    )
}

/// `decide`, boxed, in a span naming the layer.
fn boxed(config: &Config, decide: impl Future<Output = Verdict> + Send + 'static) -> Decide {
    let span = tracing::debug_span!(
        target: "limiter_tower",
        "rate_limit",
        policy = config.observer.policy()
    );
    Box::pin(decide.instrument(span))
}

/// The future of a request decided synchronously, `inner` its service.
#[inline(always)]
fn answer_now<S, B, ResB>(
    inner: &mut S,
    verdict: Verdict,
    req: Request<B>,
) -> ResponseFuture<S::Future, S, B>
where
    S: Service<Request<B>, Response = Response<ResB>>,
{
    match verdict {
        Verdict::Pass(headers) => ResponseFuture::calling(inner.call(req), headers),
        Verdict::Respond(response) => ResponseFuture::done(*response),
        Verdict::Limited(limited) => ResponseFuture::done(limited.respond(req)),
    }
}

pin_project! {
    /// The future of a [`RateLimit`] call.
    pub struct ResponseFuture<F, S, B> {
        #[pin]
        state: State<F, S, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, B> {
        Deciding {
            decide: Decide,
            inner: Option<S>,
            req: Option<Request<B>>,
        },
        Calling {
            #[pin]
            fut: F,
            headers: RateHeaders,
        },
        Done {
            response: Option<Response<Bytes>>,
        },
    }
}

impl<F, S, B> ResponseFuture<F, S, B> {
    fn done(response: Response<Bytes>) -> Self {
        Self {
            state: State::Done {
                response: Some(response),
            },
        }
    }

    fn calling(fut: F, headers: RateHeaders) -> Self {
        Self {
            state: State::Calling { fut, headers },
        }
    }
}

impl<F, S, B> fmt::Debug for ResponseFuture<F, S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Deciding { .. } => "deciding",
            State::Calling { .. } => "calling",
            State::Done { .. } => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<F, S, B, ResB, E> Future for ResponseFuture<F, S, B>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    S: Service<Request<B>, Response = Response<ResB>, Error = E, Future = F>,
    ResB: RefusalBody,
{
    type Output = Result<Response<ResB>, E>;

    // Inline: out of line, the response is copied once more on its way out.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Deciding { decide, inner, req } => {
                    match ready!(decide.as_mut().poll(cx)) {
                        Verdict::Pass(headers) => {
                            let mut inner = inner.take().expect("polled after completion");
                            let req = req.take().expect("polled after completion");
                            State::Calling {
                                fut: inner.call(req),
                                headers,
                            }
                        }
                        Verdict::Respond(response) => State::Done {
                            response: Some(*response),
                        },
                        Verdict::Limited(limited) => {
                            let req = req.take().expect("polled after completion");
                            State::Done {
                                response: Some(limited.respond(req)),
                            }
                        }
                    }
                }
                StateProj::Calling { fut, headers } => {
                    let mut response = ready!(fut.poll(cx))?;
                    if !headers.is_empty() {
                        std::mem::take(headers).replace_inner(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Done { response } => {
                    let response = response.take().expect("polled after completion");
                    return Poll::Ready(Ok(response.map(ResB::refusal)));
                }
            };
            this.state.set(next);
        }
    }
}

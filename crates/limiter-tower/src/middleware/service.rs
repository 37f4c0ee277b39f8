//! [`LimiterService`]: the [`tower::Service`] a
//! [`LimiterLayer`](crate::LimiterLayer) wraps a route in, and its `call`:
//! a request keyed, then let through, refused, or decided by the limiter.
//!
//! # The route of an admitted request
//!
//! The functions a request crosses, in order, on the common path (a key,
//! no ban list, a limiter deciding in process, admitted with no wait);
//! each other answer leaves this route where it is decided:
//!
//! 1. `LimiterService::call`: reads the peer address (`peer_addr`) and,
//!    behind trusted proxies only, the client it forwards for
//!    (`resolve_client`).
//! 2. `KeyExtractor::write_key` writes the key into a `KeyBytes` on the
//!    stack (no allocation for a key of up to 48 bytes); no key: 401, or
//!    let through by the fallback.
//! 3. `Allowlist::allows`: an allowlisted client passes, counted.
//! 4. With plans, `PlanSwitch::load` and `PlanTable::limits_for`: the plan
//!    in force's limiter and headers, one snapshot for the whole request.
//! 5. `Cost::of_request`, unless every request costs one: 400/411/413.
//! 6. `Pending::acquire_now`, which asks `Limiter::acquire_now` (the
//!    memory backend's `Store::try_acquire`: one shard lock, the core's
//!    decision).
//! 7. `Observer::record` counts the outcome; `ResponseCharge::of` keeps a
//!    charge after the response, if the layer makes one; `rate_headers`
//!    fills the response's headers from the plan's `PolicyHeaders`
//!    templates.
//! 8. The inner service's future, in `ResponseFuture::calling`, whose
//!    `poll` writes the headers into the response (`RateHeaders::
//!    replace_inner`) and, for a charge after the response, meters its body
//!    (`ResponseCharge::meter`).
//!
//! A decision that needs a future (a Redis limiter, a ban list in Redis, a
//! penalty to count, a wait to sleep) goes from step 6 to `decide_later`
//! or `follow_up_later` (`pending.rs`): the same steps, awaited, in one
//! boxed future.

use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use crate::answer::headers::HeaderStyle;
use crate::answer::rate_headers::{rate_headers, RateHeaders};
use crate::answer::response::{accepts_json, missing_key, missing_peer, Verdict};
use crate::client::client_address::{normalize_ip, peer_addr, resolve_client};
use crate::client::key::{Missing, RequestView};
use crate::client::key_bytes::KeyBytes;
use crate::middleware::body::RefusalBody;
use crate::middleware::future::ResponseFuture;
use crate::middleware::observe::{Outcome, Timer};
use crate::middleware::pending::{decide_later, follow_up_later, Decide, Pending};
use crate::middleware::response_charge::ResponseCharge;
use crate::middleware::settings::Settings;

/// The service of a [`LimiterLayer`](crate::LimiterLayer): asks the
/// limiter, then calls `inner` or answers 429 (or 403, 503, 401, 500; see
/// the crate docs).
#[derive(Debug, Clone)]
pub struct LimiterService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> LimiterService<S> {
    /// `inner`, limited as `settings` says.
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, to change.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, this layer's service gone.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResB> Service<Request<B>> for LimiterService<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    ResB: RefusalBody + http_body::Body,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    // Out of line: inlined into the caller's future (axum's route), the
    // future is built there and then copied once more.
    #[inline(never)]
    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let timer = Timer::start();
        let settings = &self.settings;
        // The plans in force, read once: the request is decided entirely
        // under them.
        let plans = settings.plans.as_ref().map(|switch| switch.load());
        let (ip, allowlistable): (Option<IpAddr>, _) = match peer_addr(req.extensions()) {
            // No proxy trusted (the default): the peer is the client, and
            // vouched for; `resolve_client` answers that without its copy.
            Some(peer) if settings.trusted.is_empty() => {
                let peer = normalize_ip(peer);
                (Some(peer), Some(peer))
            }
            Some(peer) => {
                let client = resolve_client(peer, req.headers(), &settings.trusted);
                (Some(client.ip), client.allowlistable())
            }
            None => (None, None),
        };
        let view = || RequestView {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            client_ip: ip,
        };
        let mut key = KeyBytes::empty();
        match settings.key.write_key(ip, view, &mut key) {
            Ok(()) => {}
            // An allowlisted address passes before its missing key is held
            // against it.
            Err(_) if settings.allow.allows_ip(allowlistable) => {
                settings.observer.record(Outcome::Allowlisted, timer);
                return ResponseFuture::passing(self.inner.call(req));
            }
            Err(Missing::Skip) => {
                settings.observer.record(Outcome::Skipped, timer);
                return ResponseFuture::passing(self.inner.call(req));
            }
            Err(Missing::Key) => {
                settings.observer.record(Outcome::MissingKey, timer);
                return ResponseFuture::done(missing_key(
                    accepts_json(req.headers()),
                    settings.key.challenge(),
                ));
            }
            Err(Missing::PeerAddress) => {
                settings.observer.missing_peer_address();
                settings.observer.record(Outcome::MissingKey, timer);
                return ResponseFuture::done(missing_peer(accepts_json(req.headers())));
            }
        };
        settings.observer.keyed(&key, ip, settings.mask_addresses);
        if settings.allow.allows(allowlistable, &key) {
            settings.observer.record(Outcome::Allowlisted, timer);
            return ResponseFuture::passing(self.inner.call(req));
        }
        let limits = match &plans {
            None => &settings.limits,
            Some(plans) => plans.limits_for(&req, &key),
        };
        let cost = if settings.cost.is_one() {
            1
        } else {
            let (back, units) = settings.cost.of_request(req, limits.max_cost);
            req = back;
            match units {
                Ok(units) => units,
                Err(error) => {
                    settings.observer.record(Outcome::InvalidCost, timer);
                    return ResponseFuture::done(error.respond(accepts_json(req.headers())));
                }
            }
        };
        let request = Pending {
            settings: &**settings,
            limits: &**limits,
            key: &key,
            cost,
            reply: req.headers(),
            timer,
        };
        // Synchronously as far as every part decides in process (no bans
        // or in-process bans, a limiter in process, one policy or a tiered set): no
        // future, no allocation beyond the key.
        if let Some(bans) = &settings.bans {
            match bans.banned_for_now(&key) {
                None => {
                    let decide = decide_later(settings, limits, request, true);
                    return deciding(&mut self.inner, decide, req);
                }
                Some(banned) => {
                    if let Some(verdict) = request.ban_verdict(Ok(banned)) {
                        return answer_now(&mut self.inner, verdict, None, req);
                    }
                }
            }
        }
        let decide: Decide = match request.acquire_now() {
            // The common answer: admitted by the backend, nothing to wait.
            // What `finish` answers it, without the moves on its way.
            Some(Ok(decision))
                if decision.allowed
                    && decision.wait.is_zero()
                    && !decision.source.is_degraded() =>
            {
                settings.observer.record(Outcome::Allowed, request.timer);
                let charge = ResponseCharge::of(settings, limits, &key, cost, &decision);
                let mut headers = RateHeaders::default();
                if settings.style != HeaderStyle::None {
                    rate_headers(
                        &mut headers,
                        &decision,
                        settings.style,
                        &limits.policy_headers,
                    );
                }
                let fut = self.inner.call(req);
                return match charge {
                    None => ResponseFuture::calling(fut, headers),
                    Some(charge) => ResponseFuture::charging(fut, headers, charge),
                };
            }
            Some(result) if !request.needs_follow_up(&result) => {
                let charge = match &result {
                    Ok(decision) => ResponseCharge::of(settings, limits, &key, cost, decision),
                    Err(_) => None,
                };
                let verdict = request.finish(result);
                return answer_now(&mut self.inner, verdict, charge, req);
            }
            Some(result) => follow_up_later(settings, limits, request, result),
            None => decide_later(settings, limits, request, false),
        };
        deciding(&mut self.inner, decide, req)
    }
}

/// The future of `req`, decided by `decide`: the ready service `inner`
/// goes with the request, a clone takes its place.
#[inline(never)]
fn deciding<S, B>(inner: &mut S, decide: Decide, req: Request<B>) -> ResponseFuture<S::Future, S, B>
where
    S: Service<Request<B>> + Clone,
{
    let clone = inner.clone();
    let inner = std::mem::replace(inner, clone);
    ResponseFuture::deciding(decide, inner, req)
}

/// The future of a request decided synchronously, `inner` its service,
/// `charge` the charge after the response of a request it admits.
#[inline(always)]
fn answer_now<S, B, ResB>(
    inner: &mut S,
    verdict: Verdict,
    charge: Option<Box<ResponseCharge>>,
    req: Request<B>,
) -> ResponseFuture<S::Future, S, B>
where
    S: Service<Request<B>, Response = Response<ResB>>,
{
    match verdict {
        Verdict::Pass(headers) => {
            let fut = inner.call(req);
            match charge {
                None => ResponseFuture::calling(fut, headers),
                Some(charge) => ResponseFuture::charging(fut, headers, charge),
            }
        }
        Verdict::Respond(response) => ResponseFuture::done(*response),
        Verdict::Limited(limited) => ResponseFuture::done(limited.respond(req)),
    }
}

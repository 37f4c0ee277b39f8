//! [`RateLimitLayer`] and the [`RateLimit`] service.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use limiter_core::{Error, Limiter, SetDecision};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::body::ResponseBody;
use crate::key::{client_ip, peer_addr, IpNet, KeyExtractor, Missing, RequestView};
use crate::response::{
    accepts_json, missing_key, missing_peer, verdict, HeaderStyle, PolicyHeaders, Verdict,
};

/// What every [`RateLimit`] of a layer shares.
#[derive(Clone)]
struct Config {
    limiter: Arc<dyn Limiter>,
    key: KeyExtractor,
    trusted: Vec<IpNet>,
    style: HeaderStyle,
    policy_headers: PolicyHeaders,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("policies", self.limiter.policies())
            .field("key", &self.key)
            .field("trusted", &self.trusted)
            .field("style", &self.style)
            .finish_non_exhaustive()
    }
}

/// A [`tower::Layer`] that rate limits HTTP requests with a [`Limiter`]
/// (one policy or a tiered set, any backend).
///
/// A denied request is answered `429 Too Many Requests` without reaching
/// the inner service; an admitted one reaches it and its response carries
/// the rate-limit headers (see [`HeaderStyle`]). Each request costs one
/// unit.
///
/// ```
/// use std::sync::Arc;
/// use limiter_memory::MemoryLimiter;
/// use limiter_tower::{HeaderStyle, KeyExtractor, RateLimitLayer};
///
/// let limiter = MemoryLimiter::new("sliding-log:100/10s".parse::<limiter_core::Policy>()?);
/// let layer = RateLimitLayer::new(limiter)
///     .key(KeyExtractor::ip())
///     .trusted_proxies(["10.0.0.0/8".parse()?])
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
        Self {
            config: Arc::new(Config {
                limiter,
                key: KeyExtractor::default(),
                trusted: Vec::new(),
                style: HeaderStyle::default(),
                policy_headers,
            }),
        }
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
/// `inner` or answers 429 (or 503, 401, 500; see the crate docs).
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

/// The limiter's boxed answer, when it cannot answer at once.
type Decide = Pin<Box<dyn Future<Output = Result<SetDecision, Error>> + Send>>;

impl<S, B, ResB> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let config = &self.config;
        let json = accepts_json(req.headers());
        let view = RequestView {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
            client_ip: peer_addr(req.extensions())
                .map(|peer| client_ip(peer, req.headers(), &config.trusted)),
        };
        let key = match config.key.key(&view) {
            Ok(key) => key,
            Err(Missing::Key) => return ResponseFuture::done(missing_key(json)),
            Err(Missing::PeerAddress) => return ResponseFuture::done(missing_peer(json)),
        };
        // The synchronous fast path (an in-process limiter of one policy):
        // no future, no allocation beyond the key.
        if config.limiter.policies().single().is_some() {
            if let Some(result) = config.limiter.acquire_now(&key, 1) {
                let result = result.map(SetDecision::single);
                return match verdict(result, json, config.style, &config.policy_headers) {
                    Verdict::Pass(headers) => {
                        ResponseFuture::calling(self.inner.call(req), headers)
                    }
                    Verdict::Respond(response) => ResponseFuture::done(response),
                };
            }
        }
        let limiter = Arc::clone(&config.limiter);
        let decide: Decide = Box::pin(async move { limiter.acquire_parts(&key, 1).await });
        // The ready service goes with the request; a clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            state: State::Deciding {
                decide,
                inner: Some(inner),
                req: Some(req),
                config: Arc::clone(&self.config),
                json,
            },
        }
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
            config: Arc<Config>,
            json: bool,
        },
        Calling {
            #[pin]
            fut: F,
            headers: HeaderMap,
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

    fn calling(fut: F, headers: HeaderMap) -> Self {
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
{
    type Output = Result<Response<ResponseBody<ResB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Deciding {
                    decide,
                    inner,
                    req,
                    config,
                    json,
                } => {
                    let result = ready!(decide.as_mut().poll(cx));
                    match verdict(result, *json, config.style, &config.policy_headers) {
                        Verdict::Pass(headers) => {
                            let mut inner = inner.take().expect("polled after completion");
                            let req = req.take().expect("polled after completion");
                            State::Calling {
                                fut: inner.call(req),
                                headers,
                            }
                        }
                        Verdict::Respond(response) => State::Done {
                            response: Some(response),
                        },
                    }
                }
                StateProj::Calling { fut, headers } => {
                    let response = ready!(fut.poll(cx))?;
                    let (mut parts, body) = response.into_parts();
                    for (name, value) in std::mem::take(headers) {
                        if let Some(name) = name {
                            parts.headers.insert(name, value);
                        }
                    }
                    return Poll::Ready(Ok(Response::from_parts(parts, ResponseBody::inner(body))));
                }
                StateProj::Done { response } => {
                    let response = response.take().expect("polled after completion");
                    return Poll::Ready(Ok(response.map(ResponseBody::full)));
                }
            };
            this.state.set(next);
        }
    }
}

//! The app both HTTP benches load (`http.rs`: requests/s; `http_instructions.rs`:
//! instructions per request under callgrind): an axum hello-world behind
//! each variant's layer, served on a loopback ephemeral port, and the
//! in-process hyper client that loads it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response;
use axum::routing::get;
use axum::Router;
use governor::middleware::NoOpMiddleware;
use http::header::HOST;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use limiter_core::{Policy, Rate};
use limiter_memory::MemoryLimiter;
use limiter_tower::{HeaderStyle, KeyExtractor, LimiterLayer};
use tokio::net::{TcpListener, TcpStream};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::PeerIpKeyExtractor;
use tower_governor::GovernorLayer;

/// Keep-alive connections of the client, each with one request in flight.
pub(crate) const CONNECTIONS: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    Allowed,
    Denied,
}

impl Scenario {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
        }
    }

    /// limiter's token bucket for the scenario.
    pub(crate) fn policy(self) -> Policy {
        let (rate, burst) = match self {
            Self::Allowed => (Rate::per_second(1_000_000_000), 1_000_000_000),
            Self::Denied => (Rate::new(1, Duration::from_secs(1_000)), 10),
        };
        Policy::token_bucket(rate)
            .and_then(|policy| policy.with_capacity(burst))
            .unwrap()
    }

    /// tower_governor's configuration for the scenario, keyed by peer
    /// address (its default): one request per `period`, up to
    /// `burst_size`, the shape of [`policy`](Self::policy).
    pub(crate) fn governor(self) -> GovernorConfigBuilder<PeerIpKeyExtractor, NoOpMiddleware> {
        let mut config = GovernorConfigBuilder::default();
        match self {
            Self::Allowed => config.per_nanosecond(1).burst_size(1_000_000_000),
            Self::Denied => config.per_second(1_000).burst_size(10),
        };
        config
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    NoLayer,
    /// No layer; the handler's response carries limiter's default headers.
    SameHeaders,
    Limiter(HeaderStyle),
    Governor {
        headers: bool,
    },
}

pub(crate) const VARIANTS: [Variant; 7] = [
    Variant::NoLayer,
    Variant::SameHeaders,
    Variant::Limiter(HeaderStyle::None),
    Variant::Governor { headers: false },
    Variant::Limiter(HeaderStyle::Legacy),
    Variant::Governor { headers: true },
    Variant::Limiter(HeaderStyle::Both),
];

impl Variant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::NoLayer => "no layer",
            Self::SameHeaders => "no layer, the default's headers by hand",
            Self::Limiter(HeaderStyle::None) => "limiter, no headers",
            Self::Limiter(HeaderStyle::Legacy) => "limiter, legacy headers",
            Self::Limiter(_) => "limiter, legacy + IETF headers (default)",
            Self::Governor { headers: false } => "tower_governor (default)",
            Self::Governor { headers: true } => "tower_governor, use_headers()",
        }
    }

    /// The hello-world app behind this variant's layer, for `scenario`
    /// (`headers`: what [`Variant::SameHeaders`] adds).
    pub(crate) fn app(
        self,
        scenario: Scenario,
        headers: &Arc<[(HeaderName, HeaderValue)]>,
    ) -> Router {
        let app = Router::new().route("/", get(|| async { "ok" }));
        match self {
            Self::NoLayer => app,
            Self::SameHeaders => {
                let headers = Arc::clone(headers);
                app.layer(axum::middleware::map_response(
                    move |mut response: Response| {
                        let headers = Arc::clone(&headers);
                        async move {
                            let map = response.headers_mut();
                            map.reserve(headers.len());
                            for (name, value) in headers.iter() {
                                map.insert(name.clone(), value.clone());
                            }
                            response
                        }
                    },
                ))
            }
            Self::Limiter(style) => app.layer(
                LimiterLayer::new(MemoryLimiter::new(scenario.policy()))
                    .key(KeyExtractor::ip())
                    .headers(style),
            ),
            Self::Governor { headers } => {
                let mut config = scenario.governor();
                if headers {
                    app.layer(GovernorLayer::new(config.use_headers().finish().unwrap()))
                } else {
                    app.layer(GovernorLayer::new(config.finish().unwrap()))
                }
            }
        }
    }
}

/// Serves `app` on 127.0.0.1, an ephemeral port, with the peer address as
/// axum's `ConnectInfo` (both layers key by it).
pub(crate) async fn serve(app: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (addr, server)
}

/// Answers counted by status.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) ok: u64,
    pub(crate) limited: u64,
}

impl Counts {
    pub(crate) fn total(self) -> u64 {
        self.ok + self.limited
    }

    pub(crate) fn add(&mut self, other: Self) {
        self.ok += other.ok;
        self.limited += other.limited;
    }
}

/// When each of the client's connections stops sending.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    /// At this instant.
    At(Instant),
    /// After this many requests.
    After(u64),
}

/// `GET /` on `addr` from [`CONNECTIONS`] keep-alive connections, each
/// sending its next request when the last is answered, until `stop`;
/// every answer read whole.
pub(crate) async fn load(addr: SocketAddr, stop: Stop) -> Counts {
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            tokio::spawn(async move {
                let stream = TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(connection);
                let mut counts = Counts::default();
                while match stop {
                    Stop::At(deadline) => Instant::now() < deadline,
                    Stop::After(requests) => counts.total() < requests,
                } {
                    sender.ready().await.unwrap();
                    let request = Request::get("/")
                        .header(HOST, "localhost")
                        .body(Empty::<Bytes>::new())
                        .unwrap();
                    let response = sender.send_request(request).await.unwrap();
                    let status = response.status();
                    response.into_body().collect().await.unwrap();
                    match status {
                        StatusCode::OK => counts.ok += 1,
                        StatusCode::TOO_MANY_REQUESTS => counts.limited += 1,
                        other => panic!("unexpected status {other}"),
                    }
                }
                counts
            })
        })
        .collect();
    let mut counts = Counts::default();
    for worker in workers {
        counts.add(worker.await.unwrap());
    }
    counts
}

/// The rate-limit headers of one admitted response of limiter's default
/// layer, in the `allowed` scenario.
pub(crate) async fn default_headers() -> Arc<[(HeaderName, HeaderValue)]> {
    let app = Variant::Limiter(HeaderStyle::Both).app(Scenario::Allowed, &Arc::from([]));
    let (addr, server) = serve(app).await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::get("/")
        .header(HOST, "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    server.abort();
    rate_limit_headers(response.headers())
}

/// The rate-limit headers among `headers`: the five limiter's default
/// layer sends on an admitted response.
pub(crate) fn rate_limit_headers(headers: &http::HeaderMap) -> Arc<[(HeaderName, HeaderValue)]> {
    let headers: Arc<[_]> = headers
        .iter()
        .filter(|(name, _)| name.as_str().contains("ratelimit"))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    assert_eq!(
        headers.len(),
        5,
        "limiter's default sends five: {headers:?}"
    );
    headers
}

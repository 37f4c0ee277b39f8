//! The HTTP layer's cost (docs/benchmarks.md, "HTTP layer"): requests/s
//! of an axum hello-world (`GET /` answers 200 "ok") served on a loopback
//! ephemeral port with no layer, with limiter-tower's `RateLimitLayer` on
//! a `MemoryLimiter` token bucket, and with tower_governor's
//! `GovernorLayer`, both keyed by the peer address, all loaded in the same
//! run by the same in-process hyper client: `CONNECTIONS` keep-alive
//! connections, each sending its next request as soon as the last one is
//! answered.
//!
//! Two scenarios, the same rate on both sides:
//!
//! - `allowed`: a billion per second with a burst of a billion, so nothing
//!   is denied and the figure is the layer's overhead;
//! - `denied`: a burst of 10, then one per 1,000 s, so every request after
//!   the first ten is a 429.
//!
//! Header styles are paired as each library's users would meet them:
//! limiter without headers against tower_governor's default (none on an
//! admitted response), limiter's legacy `X-RateLimit-*` against
//! tower_governor's `use_headers()` (its `x-ratelimit-limit` and
//! `-remaining`), and limiter's default (legacy and IETF) on its own.
//!
//! Beside them, "no layer, the same headers": the hello-world adding, by
//! hand, the five header lines limiter's default sends (sampled from one of
//! its responses): what those bytes alone cost the server and the
//! in-process client, which share the machine's cores, so that the layer's
//! own cost with headers is the ratio to it.
//!
//! Each variant is measured `ROUNDS` times, interleaved with the others so
//! a slow moment of the machine is spread over all of them, and in an order
//! rotated by one each round, so that none always runs after the same one.
//!
//! `cargo bench -p limiter-benches --bench http`
#![allow(missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::Response;
use axum::routing::get;
use axum::Router;
use http::header::HOST;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use limiter_core::{Policy, Rate};
use limiter_memory::MemoryLimiter;
use limiter_tower::{HeaderStyle, KeyExtractor, RateLimitLayer};
use tokio::net::{TcpListener, TcpStream};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Keep-alive connections of the client, each with one request in flight.
const CONNECTIONS: usize = 32;
/// Requests before each measurement (connections open, maps filled).
const WARM_UP: Duration = Duration::from_millis(300);
/// One measurement of one variant.
const MEASURE: Duration = Duration::from_millis(1_000);
/// Measurements of each variant, interleaved.
const ROUNDS: usize = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Allowed,
    Denied,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
        }
    }

    /// limiter's token bucket for the scenario.
    fn policy(self) -> Policy {
        let (rate, burst) = match self {
            Self::Allowed => (Rate::per_second(1_000_000_000), 1_000_000_000),
            Self::Denied => (Rate::new(1, Duration::from_secs(1_000)), 10),
        };
        Policy::token_bucket(rate)
            .and_then(|policy| policy.with_capacity(burst))
            .unwrap()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    NoLayer,
    /// No layer; the handler's response carries limiter's default headers.
    SameHeaders,
    Limiter(HeaderStyle),
    Governor {
        headers: bool,
    },
}

const VARIANTS: [Variant; 7] = [
    Variant::NoLayer,
    Variant::SameHeaders,
    Variant::Limiter(HeaderStyle::None),
    Variant::Governor { headers: false },
    Variant::Limiter(HeaderStyle::Legacy),
    Variant::Governor { headers: true },
    Variant::Limiter(HeaderStyle::Both),
];

impl Variant {
    fn name(self) -> &'static str {
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
    fn app(self, scenario: Scenario, headers: &Arc<[(HeaderName, HeaderValue)]>) -> Router {
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
                RateLimitLayer::new(MemoryLimiter::new(scenario.policy()))
                    .key(KeyExtractor::ip())
                    .headers(style),
            ),
            Self::Governor { headers } => {
                // tower_governor counts one request per `period`, up to `burst_size`.
                let mut config = GovernorConfigBuilder::default();
                match scenario {
                    Scenario::Allowed => config.per_nanosecond(1).burst_size(1_000_000_000),
                    Scenario::Denied => config.per_second(1_000).burst_size(10),
                };
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
async fn serve(app: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
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
struct Counts {
    ok: u64,
    limited: u64,
}

impl Counts {
    fn total(self) -> u64 {
        self.ok + self.limited
    }

    fn add(&mut self, other: Self) {
        self.ok += other.ok;
        self.limited += other.limited;
    }
}

/// `GET /` on `addr` from `CONNECTIONS` keep-alive connections until
/// `duration` has passed; every answer read whole.
async fn hammer(addr: SocketAddr, duration: Duration) -> Counts {
    let deadline = Instant::now() + duration;
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
                while Instant::now() < deadline {
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
async fn default_headers() -> Arc<[(HeaderName, HeaderValue)]> {
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
    let headers: Arc<[_]> = response
        .headers()
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

/// One measurement: a fresh server, warmed up, then `MEASURE` of load.
async fn measure(
    variant: Variant,
    scenario: Scenario,
    headers: &Arc<[(HeaderName, HeaderValue)]>,
) -> Counts {
    let (addr, server) = serve(variant.app(scenario, headers)).await;
    hammer(addr, WARM_UP).await;
    let counts = hammer(addr, MEASURE).await;
    server.abort();
    counts
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{CONNECTIONS} keep-alive connections, {ROUNDS} x {} ms per variant",
        MEASURE.as_millis()
    );
    let headers = runtime.block_on(default_headers());
    for scenario in [Scenario::Allowed, Scenario::Denied] {
        let mut counts = [Counts::default(); VARIANTS.len()];
        for round in 0..ROUNDS {
            // Each round starts one variant later, so that no variant always
            // follows the same one.
            for offset in 0..VARIANTS.len() {
                let index = (round + offset) % VARIANTS.len();
                counts[index].add(runtime.block_on(measure(VARIANTS[index], scenario, &headers)));
            }
        }
        let seconds = MEASURE.as_secs_f64() * ROUNDS as f64;
        let rate = |variant: Variant| {
            let index = VARIANTS.iter().position(|v| *v == variant).unwrap();
            counts[index].total() as f64 / seconds
        };
        println!("\n{}:", scenario.name());
        for (variant, counts) in VARIANTS.iter().zip(&counts) {
            if scenario == Scenario::Allowed {
                assert_eq!(
                    counts.limited,
                    0,
                    "{}: a request was denied",
                    variant.name()
                );
            } else if !matches!(variant, Variant::NoLayer | Variant::SameHeaders) {
                // Each fresh server admits its burst of 10, at most.
                let burst = 10 * ROUNDS as u64;
                assert!(
                    counts.ok <= burst,
                    "{}: {} admitted",
                    variant.name(),
                    counts.ok
                );
            }
            println!(
                "  {:<42} {:>9.0} req/s  (200: {}, 429: {})",
                variant.name(),
                rate(*variant),
                counts.ok,
                counts.limited
            );
        }
        let none = rate(Variant::NoLayer);
        for (limiter, governor) in [
            (HeaderStyle::None, false),
            (HeaderStyle::Legacy, true),
            (HeaderStyle::Both, false),
        ] {
            let ours = rate(Variant::Limiter(limiter));
            let theirs = rate(Variant::Governor { headers: governor });
            println!(
                "  {:<42} {:.3} of no layer, {:.3} of {}",
                Variant::Limiter(limiter).name(),
                ours / none,
                ours / theirs,
                Variant::Governor { headers: governor }.name()
            );
        }
        let ours = rate(Variant::Limiter(HeaderStyle::Both));
        println!(
            "  {:<42} {:.3} of {}",
            Variant::Limiter(HeaderStyle::Both).name(),
            ours / rate(Variant::SameHeaders),
            Variant::SameHeaders.name()
        );
    }
}

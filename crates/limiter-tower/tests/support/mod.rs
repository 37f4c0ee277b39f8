//! Shared by the integration tests: an axum server on an ephemeral
//! loopback port and a real client (hyper-util's) that reads whole replies.
#![allow(dead_code, unreachable_pub)] // each test binary uses a part

pub mod events;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::routing;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use limiter_core::{Limiter, ManualClock, Policies};
use limiter_memory::MemoryLimiter;
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_server::RedisServer;
use limiter_tower::LimiterLayer;

pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Serves `GET /` (200 "ok") behind `layer` on 127.0.0.1, an ephemeral
/// port, recording each connection's peer address as axum's `ConnectInfo`.
pub async fn serve(layer: LimiterLayer) -> SocketAddr {
    serve_router(
        Router::new()
            .route("/", routing::get(|| async { "ok" }))
            .layer(layer),
    )
    .await
}

/// Serves `router` on 127.0.0.1, an ephemeral port, with `ConnectInfo`.
pub async fn serve_router(router: Router) -> SocketAddr {
    serve_router_on(Ipv4Addr::LOCALHOST.into(), router).await
}

/// Serves `router` on loopback address `ip` (`::1` for an IPv6 peer), an
/// ephemeral port, with `ConnectInfo`.
pub async fn serve_router_on(ip: IpAddr, router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A response's status, headers and body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    pub fn number(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.headers))
            .parse()
            .unwrap()
    }
}

/// `GET /` on `addr` with `headers`.
pub async fn get_with(client: &HttpClient, addr: SocketAddr, headers: &[(&str, &str)]) -> Reply {
    get_path(client, addr, "/", headers).await
}

/// `GET path` on `addr` with `headers`.
pub async fn get_path(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut request = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(client, request).await
}

/// `method path` on `addr` with `headers`, without a body.
pub async fn request_with(
    client: &HttpClient,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(client, request).await
}

/// `method path` on `addr`, without a body.
pub async fn request_path(
    client: &HttpClient,
    addr: SocketAddr,
    method: &str,
    path: &str,
) -> Reply {
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    send(client, request).await
}

/// `GET /` on `addr` with `headers` as bytes: values a `&str` cannot hold
/// (not ASCII, not UTF-8), as a client may send them.
pub async fn get_with_bytes(
    client: &HttpClient,
    addr: SocketAddr,
    headers: &[(&str, &[u8])],
) -> Reply {
    let mut request = Request::get(format!("http://{addr}/"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(client, request).await
}

/// Sends `request`, without a body, and reads the whole reply.
async fn send(client: &HttpClient, request: http::request::Builder) -> Reply {
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

pub async fn get(client: &HttpClient, addr: SocketAddr) -> Reply {
    get_with(client, addr, &[]).await
}

/// `total` requests from `concurrency` tasks at once; the count of each status.
pub async fn load(addr: SocketAddr, total: usize, concurrency: usize) -> BTreeMap<u16, usize> {
    let client = client();
    let tasks: Vec<_> = (0..concurrency)
        .map(|worker| {
            let client = client.clone();
            let share = total / concurrency + usize::from(worker < total % concurrency);
            tokio::spawn(async move {
                let mut statuses = Vec::with_capacity(share);
                for _ in 0..share {
                    statuses.push(get(&client, addr).await.status.as_u16());
                }
                statuses
            })
        })
        .collect();
    let mut counts = BTreeMap::new();
    for task in tasks {
        for status in task.await.unwrap() {
            *counts.entry(status).or_insert(0) += 1;
        }
    }
    counts
}

/// Where a test's limiter keeps its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// The test binary's [`redis_server`].
    Redis,
}

/// A limiter of `policies` on `backend`, its time taken from `clock` (on
/// Redis too, instead of Redis `TIME`), so counts do not depend on how
/// fast the machine runs the requests.
pub async fn limiter(backend: Backend, policies: &str, clock: &ManualClock) -> Arc<dyn Limiter> {
    let policies: Policies = policies.parse().unwrap();
    match backend {
        Backend::Memory => Arc::new(
            MemoryLimiter::builder(policies)
                .clock(clock.clone())
                .build(),
        ),
        Backend::Redis => Arc::new(
            RedisLimiter::builder(&redis_backend(&redis_server().url()), policies)
                .key_prefix(fresh_prefix("limit"))
                .clock(clock.clone())
                .build()
                .await
                .unwrap(),
        ),
    }
}

/// The test binary's `redis-server`, started on first use and stopped when
/// the process exits (a missing `redis-server` fails loudly, with the
/// install command).
pub fn redis_server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// A backend on `url` that connects on first use, with timeouts generous
/// enough for a loaded machine and a short probe interval. (Each test
/// builds its own: a backend's connections run on the Tokio runtime that
/// opened them, and every test has its own runtime.)
pub fn redis_backend(url: &str) -> RedisBackend {
    RedisBackend::builder(url)
        .connection_timeout(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(5))
        .probe_interval(Duration::from_millis(100))
        .build_lazy()
        .unwrap()
}

pub use limiter_test::redis_server::fresh_prefix;

//! Shared by the integration tests: an axum server on an ephemeral
//! loopback port and a real client (hyper-util's) that reads whole replies.
#![allow(dead_code, unreachable_pub)] // each test binary uses a part

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::routing;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use limiter_tower::RateLimitLayer;

pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Serves `GET /` (200 "ok") behind `layer` on 127.0.0.1, an ephemeral
/// port, recording each connection's peer address as axum's `ConnectInfo`.
pub async fn serve(layer: RateLimitLayer) -> SocketAddr {
    serve_router(
        Router::new()
            .route("/", routing::get(|| async { "ok" }))
            .layer(layer),
    )
    .await
}

/// Serves `router` on 127.0.0.1, an ephemeral port, with `ConnectInfo`.
pub async fn serve_router(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
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

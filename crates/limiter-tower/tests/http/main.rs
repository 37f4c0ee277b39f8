//! The layer behind a real HTTP server (axum on an ephemeral loopback
//! port) and a real client (hyper-util's). Limiters run on a
//! [`ManualClock`] that does not move unless a test moves it, so the counts
//! do not depend on how fast this machine runs the requests. The load tests
//! and the uploads by cost run once on memory and once on a real
//! `redis-server` (same body).
//!
//! Here the fixtures and the load tests; in the modules, the headers
//! (`headers`), what a request is keyed by (`keys`), what it costs
//! (`costs`) and is charged after its response (`charges`), a failing
//! limiter (`failures`), the layer among others (`composition`), and
//! plans chosen per request (`plans`).

#[path = "../support/mod.rs"]
mod support;

mod charges;
mod composition;
mod costs;
mod failures;
mod headers;
mod keys;
mod plans;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use limiter_core::{Algorithm, Decision, FailurePolicy, Limiter, ManualClock, Policies, Resilient};
use limiter_memory::MemoryLimiter;
use limiter_test::Flaky;
use limiter_tower::{HeaderStyle, KeyExtractor, LimiterLayer, Shaping};
use support::{
    client, get, get_path, get_with, limiter, load, request_path, serve, serve_router, Backend,
    HttpClient, Reply,
};

/// A request time far from the epoch, in µs.
const T0: u64 = 1_700_000_000_000_000;

/// A memory limiter of `policies` on `clock`.
fn memory(policies: &str, clock: &ManualClock) -> MemoryLimiter {
    let policies: Policies = policies.parse().unwrap();
    MemoryLimiter::builder(policies)
        .clock(clock.clone())
        .build()
}

fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// The legacy headers and `Retry-After` of `reply` equal `decision`'s.
fn assert_headers_match(reply: &Reply, decision: &Decision) {
    assert_eq!(
        reply.number("x-ratelimit-limit"),
        decision.limit,
        "{reply:?}"
    );
    assert_eq!(
        reply.number("x-ratelimit-remaining"),
        decision.remaining,
        "{reply:?}"
    );
    assert_eq!(
        reply.number("x-ratelimit-reset"),
        ceil_secs(decision.reset_after),
        "{reply:?}"
    );
    if decision.allowed {
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.header("retry-after"), None);
    } else {
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
        assert_eq!(
            reply.number("retry-after"),
            ceil_secs(decision.retry_after).max(1)
        );
    }
}

/// `total` requests from `concurrency` tasks against `policy` on `backend`:
/// the count of each status.
async fn load_on(
    backend: Backend,
    policy: &str,
    total: usize,
    concurrency: usize,
) -> BTreeMap<u16, usize> {
    let clock = ManualClock::new(T0);
    let addr = serve(LimiterLayer::from_arc(
        limiter(backend, policy, &clock).await,
    ))
    .await;
    load(addr, total, concurrency).await
}

/// The article's load test: 500 requests at concurrency 50 against 100 per 10 s.
async fn the_articles_load_test(backend: Backend) {
    let counts = load_on(backend, "sliding-log:100/10s", 500, 50).await;
    assert_eq!(
        counts,
        BTreeMap::from([(200, 100), (429, 400)]),
        "{backend:?}"
    );
}

/// The gin case: 20 concurrent requests against 5 per 10 s.
async fn the_gin_case(backend: Backend) {
    let counts = load_on(backend, "sliding-log:5/10s", 20, 20).await;
    assert_eq!(counts, BTreeMap::from([(200, 5), (429, 15)]), "{backend:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_articles_load_test_admits_exactly_100_of_500_on_memory() {
    the_articles_load_test(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_articles_load_test_admits_exactly_100_of_500_on_redis() {
    the_articles_load_test(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gin_case_admits_exactly_5_of_20_concurrent_on_memory() {
    the_gin_case(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gin_case_admits_exactly_5_of_20_concurrent_on_redis() {
    the_gin_case(Backend::Redis).await;
}

/// Parses `value` as an RFC 8941 List with the `sfv` crate (a full
/// structured-field parser) and checks it is what the draft's headers
/// use: Items, each an sf-string with integer parameters (`"name";q=5;w=1,
/// "other";q=9;w=60`); answers each item's name and parameters.
fn parse_sf_list(value: &str) -> Vec<(String, Vec<(String, u64)>)> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not an RFC 8941 List: {e}"));
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("an inner list in {value:?}")
            };
            let name = item
                .bare_item
                .as_string()
                .unwrap_or_else(|| panic!("an item that is not an sf-string in {value:?}"))
                .as_str()
                .to_owned();
            let params = item
                .params
                .iter()
                .map(|(key, value)| {
                    let number = value
                        .as_integer()
                        .unwrap_or_else(|| panic!("parameter {key:?} is not an sf-integer"));
                    (
                        key.as_str().to_owned(),
                        u64::try_from(i64::from(number)).unwrap(),
                    )
                })
                .collect();
            (name, params)
        })
        .collect()
}

/// The `t` of `reply`'s `RateLimit` field, read with `sfv`; every item of
/// its `RateLimit-Policy` parsed too, and the binding one named there.
fn ietf_t(reply: &Reply) -> u64 {
    let policy = parse_sf_list(reply.header("ratelimit-policy").unwrap());
    let state = parse_sf_list(reply.header("ratelimit").unwrap());
    assert_eq!(state.len(), 1, "{reply:?}");
    let (name, params) = &state[0];
    assert!(policy.iter().any(|(listed, _)| listed == name), "{reply:?}");
    let keys: Vec<&str> = params.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["r", "t"], "{reply:?}");
    params[1].1
}

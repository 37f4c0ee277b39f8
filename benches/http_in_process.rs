//! The HTTP layer's cost in process (docs/benchmarks.md, "HTTP layer"):
//! time per request of a tower service stack, a trivial service answering
//! an empty 200 alone or behind each layer, called by hand with no HTTP
//! stack, no socket and no runtime around it, so that the layers' own work
//! is most of what is timed (over loopback, `http.rs`, it drowns in
//! hyper's).
//!
//! Each request is an `http::Request` carrying its client's `SocketAddr` as
//! axum's `ConnectInfo`, the extension both layers read the peer address
//! from (tower_governor's `PeerIpKeyExtractor` reads only that one), from
//! 10,000 distinct IPv4 clients in turn. Both layers have the same token
//! bucket, a billion per second with a burst of a billion
//! (`http_app.rs`'s `allowed` scenario, as `http.rs` sets them up), so
//! nothing is denied; every client's key is stored before timing starts.
//! Each library keeps what its users get: tower_governor's keyed governor
//! hashes the `IpAddr` in a dashmap with the standard library's SipHash,
//! limiter-memory its key's bytes with aHash.
//!
//! One variant decides each request under its plan (`LimiterLayer::plans`,
//! three plans of the same policy on one key space, each request carrying
//! its plan as an authentication layer's extension): the cost of choosing
//! a plan per request, beside the default layer.
//!
//! Two variants split the layer's cost from its store's: limiter's layer
//! (no headers) deciding by governor's keyed rate limiter instead of
//! limiter-memory, and answering from no store at all (`layer_floor.rs`).
//!
//! A call is `poll_ready` then `call` and one poll of the returned future,
//! on a no-op waker: every layer here answers an admitted request at once
//! (limiter-tower decides in process through `Limiter::acquire_now`), and a
//! future still pending would fail the run. The requests of a block are
//! built before its timing starts; a block's time covers the calls and
//! dropping each response.
//!
//! Variants take turns block by block, in an order rotated by one each
//! round, so that a slow moment of a shared machine is spread over all of
//! them and none always follows the same one; each round gives a ratio of
//! two variants' blocks a few milliseconds apart.
//!
//! `cargo bench -p limiter-benches --bench http_in_process -- [ROUNDS] [PASSES] [VARIANT...]`
//! (default 31 rounds, blocks of 5 passes over the clients, every variant;
//! `list` lists them). Prints each
//! variant's median ns per request and the layer's cost beside no layer,
//! then each ratio's median and min–max over the rounds.
#![allow(missing_docs)]

// Shared with the other HTTP benches; this one uses the scenarios.
#[allow(dead_code)]
mod http_app;
mod layer_floor;

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_app::Scenario;
use layer_floor::{AnswerOnly, GovernorStore};
use limiter_memory::MemoryLimiter;
use limiter_tower::{HeaderStyle, KeyExtractor, LimiterLayer, Plan, Plans};
use tower::{service_fn, Layer, Service};
use tower_governor::GovernorLayer;

/// Distinct client addresses, visited in turn.
const CLIENTS: usize = 10_000;

/// The variants, in the order of the table.
const VARIANTS: [&str; 11] = [
    "no layer",
    "tower_governor (default, no headers)",
    "limiter, HeaderStyle::None",
    "limiter, default headers (legacy + IETF)",
    "tower_governor, use_headers()",
    "limiter, HeaderStyle::Legacy",
    "no layer, the default's headers by hand",
    "no layer, the default's headers cloned in",
    "limiter None, deciding by governor's keyed store",
    "limiter None, answering from no store",
    "limiter default, a plan per request (3 plans)",
];

/// The ratios reported: (numerator, denominator) as indexes of [`VARIANTS`],
/// and what the ratio is read as.
const RATIOS: [(usize, usize, &str); 13] = [
    (2, 1, "limiter None / tower_governor"),
    (3, 1, "limiter default / tower_governor"),
    (3, 6, "limiter default / its headers by hand"),
    (6, 1, "its headers by hand / tower_governor"),
    (3, 7, "limiter default / its headers cloned in"),
    (7, 1, "its headers cloned in / tower_governor"),
    (8, 1, "limiter None on governor's store / tower_governor"),
    (9, 1, "limiter None on no store / tower_governor"),
    (5, 4, "limiter Legacy / tower_governor use_headers()"),
    (3, 4, "limiter default / tower_governor use_headers()"),
    (4, 1, "tower_governor use_headers() / tower_governor"),
    (1, 0, "tower_governor / no layer"),
    (10, 3, "a plan per request / limiter default"),
];

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("list") {
        for (index, variant) in VARIANTS.iter().enumerate() {
            println!("{index}: {variant}");
        }
        return;
    }
    let usage = "usage: http_in_process [ROUNDS] [PASSES] [VARIANT...]";
    let rounds: usize = args.first().map_or(31, |n| n.parse().expect(usage));
    let passes: usize = args.get(1).map_or(5, |n| n.parse().expect(usage));
    let mut variants: Vec<usize> = args
        .iter()
        .skip(2)
        .map(|v| v.parse().expect(usage))
        .collect();
    if variants.is_empty() {
        variants = (0..VARIANTS.len()).collect();
    }
    let clients = clients();
    let mut stacks = stacks();
    // Every client's key stored, and the code paths warm.
    for &variant in &variants {
        stacks.block(variant, requests_of(variant, &clients, 2));
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); VARIANTS.len()];
    for round in 0..rounds {
        for turn in 0..variants.len() {
            let variant = variants[(round + turn) % variants.len()];
            let requests = requests_of(variant, &clients, passes);
            ns[variant].push(stacks.block(variant, requests));
        }
    }
    println!(
        "{} rounds, blocks of {} requests ({passes} passes over {CLIENTS} clients)",
        rounds,
        passes * CLIENTS
    );
    println!(
        "{:<48} {:>9} {:>17} {:>10}",
        "variant", "ns/req", "min-max", "- no layer"
    );
    let no_layer = (!ns[0].is_empty()).then(|| median(&ns[0]));
    for (name, times) in VARIANTS.iter().zip(&ns) {
        if times.is_empty() {
            continue;
        }
        let (low, high) = min_max(times);
        let above = no_layer.map_or(String::new(), |base| format!("{:.1}", median(times) - base));
        println!(
            "{:<48} {:>9.1} {:>8.1}-{:<8.1} {:>10}",
            name,
            median(times),
            low,
            high,
            above
        );
    }
    println!();
    println!(
        "{:<48} {:>9} {:>17}",
        "ratio (per round)", "median", "min-max"
    );
    for (over, under, name) in RATIOS {
        if ns[over].is_empty() || ns[under].is_empty() {
            continue;
        }
        let ratios: Vec<f64> = ns[over]
            .iter()
            .zip(&ns[under])
            .map(|(a, b)| a / b)
            .collect();
        let (low, high) = min_max(&ratios);
        println!(
            "{:<48} {:>9.3} {:>8.3}-{:<8.3}",
            name,
            median(&ratios),
            low,
            high
        );
    }
}

/// [`CLIENTS`] distinct IPv4 addresses spread over the whole space (the
/// index times an odd constant, modulo 2^32, is one to one), with ports.
fn clients() -> Vec<SocketAddr> {
    (0..CLIENTS as u32)
        .map(|i| {
            let ip = Ipv4Addr::from(i.wrapping_mul(2_654_435_761));
            SocketAddr::from((ip, 1_024 + (i % 60_000) as u16))
        })
        .collect()
}

/// `GET /` from each client in turn, `passes` times over.
fn requests(clients: &[SocketAddr], passes: usize) -> Vec<Request<()>> {
    clients
        .iter()
        .cycle()
        .take(clients.len() * passes)
        .map(|&client| {
            let mut request = Request::new(());
            request.extensions_mut().insert(ConnectInfo(client));
            request
        })
        .collect()
}

/// Variant `variant`'s requests: [`requests`], each carrying a [`Plan`]
/// for the variant deciding by plans (one of three, client by client, as
/// an authentication layer inserts it), built before the block's timing.
fn requests_of(variant: usize, clients: &[SocketAddr], passes: usize) -> Vec<Request<()>> {
    let mut requests = requests(clients, passes);
    if variant == PLANS_VARIANT {
        for (index, request) in requests.iter_mut().enumerate() {
            let plan = PLANS[index % clients.len() % PLANS.len()];
            request.extensions_mut().insert(Plan::new(plan));
        }
    }
    requests
}

/// The variant deciding each request under its plan.
const PLANS_VARIANT: usize = 10;

/// Its plans' names, the first the default.
const PLANS: [&str; 3] = ["free", "pro", "enterprise"];

/// The default layer deciding each request under its plan: three plans
/// of limiter-memory on one key space, each the `allowed` scenario's
/// policy (nothing is denied), so that only choosing the plan differs.
fn limiter_with_plans() -> LimiterLayer {
    let free = MemoryLimiter::new(Scenario::Allowed.policy());
    let pro = free.plan(Scenario::Allowed.policy());
    let enterprise = free.plan(Scenario::Allowed.policy());
    limiter_on(free, HeaderStyle::default()).plans(
        Plans::new(PLANS[0])
            .plan(PLANS[1], pro)
            .plan(PLANS[2], enterprise),
    )
}

/// The trivial service: an empty 200.
fn ok(_: Request<()>) -> Ready<Result<Response<Body>, Infallible>> {
    ready(Ok(Response::new(Body::empty())))
}

/// `ok` as a service, every layer's inner service.
fn trivial() -> impl Service<
    Request<()>,
    Response = Response<Body>,
    Error = Infallible,
    Future = Ready<Result<Response<Body>, Infallible>>,
> + Clone {
    service_fn(ok)
}

/// A limiter-tower layer as `http.rs` sets it up, with `style`.
fn limiter(style: HeaderStyle) -> LimiterLayer {
    limiter_on(MemoryLimiter::new(Scenario::Allowed.policy()), style)
}

/// [`limiter`] with another limiter than limiter-memory's.
fn limiter_on(limiter: impl limiter_core::Limiter + 'static, style: HeaderStyle) -> LimiterLayer {
    LimiterLayer::new(limiter)
        .key(KeyExtractor::ip())
        .headers(style)
}

/// Every variant's service stack, built once: their keys stay stored
/// from block to block.
struct Stacks<A, B, C, D, E, F, G, H, I, J, K> {
    no_layer: A,
    governor: B,
    limiter_none: C,
    limiter_default: D,
    governor_headers: E,
    limiter_legacy: F,
    same_headers: G,
    cloned_headers: H,
    on_governor_store: I,
    on_no_store: J,
    plans: K,
}

/// The rate-limit headers of an admitted response of limiter's default
/// layer, as `http_app.rs` samples them for `http.rs`.
fn default_headers() -> Arc<[(HeaderName, HeaderValue)]> {
    let mut layer = limiter(HeaderStyle::default()).layer(trivial());
    let mut cx = Context::from_waker(Waker::noop());
    let request = requests(&clients()[..1], 1).remove(0);
    let response = call_now(&mut layer, &mut cx, request);
    http_app::rate_limit_headers(response.headers())
}

/// The trivial service adding `headers` to its response by hand, as
/// `http_app.rs`'s "same headers" variant does: what writing them costs
/// without a layer.
fn with_headers(headers: Arc<[(HeaderName, HeaderValue)]>) -> impl Stack + Clone {
    service_fn(move |_: Request<()>| {
        let mut response = Response::new(Body::empty());
        let map = response.headers_mut();
        map.reserve(headers.len());
        for (name, value) in headers.iter() {
            map.insert(name.clone(), value.clone());
        }
        ready(Ok::<_, Infallible>(response))
    })
}

/// The trivial service giving its response a clone of one map of
/// `headers`, their values static: the least that putting them on a
/// response costs through `http`'s `HeaderMap` (no name hashed, no
/// reference count moved; the layer fills a clone of such a map).
fn with_cloned_headers(headers: &[(HeaderName, HeaderValue)]) -> impl Stack + Clone {
    let map: HeaderMap = headers
        .iter()
        .map(|(name, value)| {
            let text: &'static str = Box::leak(value.to_str().expect("text").into());
            (name.clone(), HeaderValue::from_static(text))
        })
        .collect();
    service_fn(move |_: Request<()>| {
        let mut response = Response::new(Body::empty());
        *response.headers_mut() = map.clone();
        ready(Ok::<_, Infallible>(response))
    })
}

/// Every variant's service stack.
#[allow(clippy::type_complexity)]
fn stacks() -> Stacks<
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
    impl Stack,
> {
    let headers = default_headers();
    let governor = Scenario::Allowed.governor().finish().unwrap();
    let governor_headers = Scenario::Allowed.governor().use_headers().finish().unwrap();
    Stacks {
        no_layer: trivial(),
        governor: GovernorLayer::new(governor).layer(trivial()),
        limiter_none: limiter(HeaderStyle::None).layer(trivial()),
        limiter_default: limiter(HeaderStyle::default()).layer(trivial()),
        governor_headers: GovernorLayer::new(governor_headers).layer(trivial()),
        limiter_legacy: limiter(HeaderStyle::Legacy).layer(trivial()),
        cloned_headers: with_cloned_headers(&headers),
        same_headers: with_headers(headers),
        on_governor_store: limiter_on(
            GovernorStore::new(Scenario::Allowed.policy()),
            HeaderStyle::None,
        )
        .layer(trivial()),
        on_no_store: limiter_on(
            AnswerOnly::new(Scenario::Allowed.policy()),
            HeaderStyle::None,
        )
        .layer(trivial()),
        plans: limiter_with_plans().layer(trivial()),
    }
}

impl<A, B, C, D, E, F, G, H, I, J, K> Stacks<A, B, C, D, E, F, G, H, I, J, K>
where
    A: Stack,
    B: Stack,
    C: Stack,
    D: Stack,
    E: Stack,
    F: Stack,
    G: Stack,
    H: Stack,
    I: Stack,
    J: Stack,
    K: Stack,
{
    /// Variant `variant`'s block: ns per request.
    fn block(&mut self, variant: usize, requests: Vec<Request<()>>) -> f64 {
        match variant {
            0 => block(&mut self.no_layer, requests),
            1 => block(&mut self.governor, requests),
            2 => block(&mut self.limiter_none, requests),
            3 => block(&mut self.limiter_default, requests),
            4 => block(&mut self.governor_headers, requests),
            5 => block(&mut self.limiter_legacy, requests),
            6 => block(&mut self.same_headers, requests),
            7 => block(&mut self.cloned_headers, requests),
            8 => block(&mut self.on_governor_store, requests),
            9 => block(&mut self.on_no_store, requests),
            _ => block(&mut self.plans, requests),
        }
    }
}

/// A service stack of the bench.
trait Stack: Service<Request<()>, Response = Response<Body>, Error = Infallible> {}

impl<S: Service<Request<()>, Response = Response<Body>, Error = Infallible>> Stack for S {}

/// Every request of `requests` through `service`: ns per request. Out of
/// line, so that callgrind can count it alone (`--toggle-collect`).
#[inline(never)]
fn block(service: &mut impl Stack, mut requests: Vec<Request<()>>) -> f64 {
    let count = requests.len();
    let mut cx = Context::from_waker(Waker::noop());
    let start = Instant::now();
    for request in requests.drain(..) {
        let response = call_now(service, &mut cx, request);
        assert_eq!(response.status(), StatusCode::OK, "every request admitted");
    }
    let elapsed = start.elapsed();
    elapsed.as_nanos() as f64 / count as f64
}

/// `service`'s answer to `request`, which it must give at once.
#[inline(always)]
fn call_now<S: Stack>(
    service: &mut S,
    cx: &mut Context<'_>,
    request: Request<()>,
) -> Response<Body> {
    assert!(
        matches!(service.poll_ready(cx), Poll::Ready(Ok(()))),
        "always ready"
    );
    let future = pin!(service.call(request));
    match future.poll(cx) {
        Poll::Ready(Ok(response)) => response,
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => panic!("an admitted request is answered at once"),
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn min_max(values: &[f64]) -> (f64, f64) {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (low, high)
}

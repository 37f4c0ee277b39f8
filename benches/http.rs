//! The HTTP layer's cost (docs/benchmarks.md, "HTTP layer"): requests/s
//! of an axum hello-world (`GET /` answers 200 "ok") served on a loopback
//! ephemeral port with no layer, with limiter-tower's `LimiterLayer` on
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

// Shared with the instructions bench; each uses part of it.
#[allow(dead_code)]
mod http_app;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use http_app::{
    default_headers, load, serve, Counts, Scenario, Stop, Variant, CONNECTIONS, VARIANTS,
};
use limiter_tower::HeaderStyle;

/// Requests before each measurement (connections open, maps filled).
const WARM_UP: Duration = Duration::from_millis(300);
/// One measurement of one variant.
const MEASURE: Duration = Duration::from_millis(1_000);
/// Measurements of each variant, interleaved.
const ROUNDS: usize = 7;

/// One measurement: a fresh server, warmed up, then `MEASURE` of load.
async fn measure(
    variant: Variant,
    scenario: Scenario,
    headers: &Arc<[(HeaderName, HeaderValue)]>,
) -> Counts {
    let (addr, server) = serve(variant.app(scenario, headers)).await;
    load(addr, Stop::At(Instant::now() + WARM_UP)).await;
    let counts = load(addr, Stop::At(Instant::now() + MEASURE)).await;
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

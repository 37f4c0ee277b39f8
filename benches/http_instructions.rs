//! The HTTP layer's cost in instructions (docs/benchmarks.md, "HTTP
//! layer"): one variant of the HTTP bench's app (`http_app.rs`) loaded by
//! the same client with a fixed number of requests, on one thread, so that
//! callgrind counts the same work every run. `scripts/instructions http`
//! runs it under callgrind, counting only the measured load (not the
//! process's start, nor the clocks' calibration, whose loop runs for a
//! time, not a count), for N and 2N requests per connection, and prints
//! the difference per request (the connections' setup cancels out): what
//! one request costs the server and the client together. Unlike requests/s on
//! this shared 2-core machine, the figure does not move with the load.
//!
//! `cargo bench -p limiter-benches --bench http_instructions -- VARIANT REQUESTS`
//! (`VARIANT` is an index into the bench's variants, `list` lists them).
#![allow(missing_docs)]

// Shared with the requests/s bench; each uses part of it.
#[allow(dead_code)]
mod http_app;

use std::future::Future;

use http_app::{default_headers, load, serve, Counts, Scenario, Stop, CONNECTIONS, VARIANTS};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("list") || args.is_empty() {
        for (index, variant) in VARIANTS.iter().enumerate() {
            println!("{index}: {}", variant.name());
        }
        return;
    }
    let usage = "usage: http_instructions VARIANT REQUESTS_PER_CONNECTION";
    let index: usize = args[0].parse().expect(usage);
    let requests: u64 = args.get(1).expect(usage).parse().expect(usage);
    let variant = *VARIANTS.get(index).expect("a variant index (see `list`)");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (addr, server) = runtime.block_on(async {
        let headers = default_headers().await;
        let (addr, server) = serve(variant.app(Scenario::Allowed, &headers)).await;
        // The clocks calibrated, the key stored, before counting starts.
        load(addr, Stop::After(1)).await;
        (addr, server)
    });
    let counts = measured(&runtime, load(addr, Stop::After(requests)));
    server.abort();
    assert_eq!(
        counts.ok,
        requests * CONNECTIONS as u64,
        "every request admitted"
    );
    println!("{}: {} requests", variant.name(), counts.total());
}

/// Runs `load` to its end: the only part callgrind counts
/// (`--toggle-collect`). The runtime is on this thread, so the server's
/// tasks run inside this call too.
#[inline(never)]
fn measured(runtime: &tokio::runtime::Runtime, load: impl Future<Output = Counts>) -> Counts {
    runtime.block_on(load)
}

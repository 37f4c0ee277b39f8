//! An HTTP server behind `limiter-tower`: `GET /` answers 200 `ok` while
//! the policies admit, 429 with `Retry-After` once they deny. The article's
//! load test, 500 requests at concurrency 50 against 100 per 10 s:
//!
//! ```sh
//! cargo run --release -p limiter-examples --example http_server -- \
//!     --listen 127.0.0.1:3000 --policy sliding-log:100/10s
//! ab -n 500 -c 50 http://127.0.0.1:3000/   # Complete requests: 500, Non-2xx responses: 400
//! ```
//!
//! Several `--policy` flags make a tiered set (every request must pass
//! each); `--key` picks what is limited (`ip`, the default, `global`,
//! `route` or `header:NAME`); `--redis-url` keeps the counts in Redis, so
//! that every instance of the server shares them. With `--listen
//! 127.0.0.1:0` the system picks a free port; the server prints the address
//! it listens on (`scripts/test` reads it from there).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::{routing::get, Router};
use clap::Parser;
use limiter_core::{Limiter, Policies, Policy};
use limiter_memory::MemoryLimiter;
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_tower::{KeyExtractor, RateLimitLayer};

/// The command line.
#[derive(Debug, Parser)]
struct Args {
    /// The address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// A policy string (`sliding-log:100/10s`); repeat for a tiered set.
    #[arg(long = "policy", required = true)]
    policies: Vec<Policy>,
    /// What a request is limited by: ip, global, route or header:NAME.
    #[arg(long, default_value = "ip")]
    key: KeyExtractor,
    /// Keep the counts in Redis at this URL instead of in this process.
    #[arg(long)]
    redis_url: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let policies = Policies::new(args.policies)?;
    let limiter: Arc<dyn Limiter> = match &args.redis_url {
        Some(url) => {
            let backend = RedisBackend::builder(url.as_str()).build().await?;
            Arc::new(RedisLimiter::builder(&backend, policies).build().await?)
        }
        None => Arc::new(MemoryLimiter::new(policies)),
    };
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::from_arc(limiter).key(args.key));

    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on http://{}/", listener.local_addr()?);
    // The peer address, for the ip key (without it every request answers 500).
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

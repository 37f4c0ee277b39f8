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
//! that every instance of the server shares them. Instead of `--policy`,
//! `--config limits.toml --name NAME` serves the named policy of a
//! configuration file (docs/http.md, "Named policies from a configuration
//! file"; `examples/limits.toml` is one), checked whole at startup. With
//! `--listen 127.0.0.1:0` the system picks a free port; the server prints
//! the address it listens on (`scripts/test` reads it from there).
//!
//! In process, the limiter holds at most `--max-keys` keys (100,000 by
//! default) of at most `--max-key-bytes` bytes each (256; a longer key is
//! held as its SHA-256), so clients choosing fresh keys cost a bounded
//! amount of memory; a new key while it is full is answered 503. With
//! `--config`, the file's `max_keys` and `max_key_bytes` apply instead.
//!
//! With `--config`, `SIGHUP` reloads the file: its new limits and plans
//! go in force while the server serves, each client keeping what it used
//! (docs/http.md, "Reloading the configuration"); a file that fails to
//! parse or check is refused and logged, and the one in force stays.
//!
//! The layer's logs go to stderr through `tracing-subscriber`, filtered by
//! `RUST_LOG` (info and above by default, so that an outage's end shows
//! beside its start): `RUST_LOG=limiter_tower=debug` shows each request's
//! key kind, client address and outcome, and a configuration's startup
//! warnings show at the default level.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::{routing::get, Router};
use clap::Parser;
use limiter_core::{Limiter, Policies, Policy};
use limiter_memory::{MemoryLimiter, MemoryLimiterBuilder};
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_tower::{Config, KeyExtractor, LimiterLayer, Registry};

/// The command line.
#[derive(Debug, Parser)]
struct Args {
    /// The address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// A policy string (`sliding-log:100/10s`); repeat for a tiered set.
    #[arg(long = "policy", required_unless_present = "config")]
    policies: Vec<Policy>,
    /// What a request is limited by: ip, global, route or header:NAME.
    #[arg(long, default_value = "ip", conflicts_with = "config")]
    key: KeyExtractor,
    /// A TOML file of named policies, instead of `--policy` and `--key`.
    #[arg(long, conflicts_with = "policies")]
    config: Option<std::path::PathBuf>,
    /// The policy of `--config` to serve.
    #[arg(long, default_value = "default", requires = "config")]
    name: String,
    /// Keep the counts in Redis at this URL instead of in this process.
    #[arg(long)]
    redis_url: Option<String>,
    /// The most keys held in process; a new key beyond them is answered 503.
    #[arg(long, default_value_t = Config::DEFAULT_MAX_KEYS, conflicts_with = "config")]
    max_keys: usize,
    /// The longest key held as it is in process; a longer one is held as
    /// its SHA-256.
    #[arg(long, default_value_t = MemoryLimiterBuilder::DEFAULT_MAX_KEY_BYTES, conflicts_with = "config")]
    max_key_bytes: usize,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(tracing_subscriber::filter::LevelFilter::INFO.into())
                .from_env_lossy(),
        )
        .with_writer(std::io::stderr)
        .init();
    match serve(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // A configuration error names the file, the entry and the reason.
            eprintln!("http_server: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let backend = match &args.redis_url {
        Some(url) => Some(RedisBackend::builder(url.as_str()).build().await?),
        None => None,
    };
    let layer = match &args.config {
        Some(path) => {
            let config = Config::from_file(path)?;
            let registry = match &backend {
                Some(backend) => Registry::redis(&config, backend, "limiter").await?,
                None => Registry::memory(&config),
            };
            registry.reload_on_sighup(path)?;
            registry.layer(&args.name)?
        }
        None => {
            let policies = Policies::new(args.policies)?;
            let limiter: Arc<dyn Limiter> = match &backend {
                Some(backend) => Arc::new(RedisLimiter::builder(backend, policies).build().await?),
                None => Arc::new(
                    MemoryLimiter::builder(policies)
                        .max_keys(args.max_keys)
                        .max_key_bytes(args.max_key_bytes)
                        .build(),
                ),
            };
            LimiterLayer::from_arc(limiter).key(args.key)
        }
    };
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);

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

//! An API sold in plans, limited by `examples/plans.toml`: three plans
//! (free, pro, enterprise) and one customer's contract (acme), chosen per
//! request from the service's own authentication; `/upload` weighed by
//! its body's size; `/generate` reserving 500 tokens a completion and
//! charged, once the answer is out, the tokens it used beyond them.
//!
//! ```sh
//! cargo run -p limiter-examples --example plans_service            # a tour, then exits
//! cargo run -p limiter-examples --example plans_service -- --serve --listen 127.0.0.1:3000
//! curl -i -H 'x-api-key: alice-key' http://127.0.0.1:3000/api      # pro
//! # edit examples/plans.toml, then:
//! kill -HUP "$(pidof plans_service)"                               # new limits, nothing reset
//! ```
//!
//! `--redis-url` keeps the counts in Redis, shared by every instance of
//! the service. With `--serve` the service prints the address it listens
//! on and serves until stopped, reloading its file on `SIGHUP`
//! (docs/http.md, "Plans" and "Reloading the configuration"); without it,
//! it serves on a free port, takes a tour of the plans as clients would,
//! prints what each was answered, and exits.

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use clap::Parser;
use limiter_redis::RedisBackend;
use limiter_tower::{ActualCost, Config, Plan, Registry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The command line.
#[derive(Debug, Parser)]
struct Args {
    /// The plans and limits.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/plans.toml"))]
    config: PathBuf,
    /// The address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Keep the counts in Redis at this URL instead of in this process.
    #[arg(long)]
    redis_url: Option<String>,
    /// Serve until stopped, instead of the tour.
    #[arg(long)]
    serve: bool,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(tracing_subscriber::filter::LevelFilter::INFO.into())
                .from_env_lossy(),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = Config::from_file(&args.config)?;
    let registry = match &args.redis_url {
        Some(url) => {
            let backend = RedisBackend::builder(url.as_str()).build().await?;
            Registry::redis(&config, &backend, "plans-example").await?
        }
        None => Registry::memory(&config),
    };
    registry.reload_on_sighup(&args.config)?;
    let app = app(&registry)?.into_make_service_with_connect_info::<SocketAddr>();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}/");
    if args.serve {
        axum::serve(listener, app).await?;
        return Ok(());
    }
    tokio::spawn(async move { axum::serve(listener, app).await });
    tour(addr).await
}

/// The routes, each under its policy's layer, behind the authentication.
fn app(registry: &Registry) -> Result<Router, limiter_tower::ConfigError> {
    let api = Router::new()
        .route("/api", get(|| async { "ok" }))
        .route_layer(registry.layer("api")?);
    let upload = Router::new()
        .route(
            "/upload",
            post(|body: Bytes| async move { format!("stored {} bytes", body.len()) }),
        )
        .route_layer(registry.layer("upload")?);
    let generate = Router::new()
        .route("/generate", post(generate))
        .route_layer(registry.layer("generate")?);
    Ok(api
        .merge(upload)
        .merge(generate)
        // Outermost: it runs before every route's limits.
        .layer(middleware::from_fn(authenticate)))
}

/// The service's own authentication: it knows each API key's plan, and
/// says so in the request's extensions, where the limits read it. A key
/// it puts on no plan is on the file's default plan (free); acme's key is
/// on its contract by the file's `[key_plans]`.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let key = request.headers().get("x-api-key").map(|key| key.as_bytes());
    let plan = match key {
        Some(b"alice-key") => Some("pro"),
        Some(b"carol-key") => Some("enterprise"),
        _ => None,
    };
    if let Some(plan) = plan {
        request.extensions_mut().insert(Plan::new(plan));
    }
    next.run(request).await
}

/// A completion of the prompt: its answer, and the tokens it used (ten
/// per byte of prompt, for the example), which the layer charges beyond
/// the 500 it reserved.
async fn generate(prompt: String) -> (ActualCost, String) {
    let tokens = 10 * prompt.len() as u64;
    (ActualCost(tokens), format!("{tokens} tokens"))
}

/// The tour: what each client is answered.
async fn tour(addr: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    println!("GET /api, 12 times each (free: 10 a minute, pro: 100, acme's contract: 5,000):");
    for key in ["bob-key", "alice-key", "acme-key"] {
        let mut admitted = 0;
        let mut last = Reply::default();
        for _ in 0..12 {
            last = send(addr, "GET", "/api", key, "").await?;
            admitted += usize::from(last.status == 200);
        }
        println!(
            "  {key}: {admitted} of 12 admitted, {}",
            last.header("ratelimit-policy").unwrap_or("no policy")
        );
        assert_eq!(admitted, if key == "bob-key" { 10 } else { 12 });
    }
    println!("POST /upload of 600 KiB, twice (free: 1 MiB a minute, a unit per KiB):");
    let body = "x".repeat(600 * 1024);
    for _ in 0..2 {
        let reply = send(addr, "POST", "/upload", "bob-key", &body).await?;
        println!(
            "  bob-key: {} {}",
            reply.status,
            reply.header("x-ratelimit-remaining").unwrap_or("-")
        );
    }
    println!("POST /generate, a 2,000-token completion (free: 20,000 tokens a day, 500 reserved):");
    let prompt = "p".repeat(200);
    let first = send(addr, "POST", "/generate", "bob-key", &prompt).await?;
    let after = send(addr, "POST", "/generate", "bob-key", "").await?;
    println!(
        "  bob-key: {} ({}), then {} left of 20000 before the next",
        first.status,
        first.body,
        after
            .header("x-ratelimit-remaining")
            .unwrap_or("-")
            .parse::<u64>()
            .unwrap_or(0)
            + 500
    );
    Ok(())
}

/// A response's status, headers (lowercase names) and body.
#[derive(Debug, Default)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        let found = self.headers.iter().find(|(named, _)| named == name);
        found.map(|(_, value)| value.as_str())
    }
}

/// `method path` with `body`, as API key `key`, on a connection of its
/// own. A body is sent only once the server asks for it (`Expect:
/// 100-continue`): a request the limits refuse is answered before its
/// bytes are sent, as an upload should be.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: &str,
    body: &str,
) -> std::io::Result<Reply> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let expect = if body.is_empty() {
        ""
    } else {
        "expect: 100-continue\r\n"
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {key}\r\n\
         content-length: {}\r\n{expect}connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    let mut text = Vec::new();
    if !body.is_empty() {
        // The interim answer, or the final one.
        let mut buffer = [0; 4096];
        while !text.windows(4).any(|window| window == b"\r\n\r\n") {
            let read = stream.read(&mut buffer).await?;
            if read == 0 {
                break;
            }
            text.extend_from_slice(&buffer[..read]);
        }
        if text.starts_with(b"HTTP/1.1 100") {
            text.clear();
            stream.write_all(body.as_bytes()).await?;
        }
    }
    stream.read_to_end(&mut text).await?;
    let text = String::from_utf8_lossy(&text);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    Ok(Reply {
        status,
        headers,
        body: body.to_owned(),
    })
}

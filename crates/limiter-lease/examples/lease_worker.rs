//! One instance of a leasing fleet, as its own OS process: `--tasks`
//! callers decide through a [`Leased`] limiter over a [`RedisLimiter`] at
//! `--rate`, on `--keys` keys, from `--start-us` for `--run-ms`,
//! and the process writes every admitted decision, and every decision a
//! failure policy answered, to `--out`, one per line:
//!
//! ```text
//! TIME_US KEY_INDEX COST SOURCE ALLOWED
//! ```
//!
//! `TIME_US` is the decision's own time: Redis `TIME` for a decision the
//! global limiter took, the instance's clock (the host's wall clock read
//! at start, advanced monotonically) for a leased one. The fleet's
//! processes and its redis-server share one host, so these are one time
//! line (docs/spec.md section 8.2 bounds the units used per interval on
//! it). Run by `tests/redis_fleet.rs`, which `cargo test -p limiter-lease`
//! builds this beside.
//!
//! ```text
//! lease_worker --redis redis://127.0.0.1:6379/ --policy sliding-log:100/200ms \
//!     --prefix fleet --keys 1 --tasks 64 --run-ms 1500 --lifetime-ms 100 \
//!     --max-lease 10 --rate 1000 --on-failure return-error --out admitted.log
//! ```
//!
//! `--cluster URL,URL,...` instead of `--redis` reaches a Redis Cluster;
//! `--start-us` (wall-clock µs) lines the processes up; `--rate` is the
//! process's demand in decisions per second (0, the default: as fast as
//! its callers can); `--on-failure` is
//! `return-error` (an error ends the process with a failure),
//! `fail-open` or `fail-closed`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use limiter_core::{DecisionSource, FailurePolicy, Limiter, LimiterExt, Policy};
use limiter_lease::Leased;
use limiter_redis::{RedisBackend, RedisLimiter};

/// The worker's options, from its command line.
struct Options {
    backend: Target,
    policy: Policy,
    prefix: String,
    keys: u64,
    tasks: u64,
    start_us: Option<u64>,
    run: Duration,
    /// Decisions per second the process asks for, spread over its callers;
    /// 0: as fast as they can.
    rate: u64,
    lifetime: Duration,
    max_lease: u64,
    on_failure: FailurePolicy,
    out: String,
}

enum Target {
    Server(String),
    Cluster(Vec<String>),
}

/// One logged decision.
struct Logged {
    time_us: u64,
    key: u64,
    cost: u64,
    source: DecisionSource,
    allowed: bool,
}

/// What one caller saw.
#[derive(Default)]
struct Tally {
    logged: Vec<Logged>,
    denied: u64,
}

fn main() {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("lease_worker: {message}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(message) = runtime.block_on(run(options)) {
        eprintln!("lease_worker: {message}");
        std::process::exit(1);
    }
}

async fn run(options: Options) -> Result<(), String> {
    let backend = match &options.backend {
        Target::Server(url) => RedisBackend::builder(url.clone()),
        Target::Cluster(seeds) => RedisBackend::cluster(seeds.clone()),
    }
    // Generous: the fleet tests check the bound, not latency, and a busy
    // 2-core host can stall a process past a production timeout. A killed
    // server refuses at once, so no test waits it out.
    .command_timeout(Duration::from_secs(2))
    .connection_timeout(Duration::from_secs(2))
    .build()
    .await
    .map_err(|e| format!("backend: {e}"))?;
    backend
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let redis = RedisLimiter::builder(&backend, options.policy.clone())
        .key_prefix(options.prefix.clone())
        .build()
        .await
        .map_err(|e| format!("limiter: {e}"))?;
    let leased = Arc::new(
        Leased::builder(redis.on_failure(options.on_failure.clone()))
            .lifetime(options.lifetime)
            .max_lease(options.max_lease)
            .build(),
    );
    let start_us = options.start_us.unwrap_or_else(wall_us);
    let deadline_us = start_us + u64::try_from(options.run.as_micros()).unwrap_or(u64::MAX);
    tokio::time::sleep(Duration::from_micros(start_us.saturating_sub(wall_us()))).await;
    let callers: Vec<_> = (0..options.tasks)
        .map(|task| {
            let leased = Arc::clone(&leased);
            let keys = options.keys;
            // A caller's mean pause between requests, in µs.
            let pause_us = match options.rate {
                0 => 0,
                rate => options.tasks * 1_000_000 / rate,
            };
            tokio::spawn(async move { call(&*leased, task, keys, pause_us, deadline_us).await })
        })
        .collect();
    let mut tallies = Vec::with_capacity(callers.len());
    for caller in callers {
        tallies.push(caller.await.map_err(|e| format!("a caller: {e}"))??);
    }
    write_log(&options.out, &tallies).map_err(|e| format!("{}: {e}", options.out))?;
    let admitted: usize = tallies
        .iter()
        .map(|t| t.logged.iter().filter(|l| l.allowed).count())
        .sum();
    let denied: u64 = tallies.iter().map(|t| t.denied).sum();
    println!(
        "admitted {admitted} denied {denied} lapsed {}",
        leased.lapsed()
    );
    Ok(())
}

/// One caller: decides on keys picked at random until the deadline,
/// pausing between requests for a random time of mean `pause_us` (demand
/// that comes and goes around its mean).
async fn call(
    limiter: &impl Limiter,
    task: u64,
    keys: u64,
    pause_us: u64,
    deadline_us: u64,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    // xorshift64, seeded per task and per process.
    let mut state =
        (u64::from(std::process::id()) << 32 | task).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    while wall_us() < deadline_us {
        let key = next() % keys;
        let decision = limiter
            .acquire(format!("k{key}").as_bytes(), 1)
            .await
            .map_err(|e| format!("key k{key}: {e}"))?;
        if decision.allowed || decision.source.is_degraded() {
            tally.logged.push(Logged {
                time_us: decision.time_us,
                key,
                cost: 1,
                source: decision.source,
                allowed: decision.allowed,
            });
        } else {
            tally.denied += 1;
        }
        match pause_us {
            // Leased decisions complete without yielding: let the other
            // callers (and the lease fetches) run.
            0 => tokio::task::yield_now().await,
            mean => tokio::time::sleep(Duration::from_micros(next() % (2 * mean))).await,
        }
    }
    Ok(tally)
}

fn write_log(path: &str, tallies: &[Tally]) -> std::io::Result<()> {
    let mut text = String::new();
    for logged in tallies.iter().flat_map(|t| &t.logged) {
        let _ = writeln!(
            text,
            "{} {} {} {} {}",
            logged.time_us,
            logged.key,
            logged.cost,
            logged.source.name(),
            logged.allowed
        );
    }
    let mut file = std::fs::File::create(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

fn wall_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut backend = None;
        let mut policy = None;
        let mut prefix = None;
        let mut out = None;
        let mut keys = 1;
        let mut tasks = 64;
        let mut start_us = None;
        let mut run_ms = 1_000;
        let mut rate = 0;
        let mut lifetime_ms = 100;
        let mut max_lease = Leased::<RedisLimiter>::DEFAULT_MAX_LEASE;
        let mut on_failure = FailurePolicy::ReturnError;
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|e| format!("{flag} {value}: {e}"))
            };
            match flag.as_str() {
                "--redis" => backend = Some(Target::Server(value)),
                "--cluster" => {
                    backend = Some(Target::Cluster(
                        value.split(',').map(str::to_owned).collect(),
                    ))
                }
                "--policy" => {
                    policy = Some(
                        value
                            .parse()
                            .map_err(|e| format!("--policy {value}: {e}"))?,
                    )
                }
                "--prefix" => prefix = Some(value),
                "--out" => out = Some(value),
                "--keys" => keys = number()?.max(1),
                "--tasks" => tasks = number()?,
                "--start-us" => start_us = Some(number()?),
                "--run-ms" => run_ms = number()?,
                "--rate" => rate = number()?,
                "--lifetime-ms" => lifetime_ms = number()?,
                "--max-lease" => max_lease = number()?,
                "--on-failure" => {
                    on_failure = match value.as_str() {
                        "return-error" => FailurePolicy::ReturnError,
                        "fail-open" => FailurePolicy::FailOpen,
                        "fail-closed" => FailurePolicy::FailClosed,
                        _ => return Err(format!("--on-failure {value}: unknown")),
                    }
                }
                _ => return Err(format!("unknown option {flag}")),
            }
        }
        Ok(Self {
            backend: backend.ok_or("--redis or --cluster is required")?,
            policy: policy.ok_or("--policy is required")?,
            prefix: prefix.ok_or("--prefix is required")?,
            keys,
            tasks,
            start_us,
            run: Duration::from_millis(run_ms),
            rate,
            lifetime: Duration::from_millis(lifetime_ms),
            max_lease,
            on_failure,
            out: out.ok_or("--out is required")?,
        })
    }
}

//! Redis server CPU per decision of the two engines (the Lua functions and
//! limiter-redis-module) and of redis-cell, on one redis-server with both
//! modules loaded, through real clients: `RedisLimiter` (one shared
//! multiplexed connection, its batches) and redis-cell's `CL.THROTTLE`
//! through a redis-rs multiplexed connection the same callers share, one
//! command a decision, as its users send it.
//!
//! For 10,000 spread keys and one hot key, at 8, 64 and 256 concurrent
//! callers: every algorithm of 100 a second (a sliding log of 100 kept in
//! one string), a tiered set of two, and redis-cell at the token bucket's
//! rate and burst. Per run: decisions per second, the share admitted,
//! decisions per command and per read of a client's socket (how many
//! decisions one wake-up of the server carries), and the server's CPU
//! (`INFO cpu`, user and system) over the decisions. The
//! paths of one block (keys and concurrency) alternate, the order rotating
//! round by round, each a warm-up then a timed run, so all see the same
//! machine; the table gives every run's range and each path's median
//! against redis-cell's. The load average is printed before and after.
//!
//! `REDIS_CELL_MODULE=$(scripts/redis-cell) cargo bench -p limiter-benches --bench engines_cpu -- [ROUNDS] [SECONDS] [KEYS] [CONCURRENCY] [PATH]`
//! (default 3 rounds of 2 s, both key sets, every concurrency (`all`), every path;
//! `PATH` keeps the paths whose name contains it, or one of its `|`-separated parts). The module
//! is built with `--release` from this checkout.
#![allow(missing_docs)]

mod redis_cell;
mod server_cpu;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{Limiter, Policies};
use limiter_redis::{Engine, RedisBackend, RedisLimiter};
use limiter_test::redis_server::{optimized_module_path, RedisServer};
use redis::aio::MultiplexedConnection;

const WARM_UP: Duration = Duration::from_millis(500);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The policies measured on both engines: every algorithm at 100 a
/// second, and a tiered set of two.
const POLICIES: [&str; 6] = [
    "token-bucket:100/1s",
    "fixed-window:100/1s",
    "sliding-counter:100/1s",
    "leaky-bucket:100/1s",
    "sliding-log:100/1s",
    "token-bucket:100/1s;fixed-window:1000/1m",
];

/// redis-cell at the token bucket's rate and burst: `CL.THROTTLE key 99
/// 100 1` (a burst of 100: its max_burst counts the units beyond the
/// first).
const CELL: (u64, u64, u64) = (99, 100, 1);

/// What decides a path's requests.
#[derive(Clone)]
enum Decider {
    Limiter(Arc<dyn Limiter>),
    Cell(MultiplexedConnection),
}

impl Decider {
    /// One request on `key`: whether it was admitted.
    async fn decide(&mut self, key: &str) -> bool {
        match self {
            Self::Limiter(limiter) => {
                limiter
                    .acquire(key.as_bytes(), 1)
                    .await
                    .expect("a decision")
                    .allowed
            }
            Self::Cell(conn) => {
                let (burst, count, period) = CELL;
                redis_cell::throttle(conn, key, burst, count, period).await
            }
        }
    }
}

/// One timed run of one path.
struct Measured {
    decisions: u64,
    admitted: u64,
    elapsed: Duration,
    cpu: Duration,
    /// Commands the client sent: `FCALL`, `LIMITER.DECIDE`, `CL.THROTTLE`.
    calls: u64,
    /// Reads of the server from its clients' sockets (`INFO stats`): one
    /// each time the event loop found a client's commands to run.
    reads: u64,
}

impl Measured {
    fn per_second(&self) -> f64 {
        self.decisions as f64 / self.elapsed.as_secs_f64()
    }

    fn cpu_us_per_decision(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.decisions as f64
    }

    fn decisions_per_call(&self) -> f64 {
        self.decisions as f64 / self.calls as f64
    }

    fn decisions_per_read(&self) -> f64 {
        self.decisions as f64 / self.reads as f64
    }

    fn admitted_percent(&self) -> f64 {
        self.admitted as f64 * 100.0 / self.decisions as f64
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    let usage = "usage: engines_cpu [ROUNDS] [SECONDS] [KEYS] [CONCURRENCY] [PATH]";
    let rounds: usize = args.first().map_or(3, |n| n.parse().expect(usage));
    let seconds: u64 = args.get(1).map_or(2, |n| n.parse().expect(usage));
    // `all` (or nothing) for every key set or concurrency.
    let only = |n: Option<&String>| {
        n.filter(|n| *n != "all")
            .map(|n| n.parse::<u64>().expect(usage))
    };
    let only_keys = only(args.get(2));
    let only_concurrency = only(args.get(3));
    let only_path = args.get(4).map_or("", String::as_str);
    let run = Duration::from_secs(seconds);

    let (server, with_cell) = server();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("load average before: {}", load_average());
    // A busy machine can hold an answer past the default timeout: a bench
    // measures, it does not fail a decision.
    let backend = runtime.block_on(async {
        RedisBackend::builder(server.url())
            .command_timeout(COMMAND_TIMEOUT)
            .build()
            .await
            .unwrap()
    });
    for keys in [10_000, 1]
        .into_iter()
        .filter(|k| only_keys.is_none_or(|o| o == *k))
    {
        for concurrency in [8, 64, 256]
            .into_iter()
            .filter(|c| only_concurrency.is_none_or(|o| o == *c))
        {
            let mut paths = runtime.block_on(paths(&backend, &server, with_cell));
            paths.retain(|(name, _)| only_path.split('|').any(|part| name.contains(part)));
            let rows = measure(&server, &runtime, &paths, keys, concurrency, rounds, run);
            report(&rows, keys, concurrency, rounds, seconds);
        }
    }
    println!("load average after: {}", load_average());
}

/// Key prefixes given so far: each path of each block has its own keys.
static PREFIXES: AtomicU64 = AtomicU64::new(0);

/// A redis-server with limiter-redis-module (optimized) and, when
/// `REDIS_CELL_MODULE` names it, redis-cell loaded; whether redis-cell is.
fn server() -> (RedisServer, bool) {
    let module = optimized_module_path();
    redis_cell::server(&["--loadmodule", module.to_str().expect("a UTF-8 path")])
}

/// Every path of one block: each policy on each engine, under its own
/// key prefix, then redis-cell. A prefix is as long as the default one
/// (`limiter`), so that the keys Redis hashes and compares are as long as
/// a user's: redis-cell's are the user keys alone.
async fn paths(
    backend: &RedisBackend,
    server: &RedisServer,
    with_cell: bool,
) -> Vec<(String, Decider)> {
    let mut paths = Vec::new();
    for (engine, name) in [(Engine::Lua, "lua"), (Engine::Module, "module")] {
        for policies in POLICIES {
            let set: Policies = policies.parse().expect("a policy set");
            let limiter = RedisLimiter::builder(backend, set)
                .engine(engine)
                .key_prefix(format!("l{:06}", PREFIXES.fetch_add(1, Ordering::Relaxed)))
                .build()
                .await
                .expect("a limiter");
            paths.push((
                format!("{name} {policies}"),
                Decider::Limiter(Arc::new(limiter)),
            ));
        }
    }
    if with_cell {
        let conn = redis_cell::connect(&server.url()).await;
        paths.push(("redis-cell".to_owned(), Decider::Cell(conn)));
    }
    paths
}

/// `rounds` rounds of every path, the order rotating round by round; the
/// runs of each path, in the order of `paths`.
fn measure(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    paths: &[(String, Decider)],
    keys: u64,
    concurrency: u64,
    rounds: usize,
    run: Duration,
) -> Vec<(String, Vec<Measured>)> {
    let mut rows: Vec<(String, Vec<Measured>)> = paths
        .iter()
        .map(|(name, _)| (name.clone(), Vec::new()))
        .collect();
    for round in 0..rounds {
        for turn in 0..paths.len() {
            let which = (round + turn) % paths.len();
            let decider = &paths[which].1;
            runtime.block_on(drive(decider, keys, concurrency, WARM_UP));
            server.command("CONFIG RESETSTAT");
            let cpu_before = server_cpu::redis_cpu(server);
            let (decisions, admitted, elapsed) =
                runtime.block_on(drive(decider, keys, concurrency, run));
            rows[which].1.push(Measured {
                decisions,
                admitted,
                elapsed,
                cpu: server_cpu::redis_cpu(server).saturating_sub(cpu_before),
                calls: client_calls(server),
                reads: reads(server),
            });
        }
    }
    rows
}

/// Every path's runs as ranges, and its median CPU per decision against
/// redis-cell's.
fn report(
    rows: &[(String, Vec<Measured>)],
    keys: u64,
    concurrency: u64,
    rounds: usize,
    seconds: u64,
) {
    println!("{keys} keys, {concurrency} callers, {rounds} rounds of {seconds} s");
    println!(
        "{:<44} {:>20} {:>9} {:>9} {:>9} {:>18} {:>8}",
        "path", "decisions/s", "admitted", "dec/call", "dec/read", "server CPU µs/dec", "÷ cell"
    );
    let cell_cpu = rows
        .iter()
        .find(|(name, _)| name == "redis-cell")
        .map(|(_, runs)| median(runs, Measured::cpu_us_per_decision));
    for (name, runs) in rows {
        let (rate_low, rate_high) = range(runs, Measured::per_second);
        let (cpu_low, cpu_high) = range(runs, Measured::cpu_us_per_decision);
        let admitted = median(runs, Measured::admitted_percent);
        let per_call = median(runs, Measured::decisions_per_call);
        let per_read = median(runs, Measured::decisions_per_read);
        let against_cell = cell_cpu.map_or_else(
            || "-".to_owned(),
            |cell| format!("{:.2}x", median(runs, Measured::cpu_us_per_decision) / cell),
        );
        println!(
            "{name:<44} {:>9.0}–{:<10.0} {admitted:>8.1}% {per_call:>9.1} {per_read:>9.1} {cpu_low:>8.2}–{cpu_high:<9.2} {against_cell:>8}",
            rate_low, rate_high
        );
    }
    println!();
}

fn median(runs: &[Measured], f: fn(&Measured) -> f64) -> f64 {
    let mut values: Vec<f64> = runs.iter().map(f).collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn range(runs: &[Measured], f: fn(&Measured) -> f64) -> (f64, f64) {
    runs.iter()
        .map(f)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), v| {
            (low.min(v), high.max(v))
        })
}

/// `concurrency` tasks deciding on random keys of `keys` for `run`: the
/// decisions made, those admitted, and the time they took.
async fn drive(
    decider: &Decider,
    keys: u64,
    concurrency: u64,
    run: Duration,
) -> (u64, u64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let callers: Vec<_> = (0..concurrency)
        .map(|caller| {
            let mut decider = decider.clone();
            let stop = Arc::clone(&stop);
            let decisions = Arc::clone(&decisions);
            let admitted = Arc::clone(&admitted);
            tokio::spawn(async move {
                let mut state = (caller + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let (mut made, mut allowed) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let key = format!("tenant:{}", state % keys);
                    allowed += u64::from(decider.decide(&key).await);
                    made += 1;
                }
                decisions.fetch_add(made, Ordering::Relaxed);
                admitted.fetch_add(allowed, Ordering::Relaxed);
            })
        })
        .collect();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.unwrap();
    }
    (
        decisions.load(Ordering::Relaxed),
        admitted.load(Ordering::Relaxed),
        start.elapsed(),
    )
}

/// The decision commands the server ran since the last `CONFIG
/// RESETSTAT`: what the clients sent, the functions' own calls excepted.
fn client_calls(server: &RedisServer) -> u64 {
    server
        .query("INFO commandstats")
        .lines()
        .filter(|line| {
            [
                "cmdstat_fcall:",
                "cmdstat_limiter.decide:",
                "cmdstat_cl.throttle:",
            ]
            .iter()
            .any(|name| line.starts_with(name))
        })
        .filter_map(|line| {
            line.split(',')
                .find_map(|field| field.split_once("calls=").map(|(_, n)| n))
        })
        .map(|calls| calls.parse::<u64>().expect("a count of calls"))
        .sum()
}

/// The server's reads of its clients' sockets since the last `CONFIG
/// RESETSTAT` (`total_reads_processed`).
fn reads(server: &RedisServer) -> u64 {
    server
        .query("INFO stats")
        .lines()
        .find_map(|line| line.strip_prefix("total_reads_processed:"))
        .map(|n| n.trim().parse::<u64>().expect("a count of reads"))
        .expect("INFO stats names total_reads_processed")
}

/// The machine's load averages over 1, 5 and 15 minutes.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}

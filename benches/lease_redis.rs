//! Leased quota against the exact Redis path on a real redis-server (the
//! test harness starts one), 64 concurrent callers on one multiplexed
//! connection, steady demand below the limit, in two scenarios: 10,000
//! keys (a token bucket of 1,000,000 a second per key) and one hot key
//! (a token bucket of 1,000,000,000 a second, which no path here reaches),
//! so nothing is denied. Decisions per second, and Redis commands
//! (`INFO commandstats`: the `FCALL`s a client sent, and every command
//! run, the functions' own calls included) and Redis CPU (`INFO cpu`, user
//! and system) per 1,000 decisions, and the share of decisions taken from
//! a lease in hand, for `RedisLimiter` alone and for `Leased` over it with
//! its default lease options; on the hot key also with a maximum lease of
//! 1,000 (`M=1000`).
//!
//! With `REDIS_CELL_MODULE` naming redis-cell's module (`scripts/redis-cell`
//! builds it), the same server loads it and redis-cell's `CL.THROTTLE`
//! runs beside them: the same keys and rate (a GCRA of the token bucket's
//! rate, its burst the bucket's capacity), through a redis-rs multiplexed
//! connection shared by the callers, one command per decision.
//!
//! The paths alternate, round by round, each round a warm-up then a
//! timed run, so all see the same machine; the table gives every round
//! and the median, and each leased path's range over rounds of its rate
//! against the exact path's and redis-cell's of the same round.
//!
//! `cold` measures a cold start instead: each round builds every path
//! anew (a fresh `Leased`, whose keys hold no lease and no demand yet)
//! and its callers decide keys no round used before (a prefix of the
//! round), with no warm-up: the timed run counts from the first request,
//! every lease fetched on the way included.
//!
//! `REDIS_CELL_MODULE=$(scripts/redis-cell) cargo bench -p limiter-benches --bench lease_redis -- [ROUNDS] [SECONDS] [KEYS] [cold]`
//! (default 3 rounds of 3 s, both scenarios, warm; `KEYS` 10000 or 1 runs
//! one).
#![allow(missing_docs)]

mod redis_cell;
mod server_cpu;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{DecisionSource, Limiter, Policy, Rate};
use limiter_lease::Leased;
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_server::RedisServer;
use redis::aio::MultiplexedConnection;

const CALLERS: u64 = 64;
const WARM_UP: Duration = Duration::from_secs(1);

/// One timed run of one path.
struct Measured {
    decisions: u64,
    /// Decisions taken from a lease in hand.
    from_leases: u64,
    elapsed: Duration,
    fcalls: u64,
    commands: u64,
    cpu: Duration,
}

impl Measured {
    fn per_second(&self) -> f64 {
        self.decisions as f64 / self.elapsed.as_secs_f64()
    }

    fn leased_percent(&self) -> f64 {
        self.from_leases as f64 * 100.0 / self.decisions as f64
    }

    fn fcalls_per_1000(&self) -> f64 {
        self.fcalls as f64 * 1_000.0 / self.decisions as f64
    }

    fn commands_per_1000(&self) -> f64 {
        self.commands as f64 * 1_000.0 / self.decisions as f64
    }

    fn cpu_us_per_1000(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 * 1_000.0 / self.decisions as f64
    }
}

/// Keys the callers pick from, each key's rate per second, and the
/// maximum lease of an extra leased path beside the defaults, if any.
struct Scenario {
    keys: u64,
    per_second: u64,
    max_lease: Option<u64>,
}

const SCENARIOS: [Scenario; 2] = [
    Scenario {
        keys: 10_000,
        per_second: 1_000_000,
        max_lease: None,
    },
    // One key takes every decision: its units per lease round trip are
    // what the maximum lease allows (docs/lease.md), so a larger one runs
    // beside the default.
    Scenario {
        keys: 1,
        per_second: 1_000_000_000,
        max_lease: Some(1_000),
    },
];

/// A path measured: its name and what decides.
type Path = (String, Decider);

/// What decides a path's requests: a limiter, or redis-cell's command at
/// a rate per second.
#[derive(Clone)]
enum Decider {
    Limiter(Arc<dyn Limiter>),
    Cell(MultiplexedConnection, u64),
}

impl Decider {
    /// One request on `key`: whether it was admitted, and whether from a
    /// lease in hand.
    async fn decide(&mut self, key: &str) -> (bool, bool) {
        match self {
            Self::Limiter(limiter) => {
                let decision = limiter
                    .acquire(key.as_bytes(), 1)
                    .await
                    .expect("a decision");
                (decision.allowed, decision.source == DecisionSource::Lease)
            }
            Self::Cell(conn, per_second) => {
                let admitted = redis_cell::throttle(conn, key, *per_second, *per_second, 1).await;
                (admitted, false)
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    let usage = "usage: lease_redis [ROUNDS] [SECONDS] [KEYS] [cold]";
    let rounds: usize = args.first().map_or(3, |n| n.parse().expect(usage));
    let seconds: u64 = args.get(1).map_or(3, |n| n.parse().expect(usage));
    let only: Option<u64> = args.get(2).map(|n| n.parse().expect(usage));
    let cold = match args.get(3).map(String::as_str) {
        None => false,
        Some("cold") => true,
        Some(_) => panic!("{usage}"),
    };
    let run = Duration::from_secs(seconds);

    let (server, with_cell) = redis_cell::server(&[]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backend =
        runtime.block_on(async { RedisBackend::builder(server.url()).build().await.unwrap() });
    for scenario in SCENARIOS
        .iter()
        .filter(|scenario| only.is_none_or(|keys| keys == scenario.keys))
    {
        let build = || runtime.block_on(paths(&backend, &server, scenario, with_cell));
        let rows = measure(&server, &runtime, build, scenario.keys, rounds, run, cold);
        report(
            &rows,
            scenario.keys,
            scenario.per_second,
            rounds,
            seconds,
            cold,
        );
    }
}

/// The paths of `scenario`, built anew (a leased path holds nothing).
async fn paths(
    backend: &RedisBackend,
    server: &RedisServer,
    scenario: &Scenario,
    with_cell: bool,
) -> Vec<Path> {
    let keys = scenario.keys;
    let policy = Policy::token_bucket(Rate::per_second(scenario.per_second)).unwrap();
    let limiter = |prefix: String| {
        RedisLimiter::builder(backend, policy.clone())
            .key_prefix(prefix)
            .build()
    };
    let mut paths: Vec<Path> = vec![
        (
            "redis".into(),
            Decider::Limiter(Arc::new(limiter(format!("exact{keys}")).await.unwrap())),
        ),
        (
            "leased".into(),
            Decider::Limiter(Arc::new(Leased::new(
                limiter(format!("leased{keys}")).await.unwrap(),
            ))),
        ),
    ];
    if let Some(max_lease) = scenario.max_lease {
        let inner = limiter(format!("leased{keys}m{max_lease}")).await.unwrap();
        paths.push((
            format!("M={max_lease}"),
            Decider::Limiter(Arc::new(
                Leased::builder(inner).max_lease(max_lease).build(),
            )),
        ));
    }
    if with_cell {
        let conn = redis_cell::connect(&server.url()).await;
        paths.push(("cell".into(), Decider::Cell(conn, scenario.per_second)));
    }
    paths
}

/// `rounds` rounds of every path, each a warm-up then a timed run of
/// `run`, the order rotating round by round so that every path sees the
/// same machine; the runs of each path, in the order of the paths. Warm,
/// the paths `build` gives serve every round; `cold`, each round builds
/// them anew, decides keys of its own (a prefix of the round) and skips
/// the warm-up.
fn measure(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    build: impl Fn() -> Vec<Path>,
    keys: u64,
    rounds: usize,
    run: Duration,
    cold: bool,
) -> Vec<(String, Vec<Measured>)> {
    let mut paths = build();
    let mut rows: Vec<(String, Vec<Measured>)> = paths
        .iter()
        .map(|(name, _)| (name.clone(), Vec::new()))
        .collect();
    for round in 0..rounds {
        if cold && round > 0 {
            paths = build();
        }
        let key_prefix = match cold {
            true => format!("{round}:"),
            false => String::new(),
        };
        for turn in 0..paths.len() {
            let which = (round + turn) % paths.len();
            let decider = &paths[which].1;
            if !cold {
                runtime.block_on(drive(decider, "", keys, WARM_UP));
            }
            server.command("CONFIG RESETSTAT");
            let cpu_before = server_cpu::redis_cpu(server);
            let (decisions, from_leases, elapsed) =
                runtime.block_on(drive(decider, &key_prefix, keys, run));
            let (fcalls, commands) = redis_commands(server);
            rows[which].1.push(Measured {
                decisions,
                from_leases,
                elapsed,
                fcalls,
                commands,
                cpu: server_cpu::redis_cpu(server).saturating_sub(cpu_before),
            });
        }
    }
    rows
}

/// Prints every run of one scenario, the medians, and each leased path's
/// median against the exact path's (the first row) and redis-cell's, and
/// the range over rounds of its rate against theirs in the same round.
fn report(
    rows: &[(String, Vec<Measured>)],
    keys: u64,
    per_second: u64,
    rounds: usize,
    seconds: u64,
    cold: bool,
) {
    let start = match cold {
        true => "cold: fresh paths and keys each round, no warm-up",
        false => "warm",
    };
    println!(
        "{keys} keys, {CALLERS} callers, {rounds} rounds of {seconds} s, {start} (token \
         bucket of {per_second}/s per key, nothing denied)"
    );
    println!(
        "{:<8} {:>14} {:>12} {:>14} {:>16} {:>16}",
        "path", "decisions/s", "from lease", "FCALL/1,000", "commands/1,000", "CPU µs/1,000"
    );
    for (name, measured) in rows {
        for m in measured {
            println!(
                "{name:<8} {:>14.0} {:>11.1}% {:>14.1} {:>16.1} {:>16.0}",
                m.per_second(),
                m.leased_percent(),
                m.fcalls_per_1000(),
                m.commands_per_1000(),
                m.cpu_us_per_1000()
            );
        }
    }
    let median = |which: usize, f: fn(&Measured) -> f64| {
        let mut values: Vec<f64> = rows[which].1.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    for (which, (name, _)) in rows.iter().enumerate() {
        println!(
            "{:<8} {:>14.0} {:>11.1}% {:>14.1} {:>16.1} {:>16.0}   (median)",
            name,
            median(which, Measured::per_second),
            median(which, Measured::leased_percent),
            median(which, Measured::fcalls_per_1000),
            median(which, Measured::commands_per_1000),
            median(which, Measured::cpu_us_per_1000),
        );
    }
    let cell = rows.iter().position(|(name, _)| name == "cell");
    // Each round's rate against another path's in the same round.
    let per_round = |which: usize, other: usize| {
        let ratios = rows[which].1.iter().zip(&rows[other].1);
        let ratios: Vec<f64> = ratios
            .map(|(a, b)| a.per_second() / b.per_second())
            .collect();
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let high = ratios.iter().copied().fold(0.0, f64::max);
        format!("{low:.1}x–{high:.1}x")
    };
    for (which, (name, _)) in rows.iter().enumerate().skip(1) {
        if Some(which) == cell {
            continue;
        }
        println!(
            "{name} / redis decisions/s (median): {:.1}x, per round {}",
            median(which, Measured::per_second) / median(0, Measured::per_second),
            per_round(which, 0)
        );
        if let Some(cell) = cell {
            println!(
                "{name} / cell decisions/s (median): {:.1}x, per round {}",
                median(which, Measured::per_second) / median(cell, Measured::per_second),
                per_round(which, cell)
            );
        }
    }
    println!();
}

/// `CALLERS` tasks deciding on random keys of `keys` (`tenant:N` after
/// `key_prefix`) for `run`: the decisions made, those taken from a lease,
/// and the time they took.
async fn drive(
    decider: &Decider,
    key_prefix: &str,
    keys: u64,
    run: Duration,
) -> (u64, u64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(AtomicU64::new(0));
    let from_leases = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let mut decider = decider.clone();
            let stop = Arc::clone(&stop);
            let decisions = Arc::clone(&decisions);
            let from_leases = Arc::clone(&from_leases);
            let key_prefix = key_prefix.to_owned();
            tokio::spawn(async move {
                let mut state = (caller + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut made = 0;
                let mut leased = 0;
                while !stop.load(Ordering::Relaxed) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let key = format!("{key_prefix}tenant:{}", state % keys);
                    let (allowed, from_lease) = decider.decide(&key).await;
                    assert!(allowed, "demand below the limit");
                    made += 1;
                    leased += u64::from(from_lease);
                    if made % 64 == 0 {
                        // Leased decisions do not yield: let the others run.
                        tokio::task::yield_now().await;
                    }
                }
                decisions.fetch_add(made, Ordering::Relaxed);
                from_leases.fetch_add(leased, Ordering::Relaxed);
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
        from_leases.load(Ordering::Relaxed),
        start.elapsed(),
    )
}

/// The `FCALL`s and all commands the server ran since the last `CONFIG
/// RESETSTAT`, but this bench's own `INFO` and `CONFIG`.
fn redis_commands(server: &RedisServer) -> (u64, u64) {
    let mut fcalls = 0;
    let mut commands = 0;
    for line in server.query("INFO commandstats").lines() {
        let Some((name, stats)) = line.split_once(':') else {
            continue;
        };
        if name == "cmdstat_info" || name.starts_with("cmdstat_config") {
            continue;
        }
        let Some(calls) = stats
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
        else {
            continue;
        };
        let calls: u64 = calls.parse().expect("a count of calls");
        commands += calls;
        if name.starts_with("cmdstat_fcall") {
            fcalls += calls;
        }
    }
    (fcalls, commands)
}

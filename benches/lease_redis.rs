//! Leased quota against the exact Redis path on a real redis-server (the
//! test harness starts one): 10,000 keys, 64 concurrent callers on one
//! multiplexed connection, steady demand below the limit (a token bucket
//! of 1,000,000 a second per key, so nothing is denied). Decisions per
//! second, and Redis commands (`INFO commandstats`: the `FCALL`s a client
//! sent, and every command run, the functions' own calls included) and
//! Redis CPU (`INFO cpu`, user and system) per 1,000 decisions, for
//! `RedisLimiter` alone and for `Leased` over it with its default lease
//! options.
//!
//! The two paths alternate, round by round, each round a warm-up then a
//! timed run, so both see the same machine; the table gives every round
//! and the median. redis-cell's `CL.THROTTLE` is not beside them: it is a
//! Redis module, not packaged for Debian, and this bench builds nothing.
//!
//! `cargo bench -p limiter-benches --bench lease_redis -- [ROUNDS] [SECONDS]`
//! (default 3 rounds of 3 s).
#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{Limiter, Policy, Rate};
use limiter_lease::Leased;
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_server::RedisServer;

const KEYS: u64 = 10_000;
const CALLERS: u64 = 64;
const WARM_UP: Duration = Duration::from_secs(1);

/// One timed run of one path.
struct Measured {
    decisions: u64,
    elapsed: Duration,
    fcalls: u64,
    commands: u64,
    cpu: Duration,
}

impl Measured {
    fn per_second(&self) -> f64 {
        self.decisions as f64 / self.elapsed.as_secs_f64()
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

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    let usage = "usage: lease_redis [ROUNDS] [SECONDS]";
    let rounds: usize = args.first().map_or(3, |n| n.parse().expect(usage));
    let seconds: u64 = args.get(1).map_or(3, |n| n.parse().expect(usage));
    let run = Duration::from_secs(seconds);

    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (exact, leased) = runtime.block_on(async {
        let backend = RedisBackend::builder(server.url()).build().await.unwrap();
        let policy = Policy::token_bucket(Rate::per_second(1_000_000)).unwrap();
        let limiter = |prefix: &str| {
            RedisLimiter::builder(&backend, policy.clone())
                .key_prefix(prefix)
                .build()
        };
        let exact: Arc<dyn Limiter> = Arc::new(limiter("exact").await.unwrap());
        let leased: Arc<dyn Limiter> = Arc::new(Leased::new(limiter("leased").await.unwrap()));
        (exact, leased)
    });

    let mut rows: Vec<(&str, Vec<Measured>)> = vec![("redis", Vec::new()), ("leased", Vec::new())];
    for round in 0..rounds {
        // Alternate which path goes first.
        for turn in 0..2 {
            let which = (round + turn) % 2;
            let limiter = if which == 0 { &exact } else { &leased };
            runtime.block_on(drive(limiter, WARM_UP));
            server.command("CONFIG RESETSTAT");
            let cpu_before = redis_cpu(&server);
            let (decisions, elapsed) = runtime.block_on(drive(limiter, run));
            let (fcalls, commands) = redis_commands(&server);
            rows[which].1.push(Measured {
                decisions,
                elapsed,
                fcalls,
                commands,
                cpu: redis_cpu(&server).saturating_sub(cpu_before),
            });
        }
    }

    println!(
        "{KEYS} keys, {CALLERS} callers, {rounds} rounds of {seconds} s (token bucket, \
         nothing denied)"
    );
    println!(
        "{:<8} {:>14} {:>14} {:>16} {:>16}",
        "path", "decisions/s", "FCALL/1,000", "commands/1,000", "CPU µs/1,000"
    );
    for (name, measured) in &rows {
        for m in measured {
            println!(
                "{name:<8} {:>14.0} {:>14.1} {:>16.1} {:>16.0}",
                m.per_second(),
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
            "{:<8} {:>14.0} {:>14.1} {:>16.1} {:>16.0}   (median)",
            name,
            median(which, Measured::per_second),
            median(which, Measured::fcalls_per_1000),
            median(which, Measured::commands_per_1000),
            median(which, Measured::cpu_us_per_1000),
        );
    }
    println!(
        "leased / redis decisions/s (median): {:.1}x",
        median(1, Measured::per_second) / median(0, Measured::per_second)
    );
}

/// `CALLERS` tasks deciding on random keys for `run`: the decisions made
/// and the time they took.
async fn drive(limiter: &Arc<dyn Limiter>, run: Duration) -> (u64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let limiter = Arc::clone(limiter);
            let stop = Arc::clone(&stop);
            let decisions = Arc::clone(&decisions);
            tokio::spawn(async move {
                let mut state = (caller + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut made = 0;
                while !stop.load(Ordering::Relaxed) {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let key = format!("tenant:{}", state % KEYS);
                    let decision = limiter
                        .acquire(key.as_bytes(), 1)
                        .await
                        .expect("a decision");
                    assert!(decision.allowed, "demand below the limit");
                    made += 1;
                    if made % 64 == 0 {
                        // Leased decisions do not yield: let the others run.
                        tokio::task::yield_now().await;
                    }
                }
                decisions.fetch_add(made, Ordering::Relaxed);
            })
        })
        .collect();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.unwrap();
    }
    (decisions.load(Ordering::Relaxed), start.elapsed())
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

/// The server's CPU time so far, user and system.
fn redis_cpu(server: &RedisServer) -> Duration {
    let seconds: f64 = server
        .query("INFO cpu")
        .lines()
        .filter(|line| line.starts_with("used_cpu_sys:") || line.starts_with("used_cpu_user:"))
        .filter_map(|line| line.split(':').nth(1))
        .map(|value| value.trim().parse::<f64>().expect("CPU seconds"))
        .sum();
    Duration::from_secs_f64(seconds)
}

//! One instance of a leasing fleet, as its own OS process: `--tasks`
//! callers decide through a [`Leased`] limiter over a [`RedisLimiter`] on a
//! fixed schedule of `--rounds` rounds, one every `--period-ms` from
//! `--start-us`, and the process writes every admitted decision, and every
//! decision a failure policy answered, to `--out`, one per line:
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
//! it). Run by `tests/lease_redis_fleet.rs` and
//! `tests/lease_redis_cluster_fleet.rs`, which `cargo test -p
//! limiter-examples` builds this beside.
//!
//! ```text
//! lease_worker --redis redis://127.0.0.1:6379/ --policy sliding-log:100/200ms \
//!     --prefix fleet --keys 1 --tasks 64 --rounds 24 --period-ms 50 --phase 8 \
//!     --quiet 5 --burst 4 --lifetime-ms 100 --max-lease 10 \
//!     --on-failure return-error --out admitted.log
//! ```
//!
//! The rounds come in phases of `--phase` rounds, in each of which a
//! caller asks one of `--keys` keys: in every round but the phase's last,
//! a quiet one, the first `--quiet` callers send a request each; in the
//! last every caller sends `--burst` requests back to back. The key of a
//! caller's phase depends on the phase and the caller's number only, so
//! the callers of the same number in every process of a fleet ask the
//! same key at about the same time. The work is fixed in size: a round
//! that starts late, on a busy host, starts at once, and the process ends
//! when its rounds are done.
//!
//! `--cluster URL,URL,...` instead of `--redis` reaches a Redis Cluster;
//! `--start-us` (wall-clock µs) lines the processes up; `--ready-after N`
//! prints `ready` once every caller has done N rounds; `--until-degraded
//! N` keeps each caller going past its rounds until N of its rounds had
//! an answer of the failure policy; `--on-failure` is `return-error` (an
//! error ends the process with a failure), `fail-open` or `fail-closed`.
//! Without `--lifetime-ms` or `--max-lease` the leases are
//! `LeasedBuilder`'s defaults (docs/lease.md).

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
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
    schedule: Schedule,
    /// Rounds after which the process prints `ready` (0: never).
    ready_after: u64,
    /// `None`: the default lifetime.
    lifetime: Option<Duration>,
    /// `None`: the default maximum lease (the over-admission budget's).
    max_lease: Option<u64>,
    on_failure: FailurePolicy,
    out: String,
}

/// What each caller sends: `rounds` rounds, one every `period`, and
/// more until `until_degraded` of them had a failure policy's answer; in
/// phases of `phase` rounds on one key, a request from each of the first
/// `quiet` callers in each round but the last, `burst` requests from
/// every caller in the last.
#[derive(Clone, Copy)]
struct Schedule {
    rounds: u64,
    period: Duration,
    phase: u64,
    quiet: u64,
    burst: u64,
    until_degraded: u64,
}

impl Schedule {
    /// Requests `task` sends in `round`.
    fn requests(&self, round: u64, task: u64) -> u64 {
        match round % self.phase == self.phase - 1 {
            true => self.burst,
            false => u64::from(task < self.quiet),
        }
    }
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
    let mut builder = Leased::builder(redis.on_failure(options.on_failure.clone()));
    if let Some(lifetime) = options.lifetime {
        builder = builder.lifetime(lifetime);
    }
    if let Some(max_lease) = options.max_lease {
        builder = builder.max_lease(max_lease);
    }
    let leased = Arc::new(builder.build());
    let start_us = options.start_us.unwrap_or_else(wall_us);
    // Callers that have done `ready_after` rounds.
    let done = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..options.tasks)
        .map(|task| {
            let leased = Arc::clone(&leased);
            let done = Arc::clone(&done);
            let (keys, tasks, ready_after) = (options.keys, options.tasks, options.ready_after);
            let schedule = options.schedule;
            tokio::spawn(async move {
                let ready = || {
                    if done.fetch_add(1, Ordering::SeqCst) + 1 == tasks {
                        println!("ready");
                    }
                };
                call(&*leased, task, keys, start_us, schedule, ready_after, ready).await
            })
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

/// One caller: its rounds, each begun at its time on the schedule (at
/// once when late), its requests sent back to back; calls `ready` once
/// `ready_after` rounds are done.
async fn call(
    limiter: &impl Limiter,
    task: u64,
    keys: u64,
    start_us: u64,
    schedule: Schedule,
    ready_after: u64,
    ready: impl Fn(),
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let mut degraded_rounds = 0;
    let period_us = u64::try_from(schedule.period.as_micros()).unwrap_or(u64::MAX);
    for round in 0.. {
        if round >= schedule.rounds && degraded_rounds >= schedule.until_degraded {
            break;
        }
        let due_us = start_us.saturating_add(round * period_us);
        tokio::time::sleep(Duration::from_micros(due_us.saturating_sub(wall_us()))).await;
        let key = phase_key(round / schedule.phase, task) % keys;
        let mut degraded = false;
        for _ in 0..schedule.requests(round, task) {
            let decision = limiter
                .acquire(format!("k{key}").as_bytes(), 1)
                .await
                .map_err(|e| format!("key k{key}: {e}"))?;
            degraded |= decision.source.is_degraded();
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
        }
        degraded_rounds += u64::from(degraded);
        if round + 1 == ready_after {
            ready();
        }
    }
    Ok(tally)
}

/// The key of `task` in `phase`, before reduction to the keys asked
/// for: the same in every process (splitmix64's finalizer).
fn phase_key(phase: u64, task: u64) -> u64 {
    let mut z = (phase << 32 | task).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
        let mut schedule = Schedule {
            rounds: 20,
            period: Duration::from_millis(50),
            phase: 1,
            quiet: 0,
            burst: 1,
            until_degraded: 0,
        };
        let mut ready_after = 0;
        let mut lifetime = None;
        let mut max_lease = None;
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
                "--rounds" => schedule.rounds = number()?,
                "--phase" => schedule.phase = number()?.max(1),
                "--quiet" => schedule.quiet = number()?,
                "--burst" => schedule.burst = number()?,
                "--period-ms" => schedule.period = Duration::from_millis(number()?),
                "--until-degraded" => schedule.until_degraded = number()?,
                "--ready-after" => ready_after = number()?,
                "--lifetime-ms" => lifetime = Some(Duration::from_millis(number()?)),
                "--max-lease" => max_lease = Some(number()?),
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
            schedule,
            ready_after,
            lifetime,
            max_lease,
            on_failure,
            out: out.ok_or("--out is required")?,
        })
    }
}

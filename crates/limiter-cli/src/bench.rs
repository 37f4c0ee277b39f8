//! `limiter bench`: how many decisions per second a deployment gives, at
//! what latency, beside what the same Redis server gives a trivial script
//! in the same run (the ceiling).
//!
//! `N` tokio tasks on a multi-threaded runtime decide in a loop until the
//! deadline, one unit at a time, spreading their requests over `K` keys.
//! Every call's latency goes into a per-task log-bucketed `Histogram`
//! (bounded memory, percentiles within 1.6 %), merged at the end. On Redis
//! the same `N` tasks also run for the same duration through the client the
//! limiter's calls use (a shared multiplexed redis-rs connection; on a
//! cluster, the backend's own routing), each call an `EVALSHA` of
//! `return 1` on a key of the same slot as a decision's: the most this
//! client and server can do per call, against which the limiter's figure
//! is a ratio. The two alternate in five slices each,
//! so that a change in the machine's load weighs on both alike.

use std::fmt::Write as _;
use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use limiter_core::{
    parse_duration, DecisionSource, Error, FailurePolicy, Limiter, LimiterExt, Policies,
    PolicyError,
};
use limiter_memory::MemoryLimiter;
use limiter_redis::{redact_url, RedisBackend, RedisLimiter};

use crate::backend;
use crate::cli::{BackendArgs, BackendKind, Format};
use crate::failure::Failure;
use crate::json_string::string;

/// The most concurrent tasks (each holds a 9 KiB histogram).
const MAX_CONCURRENCY: i64 = 4096;
/// The most keys (each is a string held for the run).
const MAX_KEYS: i64 = 1_000_000;
/// How long connecting to Redis may take in all before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The ceiling's script.
const CEILING_SCRIPT: &str = "return 1";
/// On Redis, the ceiling and the limiter each run in this many slices of
/// the duration, alternating, so that a shared machine's changing load
/// weighs on both phases alike and the ratio holds from run to run.
const SLICES: u32 = 5;
/// A task yields to the runtime after this many calls: one that decides
/// without I/O (memory, or a failure policy while Redis is down) would
/// otherwise keep its thread, and the other tasks would not run.
const YIELD_EVERY: u32 = 64;

/// `limiter bench --help`, after the flags.
pub(crate) const AFTER_HELP: &str = "\
Measures a deployment: N tasks decide in a loop for the duration, one unit
per request, their requests spread round-robin over K keys (1: one hot key),
with the policy's clock being Redis TIME (or the system clock on memory),
as a service would run. Prints the backend's decisions per second
(admitted + denied), the latency of a call (p50, p99, p99.9, within 2 %),
errors, and the answers a failure policy gave instead of the backend
(fail-open, fail-closed; see --on-failure), which are not decisions/s.

On Redis it also measures the ceiling, in the same run and on the same
runtime: the same N tasks for the same duration, each call an EVALSHA of
`return 1` on a key in the slot of the decision it stands for, through the
client the limiter's calls use (one multiplexed redis-rs connection that
every task shares; on a cluster, the backend's own routing), not through
the limiter's layer. The ratio, decisions/s over ceiling/s, tells how much of what the server and
client can do per call the limiter gets. The two alternate, in five slices
of a fifth of the duration each, the ceiling first, so that a change in the
machine's load weighs on both alike.

Keys live under --redis-prefix, or else under a fresh prefix per run,
limiter-bench-<pid>-<nanos>, whose keys the benchmark deletes at the end
(keys under a --redis-prefix you gave are left to expire by their TTL).
Nothing else is written or deleted; `return 1` stays in the script cache.

Errors do not stop the run: they are counted, the first is shown, and the
exit status is still 0. Exit status 2 on a usage error (invalid policy,
concurrency or duration, malformed Redis URL), 1 when Redis cannot be
reached.

Examples:
  limiter bench --policy token-bucket:100/1s
  limiter bench --backend redis --redis-url redis://127.0.0.1:6379 \\
                --policy token-bucket:100/1s --concurrency 64 --duration 5s
  limiter bench --backend redis --policy sliding-log:100/10s --keys 10000 \\
                --on-failure open --format json";

/// `limiter bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The policy every decision is made under, as a policy string
    /// `ALG:LIMIT/WINDOW[,capacity=C|,queue=Q]` (e.g. sliding-log:100/10s,
    /// token-bucket:2/1s,capacity=10). Repeat it (or join policies with
    /// `;`) for a tiered set: every decision by all of them (at most 8).
    #[arg(long, value_name = "POLICY", value_parser = parse_policies, required = true)]
    pub policy: Vec<Policies>,
    /// Tasks deciding at the same time (1 to 4096).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        value_parser = clap::value_parser!(u32).range(1..=MAX_CONCURRENCY)
    )]
    pub concurrency: u32,
    /// How long each phase runs (e.g. 500ms, 5s, 1m).
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_run_duration)]
    pub duration: Duration,
    /// Distinct keys the requests are spread over (1 to 1000000).
    #[arg(
        long,
        value_name = "K",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=MAX_KEYS)
    )]
    pub keys: u32,
    /// What a decision answers when the backend fails (the failure policy
    /// of limiter-core's `Resilient` wrapper around the limiter).
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = OnFailure::Error)]
    pub on_failure: OnFailure,
    /// Where decisions are made.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `--on-failure`: the failure policy around the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnFailure {
    /// Return the error (counted in `errors`).
    Error,
    /// Admit without counting (counted in `fail_open`).
    Open,
    /// Deny (counted in `fail_closed`).
    Closed,
}

impl OnFailure {
    /// The name used on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Open => "open",
            Self::Closed => "closed",
        }
    }
}

fn parse_policies(text: &str) -> Result<Policies, PolicyError> {
    text.parse()
}

fn parse_run_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("the duration must be more than zero".to_owned());
    }
    Ok(duration)
}

/// Runs the benchmark and prints its report to stdout.
pub async fn run(args: &BenchArgs) -> Result<(), Failure> {
    let policy = Policies::new(args.policy.iter().flat_map(|set| set.iter().cloned()))
        .map_err(|e| Failure::usage("invalid policy").with_source(e))?;
    let keys: Arc<[String]> = (0..args.keys).map(|i| format!("bench:{i}")).collect();
    let report = match args.backend.backend {
        BackendKind::Memory => {
            backend::memory_takes_no_redis_flags(&args.backend)?;
            let limiter = wrap(
                MemoryLimiter::builder(policy.clone()).build(),
                args.on_failure,
            );
            let decisions = decide(&limiter, &keys, args, args.duration).await?;
            Report {
                args,
                policy,
                server: None,
                decisions,
                ceiling: None,
                cleanup: None,
            }
        }
        BackendKind::Redis | BackendKind::RedisCluster => {
            let redis = backend::redis_backend(&args.backend)?;
            let server = redis.url().to_owned();
            let (limiter, fresh) = connect_redis(args, &redis, policy.clone()).await?;
            let slice = args.duration / SLICES;
            let client = match args.backend.backend {
                BackendKind::RedisCluster => CeilingClient::Cluster(redis.clone()),
                _ => CeilingClient::Server(connect_plain(&args.backend.redis_urls()[0]).await?),
            };
            let (ceiling, decisions) = alternate(client, &limiter, &keys, args, slice).await?;
            let cleanup = if fresh {
                Some(delete_keys(&limiter, &keys, args.concurrency).await?)
            } else {
                None
            };
            Report {
                args,
                policy,
                server: Some(server),
                decisions,
                ceiling: Some(ceiling),
                cleanup,
            }
        }
    };
    let text = match args.format {
        Format::Table => report.table(),
        Format::Json => report.json(),
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // A reader that went away (`| head`) wanted no more.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(Failure::runtime(format!("cannot write the report: {e}")));
        }
        _ => {}
    }
    if let Some(failed) = report.cleanup.filter(|&failed| failed > 0) {
        eprintln!(
            "warning: {failed} of {} benchmark keys could not be deleted; they expire by their TTL",
            keys.len()
        );
    }
    Ok(())
}

/// `limiter` wrapped in the failure policy of `--on-failure`.
fn wrap(limiter: impl Limiter + 'static, on_failure: OnFailure) -> Arc<dyn Limiter> {
    match on_failure {
        OnFailure::Error => Arc::new(limiter),
        OnFailure::Open => Arc::new(limiter.on_failure(FailurePolicy::FailOpen)),
        OnFailure::Closed => Arc::new(limiter.on_failure(FailurePolicy::FailClosed)),
    }
}

/// The limiter on Redis (Redis `TIME`, no caller clock), and whether its
/// key prefix is a fresh one of this run's.
async fn connect_redis(
    args: &BenchArgs,
    redis: &RedisBackend,
    policy: Policies,
) -> Result<(Arc<dyn Limiter>, bool), Failure> {
    let (prefix, fresh) = match &args.backend.redis_prefix {
        Some(prefix) => (prefix.clone(), false),
        None => (backend::fresh_prefix("bench"), true),
    };
    let build = async {
        redis.connect().await?;
        RedisLimiter::builder(redis, policy)
            .key_prefix(prefix)
            .build()
            .await
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, build).await {
        Ok(Ok(limiter)) => Ok((wrap(limiter, args.on_failure), fresh)),
        Ok(Err(Error::InvalidPolicy(e))) => Err(Failure::usage(format!("invalid policy: {e}"))),
        Ok(Err(e @ Error::InvalidConfig(_))) => Err(Failure::usage(backend::reason(&e))),
        Ok(Err(e)) => Err(Failure::runtime(backend::reason(&e))),
        Err(_) => Err(Failure::runtime(format!(
            "cannot connect to Redis at {}: no answer within {}s",
            redis.url(),
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

/// The ceiling's calls go through the client the limiter's own calls use,
/// so that the ratio compares the decisions with what that same client
/// and server give a trivial script: a comparison through a slower client
/// would flatter the limiter (redis-rs's cluster connection gives fewer
/// calls a second than this crate's cluster routing, docs/benchmarks.md,
/// "Redis Cluster beside one server").
#[derive(Clone)]
enum CeilingClient {
    /// One server: one multiplexed redis-rs connection, as the backend's.
    Server(redis::aio::MultiplexedConnection),
    /// A cluster: the backend's own routing ([`RedisBackend::command`]).
    Cluster(RedisBackend),
}

impl CeilingClient {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        match self {
            Self::Server(connection) => {
                cmd.query_async(connection).await.map_err(|e| e.to_string())
            }
            Self::Cluster(backend) => backend.command(cmd).await.map_err(|e| backend::reason(&e)),
        }
    }
}

/// The ceiling's key for `key`: in the same slot on a cluster (its hash
/// tag is the user key, as in the limiter's state keys).
fn ceiling_key(key: &str) -> String {
    format!("{{{key}}}:ceiling")
}

/// The ceiling's connection: plain redis-rs, one multiplexed connection.
async fn connect_plain(url: &str) -> Result<redis::aio::MultiplexedConnection, Failure> {
    let failed = |e: &dyn std::fmt::Display| {
        Failure::runtime(format!(
            "cannot open the ceiling's redis-rs connection to {}: {e}",
            redact_url(url)
        ))
    };
    let client = redis::Client::open(url).map_err(|e| failed(&e))?;
    match tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection()).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(e)) => Err(failed(&e)),
        Err(_) => Err(failed(&"no answer within 5s")),
    }
}

/// What one phase's tasks did.
#[derive(Debug)]
struct Tally {
    latency: Histogram,
    admitted: u64,
    denied: u64,
    fail_open: u64,
    fail_closed: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn new() -> Self {
        Self {
            latency: Histogram::new(),
            admitted: 0,
            denied: 0,
            fail_open: 0,
            fail_closed: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// Decisions the backend made (a failure policy's are not counted:
    /// they say nothing of what the backend can do).
    fn decisions(&self) -> u64 {
        self.admitted + self.denied
    }

    fn error(&mut self, message: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message());
        }
    }

    fn merge(&mut self, other: Self) {
        self.latency.merge(&other.latency);
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.fail_open += other.fail_open;
        self.fail_closed += other.fail_closed;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// A phase's tally and wall time, from the start until its last call ended.
#[derive(Debug)]
struct Phase {
    tally: Tally,
    elapsed: Duration,
}

impl Phase {
    /// Nothing measured yet.
    fn empty() -> Self {
        Self {
            tally: Tally::new(),
            elapsed: Duration::ZERO,
        }
    }

    /// This phase and `other` as one.
    fn merge(&mut self, other: Self) {
        self.tally.merge(other.tally);
        self.elapsed += other.elapsed;
    }

    /// Decisions the backend made, per second of the phase.
    fn per_second(&self) -> f64 {
        self.tally.decisions() as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `task(index, deadline)` on `concurrency` tasks and merges their tallies.
async fn phase<F, Fut>(concurrency: u32, duration: Duration, task: F) -> Result<Phase, Failure>
where
    F: Fn(usize, Instant) -> Fut,
    Fut: Future<Output = Tally> + Send + 'static,
{
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = (0..concurrency as usize)
        .map(|index| tokio::spawn(task(index, deadline)))
        .collect();
    let mut tally = Tally::new();
    for task in tasks {
        let done = task
            .await
            .map_err(|e| Failure::runtime(format!("a benchmark task failed: {e}")))?;
        tally.merge(done);
    }
    Ok(Phase {
        tally,
        elapsed: start.elapsed(),
    })
}

/// The limiter's phase: every task decides one unit at a time until the
/// deadline; the j-th request of task i goes to key (i + j·N) mod K, so
/// the requests of all tasks together go round-robin over the keys.
async fn decide(
    limiter: &Arc<dyn Limiter>,
    keys: &Arc<[String]>,
    args: &BenchArgs,
    duration: Duration,
) -> Result<Phase, Failure> {
    let concurrency = args.concurrency as usize;
    phase(args.concurrency, duration, |first, deadline| {
        let (limiter, keys) = (Arc::clone(limiter), Arc::clone(keys));
        async move {
            let mut tally = Tally::new();
            let count = keys.len();
            let step = concurrency % count;
            let mut index = first % count;
            let mut calls = 0u32;
            loop {
                let started = Instant::now();
                if started >= deadline {
                    break;
                }
                let key = keys[index].as_str();
                index += step;
                if index >= count {
                    index -= count;
                }
                let result = match limiter.acquire_now(key, 1) {
                    Some(result) => result,
                    None => limiter.acquire(key, 1).await,
                };
                tally.latency.record(started.elapsed());
                match result {
                    Ok(decision) => match decision.source {
                        DecisionSource::FailOpen => tally.fail_open += 1,
                        DecisionSource::FailClosed => tally.fail_closed += 1,
                        _ if decision.allowed => tally.admitted += 1,
                        _ => tally.denied += 1,
                    },
                    Err(e) => tally.error(|| backend::reason(&e)),
                }
                calls += 1;
                if calls == YIELD_EVERY {
                    calls = 0;
                    tokio::task::yield_now().await;
                }
            }
            tally
        }
    })
    .await
}

/// The ceiling (on `client`) and the limiter's phase in [`SLICES`] slices
/// of `slice` each, alternating, the ceiling first: (ceiling, decisions).
async fn alternate(
    client: CeilingClient,
    limiter: &Arc<dyn Limiter>,
    keys: &Arc<[String]>,
    args: &BenchArgs,
    slice: Duration,
) -> Result<(Phase, Phase), Failure> {
    let ceiling_keys: Arc<[String]> = keys.iter().map(|k| ceiling_key(k)).collect();
    let (mut ceilings, mut decisions) = (Phase::empty(), Phase::empty());
    for _ in 0..SLICES {
        ceilings.merge(ceiling(client.clone(), &ceiling_keys, args, slice).await?);
        decisions.merge(decide(limiter, keys, args, slice).await?);
    }
    Ok((ceilings, decisions))
}

/// A slice of the ceiling: EVALSHA of `return 1` in a loop on clones of
/// `client`, over `keys` as the decisions go over theirs (so a cluster
/// routes each call to the node of the decision it stands for). A node
/// without the script (the first call on each of a cluster's primaries)
/// is sent it with EVAL, which caches it there. A call is "admitted" when
/// it answers 1.
async fn ceiling(
    client: CeilingClient,
    keys: &Arc<[String]>,
    args: &BenchArgs,
    duration: Duration,
) -> Result<Phase, Failure> {
    let sha: Arc<str> = redis::Script::new(CEILING_SCRIPT).get_hash().into();
    let concurrency = args.concurrency as usize;
    phase(args.concurrency, duration, |first, deadline| {
        let (mut client, sha, keys) = (client.clone(), Arc::clone(&sha), Arc::clone(keys));
        async move {
            let mut tally = Tally::new();
            let count = keys.len();
            let step = concurrency % count;
            let mut index = first % count;
            loop {
                let started = Instant::now();
                if started >= deadline {
                    break;
                }
                let key = keys[index].as_str();
                index += step;
                if index >= count {
                    index -= count;
                }
                let mut call = redis::cmd("EVALSHA");
                call.arg(&*sha).arg(1).arg(key);
                let mut result: Result<i64, String> = client.query(&call).await;
                // "NOSCRIPT …" from the server, "NoScript: …" as redis-rs
                // writes it.
                if matches!(&result, Err(e) if e.to_ascii_lowercase().contains("noscript")) {
                    let mut eval = redis::cmd("EVAL");
                    eval.arg(CEILING_SCRIPT).arg(1).arg(key);
                    result = client.query(&eval).await;
                }
                tally.latency.record(started.elapsed());
                match result {
                    Ok(1) => tally.admitted += 1,
                    Ok(other) => tally.error(|| format!("`return 1` answered {other}")),
                    Err(e) => tally.error(|| e),
                }
            }
            tally
        }
    })
    .await
}

/// Deletes the run's keys (`reset`), `concurrency` at a time; how many
/// could not be.
async fn delete_keys(
    limiter: &Arc<dyn Limiter>,
    keys: &Arc<[String]>,
    concurrency: u32,
) -> Result<u64, Failure> {
    let workers = (concurrency as usize).min(keys.len());
    let tasks: Vec<_> = (0..workers)
        .map(|first| {
            let (limiter, keys) = (Arc::clone(limiter), Arc::clone(keys));
            tokio::spawn(async move {
                let mut failed = 0u64;
                for key in keys.iter().skip(first).step_by(workers) {
                    if limiter.reset(key).await.is_err() {
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        failed += task
            .await
            .map_err(|e| Failure::runtime(format!("a cleanup task failed: {e}")))?;
    }
    Ok(failed)
}

/// Everything the report prints.
struct Report<'a> {
    args: &'a BenchArgs,
    policy: Policies,
    /// The Redis URL, password left out.
    server: Option<String>,
    decisions: Phase,
    ceiling: Option<Phase>,
    /// Keys that could not be deleted, when the run deleted its keys.
    cleanup: Option<u64>,
}

impl Report<'_> {
    fn ratio(&self) -> Option<f64> {
        let ceiling = self.ceiling.as_ref()?.per_second();
        (ceiling > 0.0).then(|| self.decisions.per_second() / ceiling)
    }

    /// The aligned table.
    fn table(&self) -> String {
        let args = self.args;
        let mut out = String::new();
        let keys = if args.keys == 1 {
            "1 key".to_owned()
        } else {
            format!("{} keys", args.keys)
        };
        let _ = writeln!(
            out,
            "limiter bench: {} on {}{}, concurrency {}, {} per phase, {keys}, on failure: {}",
            self.policy,
            args.backend.backend.name(),
            self.server
                .as_ref()
                .map_or_else(String::new, |s| format!(" ({s})")),
            args.concurrency,
            seconds(args.duration),
            args.on_failure.name(),
        );
        out.push('\n');
        let mut rows = vec![[
            String::new(),
            "per second".to_owned(),
            "total".to_owned(),
            "errors".to_owned(),
            "p50".to_owned(),
            "p99".to_owned(),
            "p99.9".to_owned(),
        ]];
        rows.push(row("decisions", Some(&self.decisions)));
        rows.push(row("ceiling (return 1)", self.ceiling.as_ref()));
        let mut ratio = vec![String::new(); 7];
        ratio[0] = "ratio".to_owned();
        ratio[1] = self
            .ratio()
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"));
        for line in aligned(rows.iter().map(|r| r.as_slice()).chain([ratio.as_slice()])) {
            let _ = writeln!(out, "  {}", line.trim_end());
        }
        let t = &self.decisions.tally;
        let _ = writeln!(
            out,
            "\n  admitted {}, denied {}, fail-open {}, fail-closed {}, errors {}",
            t.admitted, t.denied, t.fail_open, t.fail_closed, t.errors
        );
        if let Some(e) = &t.first_error {
            let _ = writeln!(out, "  first error: {e}");
        }
        if let Some(e) = self
            .ceiling
            .as_ref()
            .and_then(|c| c.tally.first_error.as_ref())
        {
            let _ = writeln!(out, "  first ceiling error: {e}");
        }
        out.push_str(match self.ceiling {
            Some(_) => {
                "\n  ceiling: EVALSHA of `return 1` through the limiter's client, on the keys' slots,\n  \
                 same concurrency and duration, same runtime; ratio = decisions/s / ceiling/s.\n"
            }
            None => "\n  ceiling: Redis only (the memory backend has no server to compare with).\n",
        });
        out
    }

    /// The JSON document (see docs/cli.md).
    fn json(&self) -> String {
        let args = self.args;
        let d = &self.decisions;
        let t = &d.tally;
        let c = self.ceiling.as_ref();
        let latency =
            |phase: Option<&Phase>, q: f64| micros(phase.and_then(|p| p.tally.latency.quantile(q)));
        let fields: Vec<(&str, String)> = vec![
            ("backend", string(args.backend.backend.name())),
            ("server", self.server.as_deref().map_or_else(null, string)),
            ("policy", string(&self.policy.to_string())),
            ("concurrency", args.concurrency.to_string()),
            ("duration_s", float(Some(args.duration.as_secs_f64()), 3)),
            ("keys", args.keys.to_string()),
            ("on_failure", string(args.on_failure.name())),
            ("elapsed_s", float(Some(d.elapsed.as_secs_f64()), 3)),
            ("decisions", t.decisions().to_string()),
            ("decisions_per_s", float(Some(d.per_second()), 1)),
            ("admitted", t.admitted.to_string()),
            ("denied", t.denied.to_string()),
            ("fail_open", t.fail_open.to_string()),
            ("fail_closed", t.fail_closed.to_string()),
            ("errors", t.errors.to_string()),
            (
                "first_error",
                t.first_error.as_deref().map_or_else(null, string),
            ),
            ("p50_us", latency(Some(d), 0.5)),
            ("p99_us", latency(Some(d), 0.99)),
            ("p999_us", latency(Some(d), 0.999)),
            ("max_us", micros(t.latency.max())),
            ("ceiling_per_s", float(c.map(Phase::per_second), 1)),
            ("ceiling_calls", integer(c.map(|c| c.tally.decisions()))),
            ("ceiling_errors", integer(c.map(|c| c.tally.errors))),
            ("ceiling_p50_us", latency(c, 0.5)),
            ("ceiling_p99_us", latency(c, 0.99)),
            ("ceiling_p999_us", latency(c, 0.999)),
            ("ratio", float(self.ratio(), 3)),
        ];
        let mut out = String::from("{\n");
        for (i, (name, value)) in fields.iter().enumerate() {
            let comma = if i + 1 < fields.len() { "," } else { "" };
            let _ = writeln!(out, "  {}: {value}{comma}", string(name));
        }
        out.push_str("}\n");
        out
    }
}

/// A table row for a phase: `-` throughout when there is none.
fn row(name: &str, phase: Option<&Phase>) -> [String; 7] {
    let dash = || "-".to_owned();
    let Some(phase) = phase else {
        return [
            name.to_owned(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
        ];
    };
    let t = &phase.tally;
    let latency = |q| t.latency.quantile(q).map_or_else(dash, human_latency);
    [
        name.to_owned(),
        format!("{:.0}", phase.per_second()),
        t.decisions().to_string(),
        t.errors.to_string(),
        latency(0.5),
        latency(0.99),
        latency(0.999),
    ]
}

/// Rows as lines, the first column left-aligned and the others right-aligned.
fn aligned<'a>(rows: impl Iterator<Item = &'a [String]> + Clone) -> Vec<String> {
    let columns = rows.clone().map(<[String]>::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.clone()
                .filter_map(|r| r.get(i))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.map(|r| {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i == 0 {
                let _ = write!(line, "{cell:<width$}", width = widths[0]);
            } else {
                let _ = write!(line, "  {cell:>width$}", width = widths[i]);
            }
        }
        line
    })
    .collect()
}

/// `850ns`, `12.3µs`, `1.25ms`, `1.500s`: three significant digits or so.
fn human_latency(nanos: u64) -> String {
    let n = nanos as f64;
    if nanos < 1_000 {
        format!("{nanos}ns")
    } else if nanos < 100_000 {
        format!("{:.1}µs", n / 1e3)
    } else if nanos < 1_000_000 {
        format!("{:.0}µs", n / 1e3)
    } else if nanos < 1_000_000_000 {
        format!("{:.2}ms", n / 1e6)
    } else {
        format!("{:.3}s", n / 1e9)
    }
}

/// `5s`, `1.5s`.
fn seconds(duration: Duration) -> String {
    let s = format!("{:.3}", duration.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}s")
}

fn null() -> String {
    "null".to_owned()
}

/// A JSON number with at most `decimals` decimals, or `null`.
fn float(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) if v.is_finite() => {
            let text = format!("{v:.decimals$}");
            if text.contains('.') {
                text.trim_end_matches('0').trim_end_matches('.').to_owned()
            } else {
                text
            }
        }
        _ => null(),
    }
}

fn integer(value: Option<u64>) -> String {
    value.map_or_else(null, |v| v.to_string())
}

/// Nanoseconds as a JSON number of microseconds (to the ns), or `null`.
fn micros(nanos: Option<u64>) -> String {
    float(nanos.map(|n| n as f64 / 1e3), 3)
}

/// Latencies in nanoseconds, log-bucketed: exact below 64 ns, then 32
/// buckets per power of two, so a quantile (a bucket's midpoint) is within
/// 1/64 of the true value. 1152 counters (9 KiB) cover up to 2^40 ns
/// (18 minutes); longer values count in the last bucket.
#[derive(Debug, Clone)]
struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    min: u64,
    max: u64,
}

impl Histogram {
    /// Buckets per power of two, as a power of two.
    const SUB_BITS: u32 = 5;
    const SUB: u64 = 1 << Self::SUB_BITS;
    /// The largest value kept exactly in range.
    const MAX_VALUE: u64 = (1 << 40) - 1;
    const BUCKETS: usize = Self::index(Self::MAX_VALUE) + 1;

    fn new() -> Self {
        Self {
            counts: vec![0; Self::BUCKETS].into_boxed_slice(),
            total: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// The bucket of `value` (at most `MAX_VALUE`).
    const fn index(value: u64) -> usize {
        if value < Self::SUB {
            return value as usize;
        }
        let exponent = 63 - value.leading_zeros();
        let shift = exponent - Self::SUB_BITS;
        // value >> shift is in [SUB, 2 * SUB).
        (shift as u64 * Self::SUB + (value >> shift)) as usize
    }

    /// The smallest value of bucket `index` and the bucket's width.
    const fn bounds(index: usize) -> (u64, u64) {
        let index = index as u64;
        if index < 2 * Self::SUB {
            return (index, 1);
        }
        let shift = index / Self::SUB - 1;
        let mantissa = Self::SUB + index % Self::SUB;
        (mantissa << shift, 1 << shift)
    }

    fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[Self::index(nanos.min(Self::MAX_VALUE))] += 1;
        self.total += 1;
        self.min = self.min.min(nanos);
        self.max = self.max.max(nanos);
    }

    fn merge(&mut self, other: &Self) {
        for (count, more) in self.counts.iter_mut().zip(other.counts.iter()) {
            *count += more;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    fn max(&self) -> Option<u64> {
        (self.total > 0).then_some(self.max)
    }

    /// The value below which a fraction `q` of the values lie (the
    /// `ceil(q·n)`-th smallest): its bucket's midpoint, kept within the
    /// smallest and largest value recorded. `None` when empty.
    fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, width) = Self::bounds(index);
                return Some((low + (width - 1) / 2).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_their_values() {
        let mut expected_low = 0;
        for index in 0..Histogram::BUCKETS {
            let (low, width) = Histogram::bounds(index);
            assert_eq!(low, expected_low, "bucket {index}");
            assert_eq!(Histogram::index(low), index);
            assert_eq!(Histogram::index(low + width - 1), index);
            expected_low = low + width;
        }
        assert_eq!(expected_low, Histogram::MAX_VALUE + 1);
    }

    #[test]
    fn quantiles_are_within_two_percent() {
        let mut histogram = Histogram::new();
        for nanos in 1..=100_000u64 {
            histogram.record(Duration::from_nanos(nanos * 37));
        }
        for (q, exact) in [
            (0.5, 50_000u64 * 37),
            (0.99, 99_000 * 37),
            (0.999, 99_900 * 37),
        ] {
            let got = histogram.quantile(q).unwrap() as f64;
            let error = (got - exact as f64).abs() / exact as f64;
            assert!(error < 0.02, "q={q}: {got} vs {exact}");
        }
        assert_eq!(histogram.quantile(1.0), Some(100_000 * 37));
        assert_eq!(histogram.quantile(0.0), Some(37));
        assert_eq!(Histogram::new().quantile(0.5), None);
    }

    #[test]
    fn merging_adds_the_counts() {
        let (mut a, mut b) = (Histogram::new(), Histogram::new());
        a.record(Duration::from_micros(10));
        b.record(Duration::from_millis(10));
        b.record(Duration::from_secs(3600)); // beyond the range: the last bucket
        a.merge(&b);
        assert_eq!(a.total, 3);
        // 10 µs, within its bucket's half width (1/64).
        let p10 = a.quantile(0.1).unwrap();
        assert!((10_000..=10_000 + 10_000 / 64).contains(&p10), "{p10}");
        assert_eq!(a.max(), Some(3_600_000_000_000));
    }

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("rediss://:secret@host"), "rediss://:***@host");
    }

    #[test]
    fn json_numbers_drop_trailing_zeros() {
        assert_eq!(float(Some(1.5), 3), "1.5");
        assert_eq!(float(Some(2.0), 1), "2");
        assert_eq!(float(None, 1), "null");
        assert_eq!(micros(Some(1_234)), "1.234");
    }
}

//! The command line: every subcommand, flag and default, as clap parses it.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use limiter_core::{parse_duration, Algorithm, Policies, PolicyError};

pub use crate::bench::BenchArgs;
pub use crate::compare::scenario_name::ScenarioName;
use crate::policy_change::parse_change;
pub use crate::policy_change::PolicyChange;

/// The default Redis URL of `--redis-url`.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

const MAIN_AFTER_HELP: &str = "\
Examples:
  limiter replay --algorithm sliding-log --limit 100 --window 10s trace.csv
  limiter replay --policy sliding-log:5/1s --policy sliding-log:100/1m trace.csv
  limiter replay --algorithm token-bucket --limit 10 --window 1s --capacity 50 \\
                 --backend redis --redis-url redis://127.0.0.1:6379 trace.csv
  limiter compare
  limiter compare --scenario boundary-burst --plot burst.svg
  limiter compare --trace prod.csv --limit 600 --window 1m --format json
  limiter bench --backend redis --redis-url redis://127.0.0.1:6379 \\
                --policy token-bucket:100/1s --concurrency 64 --duration 5s

Exit status: 0 on success, 1 when the run fails (unreadable or malformed
trace, backend failure), 2 on a usage error (unknown flag or algorithm,
invalid policy, malformed Redis URL).";

const REPLAY_AFTER_HELP: &str = "\
Input: a CSV with the header `t_us,key,cost` (or `t_us,key`: every cost is 1);
t_us is the request time in microseconds since the Unix epoch. A trace whose
times all read as dates of 2000-2099 in seconds or in milliseconds since the
epoch (1700000000, 1700000000000) gets one warning on stderr naming the
likely unit; the decisions are printed all the same. `-` reads the
trace from standard input. The trace is streamed: any length, bounded memory
(apart from the backend's per-key state).

Output (stdout): one CSV row per request, after the header
  t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us
where outcome is `allowed`, `denied` or `error`. A request that can never be
decided (cost 0, cost above the limit/capacity/queue, time beyond 2^53 us) is
an `error` row whose last five fields are empty; a backend failure stops the
replay with a message on stderr and exit status 1.

Time: the limiter's clock is set to each row's t_us before it is decided (on
Redis too: the trace's times are passed to the Lua functions), so a replay gives
the same decisions on every backend and at any speed. Each Redis replay uses
a fresh key prefix, limiter-replay-<pid>-<nanos>, unless --redis-prefix names
one (runs with the same prefix and policy share state). The memory backend keeps a
key for an hour of trace time past its reset before it may drop it, so a
trace whose clock steps back by less than that still replays exactly (a
deeper step back gets a warning on stderr).

Policies: --algorithm, --limit and --window (with --capacity or --queue), or
one --policy per policy string (docs/spec.md section 7), e.g.
--policy sliding-log:5/1s. Several --policy flags (or policy strings joined by
`;`) make a tiered limit: a request is admitted only if every policy admits it,
and then every policy counts it; a denial counts nothing. At most 8 policies;
a cost above any policy's maximum is an `error` row.

Policy changes: --change-at T_US=POLICIES (policy strings joined by `;`)
puts POLICIES in force from the first request at or after T_US; repeat it
for several, times increasing. --change-at-request N=POLICIES does so from
the Nth request (from 1). Each key keeps what it used (docs/spec.md section
9): moved from 100 to 1000 a minute after using 90, a key has 910 left, on
every backend.

Backends may refuse a policy: Redis refuses a sliding log above 10000 per
window (one sorted-set entry per admission; use sliding-counter).

Progress is shown on stderr when stderr is a terminal, never on stdout.

Examples:
  limiter replay --algorithm sliding-log --limit 100 --window 10s trace.csv
  limiter replay --algorithm leaky-bucket --limit 10 --window 250ms --queue 20 trace.csv
  limiter replay --policy sliding-log:5/1s --policy sliding-log:100/1m trace.csv
  limiter replay --policy sliding-log:100/1m --change-at 30000000=sliding-log:120/1m trace.csv
  cat trace.csv | limiter replay --algorithm fixed-window --limit 5 --window 1m -
  limiter replay --algorithm token-bucket --limit 5 --window 10s \\
                 --backend redis --redis-url redis://127.0.0.1:6379 trace.csv > decisions.csv";

const COMPARE_AFTER_HELP: &str = "\
Built-in scenarios (all run when neither --scenario nor --trace is given):
  boundary-burst     100 per 10s; 100 requests at 9 s and 100 at 11 s (the
                     article's case: fixed window admits 200, sliding log 100)
  steady-over-limit  100 per 10s; one request every 50 ms for 60 s (twice the rate)
  on-off-bursts      100 per 10s; 150 requests within 1 s, every 13 s from
                     9.5 s (the first straddles a window boundary), 6 times
  many-keys          10 per 1s on each of 1000 keys; 40 requests per key at
                     random times within 2 s (fixed seed)
  tiered             (run when named) tiered limits, 5 per second and 100 per
                     minute: one request every 150 ms for 2 minutes; one lane
                     per algorithm, both tiers of that algorithm
  policy-change      (run when named) sliding-log:100/1m used fully in the
                     first second, changed to sliding-log:120/1m at 30 s,
                     then one request every 100 ms to 90 s: a lane with
                     per-policy state beside one carrying what each key used

Policy changes: --scenario policy-change, or --trace FILE --set BEFORE
--change-at T_US=AFTER (AFTER in force from the first request at or after
T_US), compares two lanes. \"per-policy state\": a fresh limiter of the new
policies from the change on, as a limiter keyed by its numbers, or one
restarted, does. \"carried (docs/spec.md section 9)\": each key keeps what it
used (set_policies, on every backend).
Each shows \"max/W at change\", the most units within any window of the new
policies' longest window W that holds the change, beside \"new limit\", that
policy's limit.

Policy sets: --set \"P1;P2\" (policy strings joined by `;`, docs/spec.md section
7; repeatable) compares those sets side by side instead of the
algorithms, on the scenarios (or --trace) chosen. A request is admitted only
if every policy of its set admits it. max/W is then shown for every window of
the sets' policies.

Columns, per algorithm:
  admitted, denied   requests (and `errors`, shown when any: requests that can
                     never be admitted, e.g. cost above the limit)
  max/W              the most units that proceed within any W microseconds on
                     one key (W = the window), found exactly over every admitted
                     request; a request proceeds at t + wait (wait is 0 except
                     for the leaky bucket, whose admitted requests queue)
  mean/worst retry   mean and largest retry_after of the denials
  decisions/s        only with --timing (always in --format json): requests
                     decided per second of wall time on this backend (includes
                     the clock update and, on Redis, the round trip). Left out
                     by default: a scenario of a few hundred requests is
                     decided in tens of microseconds, so the figure is mostly
                     noise; `limiter bench` measures throughput
  bytes/key          estimated in-memory state per key at the end of the run:
                     the algorithm's state struct (std::mem::size_of, e.g. 16
                     bytes for a fixed window) plus 16 bytes per sliding-log
                     entry, averaged over the keys held; excludes the key string and
                     map overhead. Shown for the memory backend only.

Every algorithm gets the same limit and window; the token bucket's capacity
and the leaky bucket's queue default to the limit. Time is simulated (a
manual clock set to each request's time), so a scenario of minutes runs in
milliseconds.

--plot writes ONE SVG file with a section per scenario; each section has one
lane per algorithm showing admitted units over time (at t + wait),
with the window boundaries dashed. Every lane has the same scale; a lane
whose bars stay under a quarter of the tallest (the leaky bucket's trickle)
is also outlined on its own scale.

Examples:
  limiter compare
  limiter compare --scenario boundary-burst --plot burst.svg
  limiter compare --format json > compare.json
  limiter compare --scenario many-keys --timing
  limiter compare --trace prod.csv --limit 600 --window 1m --capacity 1200
  limiter compare --scenario tiered
  limiter compare --scenario policy-change
  limiter compare --trace prod.csv --set sliding-log:100/1m \\
                  --change-at 30000000=sliding-log:120/1m
  limiter compare --scenario steady-over-limit --set \"sliding-log:5/1s;sliding-log:100/1m\" \\
                  --set \"token-bucket:5/1s,capacity=20;fixed-window:100/1m\"
  limiter compare --backend redis --redis-url redis://127.0.0.1:6379";

/// `limiter`: replay request traces through any rate-limiting algorithm and
/// backend, and compare the algorithms side by side.
#[derive(Debug, Parser)]
#[command(
    name = "limiter",
    version,
    about = "Replay request traces through a rate limiter, or compare the algorithms side by side.",
    long_about = "Replay request traces through a rate limiter (fixed window, sliding log, \
sliding window counter, token bucket, leaky bucket) on the in-memory or the Redis \
backend, printing every decision; or compare the algorithms side by side on \
built-in scenarios or your own trace; or measure how many decisions per second a \
deployment gives (limiter bench).",
    after_help = MAIN_AFTER_HELP,
    propagate_version = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace through one policy (or a tiered set) and print every decision as CSV.
    #[command(after_help = REPLAY_AFTER_HELP)]
    Replay(ReplayArgs),
    /// Run every algorithm on the same requests and compare what they admit.
    #[command(after_help = COMPARE_AFTER_HELP)]
    Compare(CompareArgs),
    /// Measure a deployment: decisions per second and their latency at a
    /// given concurrency, beside the Redis server's own ceiling.
    #[command(after_help = crate::bench::AFTER_HELP)]
    Bench(BenchArgs),
}

/// Which limiter backend decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// In-process state (limiter-memory).
    Memory,
    /// A Redis server, one Lua script per decision (limiter-redis).
    Redis,
    /// A Redis Cluster, found from the `--redis-url` seed nodes.
    RedisCluster,
}

impl BackendKind {
    /// The name used on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis => "redis",
            Self::RedisCluster => "redis-cluster",
        }
    }
}

/// What decides on a Redis server (`--redis-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RedisEngine {
    /// The Lua functions the limiter loads.
    Lua,
    /// limiter-redis-module's commands.
    Module,
}

impl RedisEngine {
    /// The name used on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lua => "lua",
            Self::Module => "module",
        }
    }

    /// The Redis limiter's engine.
    pub fn engine(self) -> limiter_redis::Engine {
        match self {
            Self::Lua => limiter_redis::Engine::Lua,
            Self::Module => limiter_redis::Engine::Module,
        }
    }
}

/// Where decisions are made.
#[derive(Debug, Clone, Args)]
pub struct BackendArgs {
    /// The backend that decides.
    #[arg(long, value_enum, default_value_t = BackendKind::Memory)]
    pub backend: BackendKind,
    /// The Redis server, for `--backend redis`; for `--backend
    /// redis-cluster`, a seed node (repeat the flag for several).
    /// [default: redis://127.0.0.1:6379]
    #[arg(long = "redis-url", value_name = "URL")]
    redis_urls: Vec<String>,
    /// What decides on Redis: the Lua functions (any Redis), or
    /// limiter-redis-module, which the server must have loaded
    /// (docs/backends.md, "The Redis module").
    #[arg(long = "redis-engine", value_enum, value_name = "ENGINE", default_value_t = RedisEngine::Lua)]
    pub redis_engine: RedisEngine,
    /// The prefix of every Redis key, on Redis. Runs with the
    /// same prefix share state on purpose (e.g. two replays that continue
    /// one another). Default: a fresh prefix per run.
    #[arg(long, value_name = "PREFIX")]
    pub redis_prefix: Option<String>,
}

impl BackendArgs {
    /// The `--redis-url`s given, or the default: one server on this host.
    pub fn redis_urls(&self) -> Vec<String> {
        if self.redis_urls.is_empty() {
            vec![DEFAULT_REDIS_URL.to_owned()]
        } else {
            self.redis_urls.clone()
        }
    }

    /// Whether `--redis-url` was given at all (its default named
    /// explicitly included).
    pub fn names_redis_url(&self) -> bool {
        !self.redis_urls.is_empty()
    }
}

/// `limiter replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A policy string (docs/spec.md section 7), e.g. sliding-log:5/1s or
    /// token-bucket:2/1s,capacity=10. Repeat it for a tiered limit: every
    /// request must be admitted by all of them (at most 8). Instead of
    /// --algorithm, --limit and --window.
    #[arg(
        long = "policy",
        value_name = "POLICY",
        value_parser = parse_policies,
        required_unless_present = "algorithm",
        conflicts_with_all = ["algorithm", "limit", "window", "capacity", "queue"]
    )]
    pub policies: Vec<Policies>,
    /// The algorithm (with --limit and --window; or give --policy).
    #[arg(long, value_name = "ALG", value_parser = AlgorithmParser, requires_all = ["limit", "window"])]
    pub algorithm: Option<Algorithm>,
    /// Units admitted per window (for the buckets: the refill or drain rate per window).
    #[arg(long, value_name = "L", value_parser = parse_whole_number, requires = "algorithm")]
    pub limit: Option<u64>,
    /// The window: an integer with a unit, us, ms, s, m, h or d (e.g. 250ms, 10s, 1m).
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "algorithm")]
    pub window: Option<Duration>,
    /// Token bucket only: the largest burst [default: the limit].
    #[arg(long, value_name = "C", value_parser = parse_whole_number, requires = "algorithm")]
    pub capacity: Option<u64>,
    /// Leaky bucket only: how many units may wait in the queue [default: the limit].
    #[arg(long, value_name = "Q", value_parser = parse_whole_number, requires = "algorithm")]
    pub queue: Option<u64>,
    /// Puts other policies in force from the first request at or after
    /// T_US (microseconds, as the trace's times): policy strings joined by
    /// `;`, e.g. 30000000=sliding-log:120/1m. Each key keeps what it used
    /// (docs/spec.md section 9). Repeatable, times increasing.
    #[arg(
        long = "change-at",
        value_name = "T_US=POLICIES",
        value_parser = parse_change,
        conflicts_with = "changes_at_request"
    )]
    pub changes_at: Vec<PolicyChange>,
    /// As --change-at, from the request of number N (the trace's Nth data
    /// row, from 1), e.g. 2=sliding-log:120/1m. Repeatable, numbers increasing.
    #[arg(long = "change-at-request", value_name = "N=POLICIES", value_parser = parse_change)]
    pub changes_at_request: Vec<PolicyChange>,
    /// Where decisions are made.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// The trace: a CSV file with the header `t_us,key,cost`, or `-` for standard input.
    #[arg(value_name = "TRACE.csv")]
    pub trace: PathBuf,
}

/// How `limiter compare` prints its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One aligned table per scenario.
    Table,
    /// One JSON document with every scenario and figure.
    Json,
}

/// `limiter compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// A built-in scenario to run (repeatable) [default: all of them].
    #[arg(long, value_enum, value_name = "NAME", conflicts_with = "trace")]
    pub scenario: Vec<ScenarioName>,
    /// Compare on this trace (CSV `t_us,key,cost`, or `-` for standard input)
    /// instead of the built-in scenarios; it is read into memory, since each
    /// algorithm replays it. Times that look like seconds or milliseconds
    /// since the epoch get a warning, as in `limiter replay`.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// With --trace: units admitted per window.
    #[arg(
        long,
        value_name = "L",
        default_value_t = 100,
        value_parser = parse_whole_number,
        requires = "trace",
        conflicts_with = "sets"
    )]
    pub limit: u64,
    /// With --trace: the window (e.g. 250ms, 10s, 1m).
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration, requires = "trace", conflicts_with = "sets")]
    pub window: Duration,
    /// With --trace: the token bucket's capacity [default: the limit].
    #[arg(long, value_name = "C", value_parser = parse_whole_number, requires = "trace", conflicts_with = "sets")]
    pub capacity: Option<u64>,
    /// With --trace: the leaky bucket's queue [default: the limit].
    #[arg(long, value_name = "Q", value_parser = parse_whole_number, requires = "trace", conflicts_with = "sets")]
    pub queue: Option<u64>,
    /// Compare this policy set (policy strings joined by `;`, e.g.
    /// "sliding-log:5/1s;sliding-log:100/1m"; one policy is a set of one)
    /// instead of the algorithms; repeat it to compare sets side by side.
    /// Each set carries its own numbers: --limit, --window, --capacity and
    /// --queue do not apply.
    #[arg(long = "set", value_name = "POLICIES", value_parser = parse_policies)]
    pub sets: Vec<Policies>,
    /// With --trace and one --set: changes the set's policies to POLICIES
    /// from the first request at or after T_US, and compares a limiter
    /// whose state is per policy (a fresh one at the change) with one that
    /// carries what each key used (docs/spec.md section 9).
    #[arg(
        long = "change-at",
        value_name = "T_US=POLICIES",
        value_parser = parse_change,
        requires_all = ["trace", "sets"]
    )]
    pub change_at: Option<PolicyChange>,
    /// Where decisions are made.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Add the decisions/s column to the table (wall time of each replay;
    /// noisy on small scenarios). JSON always has it.
    #[arg(long)]
    pub timing: bool,
    /// Also write an SVG plot of admitted units over time, one lane per
    /// algorithm and one section per scenario, to this file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Also decide each lane through leased limiters (limiter-lease): this
    /// many simulated instances lease from the lane's limiter and take the
    /// requests in turn. The leased lane follows its exact lane, so what
    /// leases over-admit shows beside it (docs/spec.md section 8).
    #[arg(long, value_name = "INSTANCES", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub lease: Option<u32>,
    /// Leased lanes: the lease lifetime [default: limiter-lease's].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "lease")]
    pub lease_lifetime: Option<Duration>,
    /// Leased lanes: the largest lease, in units [default: limiter-lease's].
    #[arg(long, value_name = "UNITS", value_parser = parse_whole_number, requires = "lease")]
    pub lease_max: Option<u64>,
}

/// How `compare --lease` leases: the instances, and the options given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseArgs {
    pub(crate) instances: u32,
    pub(crate) lifetime: Option<Duration>,
    pub(crate) max_lease: Option<u64>,
}

impl CompareArgs {
    /// The leased lanes asked for, if any.
    pub(crate) fn lease_args(&self) -> Option<LeaseArgs> {
        self.lease.map(|instances| LeaseArgs {
            instances,
            lifetime: self.lease_lifetime,
            max_lease: self.lease_max,
        })
    }
}

/// Parses one `--policy`: a policy string, or several joined by `;`
/// (docs/spec.md section 7), with the core's parser and its messages.
pub(crate) fn parse_policies(text: &str) -> Result<Policies, PolicyError> {
    text.parse()
}

/// Parses a number of units (`--limit`, `--capacity`, `--queue`,
/// `--lease-max`): digits only, as in a policy string (`u64::from_str`
/// also takes a leading `+`).
pub(crate) fn parse_whole_number(text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(format!("{text:?} is not a whole number (digits only)"));
    }
    text.parse()
        .map_err(|_| format!("{text} is above the largest number, {}", u64::MAX))
}

/// Parses an algorithm with the core's parser (whose error lists the five
/// names) and tells clap the possible values for `--help`.
#[derive(Debug, Clone, Copy)]
struct AlgorithmParser;

impl TypedValueParser for AlgorithmParser {
    type Value = Algorithm;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Algorithm, clap::Error> {
        let invalid = |message: String| {
            let arg = arg.map_or_else(|| "--algorithm".to_owned(), ToString::to_string);
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("invalid value for '{arg}': {message}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| invalid("not valid UTF-8".to_owned()))?;
        text.parse()
            .map_err(|e: limiter_core::PolicyError| invalid(e.to_string()))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            Algorithm::ALL
                .into_iter()
                .map(|a| PossibleValue::new(a.name())),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn algorithm_names_use_the_core_parser() {
        let cli = Cli::try_parse_from([
            "limiter",
            "replay",
            "--algorithm",
            "Sliding_Log",
            "--limit",
            "1",
            "--window",
            "1s",
            "-",
        ])
        .unwrap();
        let Command::Replay(args) = cli.command else {
            panic!("expected replay");
        };
        assert_eq!(args.algorithm, Some(Algorithm::SlidingLog));
        assert_eq!(args.backend.backend, BackendKind::Memory);
    }

    #[test]
    fn an_unknown_algorithm_lists_the_five() {
        let error = Cli::try_parse_from([
            "limiter",
            "replay",
            "--algorithm",
            "bogus",
            "--limit",
            "1",
            "--window",
            "1s",
            "-",
        ])
        .unwrap_err()
        .to_string();
        for algorithm in Algorithm::ALL {
            assert!(error.contains(algorithm.name()), "{error}");
        }
    }
}

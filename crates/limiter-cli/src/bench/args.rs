//! The arguments of `limiter bench`, and its help text.

use std::time::Duration;

use clap::{Args, ValueEnum};
use limiter_core::{parse_duration, Policies, PolicyError};

use super::lease::LeaseOptions;
use crate::cli::{parse_whole_number, BackendArgs, Format};

/// The most concurrent tasks (each holds a 9 KiB histogram).
const MAX_CONCURRENCY: i64 = 4096;
/// The most keys (each is a string held for the run).
const MAX_KEYS: i64 = 1_000_000;

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
    /// Decide through leases (limiter-lease) on the limiter: most
    /// decisions in process. The report shows the lease size reached, the
    /// share of the admitted from leases and the over-admission budget in
    /// force (with a warning when leases did not take off), and the most
    /// units a key admitted in one window beside the exact algorithm's
    /// most and the bound of docs/spec.md section 8.
    #[arg(long)]
    pub lease: bool,
    /// With --lease: the lease lifetime [default: limiter-lease's].
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "lease")]
    pub lease_lifetime: Option<Duration>,
    /// With --lease: the largest lease, in units [default: the
    /// over-admission budget's].
    #[arg(long, value_name = "UNITS", value_parser = parse_whole_number, requires = "lease")]
    pub lease_max: Option<u64>,
    /// With --lease: the smallest lease asked on demand, in units
    /// [default: limiter-lease's, the largest lease's share of a lifetime].
    #[arg(long, value_name = "UNITS", value_parser = parse_whole_number, requires = "lease")]
    pub lease_min: Option<u64>,
    /// With --lease: the over-admission budget, in percent of the limit
    /// per instance (0 to 100), which sets the largest lease
    /// [default: limiter-lease's, 1].
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent, requires = "lease")]
    pub lease_budget: Option<f64>,
}

impl BenchArgs {
    /// The leases asked for, if any.
    pub(super) fn lease_options(&self) -> Option<LeaseOptions> {
        self.lease.then_some(LeaseOptions {
            lifetime: self.lease_lifetime,
            max_lease: self.lease_max,
            min_lease: self.lease_min,
            budget: self.lease_budget,
        })
    }
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

/// `--lease-budget`: a percentage from 0 to 100, decimals allowed.
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(percent) if (0.0..=100.0).contains(&percent) => Ok(percent),
        _ => Err(format!("{text:?} is not a percentage from 0 to 100")),
    }
}

fn parse_run_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("the duration must be more than zero".to_owned());
    }
    Ok(duration)
}

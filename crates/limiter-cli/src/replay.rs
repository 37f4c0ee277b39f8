//! `limiter replay`: every request of a trace through one algorithm on one
//! backend, every decision printed as CSV (docs/spec.md section 6).

use std::io::{self, BufWriter, Write};

use limiter_core::{Error, ManualClock, Policies, Policy, Rate};

use crate::backend;
use crate::cli::{BackendKind, ReplayArgs};
use crate::epoch::{self, EpochUnitCheck};
use crate::failure::Failure;
use crate::input::{open_trace, trace_name};
use crate::policy_change::{ChangePoint, Schedule};
use crate::progress::Progress;
use crate::step_back::{self, StepBackCheck};
use limiter_core::trace::{decision_row, TraceReader, DECISION_HEADER};

/// Replays `args.trace` and writes the decisions to stdout.
///
/// A broken pipe on stdout (`limiter replay … | head`) ends the replay
/// quietly and successfully. When the replay ends so, or at the end of the
/// trace, times that look like seconds or milliseconds since the epoch get
/// one warning on stderr (see the `epoch` module), and so does, on the
/// memory backend, a step back deeper than it keeps keys (`step_back`).
pub(crate) async fn run(args: &ReplayArgs) -> Result<(), Failure> {
    let stdout = io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, stdout);
    let policy = policies(args)?;
    let schedule = schedule(args)?;
    let max_cost = schedule
        .policies()
        .map(Policies::max_cost)
        .fold(policy.max_cost(), u64::max);
    let mut times = EpochUnitCheck::new();
    let mut steps = StepBackCheck::new(max_cost);
    let result = replay(args, policy, schedule, &mut out, &mut times, &mut steps).await;
    if matches!(&result, Ok(()) | Err(Stop::Output(_))) {
        epoch::warn(&times, &trace_name(&args.trace));
        if args.backend.backend == BackendKind::Memory {
            step_back::warn(&steps, &trace_name(&args.trace));
        }
    }
    match result {
        Err(Stop::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(Stop::Output(e)) => Err(Failure::runtime("cannot write decisions").with_source(e)),
        Err(Stop::Failure(failure)) => {
            // Keep the rows decided so far: they show where it stopped.
            let _ = out.flush();
            Err(failure)
        }
        Ok(()) => match out.flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(Failure::runtime("cannot write decisions").with_source(e)),
            Ok(()) => Ok(()),
        },
    }
}

enum Stop {
    Failure(Failure),
    Output(io::Error),
}

impl From<Failure> for Stop {
    fn from(failure: Failure) -> Self {
        Self::Failure(failure)
    }
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Self::Output(e)
    }
}

/// The policies the flags name: every `--policy` in order (a tiered set,
/// docs/spec.md section 7), or `--algorithm`, `--limit` and `--window`.
pub(crate) fn policies(args: &ReplayArgs) -> Result<Policies, Failure> {
    let invalid = |e| Failure::usage("invalid policy").with_source(e);
    match (args.algorithm, args.limit, args.window) {
        (Some(algorithm), Some(limit), Some(window)) => Policy::from_options(
            algorithm,
            Rate::new(limit, window),
            args.capacity,
            args.queue,
        )
        .map(Policies::from)
        .map_err(invalid),
        _ => {
            Policies::new(args.policies.iter().flat_map(|set| set.iter().cloned())).map_err(invalid)
        }
    }
}

/// The policy changes `--change-at` or `--change-at-request` name.
fn schedule(args: &ReplayArgs) -> Result<Schedule, Failure> {
    if args.changes_at_request.is_empty() {
        Schedule::new(ChangePoint::Time, &args.changes_at)
    } else {
        Schedule::new(ChangePoint::Request, &args.changes_at_request)
    }
}

async fn replay(
    args: &ReplayArgs,
    policy: Policies,
    mut schedule: Schedule,
    out: &mut impl Write,
    times: &mut EpochUnitCheck,
    steps: &mut StepBackCheck,
) -> Result<(), Stop> {
    let name = trace_name(&args.trace);
    let clock = ManualClock::new(0);
    let changing = if schedule.is_empty() {
        None
    } else {
        Some(
            backend::connect_changing(&args.backend, policy.clone(), clock.clone(), "replay", None)
                .await?,
        )
    };
    let limiter = match &changing {
        Some(changing) => changing.limiter(),
        None => backend::connect(&args.backend, policy, clock.clone(), "replay", None).await?,
    };
    let input = open_trace(&args.trace)?;

    writeln!(out, "{DECISION_HEADER}")?;
    let mut progress = Progress::new(format!("replaying {name}"));
    for (index, request) in TraceReader::new(input).enumerate() {
        let request = request.map_err(|e| Failure::runtime(name.to_string()).with_source(e))?;
        // Every row's time, an error row's too (the checks leave out what
        // is never decided).
        times.observe(request.time_us);
        steps.observe(index as u64 + 1, request.time_us, request.cost);
        if let (Some(changing), Some(policies)) =
            (&changing, schedule.due(index as u64 + 1, request.time_us))
        {
            changing.set_policies(policies.clone())?;
        }
        if request.oversized.is_some() {
            // Out of every range: an error row, as the limiter would answer.
            writeln!(out, "{}", decision_row(&request, None))?;
            progress.tick();
            continue;
        }
        clock.set(request.time_us);
        let decision = match limiter.acquire(request.key.as_bytes(), request.cost).await {
            Ok(decision) => Some(decision),
            Err(
                Error::ZeroCost | Error::CostExceedsCapacity { .. } | Error::TimeOutOfRange { .. },
            ) => None,
            Err(e) => {
                let what = format!(
                    "request {} of {name} (t_us={}, key={})",
                    index + 1,
                    request.time_us,
                    request.key
                );
                return Err(backend::backend_failure(&args.backend, &what, &e).into());
            }
        };
        writeln!(out, "{}", decision_row(&request, decision.as_ref()))?;
        progress.tick();
    }
    progress.finish();
    Ok(())
}

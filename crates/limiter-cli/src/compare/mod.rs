//! `limiter compare`: every algorithm (or policy sets, `--set`) on the
//! same requests, side by side.
//!
//! Each scenario is replayed once per algorithm on the chosen backend (a
//! fresh limiter, and on Redis a fresh key prefix, each time) with a manual
//! clock set to each request's time; `stats` turns the decisions into
//! figures, which `table`, `json` and `svg` present.

mod json;
pub(crate) mod scenario_name;
mod scenarios;
mod stats;
mod svg;
mod table;

use self::scenario_name::ScenarioName;

use std::fs;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Instant;

use limiter_core::{Error, Limiter, ManualClock, Rate};
use limiter_lease::Leased;

use self::scenarios::{Lane, Scenario, StateAtChange};
use self::stats::{AlgorithmResult, Recorder};
use crate::backend;
use crate::cli::{BackendArgs, BackendKind, CompareArgs, Format, LeaseArgs};
use crate::epoch::{self, EpochUnitCheck};
use crate::failure::Failure;
use crate::input::trace_name;
use crate::progress::Progress;
use crate::step_back::{self, StepBackCheck};

/// One scenario's results, one per lane: per algorithm in
/// [`Algorithm::ALL`](limiter_core::Algorithm::ALL) order, or per policy set.
#[derive(Debug)]
pub(crate) struct ScenarioReport {
    pub(crate) scenario: Scenario,
    pub(crate) results: Vec<AlgorithmResult>,
}

/// Runs the comparison and prints it (table or JSON) on stdout; writes the
/// plot if asked.
pub(crate) async fn run(args: &CompareArgs) -> Result<(), Failure> {
    let scenarios = match &args.trace {
        Some(path) => vec![Scenario::from_trace(
            path,
            Rate::new(args.limit, args.window),
            args.capacity,
            args.queue,
        )?],
        None if args.scenario.is_empty() => ScenarioName::ALL
            .into_iter()
            .map(Scenario::builtin)
            .collect(),
        // Each once, in the order first named: a scenario named twice
        // would run twice under one `--redis-prefix`, the second on the
        // first's state.
        None => args
            .scenario
            .iter()
            .enumerate()
            .filter(|(at, name)| !args.scenario[..*at].contains(name))
            .map(|(_, name)| Scenario::builtin(*name))
            .collect(),
    };
    let mut scenarios = scenarios;
    if !args.sets.is_empty() {
        for scenario in &mut scenarios {
            scenario.sets = Some(args.sets.clone());
            scenario.sets_given = true;
        }
    }
    if let Some(change) = &args.change_at {
        for scenario in &mut scenarios {
            scenario.change = Some(change.clone());
        }
    }
    for scenario in &scenarios {
        if scenario.change.is_some() {
            if scenario.sets.as_ref().map_or(0, Vec::len) != 1 {
                return Err(Failure::usage(format!(
                    "{}: a policy change compares one policy set before it: give one --set",
                    scenario.name
                )));
            }
            if args.lease.is_some() {
                return Err(Failure::usage(format!(
                    "{}: --lease does not apply to a policy change",
                    scenario.name
                )));
            }
        }
    }
    // Every policy is checked before anything runs, and a trace's times
    // against its lanes' policies.
    for scenario in &scenarios {
        let lanes = scenario
            .lanes()
            .map_err(|e| Failure::usage("invalid policy").with_source(e))?;
        if let Some(path) = &args.trace {
            warn_of_times(scenario, &lanes, &trace_name(path), args.backend.backend);
        }
    }
    let mut reports = Vec::with_capacity(scenarios.len());
    for scenario in scenarios {
        reports.push(run_scenario(scenario, &args.backend, args.lease_args()).await?);
    }

    let text = match args.format {
        Format::Table => table::render(&reports, args.backend.backend, args.timing),
        Format::Json => json::render(&reports, args.backend.backend),
    };
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            return Err(Failure::runtime(format!(
                "cannot write the comparison: {e}"
            )));
        }
        _ => {}
    }
    if let Some(path) = &args.plot {
        fs::write(path, svg::render(&reports)).map_err(|e| {
            Failure::runtime(format!("cannot write the plot {}: {e}", path.display()))
        })?;
    }
    Ok(())
}

/// Warns, as `replay` does, of a trace named `name` whose times look like
/// epoch seconds or milliseconds, and on memory of a step back deeper than
/// it keeps keys: a request is a step if any of `lanes` decides it.
fn warn_of_times(scenario: &Scenario, lanes: &[Lane], name: &str, backend: BackendKind) {
    let max_cost = lanes
        .iter()
        .map(|lane| lane.policies.max_cost())
        .max()
        .unwrap_or(0);
    let mut times = EpochUnitCheck::new();
    let mut steps = StepBackCheck::new(max_cost);
    for (number, request) in (1..).zip(&scenario.requests.requests) {
        times.observe(request.time_us);
        steps.observe(number, request.time_us, request.cost);
    }
    epoch::warn(&times, name);
    if backend == BackendKind::Memory {
        step_back::warn(&steps, name);
    }
}

/// Runs every algorithm on `scenario`; with `lease`, each lane a second
/// time through leased limiters, right after it.
async fn run_scenario(
    scenario: Scenario,
    backend: &BackendArgs,
    lease: Option<LeaseArgs>,
) -> Result<ScenarioReport, Failure> {
    let lanes = scenario
        .lanes()
        .map_err(|e| Failure::usage("invalid policy").with_source(e))?;
    let mut results = Vec::with_capacity(lanes.len());
    for (index, lane) in lanes.iter().enumerate() {
        results.push(run_lane(&scenario, backend, lane, index, None).await?);
        if let Some(lease) = lease {
            results.push(run_lane(&scenario, backend, lane, index, Some(lease)).await?);
        }
    }
    Ok(ScenarioReport { scenario, results })
}

/// Replays `scenario` on one lane: on the backend's limiter, or (with
/// `lease`) on that many leased limiters over it, dealt the requests in
/// turn.
async fn run_lane(
    scenario: &Scenario,
    backend: &BackendArgs,
    lane: &Lane,
    index: usize,
    lease: Option<LeaseArgs>,
) -> Result<AlgorithmResult, Failure> {
    let clock = ManualClock::new(0);
    // Each lane of each scenario on keys of its own, also under a given
    // prefix: two scenarios may use one key and policy. (A trace's file
    // name may hold braces, which a prefix may not.)
    let mut key_space = format!("{}:{index}", scenario.name.replace(['{', '}'], "_"));
    let mut lane = lane.clone();
    if let Some(lease) = lease {
        key_space.push_str(":leased");
        lane.label = format!("{} leased x{}", lane.label, lease.instances);
        lane.leased = Some(lease.instances);
    }
    // A lane that carries state across a change decides on a limiter that
    // changes its policies; any other, on the backend's own.
    let changing = match lane.at_change {
        Some(StateAtChange::Carried) => Some(
            backend::connect_changing(
                backend,
                lane.policies.clone(),
                clock.clone(),
                "compare",
                Some(&key_space),
            )
            .await?,
        ),
        _ => None,
    };
    let global = match &changing {
        Some(changing) => changing.limiter(),
        None => {
            backend::connect(
                backend,
                lane.policies.clone(),
                clock.clone(),
                "compare",
                Some(&key_space),
            )
            .await?
        }
    };
    let mut deciders: Vec<Arc<dyn Limiter>> = match lease {
        None => vec![global],
        Some(lease) => (0..lease.instances)
            .map(|_| -> Arc<dyn Limiter> {
                let mut builder = Leased::builder(Arc::clone(&global)).clock(clock.clone());
                if let Some(lifetime) = lease.lifetime {
                    builder = builder.lifetime(lifetime);
                }
                if let Some(units) = lease.max_lease {
                    builder = builder.max_lease(units);
                }
                Arc::new(builder.build())
            })
            .collect(),
    };
    let algorithm = &lane.label;
    let requests = &scenario.requests;
    let mut recorder = Recorder::new(requests.keys.len());
    let mut progress = Progress::new(format!("{} / {algorithm}", scenario.name));
    let mut change = scenario.change.as_ref();
    let started = Instant::now();
    for (number, request) in requests.requests.iter().enumerate() {
        if let Some(due) = change.filter(|change| request.time_us >= change.at) {
            change = None;
            match &changing {
                Some(changing) => changing.set_policies(due.policies.clone())?,
                None => {
                    deciders = vec![
                        backend::connect(
                            backend,
                            due.policies.clone(),
                            clock.clone(),
                            "compare",
                            Some(&format!("{key_space}:changed")),
                        )
                        .await?,
                    ]
                }
            }
        }
        clock.set(request.time_us);
        let key = &requests.keys[request.key as usize];
        let limiter = &deciders[number % deciders.len()];
        match limiter.acquire(key.as_bytes(), request.cost).await {
            Ok(decision) => recorder.decided(request.key, request.time_us, request.cost, &decision),
            Err(
                Error::ZeroCost | Error::CostExceedsCapacity { .. } | Error::TimeOutOfRange { .. },
            ) => recorder.error(),
            Err(e) => {
                let what = format!(
                    "{} / {algorithm} (t_us={}, key={key})",
                    scenario.name, request.time_us
                );
                return Err(backend::backend_failure(backend, &what, &e));
            }
        }
        progress.tick();
    }
    let elapsed = started.elapsed();
    progress.finish();
    // A leased lane's state is its global limiter's and its leases'; a
    // lane across a change holds the state of two policies, which the
    // estimate (one policy's, replayed) does not follow.
    let bytes_per_key =
        (backend.backend == BackendKind::Memory && lease.is_none() && lane.at_change.is_none())
            .then(|| stats::state_bytes_per_key(&lane.policies, requests));
    let mut result = recorder.finish(&lane, &scenario.windows(), elapsed, bytes_per_key);
    result.around_change = scenario
        .change
        .as_ref()
        .map(|change| stats::around_change(change, &result.admissions));
    Ok(result)
}

/// `10s`, `1m`, `250ms`: a duration in microseconds in its largest exact unit.
pub(crate) fn compact_duration(micros: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (86_400_000_000, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "m"),
        (1_000_000, "s"),
        (1_000, "ms"),
    ];
    for (size, unit) in UNITS {
        if micros >= size && micros.is_multiple_of(size) {
            return format!("{}{unit}", micros / size);
        }
    }
    format!("{micros}us")
}

/// A duration for people: `850us`, `12.5ms`, `8.000s`.
pub(crate) fn human_duration(micros: f64) -> String {
    if micros >= 1_000_000.0 {
        format!("{:.3}s", micros / 1_000_000.0)
    } else if micros >= 1_000.0 {
        format!("{:.1}ms", micros / 1_000.0)
    } else {
        format!("{micros:.0}us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_built_in_scenario_looks_like_epoch_seconds_or_milliseconds() {
        use clap::ValueEnum;
        for &name in ScenarioName::value_variants() {
            let scenario = Scenario::builtin(name);
            let mut times = EpochUnitCheck::new();
            for request in &scenario.requests.requests {
                times.observe(request.time_us);
            }
            assert_eq!(times.likely_unit(), None, "{}", scenario.name);
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(compact_duration(10_000_000), "10s");
        assert_eq!(compact_duration(60_000_000), "1m");
        assert_eq!(compact_duration(250_000), "250ms");
        assert_eq!(compact_duration(1_500_000), "1500ms");
        assert_eq!(compact_duration(7), "7us");
        assert_eq!(human_duration(8_000_000.0), "8.000s");
        assert_eq!(human_duration(12_500.0), "12.5ms");
        assert_eq!(human_duration(850.0), "850us");
    }
}

//! A fleet of real OS processes: [`PROCESSES`] `lease_worker`s (this
//! package's example, `lease_worker/main.rs`), each with its callers, leasing from one Redis (a
//! server or a cluster) on a fixed schedule of bursts, and what their logs
//! say they admitted.
#![allow(dead_code)] // each test binary uses a part

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use limiter_core::{Policies, Policy};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;
use limiter_test::lease_bound;

/// Worker processes in a fleet.
pub(crate) const PROCESSES: u64 = 4;

/// How long the workers are given to start and connect before the run
/// begins (they all begin at once).
const STARTUP: Duration = Duration::from_millis(1_000);

/// Where the workers reach Redis.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Server(String),
    Cluster(Vec<String>),
}

/// One fleet run's settings.
#[derive(Debug, Clone)]
pub(crate) struct FleetRun {
    pub(crate) target: Target,
    pub(crate) policy: Policy,
    pub(crate) prefix: String,
    pub(crate) keys: u64,
    /// Callers in each worker.
    pub(crate) tasks: u64,
    /// Rounds each caller runs, one every `period` from the start.
    pub(crate) rounds: u64,
    pub(crate) period: Duration,
    /// Rounds a caller asks one key for, the last of them a burst.
    pub(crate) phase: u64,
    /// Callers of a worker that send a request in each round but a
    /// phase's last.
    pub(crate) quiet: u64,
    /// Requests each caller sends back to back in a phase's last round.
    pub(crate) burst: u64,
    /// Rounds with a failure policy's answer each caller runs, past
    /// `rounds` if need be.
    pub(crate) until_degraded: u64,
    /// `T`.
    pub(crate) lifetime: Duration,
    /// `M` as asked (the workers cap it at the policy's maximum cost).
    pub(crate) max_lease: u64,
    /// Whether the workers are given no `T` and `M` and lease at the
    /// defaults, which `lifetime` and `max_lease` then hold
    /// ([`FleetRun::defaults_of`]).
    pub(crate) at_defaults: bool,
    /// The failure policy's name, as `lease_worker --on-failure` takes it.
    pub(crate) on_failure: &'static str,
}

/// One logged decision: admitted, or answered by a failure policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Logged {
    pub(crate) time_us: u64,
    pub(crate) key: u64,
    pub(crate) cost: u64,
    /// `DecisionSource::name`.
    pub(crate) source: String,
    pub(crate) allowed: bool,
}

/// What the whole fleet logged and counted.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) logged: Vec<Logged>,
    /// Denials the global limiter gave (not logged one by one).
    pub(crate) denied: u64,
    /// When the run began (wall-clock µs).
    pub(crate) start_us: u64,
}

/// Started workers, killed if the test fails before they end.
struct Workers(Vec<(Child, PathBuf)>);

impl Drop for Workers {
    fn drop(&mut self) {
        for (child, log) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(log);
        }
    }
}

impl FleetRun {
    /// `T` and `M` of a `Leased` at its defaults over `policy`: what a
    /// worker given neither applies.
    pub(crate) fn defaults_of(policy: &Policy) -> (Duration, u64) {
        let leased = Leased::new(MemoryLimiter::new(policy.clone()));
        (leased.lifetime(), leased.max_lease())
    }

    /// `M` as the workers apply it.
    pub(crate) fn applied_max_lease(&self) -> u64 {
        self.max_lease.min(self.policy.max_cost()).max(1)
    }

    /// The smallest burst with which one worker's round, if it takes no
    /// longer than a window, asks a key for more than the bound lets the
    /// whole fleet admit in a window: so some of it is denied however
    /// fast the host is, as long as it does not stall a worker for a
    /// window. On one key every caller of a worker bursts on it; on many,
    /// one (the others' keys differ but by chance).
    pub(crate) fn denied_burst(&self) -> u64 {
        let callers_per_key = if self.keys == 1 { self.tasks } else { 1 };
        let most = lease_bound::most_admitted(
            &self.policy,
            self.policy.window_ticks(),
            PROCESSES,
            self.applied_max_lease(),
            micros(self.lifetime),
        );
        most / callers_per_key + 1
    }

    /// Requests the fleet sends in its `rounds` rounds.
    pub(crate) fn requests(&self) -> u64 {
        let bursts = self.rounds / self.phase;
        let quiet_rounds = self.rounds - bursts;
        PROCESSES * (bursts * self.tasks * self.burst + quiet_rounds * self.quiet.min(self.tasks))
    }

    /// Starts the workers; once each has done `ready_after` rounds (at
    /// once for 0), `during` runs (with the run's start, wall-clock µs)
    /// while they go on; then collects their logs.
    pub(crate) fn run_with(&self, ready_after: u64, during: impl FnOnce(u64)) -> Outcome {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let start_us = wall_us() + micros(STARTUP);
        let mut workers = Workers(Vec::new());
        let mut outputs = Vec::new();
        for process in 0..PROCESSES {
            let log = std::env::temp_dir().join(format!(
                "lease-fleet-{}-{}-{process}.log",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let (flag, target) = match &self.target {
                Target::Server(url) => ("--redis", url.clone()),
                Target::Cluster(seeds) => ("--cluster", seeds.join(",")),
            };
            let mut command = Command::new(lease_worker());
            if !self.at_defaults {
                command
                    .args(["--lifetime-ms", &self.lifetime.as_millis().to_string()])
                    .args(["--max-lease", &self.max_lease.to_string()]);
            }
            let mut child = command
                .args([flag, &target])
                .args(["--policy", &self.policy.to_string()])
                .args(["--prefix", &self.prefix])
                .args(["--keys", &self.keys.to_string()])
                .args(["--tasks", &self.tasks.to_string()])
                .args(["--start-us", &start_us.to_string()])
                .args(["--rounds", &self.rounds.to_string()])
                .args(["--period-ms", &self.period.as_millis().to_string()])
                .args(["--phase", &self.phase.to_string()])
                .args(["--quiet", &self.quiet.to_string()])
                .args(["--burst", &self.burst.to_string()])
                .args(["--until-degraded", &self.until_degraded.to_string()])
                .args(["--ready-after", &ready_after.to_string()])
                .args(["--on-failure", self.on_failure])
                .arg("--out")
                .arg(&log)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start lease_worker");
            outputs.push(BufReader::new(child.stdout.take().expect("a pipe")));
            workers.0.push((child, log));
        }
        if ready_after > 0 {
            for output in &mut outputs {
                let mut line = String::new();
                output.read_line(&mut line).expect("a worker's output");
                assert_eq!(line, "ready\n", "lease_worker ({})", self.policy);
            }
        }
        during(start_us);
        let mut logged = Vec::new();
        let mut denied = 0;
        for ((mut child, log), output) in std::mem::take(&mut workers.0).into_iter().zip(outputs) {
            let stdout = rest(output);
            let status = child.wait().expect("wait for lease_worker");
            assert!(
                status.success(),
                "lease_worker ({}) failed: {stdout}",
                self.policy
            );
            denied += stdout
                .split_whitespace()
                .skip_while(|&word| word != "denied")
                .nth(1)
                .and_then(|count| count.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("lease_worker printed {stdout:?}"));
            let text = std::fs::read_to_string(&log).expect("a worker's log");
            let _ = std::fs::remove_file(&log);
            logged.extend(text.lines().map(parse_line));
        }
        Outcome {
            logged,
            denied,
            start_us,
        }
    }

    /// Runs the fleet to its end.
    pub(crate) fn run(&self) -> Outcome {
        self.run_with(0, |_| ())
    }

    /// Checks docs/spec.md section 8.2's bound, `U(I) <= min(B(d + tau),
    /// B(d) + N*M)` (fixed window: `L` per aligned window), on every key's
    /// admitted units, the property tests' check. A violation keeps the
    /// fleet's log, for a look at the units around it, and names it.
    pub(crate) fn check_bound(&self, outcome: &Outcome) -> Result<(), String> {
        self.check_bound_of(outcome)
            .map_err(|violation| match outcome.keep(&self.prefix) {
                Ok(path) => format!("{violation} (the fleet's log: {})", path.display()),
                Err(e) => format!("{violation} (the fleet's log not kept: {e})"),
            })
    }

    fn check_bound_of(&self, outcome: &Outcome) -> Result<(), String> {
        let mut per_key = BTreeMap::<u64, Vec<(u64, u64)>>::new();
        for logged in outcome.logged.iter().filter(|l| l.allowed) {
            per_key
                .entry(logged.key)
                .or_default()
                .push((logged.time_us, logged.cost));
        }
        let policies = Policies::from(self.policy.clone());
        for (key, admitted) in per_key {
            lease_bound::check(
                &policies,
                &admitted,
                PROCESSES,
                self.applied_max_lease(),
                micros(self.lifetime),
            )
            .map_err(|e| format!("key k{key}: {e}"))?;
        }
        Ok(())
    }
}

impl Outcome {
    /// Writes every logged decision, as the workers wrote them, to a file
    /// named after `name` in the build's temporary directory.
    fn keep(&self, name: &str) -> std::io::Result<PathBuf> {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.log"));
        let mut text = String::new();
        for l in &self.logged {
            let _ = writeln!(
                text,
                "{} {} {} {} {}",
                l.time_us, l.key, l.cost, l.source, l.allowed
            );
        }
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Admitted units of `source`.
    pub(crate) fn admitted_from(&self, source: &str) -> u64 {
        self.logged
            .iter()
            .filter(|l| l.allowed && l.source == source)
            .map(|l| l.cost)
            .sum()
    }

    /// Admitted units.
    pub(crate) fn admitted(&self) -> u64 {
        self.logged
            .iter()
            .filter(|l| l.allowed)
            .map(|l| l.cost)
            .sum()
    }
}

/// What is left of a worker's output, up to its end.
fn rest(mut output: BufReader<ChildStdout>) -> String {
    let mut text = String::new();
    output.read_to_string(&mut text).expect("a worker's output");
    text
}

/// `TIME_US KEY COST SOURCE ALLOWED`, as `lease_worker` writes it.
fn parse_line(line: &str) -> Logged {
    let fields: Vec<&str> = line.split(' ').collect();
    let [time_us, key, cost, source, allowed] = fields[..] else {
        panic!("a log line of five fields: {line:?}");
    };
    Logged {
        time_us: time_us.parse().expect("a time"),
        key: key.parse().expect("a key"),
        cost: cost.parse().expect("a cost"),
        source: source.to_owned(),
        allowed: allowed.parse().expect("true or false"),
    }
}

/// The worker: the crate's example, built beside this test.
fn lease_worker() -> PathBuf {
    limiter_test::example_binary("limiter-examples", "lease_worker")
}

pub(crate) fn wall_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    micros(since)
}

pub(crate) fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

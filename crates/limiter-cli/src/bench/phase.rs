//! A phase of the benchmark: tasks calling in a loop until a deadline,
//! and what they did, merged.

use std::future::Future;
use std::time::{Duration, Instant};

use super::histogram::Histogram;
use crate::failure::Failure;

/// What one phase's tasks did.
#[derive(Debug)]
pub(super) struct Tally {
    pub(super) latency: Histogram,
    pub(super) admitted: u64,
    /// Of the admitted, those decided in process from a lease.
    pub(super) leased: u64,
    pub(super) denied: u64,
    pub(super) fail_open: u64,
    pub(super) fail_closed: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
}

impl Tally {
    pub(super) fn new() -> Self {
        Self {
            latency: Histogram::new(),
            admitted: 0,
            leased: 0,
            denied: 0,
            fail_open: 0,
            fail_closed: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// Decisions the backend made (a failure policy's are not counted:
    /// they say nothing of what the backend can do).
    pub(super) fn decisions(&self) -> u64 {
        self.admitted + self.denied
    }

    pub(super) fn error(&mut self, message: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message());
        }
    }

    fn merge(&mut self, other: Self) {
        self.latency.merge(&other.latency);
        self.admitted += other.admitted;
        self.leased += other.leased;
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
pub(super) struct Phase {
    pub(super) tally: Tally,
    pub(super) elapsed: Duration,
}

impl Phase {
    /// Nothing measured yet.
    pub(super) fn empty() -> Self {
        Self {
            tally: Tally::new(),
            elapsed: Duration::ZERO,
        }
    }

    /// This phase and `other` as one.
    pub(super) fn merge(&mut self, other: Self) {
        self.tally.merge(other.tally);
        self.elapsed += other.elapsed;
    }

    /// Decisions the backend made, per second of the phase.
    pub(super) fn per_second(&self) -> f64 {
        self.tally.decisions() as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `task(index, deadline)` on `concurrency` tasks and merges their tallies.
pub(super) async fn phase<F, Fut>(
    concurrency: u32,
    duration: Duration,
    task: F,
) -> Result<Phase, Failure>
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

//! The bookkeeping of a failing backend: the current outage, and how
//! often its failures are logged.

use std::time::{Duration, Instant};

/// The current outage, if `failing`.
#[derive(Debug)]
pub(super) struct Outage {
    pub(super) started: Instant,
    /// When the next request may try the backend.
    pub(super) next_probe: Instant,
    /// Requests answered by the policy in this outage.
    pub(super) degraded: u64,
    /// The failures logged in this outage.
    pub(super) warnings: Tally,
}

/// Warnings of failures that do not start an outage, per reach.
#[derive(Debug, Default)]
pub(super) struct Tallies {
    pub(super) request: Tally,
    pub(super) node: Tally,
}

/// When a kind of failure was last logged, and how many were not since.
#[derive(Debug, Default)]
pub(super) struct Tally {
    last_warning: Option<Instant>,
    suppressed: u64,
}

impl Tally {
    /// Whether to log the failure seen `now`, with the count not logged
    /// since the last warning; else counts it.
    pub(super) fn warn_now(&mut self, now: Instant) -> Option<u64> {
        match self.last_warning {
            Some(last) if now.duration_since(last) < WARNING_PERIOD => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last_warning = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// At most one warning per this long.
const WARNING_PERIOD: Duration = Duration::from_secs(1);

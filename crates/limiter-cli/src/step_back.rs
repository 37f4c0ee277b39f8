//! A warning for a trace whose clock steps back further than the memory
//! backend keeps expired keys ([`MEMORY_EVICTION_DELAY`]).
//!
//! Eviction never changes a decision while time moves forward, nor after a
//! step back shorter than the delay (docs/spec.md rule 2.5). After a deeper
//! one, a key whose state was dropped starts afresh where a kept state (or
//! Redis) would still count it, and whether it was dropped depends on when
//! sweeps ran, which other keys trigger. The replay cannot tell which
//! decisions that touched, so it says where it may have happened.

use std::time::Duration;

use limiter_core::MAX_TIME_US;

use crate::backend::MEMORY_EVICTION_DELAY;

/// Watches a trace's times, one by one, in constant memory.
#[derive(Debug, Clone)]
pub(crate) struct StepBackCheck {
    /// The largest cost decided: the policies' max cost (under several
    /// lanes, the largest of theirs).
    max_cost: u64,
    /// The latest time seen.
    latest: Option<u64>,
    /// The first step back deeper than the delay: its request's number
    /// (from 1), its time and the latest time before it.
    first_deep: Option<(u64, u64, u64)>,
}

impl StepBackCheck {
    /// A check that has seen no request yet, for policies whose max cost
    /// is `max_cost`.
    pub(crate) fn new(max_cost: u64) -> Self {
        Self {
            max_cost,
            latest: None,
            first_deep: None,
        }
    }

    /// Takes request number `request` (from 1, the trace's numbering) at
    /// `time_us`, costing `cost`, into account. A request that is never
    /// decided (cost 0, above the max cost, or a time beyond 2^53 µs:
    /// docs/spec.md section 5) is an error row before the limiter reads
    /// any key, so it steps nowhere.
    pub(crate) fn observe(&mut self, request: u64, time_us: u64, cost: u64) {
        if cost == 0 || cost > self.max_cost || time_us > MAX_TIME_US {
            return;
        }
        let delay = u64::try_from(MEMORY_EVICTION_DELAY.as_micros()).unwrap_or(u64::MAX);
        if let Some(latest) = self.latest {
            if self.first_deep.is_none() && latest - time_us.min(latest) > delay {
                self.first_deep = Some((request, time_us, latest));
            }
        }
        self.latest = Some(self.latest.map_or(time_us, |latest| latest.max(time_us)));
    }

    /// The warning to print (without `warning: ` nor a newline), if any;
    /// `name` is the trace's.
    pub(crate) fn warning(&self, name: &str) -> Option<String> {
        let (request, time_us, latest) = self.first_deep?;
        Some(format!(
            "{name}: request {request} (t_us={time_us}) steps back {:?} behind the trace's latest \
             time ({latest}), more than the memory backend keeps a key past its reset ({:?}): \
             from there on its decisions may differ from Redis's",
            Duration::from_micros(latest - time_us),
            MEMORY_EVICTION_DELAY,
        ))
    }
}

/// Prints `check`'s warning on stderr, if it has one.
pub(crate) fn warn(check: &StepBackCheck, name: &str) {
    use std::io::Write as _;
    if let Some(warning) = check.warning(name) {
        let _ = writeln!(std::io::stderr(), "warning: {warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_US: u64 = 3_600_000_000;

    /// The check after `times`, each request costing 1.
    fn check(times: &[u64]) -> StepBackCheck {
        check_costs(&times.iter().map(|&time| (time, 1)).collect::<Vec<_>>())
    }

    /// The check after `(time, cost)` requests, under a max cost of 5.
    fn check_costs(requests: &[(u64, u64)]) -> StepBackCheck {
        let mut check = StepBackCheck::new(5);
        for (index, &(time, cost)) in requests.iter().enumerate() {
            check.observe(index as u64 + 1, time, cost);
        }
        check
    }

    #[test]
    fn only_a_step_back_deeper_than_the_delay_warns() {
        assert_eq!(
            check(&[0, 5, HOUR_US + 5, 5]).warning("t"),
            None,
            "exactly the delay"
        );
        assert_eq!(check(&[10, 0, 1]).warning("t"), None);
        let warning = check(&[0, 2 * HOUR_US, HOUR_US - 1, 0])
            .warning("t.csv")
            .unwrap();
        assert!(
            warning.starts_with("t.csv: request 3 (t_us=3599999999) steps back 3600.000001s"),
            "{warning}"
        );
    }

    #[test]
    fn a_time_never_decided_is_not_a_step() {
        let beyond = MAX_TIME_US + 1;
        assert_eq!(check(&[0, beyond, 0]).warning("t"), None);
        assert_eq!(check(&[0, u64::MAX, 5]).warning("t"), None);
        let warning = check(&[2 * HOUR_US, beyond, 0]).warning("t").unwrap();
        assert!(warning.starts_with("t: request 3 (t_us=0)"), "{warning}");
    }

    #[test]
    fn a_cost_never_decided_is_not_a_step() {
        let late = 2 * HOUR_US;
        assert_eq!(
            check_costs(&[(late, 1), (0, 0), (late, 1)]).warning("t"),
            None
        );
        assert_eq!(
            check_costs(&[(late, 1), (0, 6), (late, 1)]).warning("t"),
            None
        );
        assert_eq!(
            check_costs(&[(0, 1), (late, u64::MAX), (0, 1)]).warning("t"),
            None
        );
        let warning = check_costs(&[(late, 1), (0, 5)]).warning("t").unwrap();
        assert!(warning.starts_with("t: request 2 (t_us=0)"), "{warning}");
    }
}

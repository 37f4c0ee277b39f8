//! Policy changes in the middle of a trace (`--change-at`,
//! `--change-at-request`): what each flag says, and when each change comes
//! into force. A change keeps what each key used (docs/spec.md section 9).

use limiter_core::Policies;

use crate::failure::Failure;

/// One change: the policies in force from a point of the trace on.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyChange {
    /// A time in microseconds (`--change-at`) or a request's number from 1
    /// (`--change-at-request`).
    pub at: u64,
    /// The policies put in force there.
    pub policies: Policies,
}

/// Parses `AT=POLICIES`: a whole number, `=`, then policy strings joined by
/// `;` as `--set` and `--policy` take them (docs/spec.md section 7).
pub(crate) fn parse_change(text: &str) -> Result<PolicyChange, String> {
    let Some((at, policies)) = text.split_once('=') else {
        return Err(format!(
            "{text:?} is not AT=POLICIES (e.g. 30000000=sliding-log:120/1m)"
        ));
    };
    if at.is_empty() || !at.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(format!("{at:?} is not a whole number (digits only)"));
    }
    let at = at
        .parse()
        .map_err(|_| format!("{at} is above the largest number, {}", u64::MAX))?;
    let policies = policies
        .parse()
        .map_err(|e| format!("invalid policies {policies:?}: {e}"))?;
    Ok(PolicyChange { at, policies })
}

/// What a change's `at` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangePoint {
    /// In force from the first request at or after this time (µs).
    Time,
    /// In force from the request of this number (from 1).
    Request,
}

impl ChangePoint {
    fn flag(self) -> &'static str {
        match self {
            Self::Time => "--change-at",
            Self::Request => "--change-at-request",
        }
    }
}

/// The changes of one run, in order, and the next one due.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    point: ChangePoint,
    changes: Vec<PolicyChange>,
    next: usize,
}

impl Schedule {
    /// The changes of one flag, checked: their points must increase (a
    /// request is numbered from 1).
    pub(crate) fn new(point: ChangePoint, changes: &[PolicyChange]) -> Result<Self, Failure> {
        if point == ChangePoint::Request && changes.first().is_some_and(|c| c.at == 0) {
            return Err(Failure::usage(
                "--change-at-request 0: requests are numbered from 1",
            ));
        }
        if let Some(pair) = changes.windows(2).find(|pair| pair[1].at <= pair[0].at) {
            return Err(Failure::usage(format!(
                "{flag} {} after {flag} {}: the changes must come in increasing order",
                pair[1].at,
                pair[0].at,
                flag = point.flag()
            )));
        }
        Ok(Self {
            point,
            changes: changes.to_vec(),
            next: 0,
        })
    }

    /// Every policy set the schedule puts in force, in order.
    pub(crate) fn policies(&self) -> impl Iterator<Item = &Policies> {
        self.changes.iter().map(|change| &change.policies)
    }

    /// Whether the schedule changes nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The policies to put in force before request `number` (from 1), made
    /// at `time_us`: the last of the changes due by then that are not in
    /// force yet, if any. Each change comes into force once, at the first
    /// request that reaches it, so a trace stepping back in time does not
    /// undo one.
    pub(crate) fn due(&mut self, number: u64, time_us: u64) -> Option<&Policies> {
        let reached = match self.point {
            ChangePoint::Time => time_us,
            ChangePoint::Request => number,
        };
        let first = self.next;
        while self
            .changes
            .get(self.next)
            .is_some_and(|change| change.at <= reached)
        {
            self.next += 1;
        }
        (self.next > first).then(|| &self.changes[self.next - 1].policies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(at: u64, policies: &str) -> PolicyChange {
        PolicyChange {
            at,
            policies: policies.parse().unwrap(),
        }
    }

    #[test]
    fn a_change_reads_as_a_number_and_policies() {
        assert_eq!(
            parse_change("30000000=sliding-log:120/1m;fixed-window:5/1s"),
            Ok(change(30_000_000, "sliding-log:120/1m;fixed-window:5/1s"))
        );
        for (text, message) in [
            ("sliding-log:120/1m", "is not AT=POLICIES"),
            ("30s=sliding-log:120/1m", "\"30s\" is not a whole number"),
            ("+3=sliding-log:120/1m", "\"+3\" is not a whole number"),
            ("=sliding-log:120/1m", "\"\" is not a whole number"),
            ("99999999999999999999=sliding-log:1/1s", "above the largest"),
            (
                "5=sliding-log:0/1m",
                "invalid policies \"sliding-log:0/1m\"",
            ),
            ("5=", "invalid policies \"\""),
        ] {
            let error = parse_change(text).unwrap_err();
            assert!(error.contains(message), "{text}: {error}");
        }
    }

    #[test]
    fn changes_must_increase() {
        let error = Schedule::new(
            ChangePoint::Time,
            &[
                change(20, "sliding-log:1/1s"),
                change(20, "sliding-log:2/1s"),
            ],
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "--change-at 20 after --change-at 20: the changes must come in increasing order"
        );
        let error = Schedule::new(ChangePoint::Request, &[change(0, "sliding-log:1/1s")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("numbered from 1"), "{error}");
    }

    #[test]
    fn a_time_change_comes_at_the_first_request_reaching_it_once() {
        let mut schedule = Schedule::new(
            ChangePoint::Time,
            &[
                change(10, "sliding-log:1/1s"),
                change(20, "sliding-log:2/1s"),
                change(30, "sliding-log:3/1s"),
            ],
        )
        .unwrap();
        let due = |schedule: &mut Schedule, number, time| {
            schedule.due(number, time).map(ToString::to_string)
        };
        assert_eq!(due(&mut schedule, 1, 9), None);
        assert_eq!(due(&mut schedule, 2, 10), Some("sliding-log:1/1s".into()));
        assert_eq!(due(&mut schedule, 3, 5), None, "a step back undoes nothing");
        assert_eq!(due(&mut schedule, 4, 10), None, "each change once");
        // Two changes due at once: the later is the one in force.
        assert_eq!(due(&mut schedule, 5, 35), Some("sliding-log:3/1s".into()));
        assert_eq!(due(&mut schedule, 6, 99), None);
    }

    #[test]
    fn a_request_change_comes_at_its_request() {
        let mut schedule =
            Schedule::new(ChangePoint::Request, &[change(3, "sliding-log:1/1s")]).unwrap();
        assert_eq!(schedule.due(1, 100), None);
        assert_eq!(schedule.due(2, 100), None);
        assert!(schedule.due(3, 0).is_some());
        assert_eq!(schedule.due(4, 100), None);
    }
}

//! A warning for the most common trace mistake: times written in seconds or
//! milliseconds since the epoch where `t_us` is microseconds.
//!
//! The heuristic: **every** `t_us` of the trace, read in the suspected unit,
//! falls between 2000-01-01 and 2100-01-01 UTC. Read as microseconds (what
//! `t_us` is), such times are 16 to 68 minutes (seconds) or 11 to 47 days
//! (milliseconds) after the epoch: not a real date (now is about 1.7 × 10^15
//! µs), and a trace of relative times starts near 0, not there. One request
//! outside the band (a 0, a real microsecond date) and nothing is said. The
//! conformance vectors and the built-in scenarios never fire it (a test
//! checks). It only warns: the decisions printed are the same either way.

/// 2000-01-01T00:00:00Z in seconds since the epoch.
const FROM_S: u64 = 946_684_800;
/// 2100-01-01T00:00:00Z in seconds since the epoch.
const UNTIL_S: u64 = 4_102_444_800;

/// The unit a trace's times seem to be written in, when not microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpochUnit {
    /// Seconds since the epoch (e.g. `1700000000`).
    Seconds,
    /// Milliseconds since the epoch (e.g. `1700000000000`).
    Milliseconds,
}

impl EpochUnit {
    /// The unit's size in microseconds.
    fn micros(self) -> u64 {
        match self {
            Self::Seconds => 1_000_000,
            Self::Milliseconds => 1_000,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Milliseconds => "milliseconds",
        }
    }
}

/// Watches a trace's times, one by one, in constant memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct EpochUnitCheck {
    /// The smallest and largest time seen; `None` before the first.
    range: Option<(u64, u64)>,
}

impl EpochUnitCheck {
    /// A check that has seen no time yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes one request's `t_us` into account. A time beyond 2^53 µs is
    /// never decided (docs/spec.md section 5), so it says nothing of the
    /// unit the trace's decided times are in.
    pub(crate) fn observe(&mut self, time_us: u64) {
        if time_us > limiter_core::MAX_TIME_US {
            return;
        }
        self.range = Some(match self.range {
            None => (time_us, time_us),
            Some((lo, hi)) => (lo.min(time_us), hi.max(time_us)),
        });
    }

    /// The unit the times seen so far look like, if any.
    pub(crate) fn likely_unit(&self) -> Option<EpochUnit> {
        let (lo, hi) = self.range?;
        [EpochUnit::Seconds, EpochUnit::Milliseconds]
            .into_iter()
            .find(|unit| {
                let scale = 1_000_000 / unit.micros();
                lo >= FROM_S * scale && hi < UNTIL_S * scale
            })
    }

    /// The warning to print (without `warning: ` nor a newline), if any;
    /// `name` is the trace's.
    pub(crate) fn warning(&self, name: &str) -> Option<String> {
        let unit = self.likely_unit()?;
        let (lo, hi) = self.range?;
        let per_second = 1_000_000 / unit.micros();
        Some(format!(
            "{name}: t_us values look like {unit} since the epoch ({lo} to {hi}; as {unit} from {}); \
             t_us is microseconds: multiply by {}",
            utc(lo / per_second),
            unit.micros(),
            unit = unit.name(),
        ))
    }
}

/// Prints the warning on stderr, if the times seen call for one.
pub(crate) fn warn(check: &EpochUnitCheck, name: &str) {
    use std::io::Write as _;
    if let Some(warning) = check.warning(name) {
        let _ = writeln!(std::io::stderr(), "warning: {warning}");
    }
}

/// Seconds since the epoch as `2023-11-14 22:13:20 UTC`.
fn utc(seconds: u64) -> String {
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    // Days to a civil date (H. Hinnant's algorithm), for days >= 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(times: &[u64]) -> EpochUnitCheck {
        let mut check = EpochUnitCheck::new();
        for &t in times {
            check.observe(t);
        }
        check
    }

    #[test]
    fn unix_seconds_and_milliseconds_are_recognised() {
        let seconds: Vec<u64> = (0..120).map(|i| 1_700_000_000 + i).collect();
        assert_eq!(check(&seconds).likely_unit(), Some(EpochUnit::Seconds));
        let millis: Vec<u64> = (0..120).map(|i| 1_700_000_000_000 + i * 250).collect();
        assert_eq!(check(&millis).likely_unit(), Some(EpochUnit::Milliseconds));
        // A time no limiter decides (an error row) does not hide the unit.
        let with_error_row = [&millis[..], &[u64::MAX]].concat();
        assert_eq!(
            check(&with_error_row).likely_unit(),
            Some(EpochUnit::Milliseconds)
        );
        assert_eq!(
            check(&seconds).warning("t.csv").unwrap(),
            "t.csv: t_us values look like seconds since the epoch (1700000000 to 1700000119; \
             as seconds from 2023-11-14 22:13:20 UTC); t_us is microseconds: multiply by 1000000"
        );
        assert_eq!(
            check(&millis).warning("t.csv").unwrap(),
            "t.csv: t_us values look like milliseconds since the epoch (1700000000000 to \
             1700000029750; as milliseconds from 2023-11-14 22:13:20 UTC); t_us is \
             microseconds: multiply by 1000"
        );
    }

    #[test]
    fn microseconds_and_relative_times_are_left_alone() {
        // No time, a real microsecond date, relative times from 0, and a
        // seconds trace with one time outside the band.
        assert_eq!(check(&[]).likely_unit(), None);
        assert_eq!(check(&[1_764_000_000_000_000]).likely_unit(), None);
        assert_eq!(check(&[0, 9_000_000, 2_943_358_326]).likely_unit(), None);
        assert_eq!(check(&[0, 1_700_000_000]).likely_unit(), None);
        assert_eq!(check(&[1_700_000_000, 5_000_000_000]).likely_unit(), None);
        assert_eq!(check(&[946_684_799]).likely_unit(), None);
        assert_eq!(
            check(&[946_684_800]).likely_unit(),
            Some(EpochUnit::Seconds)
        );
    }

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(FROM_S), "2000-01-01 00:00:00 UTC");
        assert_eq!(utc(UNTIL_S), "2100-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_764_000_007), "2025-11-24 16:00:07 UTC");
    }

    #[test]
    fn no_shared_vector_trace_looks_like_seconds_or_milliseconds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors");
        let mut traces = 0;
        for sub in ["traces", "all-of/traces"] {
            for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
                let path = entry.unwrap().path();
                let file = std::fs::File::open(&path).unwrap();
                let mut check = EpochUnitCheck::new();
                for request in limiter_core::trace::TraceReader::new(std::io::BufReader::new(file))
                {
                    check.observe(request.unwrap().time_us);
                }
                assert_eq!(check.likely_unit(), None, "{}", path.display());
                traces += 1;
            }
        }
        assert!(traces >= 20, "{traces} traces");
    }
}

//! The benchmark's report: an aligned table, or a JSON document.

use std::fmt::Write as _;
use std::time::Duration;

use limiter_core::Policies;

use super::args::BenchArgs;
use super::lease::{decisions_per_call, percent, take_off_warning, LeaseFacts};
use super::phase::Phase;
use crate::compare::compact_duration;
use crate::json_string::string;

/// Everything the report prints.
pub(super) struct Report<'a> {
    pub(super) args: &'a BenchArgs,
    pub(super) policy: Policies,
    /// The Redis URL, password left out.
    pub(super) server: Option<String>,
    pub(super) decisions: Phase,
    /// The server's CPU over the limiter's phase, on one Redis server.
    pub(super) server_cpu: Option<Duration>,
    pub(super) ceiling: Option<Phase>,
    /// Keys that could not be deleted, when the run deleted its keys.
    pub(super) cleanup: Option<u64>,
    /// What `--lease` showed, when asked.
    pub(super) lease: Option<LeaseFacts>,
}

impl Report<'_> {
    /// The warning when the leases did not take off, with `--lease`.
    fn lease_warning(&self) -> Option<String> {
        let lease = self.lease.as_ref()?;
        let t = &self.decisions.tally;
        take_off_warning(t.decisions(), t.denied, &lease.stats, lease.max_lease)
    }

    /// The server's CPU per decision, in µs.
    fn server_cpu_us_per_decision(&self) -> Option<f64> {
        let decisions = self.decisions.tally.decisions();
        let cpu = self.server_cpu?;
        (decisions > 0).then(|| cpu.as_secs_f64() * 1e6 / decisions as f64)
    }

    fn ratio(&self) -> Option<f64> {
        let ceiling = self.ceiling.as_ref()?.per_second();
        (ceiling > 0.0).then(|| self.decisions.per_second() / ceiling)
    }

    /// The aligned table.
    pub(super) fn table(&self) -> String {
        let args = self.args;
        let mut out = String::new();
        let keys = if args.keys == 1 {
            "1 key".to_owned()
        } else {
            format!("{} keys", args.keys)
        };
        let _ = writeln!(
            out,
            "limiter bench: {} on {}{}, concurrency {}, {} per phase, {keys}, on failure: {}",
            self.policy,
            args.backend.backend.name(),
            self.server.as_ref().map_or_else(String::new, |s| format!(
                " ({s}, engine {})",
                args.backend.redis_engine.name()
            )),
            args.concurrency,
            duration(args.duration),
            args.on_failure.name(),
        );
        out.push('\n');
        let mut rows = vec![[
            String::new(),
            "per second".to_owned(),
            "total".to_owned(),
            "errors".to_owned(),
            "p50".to_owned(),
            "p99".to_owned(),
            "p99.9".to_owned(),
        ]];
        rows.push(row("decisions", Some(&self.decisions)));
        rows.push(row("ceiling (return 1)", self.ceiling.as_ref()));
        let mut ratio = vec![String::new(); 7];
        ratio[0] = "ratio".to_owned();
        ratio[1] = self
            .ratio()
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"));
        for line in aligned(rows.iter().map(|r| r.as_slice()).chain([ratio.as_slice()])) {
            let _ = writeln!(out, "  {}", line.trim_end());
        }
        let t = &self.decisions.tally;
        let _ = writeln!(
            out,
            "\n  admitted {}, denied {}, fail-open {}, fail-closed {}, errors {}",
            t.admitted, t.denied, t.fail_open, t.fail_closed, t.errors
        );
        if let Some(e) = &t.first_error {
            let _ = writeln!(out, "  first error: {e}");
        }
        if let Some(us) = self.server_cpu_us_per_decision() {
            let _ = writeln!(
                out,
                "  server CPU per decision: {us:.2} µs (INFO cpu, user and system, over the \
                 decisions' slices)"
            );
        }
        if let Some(lease) = &self.lease {
            let _ = writeln!(
                out,
                "  leases: lifetime {}, {} to {} units (over-admission budget {} of the limit \
                 per instance)",
                duration(lease.lifetime),
                lease.min_lease,
                lease.max_lease,
                budget(lease.budget_percent),
            );
            let _ = writeln!(
                out,
                "  {} of the admitted from leases ({}); {} lease requests of {} units on \
                 average, {} requests decided exactly: {:.1} decisions per call{}",
                t.leased,
                percent(t.leased, t.admitted),
                lease.stats.leases,
                lease.stats.mean_lease().unwrap_or(0),
                lease.stats.exact,
                decisions_per_call(t.decisions(), &lease.stats),
                lease.redis_calls.map_or_else(String::new, |calls| format!(
                    "; {calls} Redis calls ({:.1} per 1,000 decisions)",
                    per_thousand(calls, t.decisions())
                )),
            );
            let _ = writeln!(
                out,
                "  most units of a key in one window: {} (the exact algorithm: at most {}); \
                 over-admission {} (bound {}, docs/spec.md section 8)",
                lease.most_in_window,
                lease.exact_most,
                lease.over_admission(),
                lease.bound,
            );
            if let Some(warning) = self.lease_warning() {
                let _ = writeln!(out, "  warning: {warning}");
            }
        }
        if let Some(e) = self
            .ceiling
            .as_ref()
            .and_then(|c| c.tally.first_error.as_ref())
        {
            let _ = writeln!(out, "  first ceiling error: {e}");
        }
        out.push_str(match self.ceiling {
            Some(_) => {
                "\n  ceiling: EVALSHA of `return 1` through the limiter's client, on the keys' slots,\n  \
                 same concurrency and duration, same runtime; ratio = decisions/s / ceiling/s.\n"
            }
            None => "\n  ceiling: Redis only (the memory backend has no server to compare with).\n",
        });
        out
    }

    /// The JSON document (see docs/cli.md).
    pub(super) fn json(&self) -> String {
        let args = self.args;
        let d = &self.decisions;
        let t = &d.tally;
        let c = self.ceiling.as_ref();
        let latency =
            |phase: Option<&Phase>, q: f64| micros(phase.and_then(|p| p.tally.latency.quantile(q)));
        let fields: Vec<(&str, String)> = vec![
            ("backend", string(args.backend.backend.name())),
            ("server", self.server.as_deref().map_or_else(null, string)),
            (
                "engine",
                self.server
                    .as_ref()
                    .map_or_else(null, |_| string(args.backend.redis_engine.name())),
            ),
            ("policy", string(&self.policy.to_string())),
            ("concurrency", args.concurrency.to_string()),
            ("duration_s", float(Some(args.duration.as_secs_f64()), 6)),
            ("keys", args.keys.to_string()),
            ("on_failure", string(args.on_failure.name())),
            ("elapsed_s", float(Some(d.elapsed.as_secs_f64()), 3)),
            ("decisions", t.decisions().to_string()),
            ("decisions_per_s", float(Some(d.per_second()), 1)),
            ("admitted", t.admitted.to_string()),
            ("denied", t.denied.to_string()),
            ("fail_open", t.fail_open.to_string()),
            ("fail_closed", t.fail_closed.to_string()),
            ("errors", t.errors.to_string()),
            (
                "first_error",
                t.first_error.as_deref().map_or_else(null, string),
            ),
            ("p50_us", latency(Some(d), 0.5)),
            ("p99_us", latency(Some(d), 0.99)),
            ("p999_us", latency(Some(d), 0.999)),
            ("max_us", micros(t.latency.max())),
            ("ceiling_per_s", float(c.map(Phase::per_second), 1)),
            ("ceiling_calls", integer(c.map(|c| c.tally.decisions()))),
            ("ceiling_errors", integer(c.map(|c| c.tally.errors))),
            ("ceiling_p50_us", latency(c, 0.5)),
            ("ceiling_p99_us", latency(c, 0.99)),
            ("ceiling_p999_us", latency(c, 0.999)),
            ("ratio", float(self.ratio(), 3)),
            (
                "server_cpu_us_per_decision",
                float(self.server_cpu_us_per_decision(), 3),
            ),
        ];
        // Every document has the same fields: `null` without --lease.
        let lease = self.lease.as_ref();
        let mut fields = fields;
        fields.extend([
            (
                "lease_lifetime_s",
                float(lease.map(|l| l.lifetime.as_secs_f64()), 6),
            ),
            ("lease_max", integer(lease.map(|l| l.max_lease))),
            ("lease_min", integer(lease.map(|l| l.min_lease))),
            (
                "lease_budget_percent",
                float(lease.map(|l| l.budget_percent), 4),
            ),
            ("lease_requests", integer(lease.map(|l| l.stats.leases))),
            (
                "mean_lease",
                integer(lease.and_then(|l| l.stats.mean_lease())),
            ),
            ("exact_requests", integer(lease.map(|l| l.stats.exact))),
            (
                "decisions_per_call",
                float(
                    lease.map(|l| decisions_per_call(t.decisions(), &l.stats)),
                    2,
                ),
            ),
            ("leased_decisions", integer(lease.map(|_| t.leased))),
            ("redis_calls", integer(lease.and_then(|l| l.redis_calls))),
            (
                "redis_calls_per_1000",
                float(
                    lease
                        .and_then(|l| l.redis_calls)
                        .map(|calls| per_thousand(calls, t.decisions())),
                    2,
                ),
            ),
            ("most_in_window", integer(lease.map(|l| l.most_in_window))),
            ("exact_most_in_window", integer(lease.map(|l| l.exact_most))),
            (
                "over_admission",
                integer(lease.map(LeaseFacts::over_admission)),
            ),
            ("over_admission_bound", integer(lease.map(|l| l.bound))),
            (
                "lease_warning",
                self.lease_warning().as_deref().map_or_else(null, string),
            ),
        ]);
        let mut out = String::from("{\n");
        for (i, (name, value)) in fields.iter().enumerate() {
            let comma = if i + 1 < fields.len() { "," } else { "" };
            let _ = writeln!(out, "  {}: {value}{comma}", string(name));
        }
        out.push_str("}\n");
        out
    }
}

/// An over-admission budget in percent: `1%`, `0.25%`.
fn budget(percent: f64) -> String {
    format!("{}%", float(Some(percent), 4))
}

/// `calls` per 1,000 of `decisions`.
fn per_thousand(calls: u64, decisions: u64) -> f64 {
    calls as f64 * 1_000.0 / decisions.max(1) as f64
}

/// A table row for a phase: `-` throughout when there is none.
fn row(name: &str, phase: Option<&Phase>) -> [String; 7] {
    let dash = || "-".to_owned();
    let Some(phase) = phase else {
        return [
            name.to_owned(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
        ];
    };
    let t = &phase.tally;
    let latency = |q| t.latency.quantile(q).map_or_else(dash, human_latency);
    [
        name.to_owned(),
        format!("{:.0}", phase.per_second()),
        t.decisions().to_string(),
        t.errors.to_string(),
        latency(0.5),
        latency(0.99),
        latency(0.999),
    ]
}

/// Rows as lines, the first column left-aligned and the others right-aligned.
fn aligned<'a>(rows: impl Iterator<Item = &'a [String]> + Clone) -> Vec<String> {
    let columns = rows.clone().map(<[String]>::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.clone()
                .filter_map(|r| r.get(i))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.map(|r| {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i == 0 {
                let _ = write!(line, "{cell:<width$}", width = widths[0]);
            } else {
                let _ = write!(line, "  {cell:>width$}", width = widths[i]);
            }
        }
        line
    })
    .collect()
}

/// `850ns`, `12.3µs`, `1.25ms`, `1.500s`: three significant digits or so.
fn human_latency(nanos: u64) -> String {
    let n = nanos as f64;
    if nanos < 1_000 {
        format!("{nanos}ns")
    } else if nanos < 100_000 {
        format!("{:.1}µs", n / 1e3)
    } else if nanos < 1_000_000 {
        format!("{:.0}µs", n / 1e3)
    } else if nanos < 1_000_000_000 {
        format!("{:.2}ms", n / 1e6)
    } else {
        format!("{:.3}s", n / 1e9)
    }
}

/// `5s`, `1500ms`, `400us`: as `--duration` and `--lease-lifetime` take
/// it (whole microseconds), in its largest exact unit.
fn duration(duration: Duration) -> String {
    compact_duration(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
}

fn null() -> String {
    "null".to_owned()
}

/// A JSON number with at most `decimals` decimals, or `null`.
fn float(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) if v.is_finite() => {
            let text = format!("{v:.decimals$}");
            if text.contains('.') {
                text.trim_end_matches('0').trim_end_matches('.').to_owned()
            } else {
                text
            }
        }
        _ => null(),
    }
}

fn integer(value: Option<u64>) -> String {
    value.map_or_else(null, |v| v.to_string())
}

/// Nanoseconds as a JSON number of microseconds (to the ns), or `null`.
fn micros(nanos: Option<u64>) -> String {
    float(nanos.map(|n| n as f64 / 1e3), 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers_drop_trailing_zeros() {
        assert_eq!(float(Some(1.5), 3), "1.5");
        assert_eq!(float(Some(2.0), 1), "2");
        assert_eq!(float(None, 1), "null");
        assert_eq!(micros(Some(1_234)), "1.234");
    }

    #[test]
    fn durations_are_printed_as_given() {
        assert_eq!(duration(Duration::from_secs(5)), "5s");
        assert_eq!(duration(Duration::from_millis(1_500)), "1500ms");
        assert_eq!(duration(Duration::from_micros(400)), "400us");
        assert_eq!(
            float(Some(Duration::from_micros(400).as_secs_f64()), 6),
            "0.0004"
        );
    }
}

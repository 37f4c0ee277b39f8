//! The comparison as aligned plain-text tables, one per scenario.

use std::fmt::Write as _;

use super::{compact_duration, human_duration, ScenarioReport};
use crate::cli::BackendKind;

/// One table per scenario, then a legend. `timing` adds the decisions/s
/// column (`--timing`): left out by default, since the wall time of a
/// scenario of a few hundred decisions is tens of microseconds, mostly noise.
pub(crate) fn render(reports: &[ScenarioReport], backend: BackendKind, timing: bool) -> String {
    let mut out = String::new();
    for report in reports {
        render_scenario(&mut out, report, timing);
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "backend: {}. max/W: the most units that proceed (at t + wait) within any window W on one key.\n\
         retry: retry_after of the denials. bytes/key: estimated state per key (see `limiter compare --help`).",
        backend.name()
    );
    if reports
        .iter()
        .any(|report| report.scenario.change.is_some())
    {
        out.push_str(
            "max/W at change: the most units within any window W (the new policies' longest) \
             that holds the change; new limit: that policy's limit.\n",
        );
    }
    out
}

fn render_scenario(out: &mut String, report: &ScenarioReport, timing: bool) {
    let scenario = &report.scenario;
    let _ = writeln!(
        out,
        "{} ({}): {}",
        scenario.name,
        scenario.headline(),
        scenario.description
    );

    let with_errors = report.results.iter().any(|r| r.errors > 0);
    let first = if scenario.change.is_some() {
        "state at the change"
    } else if scenario.sets.is_some() {
        "policy"
    } else {
        "algorithm"
    };
    let mut header = vec![first.to_owned(), "admitted".into(), "denied".into()];
    if with_errors {
        header.push("errors".into());
    }
    header.extend(
        scenario
            .windows()
            .into_iter()
            .map(|w| format!("max/{}", compact_duration(w))),
    );
    let around_window = report
        .results
        .iter()
        .find_map(|r| r.around_change)
        .map(|around| around.window_us);
    if let Some(window_us) = around_window {
        header.extend([
            format!("max/{} at change", compact_duration(window_us)),
            "new limit".into(),
        ]);
    }
    header.extend(["mean retry".into(), "worst retry".into()]);
    if timing {
        header.push("decisions/s".into());
    }
    header.push("bytes/key".into());
    let mut rows = vec![header];
    for result in &report.results {
        let mut row = vec![
            result.label.clone(),
            result.admitted.to_string(),
            result.denied.to_string(),
        ];
        if with_errors {
            row.push(result.errors.to_string());
        }
        row.extend(
            result
                .max_units_in_windows
                .iter()
                .map(|(_, most)| most.to_string()),
        );
        if around_window.is_some() {
            row.extend(result.around_change.map_or_else(
                || ["-".to_owned(), "-".to_owned()],
                |around| [around.units.to_string(), around.limit.to_string()],
            ));
        }
        row.extend([
            result
                .retry_after_mean_us
                .map_or_else(|| "-".to_owned(), human_duration),
            result
                .retry_after_max_us
                .map_or_else(|| "-".to_owned(), |us| human_duration(us as f64)),
        ]);
        if timing {
            row.push(
                result
                    .decisions_per_second
                    .map_or_else(|| "-".to_owned(), rate),
            );
        }
        row.push(
            result
                .bytes_per_key
                .map_or_else(|| "-".to_owned(), |b| format!("{b:.0}")),
        );
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let mut line = String::from(" ");
        for (c, cell) in row.iter().enumerate() {
            line.push(' ');
            if c == 0 {
                let _ = write!(line, "{cell:<width$}", width = widths[c]);
            } else {
                let _ = write!(line, " {cell:>width$}", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// `2.31M`, `845k`, `950`.
fn rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2}M", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.0}k", per_second / 1e3)
    } else {
        format!("{per_second:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_short() {
        assert_eq!(rate(2_312_000.0), "2.31M");
        assert_eq!(rate(845_300.0), "845k");
        assert_eq!(rate(950.2), "950");
    }
}

//! The comparison as one JSON document, written by hand (no dependency).

use std::fmt::Write as _;

use super::ScenarioReport;
use crate::cli::BackendKind;
use crate::json_string::string;

/// The document:
///
/// ```text
/// {"backend": "memory", "scenarios": [{"name", "description", "limit",
///   "window_us", "capacity", "queue", "requests", "keys", "results": [
///   {"algorithm", "policy", "max_units_within": [{"window_us", "units"}], "admitted", "admitted_units", "denied", "errors",
///    "max_units_in_window", "retry_after_mean_us", "retry_after_max_us",
///    "wall_time_us", "decisions_per_second", "bytes_per_key",
///    "leased_instances", "around_change"}]}]}
/// ```
///
/// Under a policy change each result's `around_change` is
/// `{"at_us", "policies", "window_us", "units", "limit"}`: the most units
/// within any `window_us` (the new policies' longest window) holding the
/// change at `at_us`, and that policy's limit; `null` without a change.
///
/// `capacity` and `queue` are the token bucket's and leaky bucket's (the
/// limit unless set); figures that do not apply are `null`.
/// `leased_instances` is the number of leased limiters of a `--lease`
/// lane (its `policy` ends in `leased xN`), `null` for the others.
///
/// `admitted_units` is exact (summed in u128, never wrapped). Above 2^53 a
/// reader that parses numbers as doubles would round it, so the result then
/// also carries `"admitted_units_note"` saying so.
pub(crate) fn render(reports: &[ScenarioReport], backend: BackendKind) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\n  \"backend\": {},\n  \"scenarios\": [",
        string(backend.name())
    );
    for (i, report) in reports.iter().enumerate() {
        let s = &report.scenario;
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        let _ = write!(
            out,
            "    {{\n      \"name\": {},\n      \"description\": {},\n      \"limit\": {},\n      \
             \"window_us\": {},\n      \"capacity\": {},\n      \"queue\": {},\n      \
             \"requests\": {},\n      \"keys\": {},\n      \"results\": [",
            string(&s.name),
            string(&s.description),
            s.rate.limit,
            s.rate.window.as_micros(),
            s.capacity.unwrap_or(s.rate.limit),
            s.queue.unwrap_or(s.rate.limit),
            s.requests.requests.len(),
            s.requests.keys.len(),
        );
        for (j, r) in report.results.iter().enumerate() {
            out.push_str(if j == 0 { "\n" } else { ",\n" });
            let _ = write!(
                out,
                "        {{\"algorithm\": {}, \"policy\": {}, \"max_units_within\": [{}], \"admitted\": {}, \"admitted_units\": {}, \
                 \"denied\": {}, \"errors\": {}, \"max_units_in_window\": {}, \
                 \"retry_after_mean_us\": {}, \"retry_after_max_us\": {}, \
                 \"wall_time_us\": {}, \"decisions_per_second\": {}, \"bytes_per_key\": {}, \
                 \"leased_instances\": {}, \"around_change\": {}}}",
                string(r.algorithm.name()),
                string(&r.label),
                r.max_units_in_windows
                    .iter()
                    .map(|(w, most)| format!("{{\"window_us\": {w}, \"units\": {most}}}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                r.admitted,
                r.admitted_units,
                r.denied,
                r.errors,
                r.max_units_in_window,
                number(r.retry_after_mean_us),
                r.retry_after_max_us
                    .map_or_else(|| "null".to_owned(), |v| v.to_string()),
                r.wall_time.as_micros(),
                number(r.decisions_per_second),
                number(r.bytes_per_key),
                r.leased
                    .map_or_else(|| "null".to_owned(), |n| n.to_string()),
                match (&s.change, r.around_change) {
                    (Some(change), Some(around)) => format!(
                        "{{\"at_us\": {}, \"policies\": {}, \"window_us\": {}, \"units\": {}, \"limit\": {}}}",
                        change.at,
                        string(&change.policies.to_string()),
                        around.window_us,
                        around.units,
                        around.limit
                    ),
                    _ => "null".to_owned(),
                },
            );
            if r.admitted_units > u128::from(limiter_core::MAX_TIME_US) {
                // Inside the object: drop its closing brace, add the note.
                out.pop();
                out.push_str(
                    ", \"admitted_units_note\": \"exact integer above 2^53: \
                     read it as a big integer, a double rounds it\"}",
                );
            }
        }
        out.push_str("\n      ]\n    }");
    }
    out.push_str(if reports.is_empty() {
        "]\n}\n"
    } else {
        "\n  ]\n}\n"
    });
    out
}

/// A JSON number with at most one decimal, or `null` (also for infinities
/// and NaN, which JSON cannot hold).
fn number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => {
            let rounded = (v * 10.0).round() / 10.0;
            if rounded.fract() == 0.0 {
                format!("{rounded:.0}")
            } else {
                format!("{rounded:.1}")
            }
        }
        _ => "null".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_numbers_are_valid_json() {
        assert_eq!(string("a\"b\\c\nd\u{1}é"), r#""a\"b\\c\nd\u0001é""#);
        assert_eq!(number(Some(2.0)), "2");
        assert_eq!(number(Some(2.25)), "2.3");
        assert_eq!(number(Some(f64::INFINITY)), "null");
        assert_eq!(number(None), "null");
    }
}

//! The decisions CSV: its header, and one row per request decided.

use super::request::TraceRequest;
use crate::Decision;

/// The header of the decisions CSV.
pub const DECISION_HEADER: &str =
    "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us";

/// Formats one decisions row (without a newline). `None` is an error row:
/// the request could not be decided, and the last five fields stay empty.
/// A key that needs it is quoted (RFC 4180), so the row reads back as one.
pub fn decision_row(request: &TraceRequest, decision: Option<&Decision>) -> String {
    let TraceRequest {
        time_us,
        key,
        cost,
        oversized,
    } = request;
    let key = csv_field(key);
    if let Some(written) = oversized {
        return format!("{},{key},{},error,,,,,", written.time_us, written.cost);
    }
    match decision {
        Some(d) => format!(
            "{time_us},{key},{cost},{},{},{},{},{},{}",
            if d.allowed { "allowed" } else { "denied" },
            d.limit,
            d.remaining,
            d.retry_after.as_micros(),
            d.reset_after.as_micros(),
            d.wait.as_micros()
        ),
        None => format!("{time_us},{key},{cost},error,,,,,"),
    }
}

/// A CSV field: as it is, or quoted with inner quotes doubled when it holds
/// a comma, a quote, a line break or blanks at its ends.
fn csv_field(text: &str) -> std::borrow::Cow<'_, str> {
    let needs_quotes = text.contains([',', '"', '\n', '\r'])
        || text.starts_with(|c: char| c.is_ascii_whitespace())
        || text.ends_with(|c: char| c.is_ascii_whitespace());
    if needs_quotes {
        format!("\"{}\"", text.replace('"', "\"\"")).into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceReader;

    #[test]
    fn keys_that_need_it_are_quoted_in_decision_rows_and_read_back() {
        for key in ["plain", "a,b", "say \"hi\"", " padded ", "two\nlines"] {
            let request = TraceRequest {
                time_us: 5,
                key: key.to_owned(),
                cost: 1,
                oversized: None,
            };
            let row = decision_row(&request, None);
            let trace = format!(
                "t_us,key,cost\n{}\n",
                &row[..row.len() - ",error,,,,,".len()]
            );
            let read: Vec<_> = TraceReader::new(trace.as_bytes())
                .map(Result::unwrap)
                .collect();
            assert_eq!(read, [request], "{row}");
        }
        assert_eq!(
            decision_row(
                &TraceRequest {
                    time_us: 1,
                    key: "a,b".into(),
                    cost: 2,
                    oversized: None,
                },
                None
            ),
            "1,\"a,b\",2,error,,,,,"
        );
    }
}

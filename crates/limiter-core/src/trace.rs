//! The replay format of docs/spec.md section 6: request traces in, decision rows out.
//!
//! Shared by the `limiter replay` command and the conformance tests, so a
//! trace means the same thing everywhere.

use std::fmt;
use std::io::{self, BufRead};

use crate::decision::Decision;

/// One request of a trace: `t_us,key,cost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// Request time in µs since the Unix epoch.
    pub time_us: u64,
    /// The key limited.
    pub key: String,
    /// Units asked for (1 when the trace has no `cost` column).
    pub cost: u64,
}

/// The header of the decisions CSV.
pub const DECISION_HEADER: &str =
    "t_us,key,cost,outcome,limit,remaining,retry_after_us,reset_after_us,wait_us";

/// Why a trace could not be read; names the line (1-based) and the field.
#[derive(Debug)]
#[non_exhaustive]
pub enum TraceError {
    /// Reading the input failed.
    Io(io::Error),
    /// The first line is not `t_us,key,cost` or `t_us,key`.
    Header {
        /// The line as found.
        found: String,
    },
    /// A row is malformed.
    Row {
        /// 1-based line number (the header is line 1).
        line: u64,
        /// The field at fault: `t_us`, `key`, `cost`, or `row` for the field count.
        field: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "cannot read trace: {e}"),
            Self::Header { found } => write!(
                f,
                "line 1: expected the header `t_us,key,cost` (or `t_us,key`), found {found:?}"
            ),
            Self::Row {
                line,
                field,
                reason,
            } => write!(f, "line {line}, field {field}: {reason}"),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Streams the requests of a trace, one line at a time, so a trace of any
/// size is read in bounded memory.
#[derive(Debug)]
pub struct TraceReader<R> {
    input: R,
    line: u64,
    has_cost: Option<bool>,
    buffer: String,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads a trace from `input`; the header is checked on the first read.
    pub fn new(input: R) -> Self {
        Self {
            input,
            line: 0,
            has_cost: None,
            buffer: String::new(),
        }
    }

    fn next_line(&mut self) -> Option<Result<&str, TraceError>> {
        self.buffer.clear();
        match self.input.read_line(&mut self.buffer) {
            Ok(0) => None,
            Ok(_) => {
                self.line += 1;
                Some(Ok(self.buffer.trim_end_matches(['\n', '\r'])))
            }
            Err(e) => Some(Err(TraceError::Io(e))),
        }
    }

    fn read_header(&mut self) -> Result<bool, TraceError> {
        let header = match self.next_line() {
            None => String::new(),
            Some(line) => line?.trim().to_owned(),
        };
        match header.as_str() {
            "t_us,key,cost" => Ok(true),
            "t_us,key" => Ok(false),
            _ => Err(TraceError::Header { found: header }),
        }
    }

    fn parse_row(&self, row: &str, has_cost: bool) -> Result<TraceRequest, TraceError> {
        let line = self.line;
        let error = |field, reason: String| TraceError::Row {
            line,
            field,
            reason,
        };
        let fields: Vec<&str> = row.split(',').collect();
        let expected = if has_cost { 3 } else { 2 };
        if fields.len() != expected {
            return Err(error(
                "row",
                format!(
                    "expected {expected} comma-separated fields, found {}",
                    fields.len()
                ),
            ));
        }
        let time_us = fields[0].trim().parse::<u64>().map_err(|_| {
            error(
                "t_us",
                format!("{:?} is not a whole number of microseconds", fields[0]),
            )
        })?;
        let key = fields[1].trim();
        if key.is_empty() {
            return Err(error("key", "empty key".into()));
        }
        let cost = if has_cost {
            let cost = fields[2].trim();
            cost.parse::<u64>()
                .map_err(|_| error("cost", format!("{cost:?} is not a whole number")))?
        } else {
            1
        };
        Ok(TraceRequest {
            time_us,
            key: key.to_owned(),
            cost,
        })
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRequest, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let has_cost = match self.has_cost {
            Some(has_cost) => has_cost,
            None => match self.read_header() {
                Ok(has_cost) => *self.has_cost.insert(has_cost),
                Err(e) => {
                    self.has_cost = Some(true);
                    return Some(Err(e));
                }
            },
        };
        loop {
            let row = match self.next_line()? {
                Ok(row) => row.to_owned(),
                Err(e) => return Some(Err(e)),
            };
            if row.trim().is_empty() {
                continue;
            }
            return Some(self.parse_row(&row, has_cost));
        }
    }
}

/// Formats one decisions row (without a newline). `None` is an error row:
/// the request could not be decided, and the last five fields stay empty.
pub fn decision_row(request: &TraceRequest, decision: Option<&Decision>) -> String {
    let TraceRequest { time_us, key, cost } = request;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Result<TraceRequest, TraceError>> {
        TraceReader::new(text.as_bytes()).collect()
    }

    #[test]
    fn reads_rows_with_and_without_cost() {
        let rows = read("t_us,key,cost\n5,a,2\n\n7,b,1\n");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].as_ref().unwrap().cost, 2);
        let rows = read("t_us,key\r\n5,a\r\n");
        assert_eq!(rows[0].as_ref().unwrap().cost, 1);
        assert_eq!(rows[0].as_ref().unwrap().key, "a");
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let message = |text: &str| {
            read(text)
                .into_iter()
                .find_map(Result::err)
                .unwrap()
                .to_string()
        };
        assert_eq!(
            message("t,k\n"),
            "line 1: expected the header `t_us,key,cost` (or `t_us,key`), found \"t,k\""
        );
        assert!(message("t_us,key,cost\n1,a,1\nx,a,1\n").starts_with("line 3, field t_us"));
        assert!(message("t_us,key,cost\n1,a,-1\n").starts_with("line 2, field cost"));
        assert!(message("t_us,key,cost\n1,,1\n").starts_with("line 2, field key"));
        assert!(message("t_us,key,cost\n1,a\n").starts_with("line 2, field row"));
    }
}

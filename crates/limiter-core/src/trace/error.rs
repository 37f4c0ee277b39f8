//! [`TraceError`]: why a trace could not be read.

use std::fmt;
use std::io;

/// Why a trace could not be read; names the line (1-based) and the field.
#[derive(Debug)]
#[non_exhaustive]
pub enum TraceError {
    /// Reading the input failed.
    Io(io::Error),
    /// The first line is not `t_us,key,cost` or `t_us,key`.
    Header {
        /// The line as found (lossily decoded, at most 200 characters).
        found: String,
    },
    /// A row is malformed.
    Row {
        /// 1-based line number (the header is line 1) where the row starts.
        line: u64,
        /// The field at fault: `t_us`, `key`, `cost`, or `row` for the
        /// row as a whole (its length, its field count, its quoting).
        field: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The cause is the source, never part of the message.
            Self::Io(_) => f.write_str("cannot read trace"),
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

pub(super) fn row_error(line: u64, field: &'static str, reason: String) -> TraceError {
    TraceError::Row {
        line,
        field,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorChain;

    #[test]
    fn a_read_error_names_its_cause_once() {
        let error = TraceError::Io(io::Error::other("disk on fire"));
        assert_eq!(error.to_string(), "cannot read trace");
        assert_eq!(
            ErrorChain(&error).to_string(),
            "cannot read trace: disk on fire"
        );
    }
}

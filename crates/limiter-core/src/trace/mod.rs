//! The replay format of docs/spec.md section 6: request traces in, decision
//! rows out.
//!
//! It is the command line's format (`limiter replay`, `limiter compare
//! --trace`), the conformance tests' and the fuzz targets', so a trace
//! means the same thing everywhere.
//!
//! Available with the `trace` feature.
//!
//! Input is CSV as RFC 4180 writes it: a field may be quoted (`"a,b"`, with
//! `""` for a quote inside, and line breaks inside quotes), a UTF-8 byte
//! order mark before the header is skipped, and lines may end in `\n` or
//! `\r\n`. Memory stays bounded whatever the input: a record longer than
//! [`MAX_RECORD_BYTES`] is an error naming its line (the rest of it is
//! skipped without being held), and every error names the line and the field.

mod decision_row;
mod error;
mod reader;
mod record;
mod request;
mod split_mix;

pub use self::{
    decision_row::{decision_row, DECISION_HEADER},
    error::TraceError,
    reader::{TraceReader, MAX_RECORD_BYTES},
    request::{TraceRequest, WrittenNumbers},
    split_mix::SplitMix64,
};

//! [`TraceReader`]: the requests of a trace, streamed one record at a
//! time in bounded memory.

use std::io::{self, BufRead};

use super::error::{row_error, TraceError};
use super::record::{split_record, strip_line_ending, Record, RecordEnd, Split};
use super::request::{TraceRequest, WrittenNumbers};

/// The longest record read, in bytes (64 KiB), its line ending excluded; a
/// quoted field's line breaks count. A longer one is an error: this bounds
/// the memory a trace of any shape takes.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The fields of a trace, in order.
const FIELDS: [&str; 3] = ["t_us", "key", "cost"];

/// A whole number of a trace field: its value, or its digits when it does
/// not fit in a `u64`; `None` when the text is not a whole number (digits
/// only, as a policy string's: no sign).
fn whole_number(text: &str) -> Option<Result<u64, String>> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        text.parse::<u64>()
            .map_err(|_| text.trim_start_matches('0').to_owned()),
    )
}

/// Streams the requests of a trace, one record at a time, so a trace of any
/// size is read in bounded memory (at most [`MAX_RECORD_BYTES`] held).
///
/// After an error the reader goes on with the next record, so a caller may
/// report every bad row; `limiter replay` stops at the first.
#[derive(Debug)]
pub struct TraceReader<R> {
    input: R,
    /// Lines read so far.
    line: u64,
    has_cost: Option<bool>,
    /// The record being read (at most `MAX_RECORD_BYTES` plus a line ending).
    buffer: Vec<u8>,
    /// Set once reading has failed: the input is not read again.
    failed: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads a trace from `input`; the header is checked on the first read.
    pub fn new(input: R) -> Self {
        Self {
            input,
            line: 0,
            has_cost: None,
            buffer: Vec::new(),
            failed: false,
        }
    }

    /// Appends one physical line (with its `\n`) to the buffer, at most
    /// `limit` bytes of it; returns whether a line was there and whether it
    /// was cut at the limit (then the rest of it is still unread).
    fn read_line_into_buffer(&mut self, limit: usize) -> io::Result<(bool, bool)> {
        let mut read_any = false;
        loop {
            let available = match self.input.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok((read_any, false));
            }
            read_any = true;
            let room = limit.saturating_sub(self.buffer.len());
            let (take, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) if i < room.saturating_add(1) => (i + 1, true),
                _ if available.len() > room => {
                    self.buffer.extend_from_slice(&available[..room]);
                    self.input.consume(room);
                    return Ok((true, true));
                }
                _ => (available.len(), false),
            };
            self.buffer.extend_from_slice(&available[..take]);
            self.input.consume(take);
            if done {
                return Ok((true, false));
            }
        }
    }

    /// Skips what is left of a record over the limit, so that the next
    /// read starts at the next record, not inside this one: up to the line
    /// break outside quotes. `end`: where the bytes kept so far leave the
    /// record, which they have not ended; `line_done`: whether the kept
    /// bytes ended their line. Lines begun meanwhile are counted.
    fn skip_rest_of_record(&mut self, mut end: RecordEnd, line_done: bool) -> io::Result<()> {
        let mut starting_line = line_done;
        loop {
            let available = match self.input.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok(());
            }
            let (mut used, mut ended) = (0, false);
            for &byte in available {
                used += 1;
                if std::mem::take(&mut starting_line) {
                    self.line += 1;
                }
                if end.ends_record(byte) {
                    ended = true;
                    break;
                }
                starting_line = byte == b'\n';
            }
            self.input.consume(used);
            if ended {
                return Ok(());
            }
        }
    }

    /// Reads the next record: one line, or several when a quoted field
    /// holds line breaks. `None` at the end of the input. The record's
    /// first line number is `self.line` after the call minus its extra lines,
    /// returned alongside.
    fn next_record(&mut self) -> Option<(u64, Result<Record, TraceError>)> {
        if self.failed {
            return None;
        }
        self.buffer.clear();
        let first_line = self.line + 1;
        loop {
            // One byte over the cap tells a record at the cap from one above it.
            let limit = MAX_RECORD_BYTES + 2;
            match self.read_line_into_buffer(limit) {
                Err(e) => {
                    self.failed = true;
                    return Some((first_line, Err(TraceError::Io(e))));
                }
                Ok((false, _)) if self.line < first_line => return None,
                Ok((read, cut)) => {
                    if read {
                        self.line += 1;
                    }
                    if read && self.line == 1 && self.buffer.starts_with(BOM) {
                        self.buffer.drain(..BOM.len());
                    }
                    let content = strip_line_ending(&self.buffer).len();
                    if cut || content > MAX_RECORD_BYTES {
                        let mut end = RecordEnd::default();
                        let ended = self.buffer.iter().any(|&byte| end.ends_record(byte));
                        let line_done = !cut && self.buffer.ends_with(b"\n");
                        if !ended {
                            if let Err(e) = self.skip_rest_of_record(end, line_done) {
                                self.failed = true;
                                return Some((first_line, Err(TraceError::Io(e))));
                            }
                        }
                        let error = row_error(
                            first_line,
                            "row",
                            format!("longer than the limit of {MAX_RECORD_BYTES} bytes"),
                        );
                        return Some((first_line, Err(error)));
                    }
                    match split_record(strip_line_ending(&self.buffer)) {
                        Split::Done(record) => return Some((first_line, Ok(record))),
                        // A line break inside quotes: the record goes on,
                        // unless the input ended.
                        Split::OpenQuote if read && self.buffer.ends_with(b"\n") => continue,
                        Split::OpenQuote => {
                            let error = row_error(
                                first_line,
                                "row",
                                "a quoted field is never closed".into(),
                            );
                            return Some((first_line, Err(error)));
                        }
                        Split::Malformed(reason) => {
                            return Some((first_line, Err(row_error(first_line, "row", reason))));
                        }
                    }
                }
            }
        }
    }

    fn read_header(&mut self) -> Result<bool, TraceError> {
        let fields = match self.next_record() {
            None => Vec::new(),
            Some((_, Err(e))) => return Err(e),
            Some((_, Ok(Record::Blank))) => Vec::new(),
            Some((_, Ok(Record::Fields(fields)))) => fields,
        };
        let names = || fields.iter().map(Vec::as_slice);
        let wanted = |n: usize| FIELDS[..n].iter().map(|f| f.as_bytes());
        if names().eq(wanted(3)) {
            Ok(true)
        } else if names().eq(wanted(2)) {
            Ok(false)
        } else {
            let found = String::from_utf8_lossy(&fields.join(&b","[..]))
                .chars()
                .take(200)
                .collect();
            Err(TraceError::Header { found })
        }
    }

    fn parse_row(
        line: u64,
        fields: &[Vec<u8>],
        has_cost: bool,
    ) -> Result<TraceRequest, TraceError> {
        let expected = if has_cost { 3 } else { 2 };
        if fields.len() != expected {
            return Err(row_error(
                line,
                "row",
                format!(
                    "expected {expected} comma-separated fields, found {}",
                    fields.len()
                ),
            ));
        }
        let mut text = Vec::with_capacity(expected);
        for (field, name) in fields.iter().zip(FIELDS) {
            let value = std::str::from_utf8(field).map_err(|e| {
                row_error(
                    line,
                    name,
                    format!("invalid UTF-8 at byte {} of the field", e.valid_up_to()),
                )
            })?;
            text.push(value);
        }
        let time = text[0];
        let time_us = whole_number(time).ok_or_else(|| {
            row_error(
                line,
                "t_us",
                format!("{} is not a whole number of microseconds", quoted(time)),
            )
        })?;
        let key = text[1];
        if key.trim().is_empty() {
            return Err(row_error(line, "key", "empty key".into()));
        }
        let cost = match text.get(2) {
            Some(cost) => whole_number(cost).ok_or_else(|| {
                row_error(
                    line,
                    "cost",
                    format!("{} is not a whole number", quoted(cost)),
                )
            })?,
            None => Ok(1),
        };
        let oversized = (time_us.is_err() || cost.is_err()).then(|| {
            let written = |number: &Result<u64, String>| match number {
                Ok(value) => value.to_string(),
                Err(digits) => digits.clone(),
            };
            Box::new(WrittenNumbers {
                time_us: written(&time_us),
                cost: written(&cost),
            })
        });
        Ok(TraceRequest {
            time_us: time_us.unwrap_or(u64::MAX),
            key: key.to_owned(),
            cost: cost.unwrap_or(u64::MAX),
            oversized,
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
            let (line, record) = self.next_record()?;
            match record {
                Err(e) => return Some(Err(e)),
                Ok(Record::Blank) => continue,
                Ok(Record::Fields(fields)) => {
                    return Some(Self::parse_row(line, &fields, has_cost))
                }
            }
        }
    }
}

/// A field's text as shown in a message: debug-quoted, cut at 64 characters.
fn quoted(text: &str) -> String {
    if text.chars().count() <= 64 {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(64).collect();
        format!("{head:?}… ({} bytes)", text.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Vec<Result<TraceRequest, TraceError>> {
        TraceReader::new(bytes).collect()
    }

    fn message(bytes: &[u8]) -> String {
        read(bytes)
            .into_iter()
            .find_map(Result::err)
            .expect("an error")
            .to_string()
    }

    fn keys(bytes: &[u8]) -> Vec<String> {
        read(bytes).into_iter().map(|r| r.unwrap().key).collect()
    }

    #[test]
    fn reads_rows_with_and_without_cost() {
        let rows = read(b"t_us,key,cost\n5,a,2\n\n7,b,1\n");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].as_ref().unwrap().cost, 2);
        let rows = read(b"t_us,key\r\n5,a\r\n");
        assert_eq!(rows[0].as_ref().unwrap().cost, 1);
        assert_eq!(rows[0].as_ref().unwrap().key, "a");
        // No newline at the end.
        assert_eq!(keys(b"t_us,key,cost\n5,a,2"), ["a"]);
    }

    #[test]
    fn errors_name_the_line_and_field() {
        assert_eq!(
            message(b"t,k\n"),
            "line 1: expected the header `t_us,key,cost` (or `t_us,key`), found \"t,k\""
        );
        assert!(message(b"t_us,key,cost\n1,a,1\nx,a,1\n").starts_with("line 3, field t_us"));
        assert!(message(b"t_us,key,cost\n1,a,-1\n").starts_with("line 2, field cost"));
        assert!(message(b"t_us,key,cost\n1,,1\n").starts_with("line 2, field key"));
        assert!(message(b"t_us,key,cost\n1,a\n").starts_with("line 2, field row"));
    }

    /// A line of any length is read in pieces, never held whole.
    #[test]
    fn a_line_over_64_kib_is_an_error_naming_it_and_is_never_held() {
        let mut trace = b"t_us,key,cost\n1,a,1\n2,".to_vec();
        trace.extend(std::iter::repeat_n(b'k', 10 * MAX_RECORD_BYTES));
        trace.extend_from_slice(b",1\n3,b,1\n");
        let mut reader = TraceReader::new(&trace[..]);
        assert_eq!(reader.next().unwrap().unwrap().key, "a");
        let error = reader.next().unwrap().unwrap_err().to_string();
        assert_eq!(
            error,
            "line 3, field row: longer than the limit of 65536 bytes"
        );
        assert!(reader.buffer.capacity() <= 4 * MAX_RECORD_BYTES);
        // The rest of the long line is skipped: the next row reads as line 4.
        assert_eq!(reader.next().unwrap().unwrap().key, "b");
        assert!(reader.next().is_none());
        // A line of exactly the limit is fine.
        let key = "k".repeat(MAX_RECORD_BYTES - "3,,1".len());
        let trace = format!("t_us,key,cost\n3,{key},1\r\n");
        assert_eq!(keys(trace.as_bytes()), [key]);
    }

    /// A record over the limit inside a quoted field that spans lines:
    /// the rest of the record is skipped to its end, so its lines are not
    /// read as requests of their own.
    #[test]
    fn a_quoted_record_over_the_limit_is_skipped_to_its_end() {
        for cut in [true, false] {
            let mut trace = b"t_us,key,cost\n1,\"".to_vec();
            if cut {
                // Over the limit within its first line.
                trace.extend(std::iter::repeat_n(b'k', MAX_RECORD_BYTES + 10));
                trace.push(b'\n');
            } else {
                // Over the limit over several lines, each below it.
                for _ in 0..3 {
                    trace.extend(std::iter::repeat_n(b'k', MAX_RECORD_BYTES / 2));
                    trace.push(b'\n');
                }
            }
            trace.extend_from_slice(b"2,a,1\n\"\",x\n\",1\n3,b,1\n");
            let mut reader = TraceReader::new(&trace[..]);
            let error = reader.next().unwrap().unwrap_err().to_string();
            assert!(error.starts_with("line 2, field row: longer"), "{error}");
            let next = reader.next().unwrap().unwrap();
            assert_eq!(next.key, "b", "cut: {cut}");
            assert!(reader.next().is_none());
            // Numbered as the file numbers its lines.
            let lines = if cut { 6 } else { 8 };
            assert_eq!(reader.line, lines, "cut: {cut}");
        }
    }

    /// A `"` that does not begin a field is a plain byte, or text after a
    /// closing quote, in a record over the limit as in any other: it opens
    /// no quoted field, so the rows after it are read, numbered as the file
    /// numbers its lines.
    #[test]
    fn a_stray_quote_in_a_row_over_the_limit_does_not_swallow_the_rows_after_it() {
        assert_eq!(keys(b"t_us,key,cost\n1,a\"b,1\n2,c,1\n"), ["a\"b", "c"]);
        for stray in [&b"a\""[..], b"\"a\"b\""] {
            // Cut at the limit within the line, and read whole one byte over it.
            for long in [MAX_RECORD_BYTES + 10, MAX_RECORD_BYTES - 3 - stray.len()] {
                let mut trace = b"t_us,key,cost\n1,".to_vec();
                trace.extend_from_slice(stray);
                trace.extend(std::iter::repeat_n(b'k', long));
                trace.extend_from_slice(b",1\n2,b,1\n3,c,1\nx,d,1\n");
                let mut reader = TraceReader::new(&trace[..]);
                let error = reader.next().unwrap().unwrap_err().to_string();
                assert!(error.starts_with("line 2, field row: longer"), "{error}");
                assert_eq!(reader.next().unwrap().unwrap().key, "b");
                assert_eq!(reader.next().unwrap().unwrap().key, "c");
                let error = reader.next().unwrap().unwrap_err().to_string();
                assert!(error.starts_with("line 5, field t_us"), "{error}");
                assert!(reader.next().is_none());
            }
        }
    }

    /// Invalid UTF-8 is reported with its line and field.
    #[test]
    fn invalid_utf8_names_the_line_and_the_field() {
        assert_eq!(
            message(b"t_us,key,cost\n1,a,1\n2,b\xff\xfe,1\n"),
            "line 3, field key: invalid UTF-8 at byte 1 of the field"
        );
        assert!(message(b"t_us,key,cost\n1,a,\xc3\n").starts_with("line 2, field cost"));
        // In the header too: the header error shows what was found.
        assert!(message(b"t_us,k\xffey,cost\n").starts_with("line 1: expected the header"));
    }

    /// A UTF-8 byte order mark and RFC 4180 quoted fields are accepted.
    #[test]
    fn a_utf8_bom_and_rfc_4180_quoting_are_accepted() {
        assert_eq!(keys(b"\xEF\xBB\xBFt_us,key,cost\n1,a,1\n"), ["a"]);
        assert_eq!(
            keys(b"\"t_us\",\"key\",\"cost\"\r\n\"1\",\"a,b\",\"2\"\r\n3,\"say \"\"hi\"\"\",1\r\n"),
            ["a,b", "say \"hi\""]
        );
        // A quoted field may hold a line break; the row is numbered by its
        // first line.
        assert_eq!(
            keys(b"t_us,key\n1,\"two\nlines\"\n2,c\n"),
            ["two\nlines", "c"]
        );
        assert!(message(b"t_us,key\n1,\"two\nlines\"\nx,c\n").starts_with("line 4, field t_us"));
        assert!(message(b"t_us,key\n1,\"open\n").starts_with("line 2, field row: a quoted"));
        assert!(message(b"t_us,key\n1,\"a\"b\n").starts_with("line 2, field row: text after"));
        // A BOM is only a BOM before the header.
        assert!(message(b"t_us,key\n\xEF\xBB\xBF1,a\n").starts_with("line 2, field t_us"));
    }
}

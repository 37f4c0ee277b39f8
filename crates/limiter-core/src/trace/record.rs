//! One CSV record of a trace split into its fields, RFC 4180 style.

/// One record's raw bytes, read and split by [`TraceReader`](super::TraceReader).
pub(super) enum Record {
    /// The fields, unquoted (still bytes: UTF-8 is checked per field).
    Fields(Vec<Vec<u8>>),
    /// An empty or blank line.
    Blank,
}

pub(super) fn strip_line_ending(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    bytes.strip_suffix(b"\r").unwrap_or(bytes)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

pub(super) enum Split {
    Done(Record),
    /// The record ends inside a quoted field.
    OpenQuote,
    Malformed(String),
}

/// Splits one record (its line ending removed) into fields, RFC 4180 style:
/// a field whose first non-blank byte is `"` is quoted, `""` inside it is a
/// quote, and after its closing quote only blanks may come before the comma.
/// Unquoted fields are trimmed of ASCII blanks; quoted ones are kept as they are.
pub(super) fn split_record(bytes: &[u8]) -> Split {
    if trim(bytes).is_empty() {
        return Split::Done(Record::Blank);
    }
    let mut fields = Vec::new();
    let mut rest = bytes;
    loop {
        let blanks = rest
            .iter()
            .position(|&b| b != b' ' && b != b'\t')
            .unwrap_or(rest.len());
        if rest.get(blanks) == Some(&b'"') {
            let mut field = Vec::new();
            let mut i = blanks + 1;
            loop {
                match rest.get(i) {
                    None => return Split::OpenQuote,
                    Some(b'"') if rest.get(i + 1) == Some(&b'"') => {
                        field.push(b'"');
                        i += 2;
                    }
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(&b) => {
                        field.push(b);
                        i += 1;
                    }
                }
            }
            let after = &rest[i..];
            let blanks = after
                .iter()
                .position(|&b| b != b' ' && b != b'\t')
                .unwrap_or(after.len());
            fields.push(field);
            match after.get(blanks) {
                None => return Split::Done(Record::Fields(fields)),
                Some(b',') => rest = &after[blanks + 1..],
                Some(_) => {
                    return Split::Malformed(format!(
                        "text after the closing quote of field {}",
                        fields.len()
                    ))
                }
            }
        } else {
            match rest.iter().position(|&b| b == b',') {
                Some(i) => {
                    fields.push(trim(&rest[..i]).to_vec());
                    rest = &rest[i + 1..];
                }
                None => {
                    fields.push(trim(rest).to_vec());
                    return Split::Done(Record::Fields(fields));
                }
            }
        }
    }
}

/// Where a record ends, found byte by byte without holding the record: at
/// the first line break outside a quoted field. Quotes are read as
/// [`split_record`] reads them, so a record ends where the reader would end
/// it if it held the whole record: a `"` opens a quoted field only as a
/// field's first non-blank byte (elsewhere it is a plain byte, or text after
/// a closing quote, which ends the record at its line break); inside a
/// quoted field `""` is a quote and a lone `"` closes the field.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RecordEnd {
    state: FieldState,
}

#[derive(Debug, Clone, Copy, Default)]
enum FieldState {
    /// Before a field's first non-blank byte.
    #[default]
    Start,
    /// In a field that does not begin with a quote.
    Unquoted,
    /// In a quoted field.
    Quoted,
    /// A quote in a quoted field: a second one makes it a quote, anything
    /// else makes it the closing quote.
    QuoteInQuoted,
    /// After a closing quote: blanks, then a comma or the end.
    AfterQuoted,
    /// Text after a closing quote: the record is malformed and ends at its
    /// line break, whatever the rest of the line holds.
    Malformed,
}

impl RecordEnd {
    /// Reads the record's next byte; returns whether it ends the record,
    /// after which the next byte begins a record of its own.
    pub(super) fn ends_record(&mut self, byte: u8) -> bool {
        use FieldState::*;
        let next = match (self.state, byte) {
            (Quoted, b'"') => QuoteInQuoted,
            (Quoted, _) | (QuoteInQuoted, b'"') => Quoted,
            (_, b'\n') => {
                self.state = Start;
                return true;
            }
            (Start, b' ' | b'\t') => Start,
            (Start, b'"') => Quoted,
            (Start | Unquoted, b',') => Start,
            (Start | Unquoted, _) => Unquoted,
            (QuoteInQuoted | AfterQuoted, b',') => Start,
            (QuoteInQuoted | AfterQuoted, b' ' | b'\t') => AfterQuoted,
            (QuoteInQuoted | AfterQuoted | Malformed, _) => Malformed,
        };
        self.state = next;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Where the reader ends the first record of `bytes` when it holds it
    /// whole: at the first line break where the record read so far is not
    /// left inside a quoted field.
    fn end_by_split(bytes: &[u8]) -> Option<usize> {
        (0..bytes.len()).filter(|&i| bytes[i] == b'\n').find(|&i| {
            !matches!(
                split_record(strip_line_ending(&bytes[..=i])),
                Split::OpenQuote
            )
        })
    }

    fn end_by_scan(bytes: &[u8]) -> Option<usize> {
        let mut end = RecordEnd::default();
        bytes.iter().position(|&byte| end.ends_record(byte))
    }

    #[test]
    fn a_record_ends_at_its_line_break_outside_quotes() {
        for (bytes, end) in [
            (&b"1,a\"b,1\n2"[..], Some(7)),
            (b"1,\"a\nb\",1\n2", Some(9)),
            (b"1, \"a\"\"\nb\"\r\n2", Some(11)),
            (b"1,\"a\"b\"\n2", Some(7)),
            (b"1,\"a\" ,\"\n\"\n2", Some(10)),
            (b"1,\"a\n", None),
        ] {
            assert_eq!(end_by_scan(bytes), end, "{:?}", bytes.escape_ascii());
            assert_eq!(end_by_split(bytes), end, "{:?}", bytes.escape_ascii());
        }
    }

    proptest! {
        /// The two readings of a record agree on where it ends.
        #[test]
        fn a_record_ends_where_split_record_ends_it(
            // Quotes are drawn twice as often as each other byte.
            bytes in proptest::collection::vec(
                proptest::sample::select(&b"\"\", \t\r\na"[..]),
                0..24,
            )
        ) {
            prop_assert_eq!(end_by_scan(&bytes), end_by_split(&bytes));
        }
    }
}

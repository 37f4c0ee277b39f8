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

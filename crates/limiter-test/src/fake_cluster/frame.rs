//! The Redis protocol (RESP2) as a fake node reads and writes it: a
//! client's command as its arguments, a server's reply as its bytes,
//! passed on unchanged.

use std::io::{Error, ErrorKind, Result};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// Reads one command (an array of bulk strings, as every Redis client
/// sends it); `None` when the client closed the connection.
pub(super) async fn read_command(
    reader: &mut (impl AsyncBufRead + Unpin),
) -> Result<Option<Vec<Vec<u8>>>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line).await? == 0 {
        return Ok(None);
    }
    let count = header(&line, b'*')?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_until(b'\n', &mut line).await?;
        let len = header(&line, b'$')?;
        let mut arg = vec![0; len + 2];
        reader.read_exact(&mut arg).await?;
        arg.truncate(len);
        args.push(arg);
    }
    Ok(Some(args))
}

/// Reads one whole reply (nested arrays included) as its bytes.
pub(super) async fn read_reply(reader: &mut (impl AsyncBufRead + Unpin)) -> Result<Vec<u8>> {
    let mut reply = Vec::new();
    // Replies still to read: arrays add their elements.
    let mut pending = 1usize;
    while pending > 0 {
        pending -= 1;
        let start = reply.len();
        if reader.read_until(b'\n', &mut reply).await? == 0 {
            return Err(Error::new(ErrorKind::UnexpectedEof, "the server closed"));
        }
        let line = &reply[start..];
        match line.first() {
            Some(b'+' | b'-' | b':') => {}
            Some(b'*') => pending += number(line)?.try_into().unwrap_or(0),
            Some(b'$') => {
                if let Ok(len) = usize::try_from(number(line)?) {
                    let body = reply.len();
                    reply.resize(body + len + 2, 0);
                    reader.read_exact(&mut reply[body..]).await?;
                }
            }
            _ => return Err(invalid(line)),
        }
    }
    Ok(reply)
}

/// A command as the client sends it.
pub(super) fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// An error reply: `-` and `text`.
pub(super) fn error(text: &str) -> Vec<u8> {
    format!("-{text}\r\n").into_bytes()
}

/// The length in a header line `kind` + number.
fn header(line: &[u8], kind: u8) -> Result<usize> {
    if line.first() != Some(&kind) {
        return Err(invalid(line));
    }
    usize::try_from(number(line)?).map_err(|_| invalid(line))
}

/// The number after a line's type byte.
fn number(line: &[u8]) -> Result<i64> {
    std::str::from_utf8(&line[1..])
        .ok()
        .and_then(|text| text.trim_end().parse().ok())
        .ok_or_else(|| invalid(line))
}

fn invalid(line: &[u8]) -> Error {
    Error::new(
        ErrorKind::InvalidData,
        format!(
            "not RESP2: {:?} (the fake speaks RESP2 only)",
            String::from_utf8_lossy(line)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_read_whole() {
        let mut input: &[u8] = b"*2\r\n$4\r\nPING\r\n$3\r\na\r\n\r\n";
        assert_eq!(
            read_command(&mut input).await.unwrap(),
            Some(vec![b"PING".to_vec(), b"a\r\n".to_vec()])
        );
        assert_eq!(read_command(&mut input).await.unwrap(), None);
        let reply: &[u8] = b"*3\r\n:1\r\n*2\r\n$2\r\nab\r\n$-1\r\n-ERR no\r\n+OK\r\n";
        let mut input = reply;
        let first = read_reply(&mut input).await.unwrap();
        assert_eq!(first, &reply[..reply.len() - 5]);
        assert_eq!(read_reply(&mut input).await.unwrap(), b"+OK\r\n");
        assert_eq!(
            command(&[b"GET", b"k"]),
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec()
        );
    }
}

//! The harnesses' own Redis client: one command on a new connection to a
//! server on `127.0.0.1`, sent either as a RESP array with its whole reply
//! read back as a [`Reply`] ([`call`]), or inline with the reply's first
//! line (or a bulk reply's contents) read back as text ([`raw_command`],
//! [`raw_query`]).
//!
//! The cluster harness speaks RESP arrays, so any argument works; the server
//! harness speaks inline commands, whose raw first line tests compare
//! (`+PONG`, `:0`, `-NOAUTH ...`).

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A reply of the Redis protocol (RESP2), as
/// [`RedisCluster::command`](crate::redis_cluster::RedisCluster::command)
/// returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`, without the dash.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$...`; `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*...`; `None` for the null array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// A status or bulk reply as text.
    ///
    /// # Panics
    ///
    /// On any other reply (with the reply).
    pub fn text(&self) -> String {
        match self {
            Self::Status(s) => s.clone(),
            Self::Bulk(Some(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("expected text, got {other:?}"),
        }
    }

    /// An integer reply.
    ///
    /// # Panics
    ///
    /// On any other reply (with the reply).
    pub fn integer(&self) -> i64 {
        match self {
            Self::Integer(n) => *n,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    /// An array reply's elements (empty for the null array).
    ///
    /// # Panics
    ///
    /// On any other reply (with the reply).
    pub fn array(&self) -> &[Reply] {
        match self {
            Self::Array(Some(items)) => items,
            Self::Array(None) => &[],
            other => panic!("expected an array, got {other:?}"),
        }
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error(_))
    }
}

/// Sends one command (as a RESP array, so any argument works) on a new
/// connection and reads its reply, within 5 seconds.
pub(crate) fn call(port: u16, password: Option<&str>, args: &[&str]) -> std::io::Result<Reply> {
    let stream = connect_local(port)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut request = Vec::new();
    let mut encode = |args: &[&str]| {
        request.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
    };
    if let Some(password) = password {
        encode(&["AUTH", password]);
    }
    encode(args);
    (&stream).write_all(&request)?;
    let mut reader = BufReader::new(stream);
    if password.is_some() {
        let auth = read_reply(&mut reader)?;
        if auth.is_error() {
            return Err(std::io::Error::other(format!(
                "AUTH on port {port}: {auth:?}"
            )));
        }
    }
    read_reply(&mut reader)
}

/// Reads one RESP2 reply.
fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let invalid =
        || std::io::Error::new(ErrorKind::InvalidData, format!("bad reply line {line:?}"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(invalid)?;
    let number = || rest.parse::<i64>().map_err(|_| invalid());
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(number()?),
        "$" => match usize::try_from(number()?) {
            Err(_) => Reply::Bulk(None),
            Ok(len) => Reply::Bulk(Some(read_bulk(reader, len)?)),
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Reply::Array(None),
            Ok(len) => Reply::Array(Some(
                (0..len)
                    .map(|_| read_reply(reader))
                    .collect::<std::io::Result<_>>()?,
            )),
        },
        _ => return Err(invalid()),
    })
}

/// The body of a bulk reply of `len` bytes, read with its CRLF.
fn read_bulk(reader: &mut impl Read, len: usize) -> std::io::Result<Vec<u8>> {
    let mut body = vec![0; len + 2];
    reader.read_exact(&mut body)?;
    body.truncate(len);
    Ok(body)
}

/// Sends one inline command and returns the reply's first line.
pub(crate) fn raw_command(port: u16, command: &str) -> std::io::Result<String> {
    raw_command_within(port, command, Duration::from_secs(5))
}

/// Sends one inline command and returns the reply's first line, waiting up
/// to `timeout` for it.
pub(crate) fn raw_command_within(
    port: u16,
    command: &str,
    timeout: Duration,
) -> std::io::Result<String> {
    let mut stream = send_inline(port, command, timeout)?;
    read_line(&mut stream)
}

/// Sends one inline command; returns a bulk reply's contents, or any other
/// reply's first line.
pub(crate) fn raw_query(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream = send_inline(port, command, Duration::from_secs(5))?;
    let first = read_line(&mut stream)?;
    let Some(len) = first
        .strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return Ok(first);
    };
    let body = read_bulk(&mut stream, len)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn send_inline(port: u16, command: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut stream = connect_local(port)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    Ok(stream)
}

/// A connection to `127.0.0.1:port`, tried again when a signal interrupts
/// it (`EINTR`: a test process that spawns children gets `SIGCHLD`).
fn connect_local(port: u16) -> std::io::Result<TcpStream> {
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            connected => return connected,
        }
    }
}

/// Reads up to and including CRLF; returns the line without it. A read
/// interrupted by a signal (`EINTR`: a test process that spawns children
/// gets `SIGCHLD`) is read again.
fn read_line(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut reply = Vec::new();
    let mut byte = [0u8];
    while !reply.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => reply.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&reply).trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        let mut input: &[u8] =
            b"*3\r\n+OK\r\n:-2\r\n*2\r\n$4\r\na\r\nb\r\n$-1\r\n-ERR no\r\n*-1\r\n";
        let reply = read_reply(&mut input).unwrap();
        assert_eq!(
            reply,
            Reply::Array(Some(vec![
                Reply::Status("OK".into()),
                Reply::Integer(-2),
                Reply::Array(Some(vec![
                    Reply::Bulk(Some(b"a\r\nb".to_vec())),
                    Reply::Bulk(None)
                ])),
            ]))
        );
        assert_eq!(
            read_reply(&mut input).unwrap(),
            Reply::Error("ERR no".into())
        );
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Array(None));
        assert!(read_reply(&mut input).is_err());
    }
}

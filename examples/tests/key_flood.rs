//! Floods of client-chosen keys against the example server, the real
//! `http_server` binary, over loopback: [`FLOOD_KEYS`] distinct
//! `x-api-key` values, ten times the server's cap, then keys of 200 KB and
//! of 1 MB. Every key is sent and answered, however long that takes: the
//! checks are on the answers' statuses and on the server's resident memory
//! (its `VmRSS`), which grows by no more than its limiter's documented
//! bound, `MemoryLimiter::max_bytes` (`max_keys × max_bytes_per_key`), plus
//! what its connections hold. Once on the command line's limiter, once on
//! a configuration file's.
//!
//! The binary is this package's example, which `cargo test` builds beside
//! this test (`target/<profile>/examples/http_server`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;

use limiter_core::Policy;
use limiter_memory::{MemoryLimiter, MemoryLimiterBuilder};
use limiter_test::ExampleServer;

/// The policy of both servers: a key lives an hour once admitted.
const POLICY: &str = "sliding-log:10/1h";

/// The servers' cap on keys.
const MAX_KEYS: usize = 5_000;

/// Distinct keys in the main flood: ten times the cap, so that nine in ten
/// are new keys the full map must refuse.
const FLOOD_KEYS: usize = 10 * MAX_KEYS;

/// Keep-alive connections the flood is pipelined over.
const CONNECTIONS: usize = 4;

/// Requests written to a connection at once.
const BATCH: usize = 512;

/// What the server holds beside its limiter, at most, per connection
/// open at once: hyper's read buffer (up to about 400 KB for a request's
/// head) and write buffer, and the task serving it.
const PER_CONNECTION: u64 = 1 << 20;

/// The example server, killed when dropped.
struct Server(ExampleServer);

impl Server {
    /// `http_server` with `args`, on a free loopback port.
    fn start(args: &[&str]) -> Self {
        let mut command = Command::new(http_server());
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        Self(ExampleServer::start(command))
    }

    /// Where it listens.
    fn addr(&self) -> SocketAddr {
        self.0.addr
    }

    /// The server's resident set size, in bytes.
    fn resident_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.child.id()))
            .expect("/proc/PID/status (Linux)");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .expect("VmRSS");
        kib * 1024
    }
}

/// The server: the example, built beside this test.
fn http_server() -> PathBuf {
    limiter_test::example_binary("limiter-examples", "http_server")
}

/// `GET /` with `x-api-key: {key}` into `out`.
fn request(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"GET / HTTP/1.1\r\nhost: flood\r\nx-api-key: ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n\r\n");
}

/// Reads `count` responses from `stream`; the count of each status.
fn read_statuses(stream: TcpStream, count: usize) -> BTreeMap<u16, usize> {
    let mut statuses = BTreeMap::new();
    let mut reader = BufReader::with_capacity(1 << 16, stream);
    let mut line = Vec::new();
    for read in 0..count {
        // The status line, then the headers up to an empty line.
        line.clear();
        assert_ne!(
            reader.read_until(b'\n', &mut line).unwrap(),
            0,
            "closed after {read}"
        );
        let status: u16 = std::str::from_utf8(&line[9..12]).unwrap().parse().unwrap();
        let mut length = 0;
        loop {
            line.clear();
            reader.read_until(b'\n', &mut line).unwrap();
            if line == b"\r\n" {
                break;
            }
            if let Some(value) = line.strip_prefix(b"content-length: ") {
                length = std::str::from_utf8(value).unwrap().trim().parse().unwrap();
            }
        }
        reader.consume_exactly(length);
        *statuses.entry(status).or_insert(0) += 1;
    }
    statuses
}

/// Skipping a body.
trait ConsumeExactly {
    fn consume_exactly(&mut self, length: usize);
}

impl<R: Read> ConsumeExactly for BufReader<R> {
    fn consume_exactly(&mut self, length: usize) {
        let mut body = vec![0; length];
        self.read_exact(&mut body).unwrap();
    }
}

/// `count` requests, request `i` keyed by `key(i)`, pipelined over
/// [`CONNECTIONS`] keep-alive connections to `addr`, each read by a thread
/// of its own while it is written; the count of each status answered.
fn flood(
    addr: SocketAddr,
    count: usize,
    key: impl Fn(usize, &mut Vec<u8>) + Sync,
) -> BTreeMap<u16, usize> {
    let key = &key;
    let per_connection = count.div_ceil(CONNECTIONS);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..CONNECTIONS)
            .map(|connection| {
                let stream = TcpStream::connect(addr).unwrap();
                let first = count.min(connection * per_connection);
                let last = count.min(first + per_connection);
                let reader = stream.try_clone().unwrap();
                let reading = scope.spawn(move || read_statuses(reader, last - first));
                scope.spawn(move || {
                    let mut stream = stream;
                    let (mut batch, mut name) = (Vec::new(), Vec::new());
                    for i in first..last {
                        name.clear();
                        key(i, &mut name);
                        request(&mut batch, &name);
                        if i + 1 == last || (i + 1 - first).is_multiple_of(BATCH) {
                            stream.write_all(&batch).unwrap();
                            batch.clear();
                        }
                    }
                });
                reading
            })
            .collect();
        let mut statuses = BTreeMap::new();
        for reading in readers {
            for (status, n) in reading.join().unwrap() {
                *statuses.entry(status).or_insert(0) += n;
            }
        }
        statuses
    })
}

/// `count` requests, each on a connection of its own, keyed by
/// `key(i)`: for keys beyond what the server reads of a request's head,
/// which it answers (431) and closes. Statuses answered, and the count
/// of connections closed with no answer read.
fn one_per_connection(
    addr: SocketAddr,
    count: usize,
    key: impl Fn(usize, &mut Vec<u8>),
) -> BTreeMap<u16, usize> {
    let mut statuses = BTreeMap::new();
    let (mut out, mut name) = (Vec::new(), Vec::new());
    for i in 0..count {
        out.clear();
        name.clear();
        key(i, &mut name);
        request(&mut out, &name);
        let mut stream = TcpStream::connect(addr).unwrap();
        // The server may close before reading it all.
        let _ = stream.write_all(&out);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let status = std::str::from_utf8(answer.get(9..12).unwrap_or(b"000"))
            .unwrap()
            .parse()
            .unwrap_or(0);
        *statuses.entry(status).or_insert(0) += 1;
    }
    statuses
}

/// Key `i` of the flood: distinct, short.
fn short_key(i: usize, out: &mut Vec<u8>) {
    write!(out, "flood-{i}").unwrap();
}

/// Key `i` of `len` bytes: its number, then `k`s.
fn long_key(len: usize) -> impl Fn(usize, &mut Vec<u8>) + Sync {
    move |i, out| {
        write!(out, "{i}-").unwrap();
        out.resize(len, b'k');
    }
}

/// Floods `server` (keyed by `x-api-key`, on [`POLICY`], capped at
/// [`MAX_KEYS`] keys of the default `max_key_bytes`) and checks its memory.
fn flood_and_measure(server: &Server) {
    let bound = MemoryLimiter::builder(POLICY.parse::<Policy>().unwrap())
        .max_keys(MAX_KEYS)
        .max_key_bytes(MemoryLimiterBuilder::DEFAULT_MAX_KEY_BYTES)
        .build()
        .max_bytes()
        .unwrap() as u64;
    let allowance = bound + CONNECTIONS as u64 * PER_CONNECTION;
    // Warmed up: one of each request the floods send.
    let warm = flood(server.addr(), CONNECTIONS, |i, out| {
        write!(out, "warm-{i}").unwrap()
    });
    assert_eq!(warm, BTreeMap::from([(200, CONNECTIONS)]));
    let before = server.resident_bytes();

    let statuses = flood(server.addr(), FLOOD_KEYS, short_key);
    // The cap admits its keys (less the warm-up's) and answers every other
    // new key 503, storing none.
    let admitted = MAX_KEYS - CONNECTIONS;
    assert_eq!(
        statuses,
        BTreeMap::from([(200, admitted), (503, FLOOD_KEYS - admitted)]),
    );
    let after_flood = server.resident_bytes();
    eprintln!(
        "{FLOOD_KEYS} keys: resident {before} -> {after_flood} bytes, \
         bound {bound} + {} for connections",
        allowance - bound
    );
    assert!(
        after_flood <= before + allowance,
        "{after_flood} > {before} + {allowance}"
    );

    // Keys the server reads whole (200 KB), at the cap: answered 503, each
    // hashed on the way; and 1 MB keys, past the most a request's head
    // may hold: answered 431, or the connection closed unread.
    let long = flood(server.addr(), 300, long_key(200_000));
    assert_eq!(long, BTreeMap::from([(503, 300)]));
    let huge = one_per_connection(server.addr(), 50, long_key(1 << 20));
    assert!(
        huge.keys().all(|status| [0, 431].contains(status)),
        "{huge:?}"
    );
    let after_long = server.resident_bytes();
    eprintln!("then 300 keys of 200 KB and 50 of 1 MB: resident {after_long} bytes");
    assert!(
        after_long <= before + allowance,
        "{after_long} > {before} + {allowance}"
    );
}

#[test]
fn the_command_lines_limiter_holds_a_flood_of_keys_within_its_bound() {
    let max_keys = MAX_KEYS.to_string();
    let server = Server::start(&[
        "--policy",
        POLICY,
        "--key",
        "header:x-api-key",
        "--max-keys",
        &max_keys,
    ]);
    flood_and_measure(&server);
}

#[test]
fn a_configuration_files_limiter_holds_a_flood_of_keys_within_its_bound() {
    let file = std::env::temp_dir().join(format!("key-flood-{}.toml", std::process::id()));
    let text = format!(
        "[policies.api]\nlimits = [\"{POLICY}\"]\nkey = \"header:x-api-key\"\nmax_keys = {MAX_KEYS}\n"
    );
    std::fs::write(&file, text).unwrap();
    let server = Server::start(&["--config", file.to_str().unwrap(), "--name", "api"]);
    std::fs::remove_file(&file).unwrap();
    flood_and_measure(&server);
}

//! [`RedisServer`]: a real `redis-server` on a free loopback port, for tests.
//!
//! Each server runs in its own temporary directory with persistence off
//! (`--save "" --appendonly no`) and is stopped when dropped. It is started
//! through a small `sh` wrapper that holds the read end of a pipe from this
//! process: when the test process exits for any reason (including a panic,
//! `SIGKILL`, or a server kept in a `static` whose `Drop` never runs), the
//! pipe closes and the wrapper stops the server, so no `redis-server`
//! outlives the tests.
//!
//! ```no_run
//! use limiter_test::redis_server::RedisServer;
//!
//! let server = RedisServer::start();
//! println!("redis at {}", server.url());
//! // dropped here: the server is stopped and its directory removed
//! ```

use std::fmt;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a missing `redis-server` panics with: how to install it.
pub const INSTALL_HINT: &str =
    "redis-server not found: install it with `apt-get update && apt-get install -y redis-server`";

/// How long a starting server has to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a stopping server has to exit before it is sent `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The wrapper, run in the server's directory: starts the server with the
/// arguments given, prints its pid, then waits for standard input to close
/// (this process stopped it or exited), stops the server and removes the
/// directory (named by `$LIMITER_REDIS_DIR`; `Drop` never runs for a
/// server held in a `static`).
const WRAPPER: &str = r#"redis-server "$@" >redis.out 2>&1 & pid=$!
echo "$pid"
read -r _ignored
kill "$pid" 2>/dev/null
wait "$pid"
rm -rf "$LIMITER_REDIS_DIR""#;

/// A running `redis-server` on `127.0.0.1`, stopped on drop.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    process: Option<Running>,
}

/// The wrapper shell, the pipe that keeps the server alive, and the
/// server's own pid (to `SIGKILL` it if it does not stop in time).
struct Running {
    wrapper: Child,
    lifeline: ChildStdin,
    server_pid: u32,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers
    /// `PING`.
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed (with the install command in the
    /// message), or if the server does not answer within 20 seconds (with
    /// its log).
    pub fn start() -> Self {
        ensure_installed();
        let mut server = Self {
            port: free_port(),
            dir: unique_dir(),
            process: None,
        };
        server.launch();
        server
    }

    /// The server's port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL to connect to, e.g. `redis://127.0.0.1:6390/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's working directory (its log is `redis.log` there),
    /// removed when the server stops.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the server is running (not [`stop`](Self::stop)ped).
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// Stops the server and waits until it has exited: connections to it
    /// fail from now on. Does nothing if it is already stopped.
    pub fn stop(&mut self) {
        if let Some(running) = self.process.take() {
            running.stop();
        }
    }

    /// Stops the server (if running) and starts a fresh one on the same port:
    /// every key and loaded script is gone, as after a real restart without
    /// persistence.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Sends one command (inline protocol, arguments without spaces) and
    /// returns the raw reply's first line, e.g. `+PONG`.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn command(&self, command: &str) -> String {
        raw_command(self.port, command)
            .unwrap_or_else(|e| panic!("redis-server on port {}: {e}", self.port))
    }

    fn launch(&mut self) {
        std::fs::create_dir_all(&self.dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", self.dir.display()));
        let log = self.dir.join("redis.log");
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let log_path = log.to_string_lossy().into_owned();
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("limiter-redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir, "--logfile", &log_path])
            .args(["--daemonize", "no"])
            .current_dir(&self.dir)
            .env("LIMITER_REDIS_DIR", &self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run sh to start redis-server: {e}"));
        let lifeline = wrapper.stdin.take().expect("stdin is piped");
        let stdout = wrapper.stdout.take().expect("stdout is piped");
        let mut pid_line = String::new();
        BufReader::new(stdout)
            .read_line(&mut pid_line)
            .unwrap_or_else(|e| panic!("cannot read redis-server's pid: {e}"));
        let server_pid = pid_line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("unexpected pid line from the wrapper: {pid_line:?}"));
        let running = Running {
            wrapper,
            lifeline,
            server_pid,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if matches!(raw_command(self.port, "PING").as_deref(), Ok("+PONG")) {
                self.process = Some(running);
                return;
            }
            if Instant::now() > deadline || !process_alive(server_pid) {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                let out = std::fs::read_to_string(self.dir.join("redis.out")).unwrap_or_default();
                running.stop();
                panic!(
                    "redis-server on port {} did not answer PING within {START_TIMEOUT:?}; \
                     output:\n{out}\nlog:\n{log}",
                    self.port
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Running {
    fn stop(self) {
        let Self {
            mut wrapper,
            lifeline,
            server_pid,
        } = self;
        drop(lifeline); // the wrapper reads EOF and stops the server
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match wrapper.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    let _ = Command::new("kill")
                        .args(["-9", &server_pid.to_string()])
                        .status();
                    let _ = wrapper.kill();
                    let _ = wrapper.wait();
                    break;
                }
                Ok(None) => thread::sleep(Duration::from_millis(10)),
            }
        }
        // The wrapper waited for the server; make sure anyway.
        while process_alive(server_pid) {
            let _ = Command::new("kill")
                .args(["-9", &server_pid.to_string()])
                .status();
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("url", &self.url())
            .field("dir", &self.dir)
            .field("running", &self.is_running())
            .finish()
    }
}

/// Panics with [`INSTALL_HINT`] unless `redis-server --version` runs.
fn ensure_installed() {
    match Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("{INSTALL_HINT} (`redis-server --version` exited with {status})"),
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
        Err(e) => panic!("{INSTALL_HINT} (running it failed: {e})"),
    }
}

/// A port that was free a moment ago: bind port 0, read it, release it.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    listener.local_addr().expect("bound address").port()
}

/// A fresh directory name under the system temp dir, unique per process
/// and per call.
fn unique_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "limiter-redis-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Whether a process with this pid exists (`kill -0`).
fn process_alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Sends one inline command and returns the reply's first line.
fn raw_command(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut reply = Vec::new();
    let mut byte = [0u8];
    while !reply.ends_with(b"\r\n") {
        if stream.read(&mut byte)? == 0 {
            break;
        }
        reply.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&reply).trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_answers_restarts_and_stops() {
        let mut server = RedisServer::start();
        assert_eq!(server.command("PING"), "+PONG");
        assert_eq!(server.command("SET k v"), "+OK");
        server.restart();
        assert_eq!(server.command("EXISTS k"), ":0", "a restart starts empty");
        let port = server.port();
        let dir = server.dir().to_owned();
        server.stop();
        assert!(!server.is_running());
        assert!(
            raw_command(port, "PING").is_err(),
            "stopped means unreachable"
        );
        drop(server);
        assert!(
            !dir.exists(),
            "the directory is removed when the server stops"
        );
    }
}

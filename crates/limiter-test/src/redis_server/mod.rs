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
//! Faults for resilience tests: [`kill`](RedisServer::kill) (`SIGKILL`, a
//! crash), [`pause`](RedisServer::pause) and [`resume`](RedisServer::resume)
//! (`SIGSTOP`/`SIGCONT`, a hung server), [`stop`](RedisServer::stop) and
//! [`restart`](RedisServer::restart) (graceful); extra server arguments
//! ([`start_with_args`](RedisServer::start_with_args)); a server with
//! limiter-redis-module loaded
//! ([`start_with_module`](RedisServer::start_with_module)); and a TLS server
//! with a throwaway CA ([`start_tls`](RedisServer::start_tls), certificates
//! made with the `openssl` command line).
//!
//! ```no_run
//! use limiter_test::redis_server::RedisServer;
//!
//! let server = RedisServer::start();
//! println!("redis at {}", server.url());
//! // dropped here: the server is stopped and its directory removed
//! ```

use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use self::process::{process_alive, Running};
use crate::resp::{raw_command, raw_command_within, raw_query};

mod dirs;
mod module;
mod ports;
mod process;
mod tls;

pub use self::module::{module_path, optimized_module_path};
pub use self::tls::unrelated_ca_pem;

pub(crate) use self::dirs::unique_dir;
pub(crate) use self::ports::free_ports;
pub(crate) use self::tls::tls_args;

/// What a missing `redis-server` panics with: how to install it.
pub const INSTALL_HINT: &str =
    "redis-server not found: install it with `apt-get update && apt-get install -y redis-server`";

/// How long a starting server has to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `redis-server` on `127.0.0.1`, stopped on drop.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    /// Arguments after the harness's own, kept for restarts.
    extra_args: Vec<String>,
    tls: Option<Tls>,
    process: Option<Running>,
}

/// A TLS server's port and the files of its throwaway CA, kept outside the
/// server's directory (which the wrapper removes on every stop) so that a
/// restart serves the same certificate.
struct Tls {
    port: u16,
    dir: PathBuf,
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
        Self::start_with_args(&[])
    }

    /// As [`start`](Self::start), with `args` after the harness's own (a
    /// later setting wins in Redis), e.g. `["--enable-debug-command",
    /// "local"]` or `["--requirepass", "s3cret"]`. Kept for
    /// [`restart`](Self::restart). A server that requires a password is
    /// taken as started when it answers `PING` with `NOAUTH`;
    /// [`command`](Self::command) then only sees `NOAUTH` replies.
    pub fn start_with_args(args: &[&str]) -> Self {
        Self::start_on_port(free_ports::<1>()[0], args)
    }

    /// As [`start_with_args`](Self::start_with_args), on `port` (one the
    /// caller found free, e.g. with other ports it needs at the same time).
    pub fn start_on_port(port: u16, args: &[&str]) -> Self {
        ensure_installed("redis-server", INSTALL_HINT);
        let mut server = Self {
            port,
            dir: unique_dir(),
            extra_args: args.iter().map(|&a| a.to_owned()).collect(),
            tls: None,
            process: None,
        };
        server.launch();
        server
    }

    /// Starts a server that also serves TLS on [`tls_port`](Self::tls_port),
    /// with a certificate for `127.0.0.1` (and `localhost`) signed by a
    /// throwaway CA made now with the `openssl` command line (clients are
    /// not asked for certificates). Trust [`ca_pem`](Self::ca_pem) to
    /// connect to [`tls_url`](Self::tls_url). The plain [`port`](Self::port)
    /// stays open for the harness's own [`command`](Self::command)s.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), or if `openssl` is missing or fails (with
    /// its output).
    pub fn start_tls() -> Self {
        ensure_installed("redis-server", INSTALL_HINT);
        let [port, tls_port] = free_ports::<2>();
        let dir = unique_dir();
        let tls_dir = dir.with_extension("tls");
        crate::certificates::generate(&tls_dir);
        let extra_args = tls_args(tls_port, &tls_dir);
        let mut server = Self {
            port,
            dir,
            extra_args,
            tls: Some(Tls {
                port: tls_port,
                dir: tls_dir,
            }),
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

    /// The TLS port of a [`start_tls`](Self::start_tls) server.
    ///
    /// # Panics
    ///
    /// If the server was not started with TLS.
    pub fn tls_port(&self) -> u16 {
        self.tls
            .as_ref()
            .expect("not a TLS server: use start_tls")
            .port
    }

    /// The TLS URL of a [`start_tls`](Self::start_tls) server, e.g.
    /// `rediss://127.0.0.1:6391/`.
    ///
    /// # Panics
    ///
    /// If the server was not started with TLS.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port())
    }

    /// The PEM certificate of the throwaway CA that signed a
    /// [`start_tls`](Self::start_tls) server's certificate.
    ///
    /// # Panics
    ///
    /// If the server was not started with TLS.
    pub fn ca_pem(&self) -> Vec<u8> {
        let tls = self.tls.as_ref().expect("not a TLS server: use start_tls");
        let path = tls.dir.join("ca.crt");
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// The pid of the `redis-server` process, if it is running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Running::pid)
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

    /// Kills the server with `SIGKILL`, as a crash: its sockets are closed
    /// without a goodbye, and connections to it fail from now on (when this
    /// returns, the process has exited). Does nothing if it is not running.
    /// [`restart`](Self::restart) starts a fresh one.
    pub fn kill(&mut self) {
        if let Some(running) = self.process.take() {
            running.kill();
        }
    }

    /// Suspends the server with `SIGSTOP`, as a hung server: connections
    /// (and new TCP connections, queued by the kernel) stay open, and
    /// nothing is answered until [`resume`](Self::resume). When this
    /// returns, the process is stopped. Stopping or dropping a paused
    /// server resumes it first, and so does the wrapper when this process
    /// dies.
    ///
    /// # Panics
    ///
    /// If the server is not running.
    pub fn pause(&self) {
        self.process
            .as_ref()
            .expect("pause: the server is not running")
            .pause();
    }

    /// Resumes a [`pause`](Self::pause)d server (`SIGCONT`): it answers
    /// everything queued meanwhile. When this returns, the process runs.
    ///
    /// # Panics
    ///
    /// If the server is not running.
    pub fn resume(&self) {
        self.process
            .as_ref()
            .expect("resume: the server is not running")
            .resume();
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

    /// Sends one command as [`command`](Self::command) does, but returns the
    /// whole reply: a bulk string's contents (e.g. `CLIENT LIST`'s lines,
    /// `INFO`'s text), or the first line of any other reply.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn query(&self, command: &str) -> String {
        raw_query(self.port, command)
            .unwrap_or_else(|e| panic!("redis-server on port {}: {e}", self.port))
    }

    /// How many normal clients are connected, not counting the connection
    /// that asks (`CLIENT LIST TYPE normal`).
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn connected_clients(&self) -> usize {
        self.query("CLIENT LIST TYPE normal")
            .lines()
            .filter(|line| !line.trim().is_empty())
            .count()
            .saturating_sub(1)
    }

    /// Sends one command on a thread of its own and returns the thread,
    /// which yields the reply's first line: for a command that blocks the
    /// server, such as `DEBUG SLEEP 1` (allowed with
    /// `--enable-debug-command local`). The reply is awaited up to 30 s.
    pub fn spawn_command(&self, command: &str) -> thread::JoinHandle<std::io::Result<String>> {
        let port = self.port;
        let command = command.to_owned();
        thread::spawn(move || raw_command_within(port, &command, Duration::from_secs(30)))
    }

    fn launch(&mut self) {
        std::fs::create_dir_all(&self.dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", self.dir.display()));
        let log = self.dir.join("redis.log");
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let log_path = log.to_string_lossy().into_owned();
        let mut args = vec!["--port", &port, "--bind", "127.0.0.1"];
        args.extend(["--save", "", "--appendonly", "no"]);
        args.extend(["--dir", &dir, "--logfile", &log_path]);
        args.extend(["--daemonize", "no"]);
        args.extend(self.extra_args.iter().map(String::as_str));
        let running = Running::spawn(&self.dir, &args);
        let server_pid = running.pid();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = raw_command(self.port, "PING")
                .is_ok_and(|reply| reply == "+PONG" || reply.starts_with("-NOAUTH"));
            if ready {
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(tls) = &self.tls {
            let _ = std::fs::remove_dir_all(&tls.dir);
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("url", &self.url())
            .field("tls_port", &self.tls.as_ref().map(|tls| tls.port))
            .field("dir", &self.dir)
            .field("extra_args", &self.extra_args)
            .field("running", &self.is_running())
            .finish()
    }
}

/// Panics with `hint` unless `program --version` runs.
pub(crate) fn ensure_installed(program: &str, hint: &str) {
    match Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("{hint} (`{program} --version` exited with {status})"),
        Err(e) if e.kind() == ErrorKind::NotFound => panic!("{hint}"),
        Err(e) => panic!("{hint} (running it failed: {e})"),
    }
}

/// A Redis key prefix no other test of this process uses: tests sharing
/// one server never share state.
pub fn fresh_prefix(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "test-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;

    use super::process::{process_running, process_state, wait_for};
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

    #[test]
    fn kill_pause_resume_and_clients() {
        let mut server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
        assert_eq!(server.connected_clients(), 0);
        let held = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        wait_for(|| server.connected_clients() == 1, "one client");
        assert!(server.query("INFO server").contains("redis_version"));

        server.pause();
        let pid = server.pid().unwrap();
        assert_eq!(process_state(pid), Some('T'));
        let silent = raw_command_within(server.port(), "PING", Duration::from_millis(200));
        assert!(
            silent.is_err(),
            "a paused server answers nothing: {silent:?}"
        );
        server.resume();
        assert_eq!(server.command("PING"), "+PONG");

        let sleeping = server.spawn_command("DEBUG SLEEP 0.2");
        assert_eq!(sleeping.join().unwrap().unwrap(), "+OK");

        server.kill();
        assert!(!server.is_running());
        assert!(!process_running(pid));
        assert!(
            raw_command(server.port(), "PING").is_err(),
            "killed means unreachable"
        );
        drop(held);
        server.restart();
        assert_eq!(server.command("PING"), "+PONG");
        let pid = server.pid().unwrap();
        // A paused server still stops (the wrapper continues it).
        server.pause();
        let dir = server.dir().to_owned();
        drop(server);
        assert!(!process_running(pid) && !dir.exists());
    }

    #[test]
    fn a_password_protected_server_starts() {
        let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
        assert!(server.command("GET k").starts_with("-NOAUTH"));
    }

    #[test]
    fn a_tls_server_serves_both_ports() {
        let server = RedisServer::start_tls();
        assert_eq!(server.command("PING"), "+PONG");
        assert_ne!(server.tls_port(), server.port());
        assert!(server.tls_url().starts_with("rediss://127.0.0.1:"));
        let pem = String::from_utf8(server.ca_pem()).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        assert_ne!(unrelated_ca_pem(), server.ca_pem());
        // A plain-text client on the TLS port gets no PONG.
        let reply = raw_command_within(server.tls_port(), "PING", Duration::from_millis(500));
        assert!(!matches!(reply.as_deref(), Ok("+PONG")), "{reply:?}");
    }
}

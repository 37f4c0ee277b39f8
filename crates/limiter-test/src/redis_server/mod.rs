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
//! ([`start_with_args`](RedisServer::start_with_args)); and a TLS server
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
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
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
/// A server [`pause`](RedisServer::pause)d with `SIGSTOP` acts on `SIGTERM`
/// only once continued, hence the `SIGCONT`.
const WRAPPER: &str = r#"redis-server "$@" >redis.out 2>&1 & pid=$!
echo "$pid"
read -r _ignored
kill "$pid" 2>/dev/null
kill -CONT "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$LIMITER_REDIS_DIR""#;

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
        ensure_installed();
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
        ensure_installed();
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
        self.process.as_ref().map(|running| running.server_pid)
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
            signal(running.server_pid, "KILL");
            // Exited (a zombie until the wrapper reaps it): its sockets are
            // closed.
            wait_for(
                || !process_running(running.server_pid),
                "redis-server to exit after SIGKILL",
            );
            running.stop(); // the wrapper reaps it and removes the directory
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
        let pid = self.pid().expect("pause: the server is not running");
        signal(pid, "STOP");
        wait_for(|| process_state(pid) == Some('T'), "redis-server to stop");
    }

    /// Resumes a [`pause`](Self::pause)d server (`SIGCONT`): it answers
    /// everything queued meanwhile. When this returns, the process runs.
    ///
    /// # Panics
    ///
    /// If the server is not running.
    pub fn resume(&self) {
        let pid = self.pid().expect("resume: the server is not running");
        signal(pid, "CONT");
        wait_for(
            || process_state(pid) != Some('T'),
            "redis-server to continue",
        );
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
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("limiter-redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &dir, "--logfile", &log_path])
            .args(["--daemonize", "no"])
            .args(&self.extra_args)
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

/// `N` distinct loopback ports that were free a moment ago (each bound,
/// all held at once, then released), taken below the kernel's ephemeral
/// range.
///
/// Why not port 0: the kernel hands out ephemeral ports, and once released
/// one can be taken at once by any outgoing connection (the tests' clients,
/// a cluster's bus) before the server binds it: a server started beside
/// several clusters failed with "Address already in use" in CI. Ports
/// below the range are never given to outgoing connections; test
/// processes start at different offsets (by pid) and skip any port that
/// something holds.
pub(crate) fn free_ports<const N: usize>() -> [u16; N] {
    let (low, high) = (10_000, ephemeral_start().max(10_000 + 4 * N as u32));
    let span = high - low;
    static NEXT: AtomicU64 = AtomicU64::new(u64::MAX);
    let _ = NEXT.compare_exchange(
        u64::MAX,
        u64::from(std::process::id()) * 7_919,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let mut held = Vec::with_capacity(N);
    for _ in 0..span {
        if held.len() == N {
            break;
        }
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % u64::from(span);
        let port = (u64::from(low) + offset) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    assert_eq!(
        held.len(),
        N,
        "no {N} free loopback ports between {low} and {high}"
    );
    std::array::from_fn(|i| held[i].local_addr().expect("bound address").port())
}

/// The first port of the kernel's ephemeral range (Linux's
/// `ip_local_port_range`; 32768, its default, elsewhere).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The PEM certificate of a fresh throwaway CA that signed nothing: a
/// client trusting only it must refuse every server.
///
/// # Panics
///
/// If `openssl` is missing or fails.
pub fn unrelated_ca_pem() -> Vec<u8> {
    let dir = unique_dir().with_extension("ca");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    crate::certificates::generate_ca(&dir, "limiter unrelated test CA");
    let pem = std::fs::read(dir.join("ca.crt")).expect("the CA certificate was written");
    let _ = std::fs::remove_dir_all(&dir);
    pem
}

/// The arguments serving TLS on `tls_port` with the certificates
/// [`generate`](crate::certificates::generate) wrote into `dir` (clients
/// need no certificate of their own).
pub(crate) fn tls_args(tls_port: u16, dir: &Path) -> Vec<String> {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    vec![
        "--tls-port".to_owned(),
        tls_port.to_string(),
        "--tls-cert-file".to_owned(),
        file("server.crt"),
        "--tls-key-file".to_owned(),
        file("server.key"),
        "--tls-ca-cert-file".to_owned(),
        file("ca.crt"),
        "--tls-auth-clients".to_owned(),
        "no".to_owned(),
    ]
}

/// A fresh directory name under the system temp dir, unique per process
/// and per call. The first call of a process removes the directories left
/// by test processes that died without dropping their servers (killed, or
/// aborted by a timeout).
pub(crate) fn unique_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SWEPT: Once = Once::new();
    SWEPT.call_once(|| remove_dirs_of_dead_processes(&std::env::temp_dir()));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!(
        "limiter-redis-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Removes every `limiter-redis-PID-…` directory under `parent` whose
/// process is gone (no `/proc/PID`). A directory of a live process, or of a
/// process that reused a dead one's PID, is left alone.
fn remove_dirs_of_dead_processes(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("limiter-redis-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Sends `SIGsignal` to `pid` (`kill -signal pid`).
fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Polls `condition` every 5 ms for up to [`STOP_TIMEOUT`].
fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + STOP_TIMEOUT;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "waited {STOP_TIMEOUT:?} for {what}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// The process's state letter from `/proc/PID/stat` (`R`, `S`, `T` for
/// stopped, `Z` for a zombie...), or `None` if it does not exist.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether `pid` is a live process: it exists and is not a zombie (an
/// exited process whose parent has not reaped it yet has closed its
/// sockets). Without `/proc`, whether it exists.
fn process_running(pid: u32) -> bool {
    if Path::new("/proc/self/stat").exists() {
        return process_state(pid).is_some_and(|state| state != 'Z' && state != 'X');
    }
    process_alive(pid)
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
    raw_command_within(port, command, Duration::from_secs(5))
}

/// Sends one inline command and returns the reply's first line, waiting up
/// to `timeout` for it.
fn raw_command_within(port: u16, command: &str, timeout: Duration) -> std::io::Result<String> {
    let mut stream = send_inline(port, command, timeout)?;
    read_line(&mut stream)
}

/// Sends one inline command; returns a bulk reply's contents, or any other
/// reply's first line.
fn raw_query(port: u16, command: &str) -> std::io::Result<String> {
    let mut stream = send_inline(port, command, Duration::from_secs(5))?;
    let first = read_line(&mut stream)?;
    let Some(len) = first
        .strip_prefix('$')
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return Ok(first);
    };
    let mut body = vec![0u8; len + 2]; // and its CRLF
    stream.read_exact(&mut body)?;
    body.truncate(len);
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
pub(crate) fn connect_local(port: u16) -> std::io::Result<TcpStream> {
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
    use super::*;

    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let ports = free_ports::<18>();
        let mut sorted = ports.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 18, "{ports:?}");
        for port in ports {
            assert!(u32::from(port) < ephemeral_start(), "{port}");
            assert_ne!(port, held.local_addr().unwrap().port());
            TcpListener::bind(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{port}: {e}"));
        }
    }

    #[test]
    fn directories_of_dead_processes_are_removed_and_live_ones_kept() {
        let parent = unique_dir().with_extension("sweep");
        // No process has PID 4294967295 (Linux PIDs stop at 2^22).
        let dead = parent.join("limiter-redis-4294967295-0-1.ca");
        let live = parent.join(format!("limiter-redis-{}-0-1", std::process::id()));
        let other = parent.join("not-ours-4294967295");
        for dir in [&dead, &live, &other] {
            std::fs::create_dir_all(dir.join("inside")).unwrap();
        }
        remove_dirs_of_dead_processes(&parent);
        assert!(!dead.exists(), "a dead process's directory is removed");
        assert!(live.exists(), "a live process's directory is kept");
        assert!(other.exists(), "another name is left alone");
        std::fs::remove_dir_all(&parent).unwrap();
    }

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

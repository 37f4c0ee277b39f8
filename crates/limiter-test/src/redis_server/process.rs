//! The `redis-server` process behind a [`RedisServer`](super::RedisServer):
//! the `sh` wrapper that starts it and stops it once this process lets go
//! of it or exits, the signals that crash, hang and continue it, and
//! whether it still runs.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a stopping server has to exit before it is sent `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The wrapper, run in the server's directory: starts the server with the
/// arguments given, prints its pid, then waits for standard input to close
/// (this process stopped it or exited), stops the server and removes the
/// directory (named by `$LIMITER_REDIS_DIR`; `Drop` never runs for a
/// server held in a `static`).
/// A server [`pause`](super::RedisServer::pause)d with `SIGSTOP` acts on `SIGTERM`
/// only once continued, hence the `SIGCONT`.
const WRAPPER: &str = r#"redis-server "$@" >redis.out 2>&1 & pid=$!
echo "$pid"
read -r _ignored
kill "$pid" 2>/dev/null
kill -CONT "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$LIMITER_REDIS_DIR""#;

/// The wrapper shell, the pipe that keeps the server alive, and the
/// server's own pid (to `SIGKILL` it if it does not stop in time).
pub(super) struct Running {
    wrapper: Child,
    lifeline: ChildStdin,
    server_pid: u32,
}

impl Running {
    /// Starts `redis-server args` through the wrapper in `dir` (which the
    /// wrapper removes once the server stops), and returns once the wrapper
    /// has printed the server's pid.
    pub(super) fn spawn(dir: &Path, args: &[&str]) -> Self {
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("limiter-redis-server")
            .args(args)
            .current_dir(dir)
            .env("LIMITER_REDIS_DIR", dir)
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
        Self {
            wrapper,
            lifeline,
            server_pid,
        }
    }

    /// The pid of the `redis-server` process.
    pub(super) fn pid(&self) -> u32 {
        self.server_pid
    }

    /// Kills the server with `SIGKILL` and waits until it has exited, then
    /// stops the wrapper, which reaps it and removes the directory.
    pub(super) fn kill(self) {
        signal(self.server_pid, "KILL");
        // Exited (a zombie until the wrapper reaps it): its sockets are
        // closed.
        wait_for(
            || !process_running(self.server_pid),
            "redis-server to exit after SIGKILL",
        );
        self.stop();
    }

    /// Suspends the server with `SIGSTOP` and waits until it is stopped.
    pub(super) fn pause(&self) {
        signal(self.server_pid, "STOP");
        wait_for(
            || process_state(self.server_pid) == Some('T'),
            "redis-server to stop",
        );
    }

    /// Continues the server with `SIGCONT` and waits until it runs.
    pub(super) fn resume(&self) {
        signal(self.server_pid, "CONT");
        wait_for(
            || process_state(self.server_pid) != Some('T'),
            "redis-server to continue",
        );
    }

    /// Closes the lifeline and waits until the wrapper and the server have
    /// exited, killing both if they take longer than [`STOP_TIMEOUT`].
    pub(super) fn stop(self) {
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

/// Sends `SIGsignal` to `pid` (`kill -signal pid`).
fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Polls `condition` every 5 ms for up to [`STOP_TIMEOUT`].
pub(super) fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
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
pub(super) fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether `pid` is a live process: it exists and is not a zombie (an
/// exited process whose parent has not reaped it yet has closed its
/// sockets). Without `/proc`, whether it exists.
pub(super) fn process_running(pid: u32) -> bool {
    if Path::new("/proc/self/stat").exists() {
        return process_state(pid).is_some_and(|state| state != 'Z' && state != 'X');
    }
    process_alive(pid)
}

/// Whether a process with this pid exists (`kill -0`).
pub(super) fn process_alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

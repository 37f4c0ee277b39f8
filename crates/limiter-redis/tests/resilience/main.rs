//! The fault matrix against a real `redis-server`: kill -9 and restart, a
//! graceful restart, `FUNCTION FLUSH`, `CLIENT KILL`, `DEBUG SLEEP`,
//! `SIGSTOP`/`SIGCONT`, a demoted primary (`REPLICAOF`), a server loading
//! its data (`LOADING`), a server that never answers and a refused port,
//! each under 64 concurrent callers. For each, what the callers see:
//!
//! - **waits are bounded**: no caller that meets the fault waits past
//!   [`IN_FLIGHT_BOUND`] (a reconnect and a retry, [`RETRY_BOUND`], when
//!   its connection breaks or its function is flushed); a hung server
//!   costs its callers a command timeout (their failures are timeouts,
//!   nothing to reconnect). These bounds say the callers did not hang, with
//!   [`SLACK`] for a loaded machine; what the tests count is speed-free;
//! - **failed decisions are bounded**: at most one that cost a round trip
//!   per caller (in-flight request) per outage; once the outage is known,
//!   and while the server is still down, every call is answered by the open
//!   circuit (`Unavailable`: no round trip, no wait on the probe); none
//!   after recovery; none at all where the fault is survived by the retry
//!   on a new connection (`CLIENT KILL`, `FUNCTION FLUSH`, a restart while
//!   idle);
//! - **no over-admission**: a long-window sliding log admits exactly its
//!   limit, or twice its limit where the fault wiped the server's state (a
//!   restart without persistence, a demotion synced from an empty primary);
//! - **recovery is bounded**: decisions succeed again within
//!   [`RECOVERY_BOUND`] of the server being back;
//! - **no leaked connections**: the server sees exactly the backend's
//!   connection after recovery (`CLIENT LIST`), and none once the backend is
//!   dropped.
//!
//! The matrix runs under [`FailurePolicy::ReturnError`] (core's
//! [`Resilient`] wrapper) so that every failure is visible.
//!
//! Here the bounds and the fixtures; in the modules, the matrix's faults
//! (`fault_matrix`), a server that never answers and a refused port
//! (`unreachable`), the callers they run (`load`), and each failure
//! policy's answer to an outage (`failure_policies`).

#[path = "../common/mod.rs"]
mod common;

mod failure_policies;
mod fault_matrix;
mod load;
mod unreachable;

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use limiter_core::{
    DecisionSource, Error, FailurePolicy, Limiter, LimiterExt, ManualClock, Policy, Rate, Resilient,
};
use limiter_redis::{BackendErrorKind, RedisBackend, RedisLimiter};

/// A Redis limiter under a failure policy (core's wrapper). The wrapper
/// tries the backend on every request (probe interval zero): the backend's
/// own circuit answers at once while Redis is down, and that is what the
/// matrix measures.
type Guarded = Resilient<RedisLimiter>;
use limiter_test::redis_server::RedisServer;

/// The backend's connection timeout in these tests.
const CONNECT: Duration = Duration::from_millis(300);

/// The backend's command timeout in these tests.
const COMMAND: Duration = Duration::from_millis(300);

/// The backend's probe interval in these tests.
const PROBE: Duration = Duration::from_millis(200);

/// Concurrent callers.
const TASKS: usize = 64;

/// Each caller's pause after a decision: short, so that most callers have
/// a request in flight at any moment (the machine is about saturated).
const PACE: Duration = Duration::from_millis(1);

/// Each caller's pause after a failure, as a client backing off (and so
/// that an outage answered at once does not spin).
const BACK_OFF: Duration = Duration::from_millis(10);

/// The sliding log's limit, per hour: a window longer than any test, so the
/// number admitted is exactly the limit unless the server lost its state.
const LIMIT: u64 = 500;

/// Slack for a loaded 2-core machine (whose stalls reach a second or
/// two), added to every bound derived from the timeouts.
const SLACK: Duration = Duration::from_secs(2);

/// The longest any caller may wait: a decision whose connection broke,
/// waiting for another caller's reconnect (connection timeout plus command
/// timeout, for `PING` and the function libraries), then its retry (one command
/// timeout), plus [`SLACK`].
const IN_FLIGHT_BOUND: Duration = Duration::from_millis(
    CONNECT.as_millis() as u64 + 2 * COMMAND.as_millis() as u64 + SLACK.as_millis() as u64,
);

/// The most a call may wait when its connection broke or its function was
/// flushed (the fault's cost): a new connection (the connection timeout,
/// then the command timeout for `PING` and the function libraries) and the
/// retry, plus [`SLACK`].
const RETRY_BOUND: Duration =
    Duration::from_millis((CONNECT.as_millis() + COMMAND.as_millis() + SLACK.as_millis()) as u64);

/// From the server being back to decisions succeeding again: the probe
/// sleeps at most one interval, and an attempt begun while the server was
/// still down gives up within the connection and command timeouts; then
/// the next attempt succeeds. Plus [`SLACK`].
const RECOVERY_BOUND: Duration = Duration::from_millis(
    (PROBE.as_millis() + CONNECT.as_millis() + COMMAND.as_millis() + SLACK.as_millis()) as u64,
);

/// How long a bounded polling loop waits for a condition that should hold
/// much sooner.
const POLL_LIMIT: Duration = Duration::from_secs(10);

/// Runs the tests of this file one at a time: each runs sixty-four
/// callers, whose neighbours' would make a 2-core machine's stalls longer.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

fn long_window() -> Policy {
    Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap()
}

/// The fault matrix's backend: short timeouts, one connection (the default).
fn backend_builder(url: &str) -> limiter_redis::RedisBackendBuilder {
    RedisBackend::builder(url)
        .connection_timeout(CONNECT)
        .command_timeout(COMMAND)
        .probe_interval(PROBE)
}

async fn limiter_on(backend: &RedisBackend, on_failure: FailurePolicy) -> Arc<Guarded> {
    let limiter = RedisLimiter::builder(backend, long_window())
        .key_prefix(common::fresh_prefix("fault"))
        .build()
        .await
        .unwrap();
    Arc::new(
        limiter
            .on_failure(on_failure)
            .probe_interval(Duration::ZERO),
    )
}

/// Polls `condition` every 2 ms until it holds; panics after [`POLL_LIMIT`].
async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + POLL_LIMIT;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "waited {POLL_LIMIT:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Polls the server's client count until it is `expected`; returns how
/// long that took. Panics with the client list after [`POLL_LIMIT`].
async fn wait_for_clients(server: &RedisServer, expected: usize) -> Duration {
    let start = Instant::now();
    loop {
        let clients = server.connected_clients();
        if clients == expected {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < POLL_LIMIT,
            "expected {expected} client connections, the server has {clients}:\n{}",
            server.query("CLIENT LIST TYPE normal")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A loopback URL nothing listens on.
fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("redis://127.0.0.1:{port}/")
}

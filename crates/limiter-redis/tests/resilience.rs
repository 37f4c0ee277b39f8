//! The fault matrix against a real `redis-server`: kill -9 and restart, a
//! graceful restart, `FUNCTION FLUSH`, `CLIENT KILL`, `DEBUG SLEEP`,
//! `SIGSTOP`/`SIGCONT`, a server that never answers and a refused port,
//! each under 64 concurrent callers. For each, what the callers see:
//!
//! - **waits are bounded**: a caller that meets the fault waits at most
//!   [`IN_FLIGHT_BOUND`] (one command timeout when the server hangs; a
//!   reconnect and a retry, [`RETRY_BOUND`], when its connection breaks or
//!   its function is flushed), and at most one call per caller per fault is
//!   slower than [`FAST`]; once the outage is known, and while the server
//!   is still down, every call is answered by the open circuit within
//!   [`FAST`] (no caller waits on the probe). Healthy calls, before the
//!   fault and after recovery, are not timed: these are failure latencies;
//! - **failed decisions are bounded**: at most one that cost a round trip
//!   per caller (in-flight request) per outage, the rest fail at once
//!   (`Unavailable`); none after recovery; none at all where the fault is
//!   survived by the retry on a new connection (`CLIENT KILL`, `FUNCTION
//!   FLUSH`, a restart while idle);
//! - **no over-admission**: a long-window sliding log admits exactly its
//!   limit, or twice its limit where the fault wiped the server's state (a
//!   restart without persistence);
//! - **recovery is bounded**: decisions succeed again within
//!   [`RECOVERY_BOUND`] of the server being back;
//! - **no leaked connections**: the server sees exactly the backend's
//!   connection after recovery (`CLIENT LIST`), and none once the backend is
//!   dropped.
//!
//! The matrix runs under [`FailurePolicy::ReturnError`] (core's
//! [`Resilient`] wrapper) so that every failure is visible; the last tests check, simply, that the other
//! failure policies give their answer at once on a refused port and a
//! killed server.

mod common;

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

/// Slack for scheduling on a loaded 2-core machine, added to every bound
/// derived from the timeouts.
const SLACK: Duration = Duration::from_millis(500);
/// A call that is answered "at once": by the circuit while it is open, or
/// by a refused port. Well under a millisecond on an idle machine; half a
/// command timeout leaves room for a loaded one, and is still half what a
/// caller that waited on a hung server (a command timeout) would wait.
const FAST: Duration = Duration::from_millis(COMMAND.as_millis() as u64 / 2);
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
/// the next attempt succeeds. Three times that, for a loaded machine.
const RECOVERY_BOUND: Duration = Duration::from_millis(
    3 * (PROBE.as_millis() + CONNECT.as_millis() + COMMAND.as_millis()) as u64,
);
/// How long a bounded polling loop waits for a condition that should hold
/// much sooner.
const POLL_LIMIT: Duration = Duration::from_secs(10);

/// Runs the tests of this file one at a time: each measures waits against
/// bounds of a few hundred ms, which sixty-four callers of a neighbouring
/// test on a 2-core machine would otherwise eat into.
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

/// What one decision answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Admitted,
    Denied,
    Failed(BackendErrorKind),
}

/// One decision, timed from the start of the load.
#[derive(Debug, Clone, Copy)]
struct Call {
    task: usize,
    start: Duration,
    end: Duration,
    outcome: Outcome,
}

impl Call {
    fn latency(&self) -> Duration {
        self.end - self.start
    }

    fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed(_))
    }
}

/// [`TASKS`] callers deciding on one key until stopped, each recording
/// every call; counters let the test poll progress.
struct Load {
    base: Instant,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Call>>>,
}

#[derive(Default)]
struct Progress {
    completed: AtomicUsize,
    admitted: AtomicU64,
    failed: AtomicUsize,
    /// The latest start (ns from the load's base) of a call that got an
    /// answer from Redis.
    last_answered_start_ns: AtomicU64,
}

impl Load {
    fn start(limiter: &Arc<Guarded>) -> Self {
        let base = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress::default());
        let tasks = (0..TASKS)
            .map(|task| {
                let limiter = Arc::clone(limiter);
                let stop = Arc::clone(&stop);
                let progress = Arc::clone(&progress);
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let start = base.elapsed();
                        let result = limiter.acquire(b"shared", 1).await;
                        let end = base.elapsed();
                        let outcome = match &result {
                            Ok(d) if d.allowed => Outcome::Admitted,
                            Ok(_) => Outcome::Denied,
                            Err(e) => Outcome::Failed(common::backend_kind(e)),
                        };
                        match outcome {
                            Outcome::Failed(_) => {
                                progress.failed.fetch_add(1, Ordering::Relaxed);
                            }
                            Outcome::Admitted | Outcome::Denied => {
                                if outcome == Outcome::Admitted {
                                    progress.admitted.fetch_add(1, Ordering::Relaxed);
                                }
                                progress
                                    .last_answered_start_ns
                                    .fetch_max(start.as_nanos() as u64, Ordering::Relaxed);
                            }
                        }
                        progress.completed.fetch_add(1, Ordering::Relaxed);
                        calls.push(Call {
                            task,
                            start,
                            end,
                            outcome,
                        });
                        let failed = matches!(outcome, Outcome::Failed(_));
                        tokio::time::sleep(if failed { BACK_OFF } else { PACE }).await;
                    }
                    calls
                })
            })
            .collect();
        Self {
            base,
            stop,
            progress,
            tasks,
        }
    }

    /// Time since the load started.
    fn now(&self) -> Duration {
        self.base.elapsed()
    }

    fn admitted(&self) -> u64 {
        self.progress.admitted.load(Ordering::Relaxed)
    }

    fn completed(&self) -> usize {
        self.progress.completed.load(Ordering::Relaxed)
    }

    fn failed(&self) -> usize {
        self.progress.failed.load(Ordering::Relaxed)
    }

    /// Whether a call started after `t` got an answer from Redis.
    fn answered_since(&self, t: Duration) -> bool {
        self.progress.last_answered_start_ns.load(Ordering::Relaxed) > t.as_nanos() as u64
    }

    /// Waits until every caller has made `n` more calls (about).
    async fn run_for_calls(&self, n: usize) {
        let target = self.completed() + n * TASKS;
        wait_until("more calls", || self.completed() >= target).await;
    }

    async fn finish(self) -> Vec<Call> {
        self.stop.store(true, Ordering::Relaxed);
        let mut calls = Vec::new();
        for task in self.tasks {
            calls.extend(task.await.unwrap());
        }
        calls.sort_by_key(|c| c.start);
        calls
    }
}

/// The faults of the matrix that a real server suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// `SIGKILL`, one second down (port refused), then a fresh server.
    KillAndRestart,
    /// `SIGTERM` then a fresh server at once.
    GracefulRestart,
    /// `FUNCTION FLUSH`: the next decisions find no function.
    FunctionFlush,
    /// `CLIENT KILL` of every client: the backend's connection dies.
    ClientKill,
    /// `DEBUG SLEEP 1.5`: the server hangs, longer than the command timeout.
    DebugSleep,
    /// `SIGSTOP`, for 1.2 s after the callers noticed, then `SIGCONT`.
    Pause,
}

impl Fault {
    /// Whether the fault wipes the server's state.
    fn wipes_state(self) -> bool {
        matches!(self, Fault::KillAndRestart | Fault::GracefulRestart)
    }

    /// Whether the callers see an outage (the circuit opens); otherwise
    /// the retry on a new connection hides the fault.
    fn is_outage(self) -> bool {
        !matches!(self, Fault::FunctionFlush | Fault::ClientKill)
    }
}

/// What one run of the matrix measured, printed for the documentation.
#[derive(Debug)]
#[allow(dead_code)] // read through `Debug`
struct Measured {
    fault: Fault,
    calls: usize,
    in_flight_at_fault: usize,
    failures: usize,
    round_trip_failures: usize,
    detection: Option<Duration>,
    slowest_in_flight: Duration,
    slowest_after_detection: Duration,
    slowest_during: Duration,
    recovery: Option<Duration>,
    admitted: u64,
    clients_settled_after: Duration,
}

/// Runs [`TASKS`] callers against a fresh server, injects `fault` once the
/// limit is reached, and checks every bound of the module documentation.
async fn fault_matrix(fault: Fault) -> Measured {
    let mut server = RedisServer::start_with_args(&["--enable-debug-command", "local"]);
    let backend = backend_builder(&server.url()).build().await.unwrap();
    let limiter = limiter_on(&backend, FailurePolicy::ReturnError).await;
    assert_eq!(server.connected_clients(), 1, "one multiplexed connection");

    let load = Load::start(&limiter);
    wait_until("the limit to be reached", || load.admitted() >= LIMIT).await;
    load.run_for_calls(3).await; // denials now
    assert_eq!(load.failed(), 0, "no failure on a healthy server");

    let fault_start = load.now();
    // `down_until`: until when the server is certainly down or hung (no
    // call can be answered by it before); `back`: from when it is back.
    let (down_until, back) = match fault {
        Fault::KillAndRestart => {
            server.kill();
            wait_until("callers to notice the crash", || load.failed() > 0).await;
            let noticed = load.now();
            wait_until("one second down", || {
                load.now() > noticed + Duration::from_secs(1)
            })
            .await;
            let down_until = load.now();
            server.restart();
            (down_until, load.now())
        }
        Fault::GracefulRestart => {
            // `restart` is `stop` then a fresh server: stopped first here
            // to know when it was down.
            server.stop();
            let down_until = load.now();
            server.restart();
            (down_until, load.now())
        }
        Fault::FunctionFlush => {
            assert_eq!(server.command("FUNCTION FLUSH"), "+OK");
            (fault_start, load.now())
        }
        Fault::ClientKill => {
            let killed = server.command("CLIENT KILL TYPE normal SKIPME yes");
            assert_eq!(killed, ":1", "the backend's one connection is killed");
            (fault_start, load.now())
        }
        Fault::DebugSleep => {
            let sleeping = server.spawn_command("DEBUG SLEEP 1.5");
            wait_until("DEBUG SLEEP to end", || sleeping.is_finished()).await;
            assert_eq!(sleeping.join().unwrap().unwrap(), "+OK");
            // It slept 1.5 s from receiving the command, after the fault's
            // start.
            (fault_start + Duration::from_millis(1500), load.now())
        }
        Fault::Pause => {
            server.pause();
            let backend = limiter.inner().backend();
            wait_until("the circuit to open", || !backend.is_available()).await;
            let noticed = load.now();
            // Long enough for probes to hang on the stopped server.
            wait_until("1.2 s paused", || {
                load.now() > noticed + Duration::from_millis(1200)
            })
            .await;
            let down_until = load.now();
            server.resume();
            (down_until, load.now())
        }
    };
    wait_until("decisions to succeed again", || load.answered_since(back)).await;
    let expected_admitted = if fault.wipes_state() {
        2 * LIMIT
    } else {
        LIMIT
    };
    wait_until("the limit to be reached again", || {
        load.admitted() >= expected_admitted
    })
    .await;
    load.run_for_calls(3).await;
    let clients_settled_after = wait_for_clients(&server, 1).await;
    let calls = load.finish().await;

    let measured = check_calls(
        fault,
        &calls,
        (fault_start, down_until, back),
        expected_admitted,
    );
    let measured = Measured {
        clients_settled_after,
        ..measured
    };

    // No leak: the backend's one connection, and none once it is dropped.
    assert_eq!(Arc::strong_count(&limiter), 1);
    drop(limiter);
    drop(backend);
    wait_for_clients(&server, 0).await;
    println!("{measured:?}");
    measured
}

/// The bounds every run of the matrix must meet. `times` are the fault's
/// start, until when the server was certainly down (the start, for a fault
/// that is no outage), and from when it was back (see [`fault_matrix`]).
fn check_calls(
    fault: Fault,
    calls: &[Call],
    times: (Duration, Duration, Duration),
    expected_admitted: u64,
) -> Measured {
    let (fault_start, down_until, back) = times;
    let slowest =
        |calls: &mut dyn Iterator<Item = &Call>| calls.map(Call::latency).max().unwrap_or_default();

    // Recovery: the first answer to a call started after the server was
    // back.
    let recovered = calls
        .iter()
        .filter(|c| c.start >= back && !c.failed())
        .map(|c| c.end)
        .min()
        .expect("decisions succeed again");
    // The calls that may have met the fault: not over before it began, nor
    // begun once the server answered again. The others are healthy calls,
    // whose latency is not asserted.
    let during: Vec<&Call> = calls
        .iter()
        .filter(|c| c.end >= fault_start && c.start < recovered)
        .collect();
    let in_flight: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start <= fault_start && c.end >= fault_start)
        .collect();
    let slowest_in_flight = slowest(&mut in_flight.iter().copied());
    let slowest_during = slowest(&mut during.iter().copied());
    assert!(
        slowest_during <= IN_FLIGHT_BOUND,
        "{fault:?}: a call waited {slowest_during:?}, above {IN_FLIGHT_BOUND:?}"
    );

    if matches!(fault, Fault::DebugSleep | Fault::Pause) {
        // A hung server: nothing to reconnect, one command timeout at most.
        assert!(
            slowest_during <= COMMAND + SLACK,
            "{fault:?}: a call waited {slowest_during:?} on a hung server"
        );
    }

    let failures: Vec<&Call> = calls.iter().filter(|c| c.failed()).collect();
    // Failures that cost a round trip (timeout, lost connection, refused
    // connect); the rest were answered by the open circuit.
    let round_trip_failures: Vec<&Call> = failures
        .iter()
        .copied()
        .filter(|c| c.outcome != Outcome::Failed(BackendErrorKind::Unavailable))
        .collect();
    for task in 0..TASKS {
        let n = round_trip_failures
            .iter()
            .filter(|c| c.task == task)
            .count();
        assert!(
            n <= 1,
            "{fault:?}: caller {task} had {n} failures that cost a round trip in one outage: \
             {round_trip_failures:?}"
        );
    }
    for c in &failures {
        assert!(
            c.end >= fault_start,
            "{fault:?}: a call failed before the fault: {c:?}"
        );
    }

    // Once the failure is known (the first failure), the open circuit
    // answers every call at once: every call begun while the server was
    // still down, and every `Unavailable` answer; no caller waits on the
    // probe.
    let detection = failures.iter().map(|c| c.end).min();
    let known = detection.unwrap_or(fault_start);
    let slowest_after_detection = slowest(&mut calls.iter().filter(|c| {
        c.start > known
            && (c.start < down_until || c.outcome == Outcome::Failed(BackendErrorKind::Unavailable))
    }));
    assert!(
        slowest_after_detection <= FAST,
        "{fault:?}: once the outage was known a call still waited {slowest_after_detection:?}"
    );
    if fault.is_outage() {
        let detection = detection.expect("an outage fails some decisions") - fault_start;
        assert!(
            detection <= COMMAND + SLACK,
            "{fault:?}: the outage was noticed after {detection:?}"
        );
    } else {
        assert!(
            failures.len() <= in_flight.len(),
            "{fault:?}: {} failures, {} requests in flight at the fault: {failures:?}",
            failures.len(),
            in_flight.len()
        );
        assert!(
            slowest_during <= RETRY_BOUND,
            "{fault:?}: a retry on a new connection waited {slowest_during:?}, above \
             {RETRY_BOUND:?}"
        );
    }
    // A caller meets the fault once: its later calls are answered at once
    // (by the circuit, or on the new connection).
    for task in 0..TASKS {
        let slow: Vec<&&Call> = during
            .iter()
            .filter(|c| c.task == task && c.latency() > FAST)
            .collect();
        assert!(
            slow.len() <= 1,
            "{fault:?}: caller {task} waited long {} times: {slow:?}",
            slow.len()
        );
    }

    // Recovery within the bound; no failure from then on.
    let recovery = fault.is_outage().then(|| recovered.saturating_sub(back));
    if let Some(recovery) = recovery {
        assert!(
            recovery <= RECOVERY_BOUND,
            "{fault:?}: decisions succeeded again {recovery:?} after the server was back, \
             above {RECOVERY_BOUND:?}"
        );
    }
    let late: Vec<&&Call> = failures.iter().filter(|c| c.start > recovered).collect();
    assert!(
        late.is_empty(),
        "{fault:?}: failures after recovery: {late:?}"
    );

    // Exactly the limit admitted (twice, when the restart wiped it).
    let admitted = calls
        .iter()
        .filter(|c| c.outcome == Outcome::Admitted)
        .count() as u64;
    assert_eq!(
        admitted, expected_admitted,
        "{fault:?}: over- or under-admission"
    );

    Measured {
        fault,
        calls: calls.len(),
        in_flight_at_fault: in_flight.len(),
        failures: failures.len(),
        round_trip_failures: round_trip_failures.len(),
        detection: detection.map(|d| d.saturating_sub(fault_start)),
        slowest_in_flight,
        slowest_after_detection,
        slowest_during,
        recovery,
        admitted,
        clients_settled_after: Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart() {
    let _serial = one_at_a_time().await;
    let m = fault_matrix(Fault::KillAndRestart).await;
    assert!(m.failures > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_restart() {
    let _serial = one_at_a_time().await;
    fault_matrix(Fault::GracefulRestart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_flush() {
    let _serial = one_at_a_time().await;
    let m = fault_matrix(Fault::FunctionFlush).await;
    assert_eq!(
        m.failures, 0,
        "a missing function is loaded and called again: {m:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill() {
    let _serial = one_at_a_time().await;
    fault_matrix(Fault::ClientKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_sleep_longer_than_the_command_timeout() {
    let _serial = one_at_a_time().await;
    let m = fault_matrix(Fault::DebugSleep).await;
    assert!(m.round_trip_failures > 0, "the hang was noticed: {m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_then_sigcont() {
    let _serial = one_at_a_time().await;
    let m = fault_matrix(Fault::Pause).await;
    assert!(m.round_trip_failures > 0, "the hang was noticed: {m:?}");
}

/// A fault while no decision is in flight is found when the next one is
/// sent: it is retried on a new connection and costs no decision, for any
/// number of concurrent callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_while_idle_costs_no_decision() {
    let _serial = one_at_a_time().await;
    let mut server = RedisServer::start();
    let backend = backend_builder(&server.url()).build().await.unwrap();
    let limiter = limiter_on(&backend, FailurePolicy::ReturnError).await;
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, LIMIT - 1);
    // (fault, how to inject it, `remaining` before the decisions)
    type IdleFault = (&'static str, fn(&mut RedisServer), u64);
    let faults: [IdleFault; 3] = [
        (
            "kill -9 and restart",
            |s| {
                s.kill();
                s.restart();
            },
            LIMIT,
        ),
        ("graceful restart", RedisServer::restart, LIMIT),
        (
            "CLIENT KILL",
            |s| assert_eq!(s.command("CLIENT KILL TYPE normal SKIPME yes"), ":1"),
            LIMIT - TASKS as u64,
        ),
    ];
    for (name, inject, remaining_before) in faults {
        inject(&mut server);
        let started = Instant::now();
        let decisions = futures_join_all((0..TASKS).map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.acquire(b"k", 1).await })
        }))
        .await;
        let took = started.elapsed();
        let mut remaining: Vec<u64> = decisions
            .into_iter()
            .map(|d| match d {
                Ok(d) => {
                    assert!(d.allowed, "{name}: {d:?}");
                    d.remaining
                }
                Err(e) => panic!("{name}: a decision failed: {}", e.chain()),
            })
            .collect();
        remaining.sort_unstable();
        let expected: Vec<u64> = (remaining_before - TASKS as u64..remaining_before).collect();
        assert_eq!(
            remaining, expected,
            "{name}: exactly {TASKS} counted once each"
        );
        // They met the fault at once (a reconnect, a library load) and
        // waited for its cost, no more.
        assert!(
            took <= RETRY_BOUND,
            "{name}: {TASKS} decisions took {took:?}, above {RETRY_BOUND:?}"
        );
        assert!(backend.is_available(), "{name}");
        wait_for_clients(&server, 1).await;
        println!("{name} while idle: 0 failures, {TASKS} decisions in {took:?}");
    }
}

/// Awaits every task in order.
async fn futures_join_all<T: Send + 'static>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let tasks: Vec<_> = tasks.collect();
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// A server that accepts connections and never answers: the first command,
/// the limiter's build loading its library, dials it and waits for that
/// one connection attempt (bounded by the connection and command timeouts),
/// which opens the circuit; every decision is then answered at once by the
/// circuit, and the probe dials once per round, holding at most one
/// connection at a time (none leak).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers() {
    let _serial = one_at_a_time().await;
    let silent = SilentServer::start();
    let since_build = Instant::now();
    let backend = backend_builder(&silent.url()).build_lazy().unwrap();
    // The matrix's callers, but answered by the failure policy: nothing
    // reaches a server, so FailClosed's denial is every answer.
    let limiter = limiter_on(&backend, FailurePolicy::FailClosed).await;
    let built = since_build.elapsed();
    let first_wait = CONNECT + COMMAND + SLACK;
    assert!(silent.accepted() >= 1, "the build did not dial the server");
    // Nothing answers: the attempt ends by a timeout, not before.
    assert!(
        built >= CONNECT.min(COMMAND) && built <= first_wait,
        "the build waited {built:?} for the first attempt; its timeouts are \
         {CONNECT:?} + {COMMAND:?}"
    );
    assert!(
        !backend.is_available(),
        "the failed attempt did not open the circuit"
    );
    let load = Load::start(&limiter);
    wait_until("two probe rounds", || {
        load.now() > 2 * (PROBE + CONNECT + COMMAND) + SLACK
    })
    .await;
    let calls = load.finish().await;
    assert!(calls.iter().all(|c| c.outcome == Outcome::Denied));
    let slowest = calls.iter().map(Call::latency).max().unwrap();
    assert!(
        slowest <= FAST,
        "a call waited {slowest:?} on a silent server whose outage was known"
    );
    let accepted = silent.accepted();
    let max_open = silent.max_open();
    // The build's attempt, then one per probe round: the probe's sleep, then
    // an attempt that ends only by a timeout (nothing answers); one more
    // for slack.
    let elapsed = since_build.elapsed();
    let round = PROBE + CONNECT.min(COMMAND);
    let rounds = 1 + elapsed.as_millis() / round.as_millis();
    assert!(
        accepted as u128 <= rounds + 1,
        "{accepted} connections in {elapsed:?}: more than one per probe round ({round:?})"
    );
    // The test lasts two rounds of the longest kind: the probe dialled.
    assert!(
        accepted >= 2,
        "{accepted} connections in {elapsed:?}: the probe never dialled"
    );
    assert!(max_open <= 2, "{max_open} connections open at once");
    drop(limiter);
    drop(backend);
    wait_until("the silent server's connections to close", || {
        silent.open() == 0
    })
    .await;
    println!(
        "silent server: built in {built:?}, then {} calls, slowest {slowest:?}, \
         {accepted} connections accepted in {elapsed:?}, at most {max_open} open",
        calls.len(),
    );
}

/// A refused port: every caller is answered at once (connecting is refused
/// at once, then the circuit answers), never waiting on the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_port() {
    let _serial = one_at_a_time().await;
    let backend = backend_builder(&closed_port_url()).build_lazy().unwrap();
    let limiter = limiter_on(&backend, FailurePolicy::FailClosed).await;
    let load = Load::start(&limiter);
    wait_until("three probe rounds", || load.now() > 3 * PROBE + SLACK).await;
    let calls = load.finish().await;
    let slowest = calls.iter().map(Call::latency).max().unwrap();
    assert!(
        slowest <= FAST,
        "a call waited {slowest:?} on a refused port"
    );
    assert!(calls.iter().all(|c| c.outcome == Outcome::Denied));
    let error = backend.ping().await.unwrap_err();
    assert_eq!(
        common::backend_kind(&error),
        BackendErrorKind::Unavailable,
        "{error}"
    );
    assert!(
        error.chain().to_string().contains("unavailable"),
        "{}",
        error.chain().to_string()
    );
    println!("refused port: {} calls, slowest {slowest:?}", calls.len());
}

/// Accepts connections, reads and discards whatever comes, never answers;
/// counts connections accepted and open.
struct SilentServer {
    listener_addr: std::net::SocketAddr,
    state: Arc<SilentState>,
}

#[derive(Default)]
struct SilentState {
    accepted: AtomicUsize,
    open: AtomicUsize,
    max_open: AtomicUsize,
    streams: Mutex<Vec<TcpStream>>,
}

impl SilentServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let listener_addr = listener.local_addr().unwrap();
        let state = Arc::new(SilentState::default());
        let accept_state = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let state = Arc::clone(&accept_state);
                state.accepted.fetch_add(1, Ordering::Relaxed);
                let open = state.open.fetch_add(1, Ordering::Relaxed) + 1;
                state.max_open.fetch_max(open, Ordering::Relaxed);
                if let Ok(clone) = stream.try_clone() {
                    state.streams.lock().unwrap().push(clone);
                }
                std::thread::spawn(move || {
                    use std::io::Read;
                    let mut buf = [0u8; 4096];
                    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                    state.open.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
        Self {
            listener_addr,
            state,
        }
    }

    fn url(&self) -> String {
        format!("redis://{}/", self.listener_addr)
    }

    fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::Relaxed)
    }

    fn open(&self) -> usize {
        self.state.open.load(Ordering::Relaxed)
    }

    fn max_open(&self) -> usize {
        self.state.max_open.load(Ordering::Relaxed)
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        for stream in self.state.streams.lock().unwrap().iter() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A loopback URL nothing listens on.
fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("redis://127.0.0.1:{port}/")
}

// ---------------------------------------------------------------------------
// Failure policies: simple checks, kept apart from the matrix.

fn short_timeouts(url: &str) -> limiter_redis::RedisLimiterBuilder {
    let backend = backend_builder(url).build_lazy().unwrap();
    RedisLimiter::builder(&backend, Policy::sliding_log(Rate::per_minute(3)).unwrap())
        .key_prefix(common::fresh_prefix("r"))
}

/// A limiter on `url` under `on_failure`, built while Redis may be down.
async fn guarded(url: &str, on_failure: FailurePolicy) -> Guarded {
    short_timeouts(url)
        .build()
        .await
        .expect("an outage does not fail the build")
        .on_failure(on_failure)
        .probe_interval(Duration::ZERO)
}

#[tokio::test]
async fn an_unreachable_server_fails_the_backends_build_with_a_clear_error() {
    let _serial = one_at_a_time().await;
    let url = closed_port_url();
    let started = Instant::now();
    let error = backend_builder(&url).build().await.unwrap_err();
    assert!(started.elapsed() <= FAST, "{:?}", started.elapsed());
    assert_eq!(common::backend_kind(&error), BackendErrorKind::Connect);
    let message = error.chain().to_string();
    assert!(message.contains(&url), "{message}");
    assert!(message.to_lowercase().contains("refused"), "{message}");
    // A limiter on a lazy backend builds: its library waits for the
    // connection that ends the outage.
    short_timeouts(&url).build().await.unwrap();
}

#[tokio::test]
async fn a_refused_port_gives_the_failure_policys_answer_at_once() {
    let _serial = one_at_a_time().await;
    let url = closed_port_url();
    let clock = ManualClock::new(5_000_000);
    let open = short_timeouts(&url)
        .clock(clock.clone())
        .build()
        .await
        .expect("an outage does not fail the build")
        .on_failure(FailurePolicy::FailOpen)
        .clock(clock.clone());
    let closed = guarded(&url, FailurePolicy::FailClosed).await;
    for _ in 0..3 {
        let started = Instant::now();
        let admitted = open.acquire(b"k", 1).await.unwrap();
        assert!(admitted.allowed);
        assert_eq!(admitted.source, DecisionSource::FailOpen, "marked degraded");
        assert_eq!((admitted.remaining, admitted.time_us), (0, 5_000_000));
        assert!(open.peek(b"k", 3).await.unwrap().allowed);

        let denied = closed.acquire(b"k", 1).await.unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.source, DecisionSource::FailClosed, "marked degraded");
        assert!(!closed.peek(b"k", 1).await.unwrap().allowed);
        assert!(started.elapsed() <= FAST, "{:?}", started.elapsed());
    }
    // Request errors stay errors, decided before any round trip.
    assert!(matches!(open.acquire(b"k", 0).await, Err(Error::ZeroCost)));
    assert!(matches!(
        closed.acquire(b"k", 4).await,
        Err(Error::CostExceedsCapacity {
            cost: 4,
            max_cost: 3
        })
    ));
    // A reset cannot be faked: it fails whatever the policy.
    for limiter in [&open, &closed] {
        let kind = common::backend_kind(&limiter.reset(b"k").await.unwrap_err());
        assert!(
            matches!(
                kind,
                BackendErrorKind::Connect | BackendErrorKind::Unavailable
            ),
            "{kind:?}"
        );
    }
    assert!(open.inner().backend().ping().await.is_err());
}

#[tokio::test]
async fn a_killed_server_gives_the_failure_policys_answer_at_once_then_recovers() {
    let _serial = one_at_a_time().await;
    let mut server = RedisServer::start();
    let url = server.url();
    let limiters = [
        guarded(&url, FailurePolicy::ReturnError).await,
        guarded(&url, FailurePolicy::FailOpen).await,
        guarded(&url, FailurePolicy::FailClosed).await,
    ];
    for limiter in &limiters {
        assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    }
    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let [error, open, closed] = &limiters;
        let e = error.acquire(b"k", 1).await.unwrap_err();
        assert!(
            matches!(
                common::backend_kind(&e),
                BackendErrorKind::Connect | BackendErrorKind::Unavailable
            ),
            "{e}"
        );
        assert!(open.acquire(b"k", 1).await.unwrap().allowed);
        assert!(!closed.acquire(b"k", 1).await.unwrap().allowed);
        assert!(started.elapsed() <= FAST, "{:?}", started.elapsed());
    }
    server.restart();
    let back = Instant::now();
    for limiter in &limiters {
        let backend = limiter.inner().backend();
        wait_until("the probe to reconnect", || backend.is_available()).await;
        let decision = limiter.acquire(b"k", 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.remaining, decision.source),
            (true, 2, DecisionSource::Backend),
            "{limiter:?}"
        );
        backend.ping().await.unwrap();
    }
    assert!(back.elapsed() <= RECOVERY_BOUND, "{:?}", back.elapsed());
}

#[tokio::test]
async fn a_limiter_built_while_redis_is_down_connects_when_it_comes_up() {
    let _serial = one_at_a_time().await;
    let mut server = RedisServer::start();
    let url = server.url();
    server.stop();
    let limiter = guarded(&url, FailurePolicy::FailClosed).await;
    assert!(!limiter.acquire(b"k", 1).await.unwrap().allowed);
    server.restart();
    let backend = limiter.inner().backend();
    wait_until("the probe to connect", || backend.is_available()).await;
    let decision = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!((decision.allowed, decision.remaining), (true, 2));
}

#[tokio::test]
async fn a_function_flush_between_calls_is_recovered_with_state_intact() {
    let _serial = one_at_a_time().await;
    let limiter = common::builder(Policy::sliding_log(Rate::per_minute(3)).unwrap())
        .build()
        .await
        .unwrap();
    let server = common::server();
    for expected_remaining in [2, 1, 0] {
        assert_eq!(server.command("FUNCTION FLUSH"), "+OK");
        let decision = limiter.acquire(b"k", 1).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.remaining, expected_remaining);
    }
    assert_eq!(server.command("FUNCTION FLUSH"), "+OK");
    assert!(!limiter.peek(b"k", 1).await.unwrap().allowed);
    assert!(!limiter.acquire(b"k", 1).await.unwrap().allowed);
}

/// A full Redis (`maxmemory` reached, `noeviction`, as docs/backends.md
/// asks) refuses a function that may write before it runs: every decision,
/// admission or denial, is an error of kind `Redis` (the backend stays up:
/// the server answers), `FailClosed` denies them, nothing is counted
/// meanwhile, and decisions go on where they left off once memory is free.
/// A peek still answers, exactly: it runs the library's no-writes function.
#[tokio::test]
async fn a_full_redis_refuses_every_decision_and_counts_nothing() {
    let _serial = one_at_a_time().await;
    let server = RedisServer::start_with_args(&["--maxmemory-policy", "noeviction"]);
    let backend = backend_builder(&server.url()).build().await.unwrap();
    let limiter = RedisLimiter::builder(&backend, Policy::sliding_log(Rate::per_hour(3)).unwrap())
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, 2);
    assert_eq!(server.command("CONFIG SET maxmemory 1"), "+OK");
    for _ in 0..3 {
        let error = limiter.acquire(b"k", 1).await.unwrap_err();
        assert_eq!(common::backend_kind(&error), BackendErrorKind::Redis);
        assert!(
            error.chain().to_string().contains("OOM"),
            "{}",
            error.chain()
        );
    }
    assert!(backend.is_available(), "a full server still answers");
    let peeked = || async {
        let peek = limiter.peek(b"k", 1).await.unwrap();
        assert!(
            peek.allowed && peek.remaining == 1 && !peek.is_degraded(),
            "a full server answers a peek, as the one admission left it: {peek:?}"
        );
    };
    peeked().await;
    // A new connection while full: FUNCTION LOAD is refused too (OOM), yet
    // the server answers, so the backend stays up, and a limiter can be
    // built (its function is loaded once there is room).
    let killed = server.command("CLIENT KILL TYPE normal SKIPME yes");
    assert_eq!(killed, ":1", "the backend's one connection is killed");
    let error = limiter.acquire(b"k", 1).await.unwrap_err();
    assert_eq!(
        common::backend_kind(&error),
        BackendErrorKind::Redis,
        "{}",
        error.chain()
    );
    assert!(
        backend.is_available(),
        "a full server still answers a new connection"
    );
    peeked().await;
    let second = RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
        .build()
        .await
        .expect("a limiter builds on a full server");
    let closed = limiter.on_failure(FailurePolicy::FailClosed);
    let decision = closed.acquire(b"k", 1).await.unwrap();
    assert!(!decision.allowed);
    assert_eq!(decision.source, DecisionSource::FailClosed);
    assert_eq!(server.command("CONFIG SET maxmemory 0"), "+OK");
    // (The wrapper itself retries the backend after its probe interval.)
    let decision = closed.inner().acquire(b"k", 1).await.unwrap();
    assert!(decision.allowed && decision.remaining == 1, "{decision:?}");
    assert!(second.acquire(b"k", 1).await.unwrap().allowed);
}

/// A reload Redis refuses (an ACL that denies `FUNCTION` to the
/// limiter's user, after `FUNCTION FLUSH`): the decision fails as Redis's
/// refusal, told as a reload, and the backend stays up; once the ACL allows
/// it again, the next decision reloads the library and is decided.
#[tokio::test]
async fn a_refused_reload_is_redis_s_refusal_not_an_outage() {
    let _serial = one_at_a_time().await;
    let server = RedisServer::start();
    let user = "ACL SETUSER app on >pw ~* +@all";
    assert_eq!(server.command(user), "+OK");
    let url = server.url().replace("redis://", "redis://app:pw@");
    let backend = backend_builder(&url).build().await.unwrap();
    let limiter = RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
        .build()
        .await
        .unwrap();
    assert_eq!(limiter.acquire(b"k", 1).await.unwrap().remaining, 2);
    assert_eq!(server.command("ACL SETUSER app -function"), "+OK");
    assert_eq!(server.command("FUNCTION FLUSH"), "+OK");
    let error = limiter.acquire(b"k", 1).await.unwrap_err();
    let chain = error.chain().to_string();
    assert_eq!(
        common::backend_kind(&error),
        BackendErrorKind::Redis,
        "{chain}"
    );
    assert!(chain.contains("reloading the function failed"), "{chain}");
    assert_eq!(chain.matches("NoPerm").count(), 1, "{chain}");
    assert!(backend.is_available(), "a refusal is no outage");
    assert_eq!(server.command("ACL SETUSER app +function"), "+OK");
    let decision = limiter.acquire(b"k", 1).await.unwrap();
    assert!(decision.allowed && decision.remaining == 1, "{decision:?}");
}

#[tokio::test]
async fn errors_name_the_server_without_its_password() {
    let _serial = one_at_a_time().await;
    let url = closed_port_url().replace("redis://", "redis://app:s3cret@");
    let error = backend_builder(&url).build().await.unwrap_err();
    let message = error.chain().to_string();
    assert!(message.contains("app:***@127.0.0.1"), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    let debug = format!("{:?}", RedisBackend::builder(url));
    assert!(!debug.contains("s3cret"), "{debug}");
}

//! The fault matrix on a real `redis-server` under load: kill -9 and
//! restart, a graceful restart, `FUNCTION FLUSH`, `CLIENT KILL`, `DEBUG
//! SLEEP`, `SIGSTOP`/`SIGCONT`, `REPLICAOF` and back, `DEBUG RELOAD` of a
//! slow load, each checked against the bounds that
//! `main.rs` states ([`fault_matrix`]); and the same faults while idle.

use super::load::{Call, Load, Outcome};
use super::*;

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
    /// `REPLICAOF` another server (a failover demoted it: every write is
    /// answered `READONLY`), for a second after the callers noticed and
    /// until it has synced with its new primary, which holds no state;
    /// then `REPLICAOF NO ONE`.
    Demoted,
    /// `DEBUG RELOAD` with a slow load (`key-load-delay`): every command
    /// is answered `LOADING` until the data is back.
    Loading,
}

impl Fault {
    /// Whether the fault wipes the server's state.
    fn wipes_state(self) -> bool {
        matches!(
            self,
            Fault::KillAndRestart | Fault::GracefulRestart | Fault::Demoted
        )
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
        Fault::Demoted => {
            let primary = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
            let demote = format!("REPLICAOF 127.0.0.1 {}", primary.port());
            assert_eq!(server.command(&demote), "+OK");
            wait_until("callers to notice the demotion", || load.failed() > 0).await;
            let noticed = load.now();
            wait_until("a second demoted, and synced", || {
                load.now() > noticed + Duration::from_secs(1)
                    && server
                        .query("INFO replication")
                        .contains("master_link_status:up")
            })
            .await;
            let down_until = load.now();
            assert_eq!(server.command("REPLICAOF NO ONE"), "+OK");
            (down_until, load.now())
        }
        Fault::Loading => {
            // A thousand keys of at least 200 µs each: loading lasts 200 ms
            // at least, answering every command `LOADING`.
            for setting in [
                "CONFIG SET key-load-delay 200",
                "CONFIG SET loading-process-events-interval-bytes 1024",
                "DEBUG POPULATE 1000 filler",
            ] {
                assert_eq!(server.command(setting), "+OK", "{setting}");
            }
            let reloading = server.spawn_command("DEBUG RELOAD");
            wait_until("DEBUG RELOAD to end", || reloading.is_finished()).await;
            assert_eq!(reloading.join().unwrap().unwrap(), "+OK");
            (fault_start, load.now())
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
    if matches!(fault, Fault::DebugSleep | Fault::Pause) {
        // A hung server: nothing to reconnect, a command timeout each.
        assert!(
            round_trip_failures
                .iter()
                .all(|c| c.outcome == Outcome::Failed(BackendErrorKind::Timeout)),
            "{fault:?}: a call on a hung server failed otherwise than by its timeout: \
             {round_trip_failures:?}"
        );
    }

    // Once the failure is known (the first failure), the open circuit
    // answers every call begun while the server was still down, without a
    // round trip.
    let detection = failures.iter().map(|c| c.end).min();
    let known = detection.unwrap_or(fault_start);
    let not_by_the_circuit: Vec<&Call> = calls
        .iter()
        .filter(|c| c.start > known && c.start < down_until)
        .filter(|c| c.outcome != Outcome::Failed(BackendErrorKind::Unavailable))
        .collect();
    if !not_by_the_circuit.is_empty() {
        let mut first_failures = failures.clone();
        first_failures.sort_by_key(|c| c.end);
        first_failures.truncate(5);
        panic!(
            "{fault:?}: once the outage was known (at {known:?}; the first failures \
             {first_failures:?}), calls were not answered by the circuit: {not_by_the_circuit:?}"
        );
    }
    let slowest_after_detection = slowest(&mut calls.iter().filter(|c| {
        c.start > known
            && (c.start < down_until || c.outcome == Outcome::Failed(BackendErrorKind::Unavailable))
    }));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_an_outage_until_promoted_back() {
    let _serial = one_at_a_time().await;
    let m = fault_matrix(Fault::Demoted).await;
    assert!(m.failures > 0, "the demotion was noticed: {m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loading_server_is_an_outage_until_loaded() {
    let _serial = one_at_a_time().await;
    let m = fault_matrix(Fault::Loading).await;
    assert!(m.failures > 0, "the load was noticed: {m:?}");
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

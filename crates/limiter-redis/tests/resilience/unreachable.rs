//! A server that never answers and a refused port, under the matrix's
//! callers: once the outage is known every caller is answered by the open
//! circuit, and no connection leaks.

use super::load::{Call, Load, Outcome};
use super::*;

/// A server that accepts connections and never answers: the first command,
/// the limiter's build loading its library, dials it and waits for that
/// one connection attempt (bounded by the connection and command timeouts),
/// which opens the circuit; every decision is then answered by the circuit
/// (`Unavailable`, no round trip), and the probe dials once per round,
/// holding at most one connection at a time (none leak).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers() {
    let _serial = one_at_a_time().await;
    let silent = SilentServer::start();
    let since_build = Instant::now();
    let backend = backend_builder(&silent.url()).build_lazy().unwrap();
    // The matrix's callers: nothing reaches a server, so the circuit's
    // error is every answer.
    let limiter = limiter_on(&backend, FailurePolicy::ReturnError).await;
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
    let slowest = calls.iter().map(Call::latency).max().unwrap();
    let not_by_the_circuit: Vec<&Call> = calls
        .iter()
        .filter(|c| c.outcome != Outcome::Failed(BackendErrorKind::Unavailable))
        .collect();
    assert!(
        not_by_the_circuit.is_empty(),
        "calls on a silent server whose outage was known were not answered by the circuit: \
         {not_by_the_circuit:?}"
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

/// A refused port: every caller is answered without a wait (connecting is
/// refused at once, then the circuit answers), never waiting on the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_port() {
    let _serial = one_at_a_time().await;
    let backend = backend_builder(&closed_port_url()).build_lazy().unwrap();
    let limiter = limiter_on(&backend, FailurePolicy::ReturnError).await;
    let load = Load::start(&limiter);
    wait_until("three probe rounds", || load.now() > 3 * PROBE + SLACK).await;
    let calls = load.finish().await;
    let slowest = calls.iter().map(Call::latency).max().unwrap();
    // The refusal, then the circuit's answer: neither waits on a timeout.
    let waited: Vec<&Call> = calls
        .iter()
        .filter(|c| {
            !matches!(
                c.outcome,
                Outcome::Failed(BackendErrorKind::Connect | BackendErrorKind::Unavailable)
            )
        })
        .collect();
    assert!(waited.is_empty(), "on a refused port: {waited:?}");
    let refused = calls
        .iter()
        .filter(|c| c.outcome == Outcome::Failed(BackendErrorKind::Connect))
        .count();
    assert!(
        refused <= TASKS,
        "{refused} calls tried to connect: the circuit did not answer the others"
    );
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

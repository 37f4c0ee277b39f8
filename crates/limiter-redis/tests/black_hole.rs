//! A connection that stops answering while the server lives on (a failover
//! that black-holes the old path): the calls sent on it time out, the
//! probe's new connection ends the outage, and a call on the old
//! connection that times out after that does not open the circuit again.
//! And a connection lost late in a call, whose reconnection meets a path
//! that answers nothing: the caller still waits one command timeout.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use limiter_core::{Limiter, Policy, Rate};
use limiter_redis::{BackendErrorKind, RedisBackend, RedisLimiter};

/// A TCP proxy to a Redis server whose connections can be frozen: what a
/// frozen connection's client sends is dropped, so it is never answered.
/// Open connections can also be cut (closed), and connections accepted
/// while [`freeze_new_connections`](Self::freeze_new_connections) holds
/// start frozen.
struct FreezingProxy {
    addr: SocketAddr,
    /// Every connection accepted so far.
    connections: Arc<Mutex<Vec<Proxied>>>,
    freeze_new: Arc<AtomicBool>,
}

/// One proxied connection: whether it is frozen, and its client's end.
type Proxied = (Arc<AtomicBool>, TcpStream);

impl FreezingProxy {
    fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections: Arc<Mutex<Vec<Proxied>>> = Arc::default();
        let freeze_new = Arc::new(AtomicBool::new(false));
        let (accepted, frozen_from_start) = (Arc::clone(&connections), Arc::clone(&freeze_new));
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    return;
                };
                let flag = Arc::new(AtomicBool::new(frozen_from_start.load(Ordering::SeqCst)));
                accepted
                    .lock()
                    .unwrap()
                    .push((Arc::clone(&flag), client.try_clone().unwrap()));
                let (client_in, server_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || pipe(client_in, server_out, Some(flag)));
                thread::spawn(move || pipe(server, client, None));
            }
        });
        Self {
            addr,
            connections,
            freeze_new,
        }
    }

    fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Freezes every connection open now.
    fn freeze_open_connections(&self) {
        for (flag, _) in self.connections.lock().unwrap().iter() {
            flag.store(true, Ordering::SeqCst);
        }
    }

    /// Closes every connection open now: their clients see them dropped.
    fn cut_open_connections(&self) {
        for (_, client) in self.connections.lock().unwrap().drain(..) {
            let _ = client.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Whether connections accepted from now on start frozen.
    fn freeze_new_connections(&self, frozen: bool) {
        self.freeze_new.store(frozen, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes; drops the bytes instead
/// while `frozen` is set.
fn pipe(mut from: TcpStream, mut to: TcpStream, frozen: Option<Arc<AtomicBool>>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if frozen.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The command timeout of the first test: its second call, sent half of
/// it after the first, times out half of it after the first; the probe
/// reconnects in between (a probe interval, and at most one attempt on a
/// frozen path, well under half of this however loaded the machine).
const COMMAND: Duration = Duration::from_secs(5);

/// Long enough to bound a wait for what a probe does in milliseconds
/// ("it did not hang"), on a loaded machine.
const POLL_LIMIT: Duration = Duration::from_secs(10);

/// Polls `condition` every 2 ms until it holds; panics after [`POLL_LIMIT`].
async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < POLL_LIMIT,
            "waited {POLL_LIMIT:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_timeout_on_the_old_connection_does_not_reopen_the_circuit() {
    const PROBE: Duration = Duration::from_millis(250);
    let proxy = FreezingProxy::start(common::server().port());
    let backend = RedisBackend::builder(proxy.url())
        .connection_timeout(Duration::from_millis(500))
        .command_timeout(COMMAND)
        .probe_interval(PROBE)
        .build()
        .await
        .unwrap();
    let limiter = Arc::new(
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(100)).unwrap())
            .key_prefix(common::fresh_prefix("black-hole"))
            .build()
            .await
            .unwrap(),
    );
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    // The path black-holed: the open connection, and new ones until the
    // outage has been seen (the probe cannot end it before).
    proxy.freeze_open_connections();
    proxy.freeze_new_connections(true);
    let started = Instant::now();
    let first = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move { limiter.acquire(b"k", 1).await }
    });
    // Sent on the frozen connection too, half a timeout later: it times
    // out once the probe's new connection has ended the outage the first
    // began.
    tokio::time::sleep(COMMAND / 2).await;
    let second = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move { limiter.acquire(b"k", 1).await }
    });
    let first = first.await.unwrap().unwrap_err();
    assert_eq!(
        common::backend_kind(&first),
        BackendErrorKind::Timeout,
        "{first}"
    );
    wait_until("the first timeout to open the circuit", || {
        !backend.is_available()
    })
    .await;
    let down = started.elapsed();
    assert!(
        down >= COMMAND,
        "the circuit opened {down:?} after the first call, before its timeout"
    );
    proxy.freeze_new_connections(false);
    wait_until("the probe to reconnect", || backend.is_available()).await;
    // The probe ended the outage before the second call timed out, or the
    // test shows nothing.
    assert!(
        !second.is_finished(),
        "the second call ended before the probe reconnected"
    );
    let second = second.await.unwrap().unwrap_err();
    assert_eq!(
        common::backend_kind(&second),
        BackendErrorKind::Timeout,
        "{second}"
    );
    assert!(started.elapsed() >= COMMAND + COMMAND / 2);
    assert!(
        backend.is_available(),
        "a stale connection's timeout reopened the circuit the probe closed"
    );
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
}

/// A call whose connection hangs for half the command timeout and is
/// then lost, and whose reconnection meets a path that answers nothing:
/// the caller is answered within about one command timeout (the
/// reconnection's own timeouts would add the connection timeout and the
/// command timeout), the reconnection going on in the background marks the
/// backend down (the next call fails at once, without a round trip), and
/// the probe brings it back once the path answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_late_costs_its_caller_one_command_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(3);
    /// How long the first connection hangs before it is cut: half the
    /// timeout, so that the cut comes in time however the machine stalls.
    const HANG: Duration = Duration::from_millis(1_500);
    /// For a loaded machine's stalls: a caller that waited out the
    /// reconnection's own timeouts waits `HANG + 2 * TIMEOUT`, far more.
    const SLACK: Duration = Duration::from_secs(2);
    let proxy = Arc::new(FreezingProxy::start(common::server().port()));
    let backend = RedisBackend::builder(proxy.url())
        .connection_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let limiter =
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(100)).unwrap())
            .key_prefix(common::fresh_prefix("lost-late"))
            .build()
            .await
            .unwrap();
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
    proxy.freeze_open_connections();
    proxy.freeze_new_connections(true);
    let cut = {
        let proxy = Arc::clone(&proxy);
        thread::spawn(move || {
            thread::sleep(HANG);
            proxy.cut_open_connections();
        })
    };
    let started = Instant::now();
    let answer = limiter.acquire(b"k", 1).await;
    let waited = started.elapsed();
    cut.join().unwrap();
    assert!(
        waited <= TIMEOUT + SLACK,
        "the caller waited {waited:?}; the command timeout is {TIMEOUT:?} (the connection \
         hung for {HANG:?}, then was lost)"
    );
    let error = answer.expect_err("a frozen path answered");
    assert_eq!(
        common::backend_kind(&error),
        BackendErrorKind::Timeout,
        "{error}"
    );
    // Cut by the call's deadline in its reconnection (the cut came in time).
    let told = error.chain().to_string();
    assert!(told.contains("a reconnection or reload included"), "{told}");

    // The reconnection, going on, fails by its own timeouts: the backend
    // is marked down, and a call fails without a round trip.
    wait_until("the failed reconnection to be told", || {
        !backend.is_available()
    })
    .await;
    let down = limiter
        .acquire(b"k", 1)
        .await
        .expect_err("the backend is down");
    assert_eq!(common::backend_kind(&down), BackendErrorKind::Unavailable);

    proxy.freeze_new_connections(false);
    wait_until("the probe to reconnect", || backend.is_available()).await;
    assert!(limiter.acquire(b"k", 1).await.unwrap().allowed);
}

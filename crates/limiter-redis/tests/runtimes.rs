//! A backend across runtimes: a limiter built on a Tokio runtime decides
//! for callers polled outside any Tokio context (a plain thread's executor,
//! another async runtime), its calls run on the runtime it met first (and
//! once that one is gone such a caller is told so, not failed open); and
//! a probe lost with the runtime it ran on is started again by the next
//! caller, so an outage still ends (one server's, and a cluster node's).

mod common;

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use limiter_core::{Error, Limiter, Policy, Rate};
use limiter_redis::{RedisBackend, RedisLimiter};
use limiter_test::redis_cluster::RedisCluster;
use limiter_test::redis_server::RedisServer;

/// Wakes a parked thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The least executor there is: polls `future` on this thread, parked in
/// between, with no Tokio context.
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Arc::new(Unpark(thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// A limiter of 3 an hour on the shared server, built on `runtime`.
fn three_an_hour_on(runtime: &tokio::runtime::Runtime) -> RedisLimiter {
    runtime.block_on(async {
        let backend = RedisBackend::builder(common::server().url())
            .build()
            .await
            .unwrap();
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
            .key_prefix(common::fresh_prefix("executor"))
            .build()
            .await
            .unwrap()
    })
}

#[test]
fn a_caller_outside_any_tokio_context_is_decided() {
    let runtime = runtime();
    let limiter = three_an_hour_on(&runtime);
    let outcomes = thread::spawn(move || {
        (0..5)
            .map(|_| block_on(limiter.acquire(b"k", 1)).unwrap().allowed)
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    assert_eq!(outcomes, [true, true, true, false, false]);
}

#[test]
fn a_backend_that_never_met_a_runtime_says_so_instead_of_panicking() {
    let server = common::server();
    let backend = RedisBackend::builder(server.url()).build_lazy().unwrap();
    let built = block_on(
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
            .key_prefix(common::fresh_prefix("executor"))
            .build(),
    );
    let error = built.unwrap_err();
    // The caller's to fix, so no failure policy would answer it.
    assert!(matches!(error, Error::InvalidConfig(_)), "{error:?}");
    let cause = std::error::Error::source(&error).unwrap().to_string();
    assert!(cause.contains("no Tokio runtime"), "{cause}");
    assert!(matches!(
        block_on(backend.ping()),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn a_caller_outside_any_runtime_once_the_first_is_gone_is_told_so() {
    let first = runtime();
    let limiter = three_an_hour_on(&first);
    drop(first);
    // Not a backend failure (which a fail-open policy would admit): the
    // caller's to fix.
    let error = block_on(limiter.acquire(b"k", 1)).unwrap_err();
    assert!(matches!(error, Error::InvalidConfig(_)), "{error:?}");
    let cause = std::error::Error::source(&error).unwrap().to_string();
    assert!(cause.contains("has shut down"), "{cause}");
}

#[test]
fn a_probe_lost_with_its_runtime_is_started_again_by_the_next_caller() {
    let mut server = RedisServer::start();
    let first = runtime();
    let limiter = first.block_on(async {
        let backend = RedisBackend::builder(server.url())
            .connection_timeout(Duration::from_millis(500))
            .command_timeout(Duration::from_millis(500))
            .probe_interval(Duration::from_millis(50))
            .build()
            .await
            .unwrap();
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(100)).unwrap())
            .key_prefix(common::fresh_prefix("probe"))
            .build()
            .await
            .unwrap()
    });
    probe_lost_with_its_runtime(&first, &limiter, "k", |down| {
        if down {
            server.stop();
        } else {
            server.restart();
        }
    });
    assert!(limiter.backend().is_available());
}

/// On a cluster: a hung primary's probe (each node has its own), lost with
/// the runtime of the caller that timed out on it.
#[test]
fn a_cluster_node_probe_lost_with_its_runtime_is_started_again_by_the_next_caller() {
    let cluster = RedisCluster::start();
    // A hang of seconds on a loaded machine starts no failover.
    for node in cluster.nodes() {
        let set = ["CONFIG", "SET", "cluster-node-timeout", "60000"];
        assert_eq!(cluster.command(&node, &set).text(), "OK");
    }
    let first = runtime();
    let limiter = first.block_on(async {
        let backend = RedisBackend::cluster(cluster.seed_urls())
            .connection_timeout(Duration::from_millis(300))
            .command_timeout(Duration::from_millis(300))
            .probe_interval(Duration::from_millis(50))
            .build()
            .await
            .unwrap();
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(100)).unwrap())
            .key_prefix(common::fresh_prefix("node-probe"))
            .build()
            .await
            .unwrap()
    });
    let node = cluster.node_for_key(limiter.redis_key(b"k"));
    // Hung for the call's timeout and a little more.
    probe_lost_with_its_runtime(&first, &limiter, "k", |down| {
        if down {
            cluster.pause(&node);
        } else {
            cluster.resume(&node);
        }
    });
}

/// Takes `limiter`'s Redis down (`set_down(true)`); a caller on a second
/// runtime meets the outage on `key`, so the probe runs there, and goes
/// with it; Redis comes back (`set_down(false)`), and a caller on `first`
/// is decided again within 10 s: it started a probe of its own.
fn probe_lost_with_its_runtime(
    first: &tokio::runtime::Runtime,
    limiter: &RedisLimiter,
    key: &str,
    mut set_down: impl FnMut(bool),
) {
    set_down(true);
    let second = runtime();
    let failed = second.block_on(limiter.acquire(key.as_bytes(), 1));
    assert!(failed.is_err(), "{failed:?}");
    drop(second);
    set_down(false);
    let deadline = Instant::now() + Duration::from_secs(10);
    let decided = first.block_on(async {
        loop {
            match limiter.acquire(key.as_bytes(), 1).await {
                Ok(decision) => return decision,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("Redis is back, still failing after 10 s: {e}"),
            }
        }
    });
    assert!(decided.allowed);
}

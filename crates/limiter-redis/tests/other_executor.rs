//! A limiter built on a Tokio runtime decides for callers polled outside
//! any Tokio context (a plain thread's executor, another async runtime),
//! while the runtime it was built on runs: its calls run there.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::thread::{self, Thread};

use limiter_core::{Error, Limiter, Policy, Rate};
use limiter_redis::{RedisBackend, RedisLimiter};

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

#[test]
fn a_caller_outside_any_tokio_context_is_decided() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let limiter = runtime.block_on(async {
        let backend = RedisBackend::builder(common::server().url())
            .build()
            .await
            .unwrap();
        RedisLimiter::builder(&backend, Policy::fixed_window(Rate::per_hour(3)).unwrap())
            .key_prefix(common::fresh_prefix("executor"))
            .build()
            .await
            .unwrap()
    });
    let outcomes = thread::spawn(move || {
        (0..5)
            .map(|_| block_on(limiter.acquire("k", 1)).unwrap().allowed)
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

//! A caller whose decision is polled once and then no more (left in a
//! `select!` that stopped polling it, or kept but stalled) holds up no
//! other caller of its limiter, and its decision still counts exactly once:
//! it was handed to a call when first polled.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use limiter_core::{Decision, Error, Limiter, Policy, Rate};
use limiter_redis::{BackendErrorKind, RedisBackend, RedisLimiter};

const LIMIT: u64 = 10;

const COMMAND: Duration = Duration::from_secs(1);

/// Beyond the command timeout, for a loaded machine: another caller's
/// answer within it is not held up by the stalled ones (it was forever).
const MARGIN: Duration = Duration::from_secs(4);

/// More stalled callers than a limiter has calls in flight.
const STALLED: usize = 4;

async fn limiter() -> RedisLimiter {
    let backend = RedisBackend::builder(common::server().url())
        .command_timeout(COMMAND)
        .build()
        .await
        .unwrap();
    RedisLimiter::builder(
        &backend,
        Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap(),
    )
    .key_prefix(common::fresh_prefix("stalled"))
    .build()
    .await
    .unwrap()
}

/// Polls `decision` once, as a `select!` that then drops it from its
/// branches would: it is pending, since a decision takes a round trip.
async fn poll_once<F: Future + Unpin>(decision: &mut F) {
    std::future::poll_fn(|cx| {
        assert!(Pin::new(&mut *decision).poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
}

/// Acquires of `key` polled once each, then left unpolled.
async fn stall<'a>(
    limiter: &'a RedisLimiter,
    key: &'a str,
) -> Vec<impl Future<Output = Result<Decision, Error>> + 'a> {
    let mut stalled: Vec<_> = (0..STALLED)
        .map(|_| limiter.acquire(key.as_bytes(), 1))
        .collect();
    for decision in &mut stalled {
        poll_once(decision).await;
    }
    stalled
}

/// Units of `key` taken, by a peek (which tells what an acquire of one
/// would leave).
async fn taken(limiter: &RedisLimiter, key: &str) -> u64 {
    LIMIT - 1 - limiter.peek(key.as_bytes(), 1).await.unwrap().remaining
}

/// Another caller's acquire of `key`, answered within the bound.
async fn answered(limiter: &RedisLimiter, key: &str) -> Decision {
    tokio::time::timeout(COMMAND + MARGIN, limiter.acquire(key.as_bytes(), 1))
        .await
        .expect("a caller waited on stalled ones past the command timeout")
        .unwrap()
}

#[tokio::test]
async fn stalled_callers_hold_up_no_one_and_count_once_when_resumed() {
    let limiter = limiter().await;
    let stalled = stall(&limiter, "k").await;
    let mut decisions = vec![answered(&limiter, "k").await];
    for decision in stalled {
        decisions.push(
            tokio::time::timeout(MARGIN, decision)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert!(decisions.iter().all(|d| d.allowed), "{decisions:?}");
    // Each acquire took one unit: Redis decided each once.
    let mut remaining: Vec<_> = decisions.iter().map(|d| d.remaining).collect();
    remaining.sort_unstable();
    let expected: Vec<_> = (LIMIT - decisions.len() as u64..LIMIT).collect();
    assert_eq!(remaining, expected);
    assert_eq!(taken(&limiter, "k").await, decisions.len() as u64);
}

#[tokio::test]
async fn stalled_callers_hold_up_no_one_and_count_once_when_dropped() {
    let limiter = limiter().await;
    let stalled = stall(&limiter, "k").await;
    assert!(answered(&limiter, "k").await.allowed);
    drop(stalled);
    // A dropped caller's decision was handed to a call when first polled:
    // its unit is taken, once, though no one hears the answer.
    let all = 1 + STALLED as u64;
    let deadline = tokio::time::Instant::now() + MARGIN;
    let mut counted = taken(&limiter, "k").await;
    while counted < all && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        counted = taken(&limiter, "k").await;
    }
    assert_eq!(counted, all);
}

/// A runtime shut down while its tasks hold a limiter's calls gives their
/// turns up: the stalled callers are told, and the limiter decides on the
/// next runtime.
#[test]
fn a_runtime_shut_down_mid_call_leaves_no_turn_taken() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let first = runtime();
    let limiter = first.block_on(limiter());
    let stalled = first.block_on(stall(&limiter, "k"));
    drop(first);
    runtime().block_on(async {
        let mut admitted = 0;
        for decision in stalled {
            let told = tokio::time::timeout(MARGIN, decision)
                .await
                .expect("a stalled caller is told");
            // Dropped with its task unanswered, unless answered before.
            match told {
                Ok(decision) => {
                    assert!(decision.allowed, "{decision:?}");
                    admitted += 1;
                }
                Err(error) => {
                    assert_eq!(common::backend_kind(&error), BackendErrorKind::Redis);
                }
            }
        }
        assert!(answered(&limiter, "k").await.allowed);
        // The first runtime ran none of its call tasks (`stall` never
        // yields), so a caller told of a failure sent nothing and took
        // nothing: only the admitted ones, and the next runtime's decision,
        // count.
        assert_eq!(taken(&limiter, "k").await, admitted + 1);
    });
}

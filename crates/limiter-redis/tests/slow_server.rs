//! A server slower than the decisions asked of it: it answers every call
//! within the command timeout, but decides fewer requests a second than
//! arrive. Requests queue behind a limiter's calls in flight (`batch.rs`);
//! one that has waited the command timeout is answered with a timeout
//! and never sent. So no caller waits much past twice the command timeout
//! (the queue's, then its call's), whatever the backlog; every admission
//! is counted exactly once and nothing is counted for a timed-out request;
//! and the backend stays available, since the server answers.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{Limiter, Policy, Rate};
use limiter_redis::{BackendErrorKind, RedisBackend, RedisLimiter};

/// The backend's command timeout: a queued request's budget too.
const COMMAND: Duration = Duration::from_secs(1);

/// How long the server is kept busy at a time, from another connection:
/// a limiter's two calls in flight (64 requests each at most) are decided
/// between two busy spells, about 1,300 requests a second.
const BUSY: Duration = Duration::from_millis(100);

/// Requests at once on one key: the last of them would wait about 6 s for
/// their call if the queue had no deadline.
const REQUESTS: usize = 8_000;

/// Above the requests: every decided request is admitted, so the count
/// kept in Redis tells which requests were sent.
const LIMIT: u64 = 2 * REQUESTS as u64;

/// Twice the command timeout, one busy spell, and a margin for a loaded
/// machine: well under the 6 s an unbounded queue takes.
const BOUND: Duration = Duration::from_millis(2 * 1_000 + 100 + 1_400);

/// Keeps the server busy for `ARGV[1]` µs (a script blocks every other
/// client until it returns).
const SPIN: &str = "
local function now()
    local t = redis.call('TIME')
    return t[1] * 1000000 + t[2]
end
local start = now()
while now() - start < tonumber(ARGV[1]) do end
return 1
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_of_a_server_slower_than_their_requests_wait_a_bounded_time_and_are_counted_exactly(
) {
    let backend = RedisBackend::builder(common::server().url())
        .command_timeout(COMMAND)
        .build()
        .await
        .unwrap();
    let policy = Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap();
    let limiter = Arc::new(
        RedisLimiter::builder(&backend, policy)
            .key_prefix(common::fresh_prefix("slow"))
            .max_sliding_log_limit(LIMIT)
            .build()
            .await
            .unwrap(),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let busy = tokio::spawn({
        let stop = Arc::clone(&stop);
        async move {
            let mut conn = common::connection().await;
            let mut spells = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let _: i64 = redis::cmd("EVAL")
                    .arg(SPIN)
                    .arg(0)
                    .arg(BUSY.as_micros() as u64)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                spells += 1;
            }
            spells
        }
    });
    tokio::time::sleep(BUSY / 2).await;

    let callers: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let start = Instant::now();
                let result = limiter.acquire("k", 1).await;
                (start.elapsed(), result)
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(REQUESTS);
    for caller in callers {
        answers.push(caller.await.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let spells = busy.await.unwrap();

    let worst = answers.iter().map(|(waited, _)| *waited).max().unwrap();
    let admitted = answers
        .iter()
        .filter(|(_, result)| result.as_ref().is_ok_and(|d| d.allowed))
        .count();
    let timed_out = answers
        .iter()
        .filter_map(|(_, result)| result.as_ref().err())
        .inspect(|error| {
            assert_eq!(
                common::backend_kind(error),
                BackendErrorKind::Timeout,
                "{error}"
            );
            let told = error.chain().to_string();
            assert!(told.contains("not sent"), "{told}");
        })
        .count();
    println!(
        "{admitted} admitted, {timed_out} timed out in the queue, worst wait {worst:?}, \
         {spells} busy spells"
    );
    assert!(spells >= 5, "the server was kept busy ({spells} spells)");
    assert!(
        timed_out > 0,
        "the backlog outlasted the command timeout: some requests expired"
    );
    assert_eq!(
        admitted + timed_out,
        REQUESTS,
        "every decided request admitted"
    );
    assert!(worst <= BOUND, "a caller waited {worst:?}, past {BOUND:?}");

    // Every admission counted once, and no expired request counted.
    let taken = LIMIT - 1 - limiter.peek("k", 1).await.unwrap().remaining;
    assert_eq!(taken, admitted as u64);
    assert!(backend.is_available(), "a slow server trips no circuit");
}

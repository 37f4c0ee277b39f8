//! A server slower than the decisions asked of it: it answers every call
//! within the command timeout, but decides fewer requests a second than
//! arrive. Requests queue behind a limiter's calls in flight (`batch.rs`);
//! one that has waited the command timeout is answered with a timeout
//! and never sent. So no caller waits much past twice the command timeout
//! (the queue's, then its call's), whatever the backlog; every admission
//! is counted exactly once and nothing is counted for a timed-out request;
//! and the backend stays available, since the server answers. Under a
//! failure policy those timed-out requests alone are answered by the
//! policy: the server answers, so no outage starts.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_core::{
    Decision, DecisionSource, Error, FailurePolicy, Limiter, LimiterExt, Policy, Rate,
};
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

/// Twice the command timeout, one busy spell, and 2 s for a loaded
/// machine's stalls: under the 6 s an unbounded queue takes (the server
/// sets that pace, so a slower machine only adds to it).
const BOUND: Duration = Duration::from_millis(2 * 1_000 + 100 + 2_000);

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

/// A backend and a sliding log of `LIMIT` an hour on it, under a fresh
/// prefix.
async fn slow_limiter() -> (RedisBackend, RedisLimiter) {
    let backend = RedisBackend::builder(common::server().url())
        .command_timeout(COMMAND)
        .build()
        .await
        .unwrap();
    let policy = Policy::sliding_log(Rate::per_hour(LIMIT)).unwrap();
    let limiter = RedisLimiter::builder(&backend, policy)
        .key_prefix(common::fresh_prefix("slow"))
        .max_sliding_log_limit(LIMIT)
        .build()
        .await
        .unwrap();
    (backend, limiter)
}

/// Each request's wait and answer, and how many busy spells the server
/// had meanwhile.
struct Burst {
    answers: Vec<(Duration, Result<Decision, Error>)>,
    spells: u32,
}

impl Burst {
    fn worst(&self) -> Duration {
        self.answers
            .iter()
            .map(|(waited, _)| *waited)
            .max()
            .unwrap()
    }

    /// How many answers `matches` holds for.
    fn count(&self, matches: impl Fn(&Result<Decision, Error>) -> bool) -> usize {
        self.answers
            .iter()
            .filter(|(_, result)| matches(result))
            .count()
    }
}

/// `REQUESTS` acquires of key `k` at once on `limiter` while another
/// connection keeps the server busy `BUSY` at a time.
async fn burst(limiter: Arc<dyn Limiter>) -> Burst {
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
                let result = limiter.acquire(b"k", 1).await;
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
    assert!(spells >= 5, "the server was kept busy ({spells} spells)");
    Burst { answers, spells }
}

/// The units of key `k` taken in `limiter`'s count.
async fn taken(limiter: &impl Limiter) -> u64 {
    LIMIT - 1 - limiter.peek(b"k", 1).await.unwrap().remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_of_a_server_slower_than_their_requests_wait_a_bounded_time_and_are_counted_exactly(
) {
    let (backend, limiter) = slow_limiter().await;
    let limiter = Arc::new(limiter);
    let burst = burst(Arc::clone(&limiter) as Arc<dyn Limiter>).await;

    let worst = burst.worst();
    let admitted = burst.count(|result| result.as_ref().is_ok_and(|d| d.allowed));
    let timed_out = burst
        .answers
        .iter()
        .filter_map(|(_, result)| result.as_ref().err())
        .inspect(|error| {
            assert_eq!(
                common::backend_kind(error),
                BackendErrorKind::Timeout,
                "{error}"
            );
            assert!(error.is_overloaded(), "{error:?}");
            let told = error.chain().to_string();
            assert!(told.contains("not sent"), "{told}");
        })
        .count();
    println!(
        "{admitted} admitted, {timed_out} timed out in the queue, worst wait {worst:?}, \
         {} busy spells",
        burst.spells
    );
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
    assert_eq!(taken(&*limiter).await, admitted as u64);
    assert!(backend.is_available(), "a slow server trips no circuit");
}

/// Under a failure policy, the requests not sent are answered by it one
/// by one; the server answers, so no outage starts (which would answer
/// every key by the policy for a probe interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_policy_answers_the_requests_not_sent_and_no_outage_starts() {
    let (backend, limiter) = slow_limiter().await;
    let limiter = Arc::new(limiter.on_failure(FailurePolicy::FailClosed));
    let burst = burst(Arc::clone(&limiter) as Arc<dyn Limiter>).await;

    let source = |wanted: DecisionSource| {
        move |result: &Result<Decision, Error>| result.as_ref().is_ok_and(|d| d.source == wanted)
    };
    let admitted = burst.count(|result| {
        result
            .as_ref()
            .is_ok_and(|d| d.allowed && d.source == DecisionSource::Backend)
    });
    let closed = burst.count(source(DecisionSource::FailClosed));
    println!("{admitted} admitted, {closed} answered fail-closed");
    assert!(closed > 0, "some requests waited past the command timeout");
    assert_eq!(admitted + closed, REQUESTS, "nothing else answered");
    assert!(!limiter.is_failing(), "a server that answers is no outage");
    // The next request is the backend's, and the count holds exactly the
    // admitted ones.
    let next = limiter.acquire(b"k", 1).await.unwrap();
    assert_eq!(next.source, DecisionSource::Backend);
    assert_eq!(taken(&*limiter).await, admitted as u64 + 1);
    assert!(backend.is_available());
}

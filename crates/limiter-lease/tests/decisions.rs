//! docs/spec.md section 8.4 and the rest of 8.1: what a leased limiter
//! answers, request by request, against the memory backend on a manual
//! clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use limiter_core::{
    Decision, DecisionSource, Error, FailurePolicy, FailureReach, Limiter, LimiterExt, ManualClock,
    Policies, Policy, Resilient,
};
use limiter_lease::{Leased, LeasedBuilder};
use limiter_memory::MemoryLimiter;

const KEY: &str = "tenant:7";

fn global(policy: &str, clock: &ManualClock) -> MemoryLimiter {
    MemoryLimiter::builder(policy.parse::<Policy>().unwrap())
        .clock(clock.clone())
        .build()
}

/// The units the global limiter has left on the key, as it counts them.
fn counted_left(global: &MemoryLimiter) -> u64 {
    global.try_peek(KEY.as_bytes(), 1).unwrap().remaining
}

fn leased<L: Limiter>(inner: L, clock: &ManualClock) -> LeasedBuilder<L> {
    Leased::builder(inner).clock(clock.clone())
}

#[tokio::test]
async fn a_leased_decision_reports_the_units_in_hand() {
    let clock = ManualClock::new(5_000_000);
    let limiter = leased(global("sliding-log:1000/1s", &clock), &clock)
        .min_lease(10)
        .build();
    let first = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(
        (first.source, first.remaining),
        (DecisionSource::Backend, 990)
    );
    clock.advance(Duration::from_millis(100));
    let next = limiter.acquire(KEY.as_bytes(), 2).await.unwrap();
    assert_eq!(next.source, DecisionSource::Lease);
    assert!(next.allowed && !next.is_degraded());
    assert_eq!((next.limit, next.remaining), (1_000, 7));
    assert_eq!(
        (next.retry_after, next.wait),
        (Duration::ZERO, Duration::ZERO)
    );
    assert_eq!(next.time_us, 5_100_000);
    // The key's reset as of the lease, from now: a lower bound of the real one.
    assert_eq!(next.reset_after, Duration::from_millis(900));
    let global_now = limiter.inner().try_peek(KEY.as_bytes(), 1).unwrap();
    assert!(next.reset_after <= global_now.reset_after);
    assert_eq!(limiter.held(KEY.as_bytes()), 7);
}

#[tokio::test]
async fn a_peek_answers_from_the_units_in_hand_without_taking_them() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("token-bucket:100/1s", &clock), &clock)
        .min_lease(10)
        .max_lease(10)
        .build();
    assert!(
        limiter.peek_now(KEY.as_bytes(), 1).is_none(),
        "nothing in hand"
    );
    assert_eq!(limiter.peek(KEY.as_bytes(), 1).await.unwrap().remaining, 99);
    limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    let peeked = limiter.peek(KEY.as_bytes(), 4).await.unwrap();
    assert_eq!(
        (peeked.source, peeked.remaining),
        (DecisionSource::Lease, 5)
    );
    assert_eq!(
        limiter.peek_now(KEY.as_bytes(), 4).unwrap().unwrap(),
        peeked
    );
    assert_eq!(limiter.held(KEY.as_bytes()), 9);
    let beyond = limiter.peek(KEY.as_bytes(), 10).await.unwrap();
    assert_eq!(
        beyond.source,
        DecisionSource::Backend,
        "the global limiter's peek"
    );
}

#[tokio::test]
async fn a_leaky_bucket_lease_keeps_each_units_place_in_the_queue() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("leaky-bucket:10/1s", &clock), &clock)
        .min_lease(5)
        .build();
    let exact = global("leaky-bucket:10/1s", &clock);
    for place in 0..5u64 {
        let decision = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
        let alone = exact.try_acquire(KEY.as_bytes(), 1).unwrap();
        assert_eq!(decision.wait, alone.wait, "unit {place}");
        assert_eq!(decision.wait, Duration::from_millis(100 * place));
    }
}

#[tokio::test]
async fn a_denial_is_the_global_limiters_own() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("fixed-window:5/1h", &clock), &clock)
        .min_lease(3)
        .build();
    let mut admitted = 0;
    let denied = loop {
        let decision = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
        if !decision.allowed {
            break decision;
        }
        admitted += 1;
    };
    assert_eq!(admitted, 5);
    assert_eq!(denied.source, DecisionSource::Backend);
    assert_eq!(
        denied,
        limiter.inner().try_acquire(KEY.as_bytes(), 1).unwrap()
    );
}

#[tokio::test]
async fn the_sync_path_answers_only_from_units_in_hand_that_need_no_refill() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("sliding-counter:1000/1s", &clock), &clock)
        .min_lease(8)
        .refill_percent(25)
        .build();
    assert!(
        limiter.acquire_now(KEY.as_bytes(), 1).is_none(),
        "nothing in hand"
    );
    limiter.acquire(KEY.as_bytes(), 1).await.unwrap(); // 7 left of 8
    for left in [6, 5, 4, 3] {
        let decision = limiter.acquire_now(KEY.as_bytes(), 1).unwrap().unwrap();
        assert_eq!(
            (decision.source, decision.remaining),
            (DecisionSource::Lease, left)
        );
    }
    // Two left would cross the threshold (25% of 8): the async path refills.
    assert!(limiter.acquire_now(KEY.as_bytes(), 1).is_none());
    assert_eq!(limiter.held(KEY.as_bytes()), 3, "None took nothing");
    assert!(matches!(
        limiter.acquire_now(KEY.as_bytes(), 0),
        Some(Err(Error::ZeroCost))
    ));
}

/// The memory backend, counting every call a leased limiter makes to it,
/// `policies` included.
#[derive(Debug)]
struct Watched {
    global: MemoryLimiter,
    calls: AtomicU64,
}

impl Watched {
    fn call(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Limiter for Watched {
    fn policies(&self) -> &Policies {
        self.call();
        self.global.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.call();
        self.global.try_acquire(key, cost)
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.call();
        self.global.try_peek(key, cost)
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.call();
        self.global.remove(key);
        Ok(())
    }
}

/// A decision from the units in hand is the leased limiter's alone: it
/// reads nothing of the limiter it wraps, whose policies may sit behind a
/// lock or a network client.
#[tokio::test]
async fn a_decision_from_the_units_in_hand_calls_nothing_of_the_wrapped_limiter() {
    let clock = ManualClock::new(0);
    let watched = Watched {
        global: global("token-bucket:1000/1s", &clock),
        calls: AtomicU64::new(0),
    };
    let limiter = leased(watched, &clock)
        .min_lease(100)
        .max_lease(100)
        .build();
    limiter.acquire(KEY.as_bytes(), 1).await.unwrap(); // fetches 100
    let calls = limiter.inner().calls.load(Ordering::SeqCst);
    for _ in 0..3 {
        let decided = [
            limiter.acquire_now(KEY.as_bytes(), 1).unwrap().unwrap(),
            limiter.acquire(KEY.as_bytes(), 1).await.unwrap(),
            limiter.peek_now(KEY.as_bytes(), 1).unwrap().unwrap(),
            limiter.peek(KEY.as_bytes(), 1).await.unwrap(),
        ];
        assert!(decided.iter().all(|d| d.source == DecisionSource::Lease));
    }
    assert_eq!(limiter.held(KEY.as_bytes()), 93);
    assert_eq!(limiter.inner().calls.load(Ordering::SeqCst), calls);
}

/// docs/spec.md section 8.1, refill: the request that fetched a lease on
/// need, which leaves the units in hand at the refill threshold, fetches
/// the next lease ahead of need before it answers.
#[tokio::test]
async fn a_lease_fetched_on_need_that_leaves_too_few_fetches_the_next_ahead() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("sliding-log:1000/1s", &clock), &clock)
        .min_lease(2)
        .max_lease(100)
        .refill_percent(100)
        .build();
    // A lease of 2 for a request of 2: nothing in hand, and no demand
    // seen yet to size a lease ahead.
    limiter.acquire(KEY.as_bytes(), 2).await.unwrap();
    assert_eq!(
        (limiter.held(KEY.as_bytes()), limiter.stats().leases),
        (0, 1)
    );
    // One unit a millisecond since: a lease of 2 (twice the arrivals),
    // which leaves 1 in hand, at the threshold (all of the last lease):
    // the same request fetches 2 more ahead.
    clock.advance(Duration::from_millis(1));
    let decision = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(decision.source, DecisionSource::Backend);
    let stats = limiter.stats();
    assert_eq!((stats.leases, stats.leased_units), (3, 6));
    assert_eq!(limiter.held(KEY.as_bytes()), 3);
}

#[tokio::test]
async fn a_fixed_window_lease_ends_with_its_window() {
    let clock = ManualClock::new(900_000);
    let limiter = leased(global("fixed-window:100/1s", &clock), &clock)
        .min_lease(10)
        .max_lease(10)
        .lifetime(Duration::from_secs(5))
        .build();
    limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    clock.set(999_999);
    assert_eq!(limiter.held(KEY.as_bytes()), 9);
    clock.set(1_000_000);
    assert_eq!(
        limiter.held(KEY.as_bytes()),
        0,
        "lapsed with the window that counted it"
    );
    assert_eq!(limiter.lapsed(), 9);
    let next = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(
        next.source,
        DecisionSource::Backend,
        "a new lease, in the new window"
    );
}

#[tokio::test]
async fn release_and_reset_give_up_the_units_in_hand() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("token-bucket:100/1s", &clock), &clock)
        .min_lease(10)
        .max_lease(10)
        .build();
    limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(limiter.release().await, 9);
    assert_eq!((limiter.held(KEY.as_bytes()), limiter.lapsed()), (0, 9));
    // No refund: the global limiter still counts them.
    assert_eq!(counted_left(limiter.inner()), 89);
    limiter.acquire(KEY.as_bytes(), 1).await.unwrap(); // a lease of 10 again
    limiter.reset(KEY.as_bytes()).await.unwrap();
    assert_eq!((limiter.held(KEY.as_bytes()), limiter.lapsed()), (0, 18));
    assert_eq!(counted_left(limiter.inner()), 99);
}

#[tokio::test]
async fn a_zero_lifetime_leases_nothing() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("sliding-log:5/1s", &clock), &clock)
        .lifetime(Duration::ZERO)
        .min_lease(5)
        .build();
    for remaining in (0..5).rev() {
        let decision = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
        assert_eq!(
            (decision.source, decision.remaining),
            (DecisionSource::Backend, remaining)
        );
    }
    assert!(limiter.is_empty());
}

#[tokio::test]
async fn keys_beyond_the_cap_are_decided_by_the_global_limiter() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("token-bucket:100/1s", &clock), &clock)
        .min_lease(10)
        .max_keys(16)
        .build();
    for i in 0..200 {
        let key = format!("k{i}");
        let decision = limiter.acquire(key.as_bytes(), 1).await.unwrap();
        assert!(decision.allowed);
    }
    assert!(limiter.len() <= 16, "{} keys held", limiter.len());
    // Every key was counted once, whether leased or not.
    let leased_units: u64 = (0..200)
        .map(|i| limiter.held(format!("k{i}").as_bytes()))
        .sum();
    let counted: u64 = (0..200)
        .map(|i| {
            100 - limiter
                .inner()
                .try_peek(format!("k{i}").as_bytes(), 1)
                .unwrap()
                .remaining
                - 1
        })
        .sum();
    assert_eq!(counted, 200 + leased_units);
}

/// docs/spec.md 8.1: a key beyond the most keys is sent to the global
/// limiter only while none of the keys held is idle; a key is idle once
/// it holds nothing and has nothing in flight, its lease used up long
/// before it lapses.
#[tokio::test]
async fn a_key_that_used_up_its_lease_makes_room_for_another() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("sliding-log:10/1h", &clock), &clock)
        .min_lease(10)
        .max_lease(10)
        .refill_percent(0)
        .max_keys(1)
        .build();
    // `a` leases the whole limit of 10.
    limiter.acquire(b"a", 1).await.unwrap();
    assert_eq!(limiter.held(b"a"), 9);
    // `b` finds the one slot taken by a live lease: decided exactly.
    let b = limiter.acquire(b"b", 1).await.unwrap();
    assert_eq!(b.source, DecisionSource::Backend);
    assert_eq!(limiter.held(b"b"), 0);
    // `a` uses its 9 units; the key has nothing left to lease ahead.
    for _ in 0..9 {
        let d = limiter.acquire(b"a", 1).await.unwrap();
        assert_eq!(d.source, DecisionSource::Lease);
    }
    assert_eq!(limiter.held(b"a"), 0);
    // `c` takes the idle key's place, and leases.
    limiter.acquire(b"c", 1).await.unwrap();
    assert_eq!(limiter.held(b"c"), 9, "`c` was decided exactly");
}

/// A key longer than `max_key_bytes` is held as its digest, and decided
/// as itself: two long keys with a common prefix keep leases of their own.
#[tokio::test]
async fn long_keys_keep_leases_of_their_own() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("sliding-log:10/1h", &clock), &clock)
        .max_lease(5)
        .min_lease(5)
        .max_key_bytes(16)
        .build();
    assert_eq!(limiter.max_key_bytes(), 16);
    let [a, b] = ["a", "b"].map(|tail| format!("{}{tail}", "k".repeat(100)));
    limiter.acquire(a.as_bytes(), 1).await.unwrap();
    limiter.acquire(b.as_bytes(), 2).await.unwrap();
    assert_eq!(
        (limiter.held(a.as_bytes()), limiter.held(b.as_bytes())),
        (4, 3)
    );
    assert_eq!(limiter.len(), 2);
    // Each counted its lease of 5 on the global limiter (a peek of 1
    // leaves 4).
    let left = |key: &str| {
        limiter
            .inner()
            .try_peek(key.as_bytes(), 1)
            .unwrap()
            .remaining
    };
    assert_eq!((left(&a), left(&b)), (4, 4));
}

/// Keys whose leases lapsed are dropped within the idle sweep's second,
/// though no new key asks for the room.
#[tokio::test]
async fn idle_keys_are_dropped_without_a_new_key_asking() {
    let clock = ManualClock::new(0);
    let limiter = leased(global("token-bucket:100/1s", &clock), &clock)
        .min_lease(10)
        .build();
    for i in 0..100 {
        limiter
            .acquire(format!("k{i}").as_bytes(), 1)
            .await
            .unwrap();
    }
    assert_eq!(limiter.len(), 100);
    clock.advance(limiter.lifetime() + Duration::from_secs(1));
    limiter.acquire(b"k0", 1).await.unwrap();
    assert_eq!(limiter.len(), 1, "only the key just asked for");
}

/// The cause of a [`Switch`] that is down.
#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("down")
    }
}

impl std::error::Error for Down {}

/// The memory backend, or a backend that is down.
#[derive(Debug)]
struct Switch {
    global: MemoryLimiter,
    down: AtomicBool,
    /// The units of every call that reached the backend, summed.
    asked: AtomicU64,
}

impl Switch {
    /// A token bucket of 1000 a second behind the switch, `down` or up,
    /// and the switch behind a fail-closed `Resilient` that asks it on
    /// every call (no probe interval).
    fn fail_closed(clock: &ManualClock, down: bool) -> (Arc<Self>, Resilient<Arc<Self>>) {
        let switch = Arc::new(Self {
            global: global("token-bucket:1000/1s", clock),
            down: AtomicBool::new(down),
            asked: AtomicU64::new(0),
        });
        let resilient = Arc::clone(&switch)
            .on_failure(FailurePolicy::FailClosed)
            .probe_interval(Duration::ZERO);
        (switch, resilient)
    }

    fn answer(&self, cost: u64) -> Result<(), Error> {
        self.asked.fetch_add(cost, Ordering::SeqCst);
        match self.down.load(Ordering::SeqCst) {
            true => Err(Error::backend(FailureReach::Backend, Down)),
            false => Ok(()),
        }
    }
}

#[async_trait]
impl Limiter for Switch {
    fn policies(&self) -> &Policies {
        self.global.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.answer(cost)?;
        self.global.try_acquire(key, cost)
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.global.try_peek(key, cost)
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.global.remove(key);
        Ok(())
    }
}

#[tokio::test]
async fn leases_in_hand_serve_through_an_outage_then_the_failure_policy_answers() {
    let clock = ManualClock::new(0);
    let (switch, resilient) = Switch::fail_closed(&clock, false);
    let limiter = leased(resilient, &clock)
        .min_lease(5)
        .refill_percent(0)
        .lifetime(Duration::from_millis(100))
        .build();
    limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    switch.down.store(true, Ordering::SeqCst);
    for left in (0..4).rev() {
        let decision = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
        assert_eq!(
            (decision.source, decision.remaining),
            (DecisionSource::Lease, left)
        );
    }
    let asked = switch.asked.load(Ordering::SeqCst);
    // The lease is used up: the next lease meets the outage.
    let refused = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(refused.source, DecisionSource::FailClosed);
    assert_eq!(
        limiter.held(KEY.as_bytes()),
        0,
        "a failure policy's answer is no lease"
    );
    let lease_asked = switch.asked.load(Ordering::SeqCst) - asked;
    assert!(lease_asked >= 1);
    // For a lifetime, the key asks at each request's own cost.
    let again = limiter.acquire(KEY.as_bytes(), 3).await.unwrap();
    assert_eq!(again.source, DecisionSource::FailClosed);
    assert_eq!(switch.asked.load(Ordering::SeqCst) - asked - lease_asked, 3);
    switch.down.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_millis(100));
    let back = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(back.source, DecisionSource::Backend, "a lease again");
    assert!(limiter.held(KEY.as_bytes()) > 0);
}

/// docs/spec.md 8.4: after a failure policy answered a lease, the key's
/// requests go to the global limiter at their own cost for `T`, the most
/// keys held or not: the key is not dropped to make room meanwhile, which
/// would have its next request ask a whole lease of the failure policy
/// again (a fallback limiter counts it whole).
#[tokio::test]
async fn a_degraded_key_keeps_asking_at_its_own_cost_when_the_map_is_full() {
    let clock = ManualClock::new(0);
    let (switch, resilient) = Switch::fail_closed(&clock, true);
    let limiter = leased(resilient, &clock)
        .min_lease(5)
        .lifetime(Duration::from_millis(100))
        .max_keys(1)
        .build();
    // `a`'s lease meets the outage: `a` is exact for 100 ms.
    let a = limiter.acquire(b"a", 1).await.unwrap();
    assert_eq!(a.source, DecisionSource::FailClosed);
    // Another key's request comes in meanwhile.
    limiter.acquire(b"b", 1).await.unwrap();
    // `a` again, within the 100 ms: its own cost, 1.
    let before = switch.asked.load(Ordering::SeqCst);
    limiter.acquire(b"a", 1).await.unwrap();
    let asked = switch.asked.load(Ordering::SeqCst) - before;
    assert_eq!(asked, 1, "asked {asked} units for a request of 1");
}

/// The memory backend behind a gate: a call is decided as it arrives and
/// its answer waits while the gate is shut, as a reply on its way back.
#[derive(Debug)]
struct Gate {
    global: MemoryLimiter,
    open: AtomicBool,
    /// Acquires asked, answered or not.
    calls: AtomicU64,
}

impl Gate {
    fn shut(global: MemoryLimiter) -> Self {
        Self {
            global,
            open: AtomicBool::new(false),
            calls: AtomicU64::new(0),
        }
    }
}

/// Ready once the gate is open.
struct Opened<'a>(&'a AtomicBool);

impl std::future::Future for Opened<'_> {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match self.0.load(Ordering::SeqCst) {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    }
}

#[async_trait]
impl Limiter for Gate {
    fn policies(&self) -> &Policies {
        self.global.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let decided = self.global.try_acquire(key, cost);
        Opened(&self.open).await;
        decided
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.global.try_peek(key, cost)
    }

    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.global.remove(key);
        Ok(())
    }
}

#[tokio::test]
async fn a_lease_request_dropped_unanswered_lets_the_key_ask_again() {
    let clock = ManualClock::new(0);
    let gate = Gate::shut(global("token-bucket:100/1s", &clock));
    let limiter = leased(gate, &clock).min_lease(10).max_lease(10).build();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut waiting = limiter.acquire(KEY.as_bytes(), 1);
    assert!(
        waiting.as_mut().poll(&mut cx).is_pending(),
        "the lease is in flight"
    );
    drop(waiting);
    limiter.inner().open.store(true, Ordering::SeqCst);
    let decision = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(decision.source, DecisionSource::Backend);
    assert_eq!(
        limiter.held(KEY.as_bytes()),
        9,
        "a lease, not a request sent alone"
    );
}

/// docs/spec.md 8.3: `reset` drops the units held, and 8.1: the units
/// held include the lease in flight. A lease counted before the reset and
/// answered after it lapses, rather than serve on top of the fresh key's
/// limit; the request that fetched it has its answer.
#[tokio::test]
async fn a_lease_in_flight_across_a_reset_is_not_used_on_the_fresh_key() {
    let clock = ManualClock::new(0);
    let gate = Gate::shut(global("sliding-log:10/1h", &clock));
    let limiter = leased(gate, &clock).min_lease(10).max_lease(10).build();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut first = limiter.acquire(KEY.as_bytes(), 1);
    assert!(
        first.as_mut().poll(&mut cx).is_pending(),
        "the lease of 10 is counted, its answer on its way"
    );
    limiter.reset(KEY.as_bytes()).await.unwrap();
    limiter.inner().open.store(true, Ordering::SeqCst);
    assert!(first.await.unwrap().allowed);
    assert_eq!(limiter.held(KEY.as_bytes()), 0);
    assert_eq!(limiter.lapsed(), 9);
    // The fresh key admits its limit of 10, no more.
    let mut admitted = 0;
    while limiter.acquire(KEY.as_bytes(), 1).await.unwrap().allowed {
        admitted += 1;
    }
    assert_eq!(admitted, 10);
}

#[tokio::test]
async fn a_tiered_set_leases_from_every_part_and_reports_the_bound_one() {
    let clock = ManualClock::new(0);
    let tiers: Policies = "sliding-log:100/1s;token-bucket:10/1s,capacity=20"
        .parse()
        .unwrap();
    let global = MemoryLimiter::builder(tiers).clock(clock.clone()).build();
    let limiter = leased(global, &clock).min_lease(50).max_lease(100).build();
    assert_eq!(limiter.max_lease(), 20, "capped by the set's max cost");
    let first = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(first.source, DecisionSource::Backend);
    // The bucket bound the lease of 20: its limit (capacity) and index.
    assert_eq!((first.limit, first.remaining, first.bound_by), (20, 0, 1));
    let next = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
    assert_eq!(next.source, DecisionSource::Lease);
    assert_eq!((next.limit, next.remaining, next.bound_by), (20, 18, 1));
    let parts = limiter.inner().try_peek(KEY.as_bytes(), 1).unwrap();
    // The set denies (the bucket is empty); the log, as it stands, counted
    // the lease too: 100 - 20.
    assert!(!parts.allowed);
    assert_eq!(parts.parts()[0].remaining, 80);
}

/// A leased limiter as a failure policy's fallback: its decisions, leased
/// or not, are the fallback's (`Fallback`), never `Lease`, which would say
/// the backend counted them.
#[tokio::test]
async fn a_leased_fallbacks_decisions_are_the_fallbacks() {
    let clock = ManualClock::new(5_000_000);
    let backend = limiter_test::Flaky::new(Arc::new(global("sliding-log:1000/1s", &clock)));
    backend.set_failing(true);
    let share = leased(global("sliding-log:100/1s", &clock), &clock)
        .min_lease(10)
        .build();
    let limiter = backend.on_failure(FailurePolicy::fallback(share));
    for _ in 0..5 {
        let decision = limiter.acquire(KEY.as_bytes(), 1).await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.source, DecisionSource::Fallback, "{decision:?}");
    }
}

/// Polls each of `requests` once, in order, while `gate` is shut (each
/// must wait), then opens it; answers how many calls reached the gate.
fn held_at_the_gate<F: std::future::Future + Unpin>(gate: &Gate, requests: &mut [F]) -> u64 {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for request in requests {
        let polled = std::pin::Pin::new(request).poll(&mut cx);
        assert!(polled.is_pending(), "the gate is shut");
    }
    gate.open.store(true, Ordering::SeqCst);
    gate.calls.load(Ordering::SeqCst)
}

/// Polls every future of `pending` on a no-op waker until all are ready
/// (the gate's calls are ready once it is open); their answers in order.
fn answers<F: std::future::Future + Unpin>(mut pending: Vec<F>) -> Vec<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut answers: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    for _ in 0..1_000 {
        for (future, answer) in pending.iter_mut().zip(&mut answers) {
            if answer.is_none() {
                if let std::task::Poll::Ready(output) = std::pin::Pin::new(future).poll(&mut cx) {
                    *answer = Some(output);
                }
            }
        }
        if answers.iter().all(Option::is_some) {
            return answers.into_iter().flatten().collect();
        }
    }
    panic!("a request never got its answer");
}

#[tokio::test]
async fn requests_the_lease_in_flight_covers_wait_for_it() {
    let clock = ManualClock::new(0);
    let gate = Gate::shut(global("token-bucket:100/1s", &clock));
    let limiter = leased(gate, &clock).min_lease(10).max_lease(10).build();
    // The first request fetches a lease of 10: its own unit and 9 more;
    // 9 requests claim those 9 and wait; the 10th finds none to claim.
    let mut requests: Vec<_> = (0..11)
        .map(|_| limiter.acquire(KEY.as_bytes(), 1))
        .collect();
    let asked = held_at_the_gate(limiter.inner(), &mut requests);
    assert_eq!(asked, 2, "the lease, and the one request it does not cover");
    let sources: Vec<DecisionSource> = answers(requests)
        .into_iter()
        .map(|answer| {
            let decision = answer.expect("an answer");
            assert!(decision.allowed);
            decision.source
        })
        .collect();
    let mut expected = vec![DecisionSource::Backend];
    expected.extend([DecisionSource::Lease; 9]);
    expected.push(DecisionSource::Backend);
    assert_eq!(sources, expected);
}

#[tokio::test]
async fn a_request_that_waited_for_a_lease_too_small_asks_alone() {
    let clock = ManualClock::new(0);
    let gate = Gate::shut(global("token-bucket:100/1s", &clock));
    // 3 units left globally: the lease of 10 is denied, then shrinks to 3.
    gate.global.try_acquire(KEY.as_bytes(), 97).unwrap();
    let limiter = leased(gate, &clock).min_lease(10).max_lease(10).build();
    let mut requests: Vec<_> = (0..5).map(|_| limiter.acquire(KEY.as_bytes(), 1)).collect();
    let asked = held_at_the_gate(limiter.inner(), &mut requests);
    assert_eq!(asked, 1, "the lease alone");
    let decisions: Vec<Decision> = answers(requests)
        .into_iter()
        .map(|answer| answer.expect("an answer"))
        .collect();
    let admitted = decisions.iter().filter(|d| d.allowed).count();
    assert_eq!(admitted, 3, "no more than the global limiter had left");
    for denied in decisions.iter().filter(|d| !d.allowed) {
        assert_eq!(denied.source, DecisionSource::Backend, "its own denial");
    }
}

/// Counts its wakes.
#[derive(Default)]
struct Wakes(AtomicU64);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_waiting_request_is_woken_when_its_lease_is_dropped_unanswered() {
    let clock = ManualClock::new(0);
    let gate = Gate::shut(global("token-bucket:100/1s", &clock));
    let limiter = leased(gate, &clock).min_lease(10).max_lease(10).build();
    let noop = std::task::Waker::noop();
    let wakes = Arc::new(Wakes::default());
    let waker = std::task::Waker::from(Arc::clone(&wakes));
    let mut fetching = limiter.acquire(KEY.as_bytes(), 1);
    let mut waiting = limiter.acquire(KEY.as_bytes(), 1);
    assert!(fetching
        .as_mut()
        .poll(&mut std::task::Context::from_waker(noop))
        .is_pending());
    assert!(waiting
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&waker))
        .is_pending());
    assert_eq!(limiter.inner().calls.load(Ordering::SeqCst), 1, "it waits");
    // The caller of the lease gives up (a timeout, a closed connection).
    drop(fetching);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "woken, not left waiting");
    limiter.inner().open.store(true, Ordering::SeqCst);
    let decision = answers(vec![waiting]).remove(0).unwrap();
    assert!(decision.allowed);
    assert_eq!(decision.source, DecisionSource::Backend, "it asks itself");
}

//! A simulated fleet: several [`Leased`] instances, each behind its own
//! round-trip delays, sharing one exact global limiter (the memory
//! backend) on one manual clock, driven tick by tick without a runtime.
#![allow(dead_code)] // each test binary uses a part

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use limiter_core::{Decision, DecisionSource, Error, Limiter, ManualClock, Policies};
use limiter_lease::Leased;
use limiter_memory::MemoryLimiter;

/// The key every instance asks for.
pub(crate) const KEY: &str = "tenant";

/// The options every instance's leases share.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseOptions {
    pub(crate) lifetime_us: u64,
    /// `None`: the default, the maximum lease's share of a lifetime.
    pub(crate) min_lease: Option<u64>,
    /// `None`: the over-admission budget's.
    pub(crate) max_lease: Option<u64>,
    /// `None`: the default budget.
    pub(crate) budget_percent: Option<f64>,
}

/// One instance: its round trip, its refill threshold and its requests.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// µs from sending a request to the global limiter deciding it.
    pub(crate) to_us: u64,
    /// µs from the decision to the reply arriving.
    pub(crate) back_us: u64,
    pub(crate) refill_percent: u8,
    /// `(arrival µs, cost)`, in time order.
    pub(crate) requests: Vec<(u64, u64)>,
}

/// What a run admitted and refused.
#[derive(Debug)]
pub(crate) struct Run {
    /// `(time_us, cost)` of every admitted request: its use time (the
    /// decision's time: the instance's clock for a leased one, the global
    /// limiter's count for one it decided).
    pub(crate) admitted: Vec<(u64, u64)>,
    /// Units admitted from a lease, in process.
    pub(crate) leased: u64,
    /// `(arrival µs, cost)` of every refused request.
    pub(crate) refused: Vec<(u64, u64)>,
    /// The most units one instance held at once.
    pub(crate) most_held: u64,
    /// Units the instances hold at the end.
    pub(crate) held: u64,
    /// Units the instances leased and never used, by the end.
    pub(crate) lapsed: u64,
    /// Units the global limiter can still admit at the end.
    pub(crate) available: u64,
    /// `M` as the instances applied it (capped by the max cost).
    pub(crate) max_lease: u64,
    /// Per instance, `(send µs, cost)` of every call to the global
    /// limiter: lease requests, and requests at their own cost.
    pub(crate) sent: Vec<Vec<(u64, u64)>>,
    /// `(instance, arrival µs, source)` of every request, in the order
    /// answered.
    pub(crate) sources: Vec<(usize, u64, DecisionSource)>,
}

/// The global limiter as one instance reaches it: each call waits out the
/// way there, is decided, and waits out the way back.
#[derive(Debug)]
struct Delayed {
    global: Arc<MemoryLimiter>,
    clock: ManualClock,
    to_us: u64,
    back_us: u64,
    /// `(send µs, cost)` of every acquire.
    sent: Mutex<Vec<(u64, u64)>>,
}

/// Ready once the manual clock reaches `due_us`.
struct Until<'a> {
    clock: &'a ManualClock,
    due_us: u64,
}

impl Future for Until<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        use limiter_core::Clock;
        match self.clock.now_us() >= self.due_us {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

impl Delayed {
    fn after(&self, us: u64) -> Until<'_> {
        use limiter_core::Clock;
        Until {
            clock: &self.clock,
            due_us: self.clock.now_us() + us,
        }
    }
}

#[async_trait]
impl Limiter for Delayed {
    fn policies(&self) -> &Policies {
        self.global.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        {
            use limiter_core::Clock;
            let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
            sent.push((self.clock.now_us(), cost));
        }
        self.after(self.to_us).await;
        let decided = self.global.try_acquire(key, cost);
        self.after(self.back_us).await;
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

type Pending<'a> = (
    usize,
    u64,
    u64,
    Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>>,
);

/// Runs `instances` against one global limiter of `policies`, a µs per
/// step, until every request is answered.
pub(crate) fn run(policies: &Policies, lease: LeaseOptions, instances: &[Instance]) -> Run {
    let clock = ManualClock::new(0);
    let global = Arc::new(
        MemoryLimiter::builder(policies.clone())
            .clock(clock.clone())
            .build(),
    );
    let leased: Vec<Leased<Delayed>> = instances
        .iter()
        .map(|instance| {
            let delayed = Delayed {
                global: Arc::clone(&global),
                clock: clock.clone(),
                to_us: instance.to_us,
                back_us: instance.back_us,
                sent: Mutex::default(),
            };
            let mut builder = Leased::builder(delayed)
                .clock(clock.clone())
                .lifetime(std::time::Duration::from_micros(lease.lifetime_us))
                .refill_percent(instance.refill_percent);
            if let Some(units) = lease.min_lease {
                builder = builder.min_lease(units);
            }
            if let Some(percent) = lease.budget_percent {
                builder = builder.over_admission_budget(percent);
            }
            if let Some(units) = lease.max_lease {
                builder = builder.max_lease(units);
            }
            builder.build()
        })
        .collect();
    let mut next = vec![0; instances.len()];
    let mut pending: Vec<Pending<'_>> = Vec::new();
    let mut admitted = Vec::new();
    let mut refused = Vec::new();
    let mut sources = Vec::new();
    let mut from_leases = 0;
    let mut most_held = 0;
    let mut cx = Context::from_waker(Waker::noop());
    let mut now = 0;
    loop {
        clock.set(now);
        for (i, instance) in instances.iter().enumerate() {
            while let Some(&(at, cost)) = instance.requests.get(next[i]) {
                if at > now {
                    break;
                }
                pending.push((i, at, cost, leased[i].acquire(KEY.as_bytes(), cost)));
                next[i] += 1;
            }
        }
        pending.retain_mut(
            |(i, at, cost, future)| match future.as_mut().poll(&mut cx) {
                Poll::Pending => true,
                Poll::Ready(decided) => {
                    let decision = decided.expect("a valid request");
                    sources.push((*i, *at, decision.source));
                    if decision.source == DecisionSource::Lease {
                        from_leases += *cost;
                    }
                    match decision.allowed {
                        true => admitted.push((decision.time_us, *cost)),
                        false => refused.push((*at, *cost)),
                    }
                    false
                }
            },
        );
        for instance in &leased {
            most_held = most_held.max(instance.held(KEY.as_bytes()));
        }
        let all_sent = instances
            .iter()
            .zip(&next)
            .all(|(instance, &sent)| sent == instance.requests.len());
        if all_sent && pending.is_empty() {
            break;
        }
        now += 1;
    }
    let held = leased
        .iter()
        .map(|instance| instance.held(KEY.as_bytes()))
        .sum();
    let lapsed = leased.iter().map(Leased::lapsed).sum();
    let available = match global.try_peek(KEY.as_bytes(), 1).expect("a valid peek") {
        peeked if peeked.allowed => peeked.remaining + 1,
        peeked => peeked.remaining,
    };
    Run {
        admitted,
        leased: from_leases,
        refused,
        most_held,
        held,
        lapsed,
        available,
        max_lease: leased[0].max_lease(),
        sent: leased
            .iter()
            .map(|instance| {
                let sent = &instance.inner().sent;
                sent.lock().unwrap_or_else(PoisonError::into_inner).clone()
            })
            .collect(),
        sources,
    }
}

/// What a closed loop of callers decided: its decisions, those taken from
/// a lease, and what the instance sent to the global limiter.
#[derive(Debug)]
pub(crate) struct ClosedRun {
    pub(crate) decisions: u64,
    pub(crate) leased: u64,
    pub(crate) stats: limiter_lease::LeaseStats,
    /// The instance's minimum and maximum lease.
    pub(crate) min_lease: u64,
    pub(crate) max_lease: u64,
}

/// `callers` that each wait for an answer before sending the next
/// request, a µs later, `decisions` times, through one instance at the
/// default options behind a round trip of `round_trip_us`: caller `i`
/// asks keys `i`, `i + callers`, … of `keys` in turn, as `limiter bench`
/// spreads its callers. Unlike [`run`], the arrivals depend on how fast
/// the instance decides.
pub(crate) fn closed_loop(
    policies: &Policies,
    callers: usize,
    keys: usize,
    round_trip_us: u64,
    decisions: usize,
) -> ClosedRun {
    let clock = ManualClock::new(0);
    let global = Arc::new(
        MemoryLimiter::builder(policies.clone())
            .clock(clock.clone())
            .build(),
    );
    let delayed = Delayed {
        global,
        clock: clock.clone(),
        to_us: round_trip_us / 2,
        back_us: round_trip_us - round_trip_us / 2,
        sent: Mutex::default(),
    };
    let leased = Leased::builder(delayed).clock(clock.clone()).build();
    let names: Vec<String> = (0..keys).map(|i| format!("key{i}")).collect();
    // Per caller: its next key's index, its decisions left, and the
    // decision in flight.
    type InFlight<'a> = Option<Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>>>;
    let mut callers: Vec<(usize, usize, InFlight<'_>)> =
        (0..callers).map(|i| (i % keys, decisions, None)).collect();
    let step = callers.len() % keys;
    let (mut total, mut from_leases) = (0, 0);
    let mut cx = Context::from_waker(Waker::noop());
    let mut now = 0;
    while callers
        .iter()
        .any(|(_, left, future)| *left > 0 || future.is_some())
    {
        clock.set(now);
        for (next, left, future) in &mut callers {
            if future.is_none() && *left > 0 {
                *left -= 1;
                *future = Some(leased.acquire(names[*next].as_bytes(), 1));
                *next = (*next + step) % keys;
            }
            if let Some(decided) = future.as_mut() {
                if let Poll::Ready(decided) = decided.as_mut().poll(&mut cx) {
                    let decision = decided.expect("a valid request");
                    total += 1;
                    from_leases += u64::from(decision.source == DecisionSource::Lease);
                    *future = None;
                }
            }
        }
        now += 1;
    }
    ClosedRun {
        decisions: total,
        leased: from_leases,
        stats: leased.stats(),
        min_lease: leased.min_lease(),
        max_lease: leased.max_lease(),
    }
}

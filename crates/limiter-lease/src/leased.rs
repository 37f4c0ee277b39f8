//! [`Leased`]: any [`Limiter`], decided in process from leases on it.
//!
//! # The route of a decision
//!
//! A **warm** decision, from units in hand that cover the request and
//! leave more than the refill threshold: one clock read, one hash, one
//! lock, no allocation, nothing awaited.
//!
//! 1. `Limiter::acquire` (or `acquire_now`): the warm route first, inline,
//!    so that its future stays small.
//! 2. `Leased::decide_now`: checks the policies only for a cost out of
//!    their range.
//! 3. `Leases::with_live`: hashes the key once (`Leases::shard`: the hash
//!    picks the shard and the slot), locks the shard, reads the clock
//!    (under the lock, so that the decision's time follows every lease
//!    that landed before it; a time out of range goes the cold route,
//!    which names the error), finds the key's `KeyLease` and drops its
//!    leases that lapsed (`KeyLease::expire`).
//! 4. `KeyLease::serve`: takes the units (`peek`, `take_held`) unless
//!    that leaves a lease to fetch (`wants_refill`), and counts the
//!    arrival (`arrived`).
//! 5. `KeyLease::grant` and `Leased::leased_decision`: the decision, from
//!    the units left and the last grant's numbers (docs/spec.md section
//!    8.4).
//!
//! A **cold** decision, a lease fetched on need: the units in hand do not
//! cover the request, and no lease is in flight.
//!
//! 1. `Limiter::acquire`: the warm route answers nothing; the rest runs
//!    in a boxed future of its own.
//! 2. `Leased::decide`: reads the clock and checks the policies; under
//!    the key's lock (`Leases::with_new`, which reads the clock again, adds
//!    the key, or answers nothing when the map is full: the request is
//!    then exact) it plans.
//! 3. `Leased::plan`: counts the arrival, then tries in turn the units in
//!    hand (`KeyLease::take`), the lease in flight (`claim`: the request
//!    waits for it, `Landing`, and plans once more), and a lease of its
//!    own (`KeyLease::ask`: `room`, `demand`, then `asked` marks it in
//!    flight); failing all three, the wrapped limiter at its own cost.
//! 4. `Leased::fetch`: guards the lease in flight (`InFlight`, which
//!    settles it however the request ends), counts it (`LeaseStats`) and
//!    sends it, `acquire(key, size)` on the wrapped limiter: the round
//!    trip.
//! 5. `Leased::settle`: the lease's units and numbers (`expiry`), put in
//!    hand under one lock (`InFlight::finish_then`: `KeyLease::granted`,
//!    `settled`), which also asks the next lease ahead of need if this one
//!    leaves too few (`wants_refill`, `ask_ahead`); then the requests
//!    that waited for the lease are woken.
//! 6. `Leased::refill`, if a lease was asked ahead: its round trip, before
//!    the request answers.
//! 7. The answer is the lease decision itself (source `Backend`). A
//!    denied lease is asked again smaller (`InFlight::retry`: `denied`,
//!    `unclaimed`, which wakes the waiting requests), down to the
//!    request's own cost.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use limiter_core::backend::{check_policies, ClockSource};
use limiter_core::{Decision, DecisionSource, Error, Limiter, Policies, MAX_TIME_US};

use crate::in_flight::InFlight;
use crate::key_lease::{packed, Batch, Grant, KeyLease, Sizing, Taken};
use crate::landing::Landing;
use crate::leases::Leases;
use crate::stats::{Counters, LeaseStats};

/// A limiter that takes quota from another limiter (the **global** one,
/// say Redis, shared by every instance) in leases, and decides most
/// requests in process from the units leased (docs/spec.md section 8).
///
/// A lease is an ordinary [`acquire`](Limiter::acquire) of several units on
/// the global limiter, so it works on every backend, algorithm and tiered
/// set, and a denied lease counts nothing. The units are then used by this
/// instance alone, for at most the [lifetime](crate::LeasedBuilder::lifetime) `T`;
/// what is not used lapses. Near the key's limit leases shrink to what is
/// left, down to the request itself, which the global limiter then decides
/// exactly. The price is an over-admission, written per algorithm in
/// docs/spec.md section 8.2: at most `N * M` units in any window for `N`
/// instances and a [maximum lease](crate::LeasedBuilder::max_lease) `M`, and no
/// more than about `T` worth of the rate (none in an aligned fixed window).
/// By default `M` is the [over-admission
/// budget](crate::LeasedBuilder::over_admission_budget), a share of the policy's
/// limit, so each instance adds at most that share to a window.
///
/// It is a [`Limiter`] itself: wrap it in [`Resilient`](limiter_core::Resilient),
/// an HTTP layer or the CLI unchanged. To keep deciding from leases in hand
/// while the global limiter fails, put the failure policy inside:
/// `Leased::new(redis.on_failure(policy))`: leases serve until they expire,
/// then each request gets the policy's answer.
///
/// Decisions taken from a lease have the source [`DecisionSource::Lease`];
/// docs/spec.md section 8.4 says what their numbers mean (`remaining` is
/// the units left in this instance's lease). A request the units in hand do
/// not cover asks the global limiter for a lease and waits for it; so does
/// the request that leaves fewer than the [refill
/// threshold](crate::LeasedBuilder::refill_percent), after taking its units, so
/// that the next requests find a lease in hand. While a key's lease is in
/// flight, a request it could cover claims units of it and waits for it
/// too, so a hot key asks about one lease per round trip however many
/// callers decide it. No task is spawned.
///
/// ```
/// use limiter_core::{DecisionSource, Limiter, ManualClock, Policy, Rate};
/// use limiter_lease::Leased;
/// use limiter_memory::MemoryLimiter;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let clock = ManualClock::new(0);
/// let global = MemoryLimiter::builder(Policy::sliding_log(Rate::per_second(1_000))?)
///     .clock(clock.clone())
///     .build();
/// let leased = Leased::builder(global).clock(clock.clone()).min_lease(10).build();
/// let first = leased.acquire(b"tenant:7", 1).await?; // fetches a lease of 10
/// assert_eq!((first.source, first.remaining), (DecisionSource::Backend, 990));
/// let next = leased.acquire(b"tenant:7", 1).await?; // decided in process
/// assert_eq!((next.source, next.remaining), (DecisionSource::Lease, 8));
/// assert_eq!(leased.held(b"tenant:7"), 8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct Leased<L> {
    pub(crate) inner: L,
    pub(crate) leases: Leases,
    pub(crate) sizing: Sizing,
    pub(crate) max_keys: usize,
    pub(crate) max_key_bytes: usize,
    pub(crate) clock: ClockSource,
    /// The policies' max cost: a request of at most it, at a time in the
    /// exact range, passes their checks.
    pub(crate) max_cost: u64,
    /// Each part's max cost: the `limit` a lease decision on it reports.
    pub(crate) part_limits: Box<[u64]>,
    /// The parts that are fixed windows: a lease ends with their window.
    pub(crate) fixed_windows: Box<[usize]>,
    /// The slowest leaky-bucket part's spacing, if any: `(W, L, tick)`.
    pub(crate) spacing: Option<(u64, u64, u64)>,
    /// What was sent to the wrapped limiter ([`stats`](Self::stats)).
    pub(crate) counters: Counters,
}

/// What a request does, decided under its key's lock.
enum Plan {
    /// Taken from the units in hand; fetch a lease of this size ahead of need.
    Served(Decision, Option<u64>),
    /// Fetch a lease of this size, the request's cost taken from it.
    Fetch(u64),
    /// Wait for the lease in flight, whose units the request claimed (the
    /// key's settle count), then decide again.
    Wait(u32),
    /// Ask the wrapped limiter at the request's own cost.
    Exact,
}

impl<L: Limiter> Leased<L> {
    /// The limiter leases are taken from.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// `T`, the [lifetime](crate::LeasedBuilder::lifetime) of a lease.
    pub fn lifetime(&self) -> Duration {
        Duration::from_micros(self.sizing.lifetime_us)
    }

    /// `M`, the [maximum lease](crate::LeasedBuilder::max_lease), as capped by the
    /// policies' maximum cost and 2^32 - 1.
    pub fn max_lease(&self) -> u64 {
        self.sizing.max_lease
    }

    /// The [over-admission budget](crate::LeasedBuilder::over_admission_budget) in
    /// force, in percent: `M` as a share of the smallest limit of the
    /// policies, the most this instance's leases add to a window of it
    /// (docs/spec.md section 8.2). It is the budget set, or more when `M`
    /// is the one unit a lease takes at least, or what a
    /// [`max_lease`](crate::LeasedBuilder::max_lease) set amounts to.
    pub fn over_admission_budget(&self) -> f64 {
        let smallest = self.inner.policies().iter().map(|p| p.limit()).min();
        self.sizing.max_lease as f64 * 100.0 / smallest.unwrap_or(1).max(1) as f64
    }

    /// What this instance has sent to the wrapped limiter so far: lease
    /// requests, their units, and requests at their own cost.
    pub fn stats(&self) -> LeaseStats {
        self.counters.snapshot()
    }

    /// `m`, the [minimum lease](crate::LeasedBuilder::min_lease).
    pub fn min_lease(&self) -> u64 {
        self.sizing.min_lease
    }

    /// The [refill threshold](crate::LeasedBuilder::refill_percent), in percent.
    pub fn refill_percent(&self) -> u8 {
        u8::try_from(self.sizing.refill_percent).unwrap_or(100)
    }

    /// The most keys leased at once ([`LeasedBuilder::max_keys`](crate::LeasedBuilder::max_keys)).
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The longest key held as it is ([`LeasedBuilder::max_key_bytes`](crate::LeasedBuilder::max_key_bytes)).
    pub fn max_key_bytes(&self) -> usize {
        self.max_key_bytes
    }

    /// The most bytes the keys' lease state holds, beyond the empty
    /// limiter's own and the wrapped limiter's: for each of
    /// [`max_keys`](Self::max_keys), its bytes (at most
    /// [`max_key_bytes`](Self::max_key_bytes), or a digest) and its
    /// leases, and the shards' tables at their largest, each allocation
    /// counted with 32 bytes of allocator overhead (the wakers of requests
    /// waiting for a lease in flight aside).
    ///
    /// A key is idle once it holds no units and has no lease in flight: at
    /// the latest a [lifetime](crate::LeasedBuilder::lifetime) after its last
    /// lease was sent. Idle keys are dropped when a new key needs the
    /// room, and otherwise within about a second, at the first request
    /// after then; a sweep also gives back the room of a table left
    /// mostly empty.
    ///
    /// ```
    /// use limiter_core::{Policy, Rate};
    /// use limiter_lease::Leased;
    /// use limiter_memory::MemoryLimiter;
    ///
    /// let global = MemoryLimiter::new(Policy::token_bucket(Rate::per_second(100))?);
    /// let leased = Leased::builder(global).max_keys(10_000).build();
    /// // Keys of up to 256 bytes, their leases and the tables.
    /// assert!(leased.max_bytes() < 10_000 * 1_024);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_bytes(&self) -> usize {
        self.leases.max_bytes()
    }

    /// The keys this instance holds lease state for (idle ones until
    /// dropped).
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The units of `key` this instance holds now, unused and unexpired.
    pub fn held(&self, key: &[u8]) -> u64 {
        self.leases
            .with_live(key, &self.clock, |lease, _| lease.held())
            .unwrap_or(0)
    }

    /// Units this instance leased and never used: lapsed with their lease,
    /// or given up, in hand or in flight, by [`release`](Self::release) or
    /// by [`reset`](Limiter::reset). The global limiter counted them (the
    /// under-admission of docs/spec.md section 8.3).
    pub fn lapsed(&self) -> u64 {
        self.leases.lapsed()
    }

    /// Gives up every unit in hand, for a shutdown: returns how many. The
    /// units of a lease in flight lapse when it arrives.
    ///
    /// No backend has a refund (docs/spec.md section 8.3), so the units
    /// lapse: the global limiter keeps them counted until its policy lets
    /// them go. The limiter keeps working: later requests fetch new leases.
    pub async fn release(&self) -> u64 {
        self.leases.release(self.clock.now_us())
    }

    /// Decides a request: from the units in hand, by waiting once for the
    /// lease in flight, by fetching a lease, or by the wrapped limiter at
    /// the request's own cost.
    async fn decide(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        check_policies(self.inner.policies(), self.clock.now_us(), cost)?;
        if self.sizing.lifetime_us == 0 {
            return self.exact(key, cost).await;
        }
        let mut may_wait = true;
        loop {
            let plan = self
                .leases
                .with_new(key, &self.clock, |lease, now_us| {
                    self.plan(lease, cost, now_us, may_wait)
                })
                .unwrap_or(Plan::Exact);
            return match plan {
                Plan::Served(decision, refill) => {
                    if let Some(size) = refill {
                        self.refill(key, size).await;
                    }
                    Ok(decision)
                }
                Plan::Fetch(size) => self.fetch(key, cost, size).await,
                Plan::Exact => self.exact(key, cost).await,
                Plan::Wait(settles) => {
                    let leases = &self.leases;
                    Landing {
                        leases,
                        key,
                        settles,
                    }
                    .await;
                    may_wait = false;
                    continue;
                }
            };
        }
    }

    /// What a request of `cost` does now: served from the units in hand,
    /// else (if `may_wait`) waiting for the lease in flight if it has the
    /// units unclaimed, else fetching a lease, else asking exactly. The
    /// first plan of a request (`may_wait`) counts its arrival.
    fn plan(&self, lease: &mut KeyLease, cost: u64, now_us: u64, may_wait: bool) -> Plan {
        if may_wait {
            lease.arrived(cost);
        }
        if let Some(taken) = lease.take(cost, self.spacing.is_some()) {
            let decision = self.leased_decision(lease.grant(&self.part_limits), taken, now_us);
            let refill = match lease.wants_refill(taken.left, now_us) {
                true => lease.ask_ahead(now_us, &self.sizing),
                false => None,
            };
            return Plan::Served(decision, refill);
        }
        if let Some(settles) = may_wait.then(|| lease.claim(cost)).flatten() {
            return Plan::Wait(settles);
        }
        match lease.ask(cost, now_us, &self.sizing) {
            Some(size) => Plan::Fetch(size),
            None => Plan::Exact,
        }
    }

    /// The wrapped limiter's decision at the request's own cost.
    async fn exact(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.counters.exact();
        self.inner.acquire(key, cost).await
    }

    /// Fetches a lease of `size` for a request of `cost`, shrinking it on a
    /// denial to the key's `remaining`, then to `cost` (docs/spec.md
    /// section 8.1); the request's answer is the last lease decision.
    async fn fetch(&self, key: &[u8], cost: u64, mut size: u64) -> Result<Decision, Error> {
        let mut pending = InFlight::new(&self.leases, key, &self.clock);
        let mut shrunk = false;
        loop {
            let sent_us = self.clock.now_us();
            self.counters.lease(size);
            let set = self.inner.acquire(key, size).await?;
            let decision = set.clone();
            if !is_counted(decision.source) {
                self.degraded(&mut pending);
                return Ok(set);
            }
            if decision.allowed {
                let ahead = self.settle(&mut pending, sent_us, size, cost, &set, true);
                drop(pending);
                if let Some(size) = ahead {
                    self.refill(key, size).await;
                }
                return Ok(set);
            }
            if size == cost {
                pending.finish(|lease| lease.denied(decision.remaining));
                return Ok(set);
            }
            pending.retry(|lease| lease.denied(decision.remaining));
            size = match decision.remaining {
                left if !shrunk && left >= cost && left < size => left,
                _ => cost,
            };
            shrunk = true;
        }
    }

    /// Fetches a lease of `size` ahead of need; a denial or a failure
    /// leaves the next request to ask (and to meet the failure).
    async fn refill(&self, key: &[u8], size: u64) {
        let mut pending = InFlight::new(&self.leases, key, &self.clock);
        let sent_us = self.clock.now_us();
        self.counters.lease(size);
        if let Ok(set) = self.inner.acquire(key, size).await {
            let decision = set.clone();
            match (is_counted(decision.source), decision.allowed) {
                (false, _) => self.degraded(&mut pending),
                (true, true) => {
                    self.settle(&mut pending, sent_us, size, 0, &set, false);
                }
                (true, false) => {
                    pending.finish(|lease| lease.denied(decision.remaining));
                }
            }
        }
    }

    /// A failure policy answered the lease in flight: it holds nothing,
    /// and the key is not leased for a lifetime (docs/spec.md section 8.4).
    fn degraded(&self, pending: &mut InFlight<'_>) {
        let until_us = self.clock.now_us().saturating_add(self.sizing.lifetime_us);
        pending.finish(|lease| lease.degraded(until_us));
    }

    /// Puts a granted lease of `size`, sent at `sent_us`, in hand, less the
    /// `cost` of the request that fetched it; counts its units lapsed if
    /// the key's units were given up while it was in flight. If `ahead`,
    /// answers the size of the next lease to fetch ahead of need, if the
    /// units in hand are at or below the refill threshold (and marks it
    /// in flight), under the same lock: the request that fetched a lease
    /// on need sends the next one when its lease leaves too few.
    fn settle(
        &self,
        pending: &mut InFlight<'_>,
        sent_us: u64,
        size: u64,
        cost: u64,
        set: &Decision,
        ahead: bool,
    ) -> Option<u64> {
        let decision = set.clone();
        let expires_us = self.expiry(sent_us, set);
        let grant = Grant {
            limit: decision.limit,
            bound_by: decision.bound_by,
            reset_at_us: sent_us.saturating_add(micros(decision.reset_after)),
        };
        let (lapsed, refill) = pending.finish_then(
            |lease, now_us| {
                let batch = Batch {
                    units: packed(size - cost),
                    expires_us,
                    taken: packed(cost),
                    depart_us: now_us.saturating_add(micros(decision.wait)),
                };
                lease.granted(batch, grant, decision.remaining, &self.part_limits)
            },
            |lease, now_us| {
                self.leases.lapse(lease.expire(now_us));
                match ahead && lease.wants_refill(lease.held(), now_us) {
                    true => lease.ask_ahead(now_us, &self.sizing),
                    false => None,
                }
            },
        )?;
        self.leases.lapse(lapsed);
        refill
    }

    /// When a lease sent at `sent_us` lapses: a lifetime after it was sent,
    /// and no later than the end of the window of any fixed-window part
    /// that counted it. A set whose parts were not reported one by one
    /// (a wrapper answered it whole) holds nothing.
    fn expiry(&self, sent_us: u64, set: &Decision) -> u64 {
        let mut expires_us = sent_us.saturating_add(self.sizing.lifetime_us);
        if self.fixed_windows.is_empty() {
            return expires_us;
        }
        let parts = set.parts();
        if parts.len() != self.inner.policies().len() {
            return sent_us;
        }
        for &part in self.fixed_windows.iter() {
            let window_end = sent_us.saturating_add(micros(parts[part].reset_after));
            expires_us = expires_us.min(window_end);
        }
        expires_us
    }

    /// A decision taken from a lease (docs/spec.md section 8.4).
    #[inline]
    fn leased_decision(&self, grant: Option<Grant>, taken: Taken, now_us: u64) -> Decision {
        // Before any grant only: a warm decision reads no policies.
        let grant = grant.unwrap_or_else(|| Grant {
            limit: self.inner.policies().max_cost(),
            bound_by: 0,
            reset_at_us: now_us,
        });
        let wait = match self.spacing {
            // The `place`-th unit of a lease departs `ceil(place * W / L)`
            // ticks after its first.
            Some((window, limit, tick)) => {
                let ticks =
                    (u128::from(taken.place) * u128::from(window)).div_ceil(u128::from(limit));
                let after = u64::try_from(ticks * u128::from(tick)).unwrap_or(u64::MAX);
                let departs_us = taken.depart_us.saturating_add(after);
                Duration::from_micros(departs_us.saturating_sub(now_us))
            }
            // Only a leaky bucket queues: no conversion otherwise.
            None => Duration::ZERO,
        };
        Decision::admit(grant.limit, taken.left, now_us)
            .with_reset_after(Duration::from_micros(
                grant.reset_at_us.saturating_sub(now_us),
            ))
            .with_wait(wait)
            .with_source(DecisionSource::Lease)
            .with_bound_by(grant.bound_by)
    }

    /// [`leased_decision`](Self::leased_decision) on `cost` from the units
    /// in hand, taken (`acquire`) or not (`peek`), if they cover it and,
    /// when taken, leave no lease to fetch: one clock read, one hash, one
    /// lock, no allocation.
    #[inline]
    fn decide_now(&self, key: &[u8], cost: u64, take: bool) -> Option<Result<Decision, Error>> {
        if self.sizing.lifetime_us == 0 {
            return None;
        }
        if cost.wrapping_sub(1) >= self.max_cost {
            // The policies' checks name the error.
            if let Err(error) = check_policies(self.inner.policies(), self.clock.now_us(), cost) {
                return Some(Err(error));
            }
        }
        let (taken, grant, now_us) = self
            .leases
            .with_live(key, &self.clock, |lease, now_us| {
                if now_us > MAX_TIME_US {
                    // The wrapped limiter's route names the error.
                    return None;
                }
                let queued = self.spacing.is_some();
                let taken = match take {
                    true => lease.serve(cost, now_us, queued)?,
                    false => lease.peek(cost, queued)?,
                };
                Some((taken, lease.grant(&self.part_limits), now_us))
            })
            .flatten()?;
        Some(Ok(self.leased_decision(grant, taken, now_us)))
    }
}

/// Whether a decision's units were counted by the global limiter: not a
/// failure policy's answer (whose numbers hold no count).
fn is_counted(source: DecisionSource) -> bool {
    matches!(source, DecisionSource::Backend | DecisionSource::Lease)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl<L: Limiter> fmt::Debug for Leased<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("inner", &self.inner)
            .field("lifetime", &self.lifetime())
            .field("min_lease", &self.sizing.min_lease)
            .field("max_lease", &self.sizing.max_lease)
            .field("refill_percent", &self.sizing.refill_percent)
            .field("max_keys", &self.max_keys)
            .field("max_key_bytes", &self.max_key_bytes)
            .field("keys_held", &self.len())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<L: Limiter> Limiter for Leased<L> {
    fn policies(&self) -> &Policies {
        self.inner.policies()
    }

    /// Decided from the units in hand when they cover the request and leave
    /// no lease to fetch, as [`acquire_now`](Limiter::acquire_now);
    /// otherwise by fetching a lease or by the wrapped limiter, in a future
    /// of its own: the warm path's future stays small.
    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        if let Some(decided) = self.decide_now(key, cost, true) {
            return decided;
        }
        Box::pin(self.decide(key, cost)).await
    }

    /// Decided from the units in hand when they cover the request (a
    /// leased decision has no parts of its own); otherwise by the wrapped
    /// limiter.
    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        match self.decide_now(key, cost, false) {
            Some(decided) => decided,
            None => self.inner.peek(key, cost).await,
        }
    }

    /// Resets the key on the wrapped limiter, then gives up the key's
    /// units in hand and those of its lease in flight (they lapse), whatever
    /// the reset's answer: once the reset returns, the key uses only leases
    /// sent after it, which the global limiter counts on the fresh key.
    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let reset = self.inner.reset(key).await;
        self.leases.release_key(key, &self.clock);
        reset
    }

    /// Charges the wrapped limiter, which every instance shares. The
    /// key's units in hand stay spendable: the wrapped limiter counted them
    /// when it leased them, so spending them admits nothing it has not
    /// counted, and the debt refuses the key's next lease until time has
    /// paid it back.
    async fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
        self.inner.charge(key, units).await
    }

    /// `Some` when the units in hand cover the request and leave no lease
    /// to fetch; `None` otherwise (call [`acquire`](Limiter::acquire)).
    fn acquire_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        self.decide_now(key, cost, true)
    }

    /// `Some` when the units in hand cover the request.
    fn peek_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        self.decide_now(key, cost, false)
    }
}

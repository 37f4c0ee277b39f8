//! [`Resilient`]: any [`Limiter`] with a [`FailurePolicy`], which answers
//! its requests while its backend fails.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::mode::Mode;
use super::outage::{Outage, Tallies, Tally};
use super::policy::FailurePolicy;
use crate::all_of::check_policies;
use crate::backend_failure::FailureReach;
use crate::clock::{Clock, SystemClock};
use crate::decision::{Decision, DecisionSource};
use crate::error::Error;
use crate::limiter::Limiter;
use crate::policies::Policies;

/// A fallback's decision, marked as the fallback's (a leased fallback's
/// too: its units were counted by the fallback, not the backend); one
/// that was degraded itself (a fallback under a failure policy of its
/// own, answering fail open or closed) keeps its source, which says that
/// nothing was counted.
fn as_fallbacks(decision: Decision) -> Decision {
    match decision.source {
        DecisionSource::Backend | DecisionSource::Lease => {
            decision.with_source(DecisionSource::Fallback)
        }
        _ => decision,
    }
}

/// Any [`Limiter`] with a [`FailurePolicy`] for when it fails.
///
/// While the backend answers, `Resilient` forwards every call and changes
/// nothing (the fast paths included). When a call fails with
/// [`Error::Backend`], the policy answers it, and the error's
/// [reach](Error::reach) says what follows:
///
/// - [`FailureReach::Backend`] (the backend cannot be reached or does not
///   answer) starts an outage: from then on at most one request per
///   [`probe_interval`](Self::probe_interval) (1 s by default) tries the
///   backend, the others are answered by the policy at once, without
///   waiting for a timeout. The first probe the backend answers ends it.
/// - [`FailureReach::Node`] (one cluster node down) and
///   [`FailureReach::Request`] (an error reply such as `WRONGTYPE` or
///   `OOM`, a new key refused at a key limit, a request queued past its
///   timeout) are answered for that request alone: the next requests, on
///   every key, are asked of the backend as usual. A cluster backend keeps
///   a circuit per node, so a down node's keys fail at once there, and the
///   other nodes' keys are decided exactly.
///
/// [`FailurePolicy::ReturnError`] forwards everything, every error included.
///
/// Failures are logged through `tracing` at `warn`, at most one per second
/// for each reach, with the count of those left out in between; the end of
/// an outage at `info`. docs/backends.md ("How far a failure reaches") tells the
/// whole outage story: this wrapper, the backend's circuit and the
/// cluster's per-node circuits.
///
/// ```
/// use limiter_core::{DecisionSource, FailurePolicy, LimiterExt, Limiter, Policy};
/// # async fn example(redis: impl Limiter, local_share: impl Limiter + 'static) -> Result<(), limiter_core::Error> {
/// let limiter = redis.on_failure(FailurePolicy::fallback(local_share));
/// let decision = limiter.acquire(b"user:42", 1).await?;
/// if decision.source == DecisionSource::Fallback {
///     // Redis is down: decided by this instance's share of the limit.
/// }
/// # Ok(()) }
/// ```
pub struct Resilient<L> {
    inner: L,
    degrade: Option<Degrade>,
    probe_interval: Duration,
    clock: Arc<dyn Clock>,
    /// Whether the backend is failing; read on every call, so kept apart
    /// from the outage's details.
    failing: AtomicBool,
    outage: Mutex<Outage>,
    tallies: Mutex<Tallies>,
}

/// How a failing backend's requests are answered (every policy but
/// `ReturnError`).
#[derive(Debug, Clone)]
enum Degrade {
    Open,
    Closed,
    Fallback(Arc<dyn Limiter>),
}

impl Degrade {
    fn source(&self) -> DecisionSource {
        match self {
            Self::Open => DecisionSource::FailOpen,
            Self::Closed => DecisionSource::FailClosed,
            Self::Fallback(_) => DecisionSource::Fallback,
        }
    }
}

/// The longest [`Resilient::probe_interval`]: a century, far enough to
/// mean never, near enough that an `Instant` plus it cannot overflow.
const LONGEST_PROBE_INTERVAL: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// What the call should do next, decided under the outage lock.
enum Route {
    Backend { probe: bool },
    Degrade,
}

impl<L: Limiter> Resilient<L> {
    /// The default [`probe_interval`](Self::probe_interval).
    pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

    /// `inner`, answered by `policy` while it fails.
    pub fn new(inner: L, policy: FailurePolicy) -> Self {
        let degrade = match policy {
            FailurePolicy::ReturnError => None,
            FailurePolicy::FailOpen => Some(Degrade::Open),
            FailurePolicy::FailClosed => Some(Degrade::Closed),
            FailurePolicy::Fallback(limiter) => Some(Degrade::Fallback(limiter)),
        };
        let now = Instant::now();
        Self {
            inner,
            degrade,
            probe_interval: Self::DEFAULT_PROBE_INTERVAL,
            clock: Arc::new(SystemClock),
            failing: AtomicBool::new(false),
            outage: Mutex::new(Outage {
                started: now,
                next_probe: now,
                degraded: 0,
                warnings: Tally::default(),
            }),
            tallies: Mutex::default(),
        }
    }

    /// While the backend fails, at most one request per `interval` tries
    /// it (the others are answered by the policy at once); 1 s by default.
    /// Zero tries it on every request; [`Duration::MAX`] (or anything past
    /// a century, taken as a century) never again in practice. Measured
    /// with [`Instant`], not the limiter's clock.
    #[must_use]
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        // An `Instant` plus a longer one may overflow, which panics.
        self.probe_interval = interval.min(LONGEST_PROBE_INTERVAL);
        self
    }

    /// The clock that stamps fail-open and fail-closed decisions
    /// (`time_us`) and checks their requests' time; [`SystemClock`] by
    /// default. Give the backend's clock when it has one.
    #[must_use]
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The limiter it wraps.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The limiter it wraps, unwrapped.
    pub fn into_inner(self) -> L {
        self.inner
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        match &self.degrade {
            None => FailurePolicy::ReturnError,
            Some(Degrade::Open) => FailurePolicy::FailOpen,
            Some(Degrade::Closed) => FailurePolicy::FailClosed,
            Some(Degrade::Fallback(limiter)) => FailurePolicy::Fallback(Arc::clone(limiter)),
        }
    }

    /// Whether the backend failed and has not answered since: requests are
    /// answered by the failure policy, and probe the backend at most once
    /// per [`probe_interval`](Self::probe_interval).
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    fn outage(&self) -> MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether to call the backend (and whether as a probe), taking the
    /// probe slot when it is due.
    fn route(&self) -> Route {
        if !self.failing.load(Ordering::Acquire) {
            return Route::Backend { probe: false };
        }
        let mut outage = self.outage();
        let now = Instant::now();
        if now >= outage.next_probe {
            outage.next_probe = now + self.probe_interval;
            Route::Backend { probe: true }
        } else {
            Route::Degrade
        }
    }

    /// Whether the backend is failing and no probe is due: the request can
    /// be answered by the policy without touching the backend.
    fn degrading_without_probe(&self) -> bool {
        self.failing.load(Ordering::Acquire) && Instant::now() < self.outage().next_probe
    }

    /// Records a backend failure: starts an outage, or continues it; logs
    /// at most one warning per second.
    fn failed(&self, error: &Error, key: &[u8], mode: Mode, source: DecisionSource) {
        let mut outage = self.outage();
        let now = Instant::now();
        if !self.failing.load(Ordering::Acquire) {
            outage.started = now;
            outage.next_probe = now + self.probe_interval;
            outage.degraded = 0;
            self.failing.store(true, Ordering::Release);
        }
        let Some(suppressed) = outage.warnings.warn_now(now) else {
            return;
        };
        drop(outage);
        tracing::warn!(
            error = %error.chain(),
            key_bytes = key.len(),
            call = mode.name(),
            answer = source.name(),
            suppressed,
            "rate limiter backend failed; answering {source} until it answers \
             ({suppressed} more failures since the last warning)"
        );
    }

    /// Ends the outage, if any: the backend answered.
    fn answered(&self) {
        if !self.failing.load(Ordering::Acquire) {
            return;
        }
        let mut outage = self.outage();
        if self.failing.swap(false, Ordering::AcqRel) {
            let (lasted, degraded) = (outage.started.elapsed(), outage.degraded);
            outage.warnings = Tally::default();
            drop(outage);
            tracing::info!(
                lasted_ms = lasted.as_millis() as u64,
                degraded,
                "rate limiter backend answers again after {lasted:?}; \
                 {degraded} requests were answered by the failure policy"
            );
        }
    }

    /// What `outcome`, the backend's answer, becomes.
    fn after_backend<T>(
        &self,
        outcome: &Result<T, Error>,
        probe: bool,
        key: &[u8],
        mode: Mode,
    ) -> Option<&Degrade> {
        match (outcome, &self.degrade) {
            (Err(error), Some(degrade)) => match error.reach()? {
                FailureReach::Backend => {
                    self.failed(error, key, mode, degrade.source());
                    Some(degrade)
                }
                // An error for this request, or for one node's keys, from a
                // backend that answers the others: the policy answers this
                // request, and the next requests are still asked. A probe
                // so answered found the backend answering.
                reach => {
                    if probe {
                        self.answered();
                    }
                    self.answered_with_error(reach, error, key, mode, degrade.source());
                    Some(degrade)
                }
            },
            (Ok(_), _) if probe => {
                self.answered();
                None
            }
            _ => None,
        }
    }

    /// Logs an error that reaches one request or one node: at most one
    /// warning per second for each reach, with the count left out since.
    fn answered_with_error(
        &self,
        reach: FailureReach,
        error: &Error,
        key: &[u8],
        mode: Mode,
        source: DecisionSource,
    ) {
        let mut tallies = self.tallies.lock().unwrap_or_else(PoisonError::into_inner);
        let tally = match reach {
            FailureReach::Node => &mut tallies.node,
            _ => &mut tallies.request,
        };
        let Some(suppressed) = tally.warn_now(Instant::now()) else {
            return;
        };
        drop(tallies);
        tracing::warn!(
            error = %error.chain(),
            reach = reach.name(),
            key_bytes = key.len(),
            call = mode.name(),
            answer = source.name(),
            suppressed,
            "rate limiter backend failed for this {reach} only; answered {source} \
             ({suppressed} more such failures since the last warning)"
        );
    }

    /// The answer of the policy if it needs no future (fail open, fail
    /// closed, a fallback with a fast path), else `None`.
    fn degrade_now(
        &self,
        degrade: &Degrade,
        key: &[u8],
        cost: u64,
        mode: Mode,
    ) -> Option<Result<Decision, Error>> {
        let answer = match degrade {
            Degrade::Open => Some(self.fixed_answer(DecisionSource::FailOpen, cost)),
            Degrade::Closed => Some(self.fixed_answer(DecisionSource::FailClosed, cost)),
            Degrade::Fallback(fallback) => mode
                .ask_now(&**fallback, key, cost)
                .map(|answer| answer.map(as_fallbacks)),
        };
        if answer.is_some() {
            self.outage().degraded += 1;
        }
        answer
    }

    /// The answer of the policy.
    async fn degrade(
        &self,
        degrade: &Degrade,
        key: &[u8],
        cost: u64,
        mode: Mode,
    ) -> Result<Decision, Error> {
        if let Some(answer) = self.degrade_now(degrade, key, cost, mode) {
            return answer;
        }
        if let Degrade::Fallback(fallback) = degrade {
            self.outage().degraded += 1;
            return mode.ask(&**fallback, key, cost).await.map(as_fallbacks);
        }
        // Fail open and fail closed always answered at once.
        self.fixed_answer(degrade.source(), cost)
    }

    /// A fail-open or fail-closed decision, after the checks every request
    /// gets (docs/spec.md rule 2.2).
    fn fixed_answer(&self, source: DecisionSource, cost: u64) -> Result<Decision, Error> {
        let policies = self.inner.policies();
        let now_us = self.clock.now_us();
        check_policies(policies, now_us, cost)?;
        let max_cost = policies.max_cost();
        let decision = if source == DecisionSource::FailClosed {
            // In an outage, until the next probe; else (one new key refused
            // at a key limit) a probe interval, when the backend would be
            // asked again were it failing.
            let until_probe = match self.failing.load(Ordering::Acquire) {
                true => self
                    .outage()
                    .next_probe
                    .saturating_duration_since(Instant::now()),
                false => self.probe_interval,
            };
            // Whole microseconds, rounded up, at least one.
            let micros = until_probe.as_nanos().div_ceil(1_000).max(1);
            let retry_after = u64::try_from(micros).map_or(Duration::MAX, Duration::from_micros);
            Decision::deny(max_cost, 0, retry_after, now_us)
        } else {
            Decision::admit(max_cost, 0, now_us)
        };
        Ok(decision.with_source(source))
    }

    async fn decide(&self, key: &[u8], cost: u64, mode: Mode) -> Result<Decision, Error> {
        let probe = match self.route() {
            Route::Backend { probe } => probe,
            Route::Degrade => {
                if let Some(degrade) = &self.degrade {
                    return self.degrade(degrade, key, cost, mode).await;
                }
                false
            }
        };
        let outcome = mode.ask(&self.inner, key, cost).await;
        match self.after_backend(&outcome, probe, key, mode) {
            Some(degrade) => self.degrade(degrade, key, cost, mode).await,
            None => outcome,
        }
    }

    fn decide_now(&self, key: &[u8], cost: u64, mode: Mode) -> Option<Result<Decision, Error>> {
        if let Some(degrade) = &self.degrade {
            if self.degrading_without_probe() {
                return self.degrade_now(degrade, key, cost, mode);
            }
        }
        if self.failing.load(Ordering::Acquire) {
            // A probe is due: the async path takes it.
            return None;
        }
        let outcome = mode.ask_now(&self.inner, key, cost)?;
        match self.after_backend(&outcome, false, key, mode) {
            // `None` with the outage started: the async path asks the
            // fallback without calling the backend again.
            Some(degrade) => self.degrade_now(degrade, key, cost, mode),
            None => Some(outcome),
        }
    }
}

#[async_trait]
impl<L: Limiter> Limiter for Resilient<L> {
    fn policies(&self) -> &Policies {
        self.inner.policies()
    }

    async fn acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Acquire).await
    }

    async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        self.decide(key, cost, Mode::Peek).await
    }

    /// Resets the key on the backend (an error if it fails, whatever the
    /// policy) and on the fallback, if any.
    async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let backend = self.inner.reset(key).await;
        if let Some(Degrade::Fallback(fallback)) = &self.degrade {
            fallback.reset(key).await?;
        }
        backend
    }

    /// Charges the backend, and the fallback too, if any, so that what
    /// it decides while the backend fails counts the charge. A backend's
    /// failure is answered as the error, whatever the policy: a charge
    /// answers no decision, so there is none to fail open or closed.
    async fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
        let backend = self.inner.charge(key, units).await;
        if let Some(Degrade::Fallback(fallback)) = &self.degrade {
            fallback.charge(key, units).await?;
        }
        backend
    }

    fn acquire_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        self.decide_now(key, cost, Mode::Acquire)
    }

    fn peek_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        self.decide_now(key, cost, Mode::Peek)
    }
}

impl<L: Limiter> fmt::Debug for Resilient<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Resilient");
        debug
            .field("inner", &self.inner)
            .field("on_failure", &self.failure_policy().name());
        if let Some(Degrade::Fallback(fallback)) = &self.degrade {
            debug.field("fallback", fallback);
        }
        debug
            .field("probe_interval", &self.probe_interval)
            .field("failing", &self.failing.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

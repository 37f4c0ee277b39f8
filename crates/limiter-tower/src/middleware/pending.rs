//! [`Pending`]: one request's decision under way, from the ban check to
//! the verdict, decided at once where every part decides in process, or
//! in a future ([`Decide`]) where one does not.

use std::borrow::Borrow;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response};
use limiter_core::{Decision, DecisionSource, Error};
use tracing::Instrument;

use crate::answer::grpc;
use crate::answer::limited::{Limited, Refusal};
use crate::answer::response::{accepts_json, banned, verdict, Verdict, ERROR_RETRY_AFTER};
use crate::client::key_bytes::KeyBytes;
use crate::middleware::observe::{Outcome, Timer};
use crate::middleware::plans::Limits;
use crate::middleware::response_charge::ResponseCharge;
use crate::middleware::settings::Settings;
use crate::middleware::shaping::{self, Plan};

/// A decision still to be made (a ban store or limiter out of process, a
/// penalty to count, a wait to sleep).
pub(crate) type Decide = Pin<Box<dyn Future<Output = Decided> + Send>>;

/// A decision made in a future: the verdict, and the charge after the
/// response of a request it admits.
pub(crate) struct Decided {
    pub(crate) verdict: Verdict,
    pub(crate) charge: Option<Box<ResponseCharge>>,
}

impl From<Verdict> for Decided {
    fn from(verdict: Verdict) -> Self {
        Self {
            verdict,
            charge: None,
        }
    }
}

/// One request's decision, with what it needs to answer: the layer's
/// [`Settings`] borrowed while the request is decided synchronously (no
/// reference count moved between the cores on the hot path), an `Arc` of
/// it once the decision needs a future; and how to write a refusal
/// ([`Reply`]), read from the request's headers only when one is written.
///
/// The key is borrowed too while the request is decided synchronously
/// (`&KeyBytes`: not moved on the hot path), owned in a future.
pub(crate) struct Pending<
    C: Deref<Target = Settings>,
    R: Reply,
    K: Borrow<KeyBytes>,
    L: Deref<Target = Limits>,
> {
    pub(crate) settings: C,
    /// The limiter the request is decided by: its plan's, borrowed as the
    /// layer's settings are.
    pub(crate) limits: L,
    pub(crate) key: K,
    /// The request's units, from 1 to the limiter's max cost.
    pub(crate) cost: u64,
    pub(crate) reply: R,
    pub(crate) timer: Timer,
}

/// How a refusal is written for a request: JSON or text, HTTP or gRPC.
pub(crate) trait Reply {
    /// Whether the client accepts JSON.
    fn json(&self) -> bool;
    /// Whether the request is a gRPC call: refused with a `grpc-status`,
    /// not an HTTP status.
    fn grpc(&self) -> bool;
}

/// While the request is at hand: asked of its headers when a refusal is
/// written, not on every admitted request.
impl Reply for &HeaderMap {
    fn json(&self) -> bool {
        accepts_json(self)
    }

    fn grpc(&self) -> bool {
        grpc::is_grpc(self)
    }
}

/// Read from the headers before the request goes on without them.
#[derive(Debug, Clone, Copy)]
struct ReplyFormat {
    json: bool,
    grpc: bool,
}

impl Reply for ReplyFormat {
    fn json(&self) -> bool {
        self.json
    }

    fn grpc(&self) -> bool {
        self.grpc
    }
}

impl Pending<&Settings, &HeaderMap, &KeyBytes, &Limits> {
    /// This request, its decision to be finished in a future.
    fn owned(
        self,
        settings: &Arc<Settings>,
        limits: &Arc<Limits>,
    ) -> Pending<Arc<Settings>, ReplyFormat, KeyBytes, Arc<Limits>> {
        Pending {
            settings: Arc::clone(settings),
            limits: Arc::clone(limits),
            key: self.key.clone(),
            cost: self.cost,
            reply: ReplyFormat {
                json: self.reply.json(),
                grpc: self.reply.grpc(),
            },
            timer: self.timer,
        }
    }
}

impl<C, R, K, L> Pending<C, R, K, L>
where
    C: Deref<Target = Settings>,
    R: Reply,
    K: Borrow<KeyBytes>,
    L: Deref<Target = Limits>,
{
    /// The key's bytes.
    fn key(&self) -> &[u8] {
        self.key.borrow()
    }

    /// The answer to a banned request, or `None` to go on (not banned, or
    /// the check failed).
    pub(crate) fn ban_verdict(&self, check: Result<Option<Duration>, Error>) -> Option<Verdict> {
        match check {
            Ok(Some(left)) => {
                self.settings.observer.record(Outcome::Banned, self.timer);
                let response = banned(self.settings.ban_status, self.reply.json(), left);
                Some(self.refuse(response, Refusal::Banned, left, None))
            }
            Ok(None) => None,
            Err(e) => {
                self.settings.observer.ban_check_failed(&e);
                None
            }
        }
    }

    /// The limiter's decision now, if it decides in process (one policy
    /// or a tiered set).
    pub(crate) fn acquire_now(&self) -> Option<Result<Decision, Error>> {
        self.limits.limiter.acquire_now(self.key(), self.cost)
    }

    /// Whether `result` needs more than a synchronous answer: a denial to
    /// count against a penalty, or a wait to sleep (or refuse).
    pub(crate) fn needs_follow_up(&self, result: &Result<Decision, Error>) -> bool {
        let Ok(decision) = result else { return false };
        if decision.allowed {
            // No wait (every algorithm but the leaky bucket): no plan.
            !decision.wait.is_zero() && self.settings.shaping.plan(decision.wait) != Plan::Pass
        } else {
            self.settings.penalty.is_some() && counts_as_denial(decision)
        }
    }

    /// The answer to `result`, counted.
    pub(crate) fn finish(&self, result: Result<Decision, Error>) -> Verdict {
        self.settings
            .observer
            .record(Outcome::of(&result), self.timer);
        let settings = &self.settings;
        match verdict(
            &result,
            || self.reply.json(),
            settings.style,
            &self.limits.policy_headers,
        ) {
            Verdict::Respond(response) => {
                let (refusal, retry_after) = match &result {
                    Ok(answer) if answer.source == DecisionSource::FailClosed => {
                        (Refusal::Unavailable, answer.retry_after)
                    }
                    Ok(answer) => (Refusal::Denied, answer.retry_after),
                    Err(error) => {
                        settings.observer.decision_failed(error);
                        (Refusal::Unavailable, ERROR_RETRY_AFTER)
                    }
                };
                self.refuse(*response, refusal, retry_after, result.ok())
            }
            pass => pass,
        }
    }

    /// The layer's own refusal, or, with an `on_limited` function, what
    /// that function needs to answer in its place.
    fn refuse(
        &self,
        own: Response<Bytes>,
        refusal: Refusal,
        retry_after: Duration,
        decision: Option<Decision>,
    ) -> Verdict {
        match &self.settings.on_limited {
            None if self.reply.grpc() => {
                Verdict::Respond(Box::new(grpc::refusal(own, refusal, retry_after)))
            }
            None => Verdict::Respond(Box::new(own)),
            Some(on_limited) => Verdict::Limited(Box::new(Limited {
                refusal,
                retry_after,
                decision,
                own,
                on_limited: Arc::clone(on_limited),
            })),
        }
    }
}

impl Pending<Arc<Settings>, ReplyFormat, KeyBytes, Arc<Limits>> {
    /// Everything from the ban check on (the ban check only if
    /// `check_bans`).
    async fn decide(self, check_bans: bool) -> Decided {
        if check_bans {
            if let Some(bans) = &self.settings.bans {
                let banned = bans.banned_for(self.key()).await;
                if let Some(verdict) = self.ban_verdict(banned) {
                    return verdict.into();
                }
            }
        }
        let result = match self.acquire_now() {
            Some(result) => result,
            None => self.limits.limiter.acquire(self.key(), self.cost).await,
        };
        self.follow_up(result).await
    }

    /// The answer to `result`, after counting a denial against the penalty
    /// and sleeping (or refusing) a wait.
    async fn follow_up(self, result: Result<Decision, Error>) -> Decided {
        let settings = &self.settings;
        let mut set = match result {
            Ok(set) => set,
            Err(_) => return self.finish(result).into(),
        };
        if !set.allowed {
            if let (Some(penalty), Some(bans), true) =
                (&settings.penalty, &settings.bans, counts_as_denial(&set))
            {
                match penalty.punish(bans, self.key()).await {
                    Ok(true) => {
                        tracing::info!(
                            target: "limiter_tower",
                            policy = settings.observer.policy(),
                            ban_for_ms = penalty.ban_for().as_millis() as u64,
                            "a key denied too often is banned"
                        );
                        // Answered as the ban it earned: the limiter's own
                        // Retry-After (seconds) would send the client back
                        // into the ban (hours).
                        if let Some(verdict) = self.ban_verdict(Ok(Some(penalty.ban_for()))) {
                            return verdict.into();
                        }
                    }
                    Ok(false) => {}
                    // A key that may have earned a ban it did not get (the
                    // counter failing, or a full in-process ban list); at
                    // debug level, as a failed ban check: an outage would
                    // otherwise log one line per denial.
                    Err(e) => tracing::debug!(
                        target: "limiter_tower",
                        policy = settings.observer.policy(),
                        error = %e.chain(),
                        "counting a denial for the penalty, or its ban, failed"
                    ),
                }
            }
            return self.finish(Ok(set)).into();
        }
        match settings.shaping.plan(set.wait) {
            Plan::Pass => self.admit(set),
            Plan::Sleep(wait) => {
                let admitted = self.admit(set);
                tokio::time::sleep(wait).await;
                admitted
            }
            Plan::Deny(max) => {
                // Admitted, but later than the layer may hold it: answered
                // as a denial, nothing left to take now.
                shaping::refuse(max, &mut set);
                self.finish(Ok(set)).into()
            }
        }
    }

    /// The answer to an admitting `decision`, with its charge after the
    /// response.
    fn admit(&self, decision: Decision) -> Decided {
        Decided {
            charge: ResponseCharge::of(
                &self.settings,
                &self.limits,
                &self.key,
                self.cost,
                &decision,
            ),
            verdict: self.finish(Ok(decision)),
        }
    }
}

/// Whether a denial counts against a [`Penalty`](crate::bans::ban::Penalty): one
/// decided by the backend or its fallback, not a fail-closed answer
/// (nothing was counted).
fn counts_as_denial(decision: &Decision) -> bool {
    !decision.allowed
        && matches!(
            decision.source,
            DecisionSource::Backend | DecisionSource::Fallback
        )
}

/// `request`'s decision from the ban check on (the ban check only if
/// `check_bans`), as a future. Out of line: its future is built on the
/// stack before it is boxed, which made `call`'s own frame kilobytes
/// larger for the requests decided at once.
#[inline(never)]
pub(crate) fn decide_later(
    settings: &Arc<Settings>,
    limits: &Arc<Limits>,
    request: Pending<&Settings, &HeaderMap, &KeyBytes, &Limits>,
    check_bans: bool,
) -> Decide {
    boxed(settings, request.owned(settings, limits).decide(check_bans))
}

/// `request`'s follow-up of `result`, as a future; out of line as
/// [`decide_later`].
#[inline(never)]
pub(crate) fn follow_up_later(
    settings: &Arc<Settings>,
    limits: &Arc<Limits>,
    request: Pending<&Settings, &HeaderMap, &KeyBytes, &Limits>,
    result: Result<Decision, Error>,
) -> Decide {
    boxed(settings, request.owned(settings, limits).follow_up(result))
}

/// `decide`, boxed, in a span naming the layer.
fn boxed(settings: &Settings, decide: impl Future<Output = Decided> + Send + 'static) -> Decide {
    let span = tracing::debug_span!(
        target: "limiter_tower",
        "rate_limit",
        policy = settings.observer.policy()
    );
    Box::pin(decide.instrument(span))
}

//! Tiered limits (docs/spec.md section 7): one key under every part of a
//! [`Policies`] set. [`all_of`] combines the parts' decisions, the one
//! place that rule is written; [`SetState`] is a key's state under a set.

use std::time::Duration;

use crate::algorithms::{check_request, KeyState, KeyUpdate};
use crate::decision::Decision;
use crate::error::Error;
use crate::policies::Policies;

const MAX_PARTS: usize = Policies::MAX_PARTS;

/// Combines the decisions of a policy set's parts on one request into the
/// set's decision (docs/spec.md section 7): the one place that rule lives.
///
/// `parts` holds each part's own decision on the request (1 to
/// [`Policies::MAX_PARTS`], in the set's order), all made at the same time
/// and `cost`, each as if it were alone: an admitting part's numbers are
/// those after its commit. A backend that decides elsewhere (a Redis
/// script) converts each part's reply with that part's own policy
/// ([`TickDecision::into_decision`](crate::backend::TickDecision::into_decision))
/// and passes the [`Decision`]s here; `allowed` says whether each part
/// admitted.
///
/// `reset_as_it_stands(i)` is asked only when the set denies, and only for
/// the parts `i` that admitted: the `reset_after` of part `i`'s state
/// without this request (what a denial by that part would report;
/// [`AlgorithmState::reset_as_it_stands`](crate::backend::AlgorithmState::reset_as_it_stands)
/// in ticks). The set's `reset_after` covers every part as it stands.
///
/// The result: allowed iff every part allows; `remaining` the smallest,
/// `limit` that of the first part with it ([`Decision::bound_by`] says
/// which), over every part when allowed and over the denying parts when
/// denied; `retry_after` the largest over the denying parts (0 when
/// allowed); `reset_after` the largest; `wait` the largest when allowed, 0
/// when denied. The backend commits every part if `decision.allowed`, none
/// otherwise.
///
/// ```
/// use limiter_core::backend::all_of;
/// use limiter_core::Decision;
/// use std::time::Duration;
///
/// let second = Decision::deny(5, 0, Duration::from_millis(400), 7)
///     .with_reset_after(Duration::from_millis(900));
/// let minute = Decision::admit(100, 93, 7).with_reset_after(Duration::from_secs(60));
/// let set = all_of(&[second, minute], 1, |_| Duration::from_millis(59_800));
/// assert!(!set.allowed);
/// assert_eq!((set.limit, set.remaining, set.bound_by), (5, 0, 0));
/// assert_eq!(set.retry_after, Duration::from_millis(400));
/// assert_eq!(set.reset_after, Duration::from_millis(59_800));
/// assert_eq!(set.parts()[1].remaining, 94); // the minute counted nothing
/// ```
pub fn all_of(
    parts: &[Decision],
    cost: u64,
    mut reset_as_it_stands: impl FnMut(usize) -> Duration,
) -> Decision {
    debug_assert!(
        (1..=MAX_PARTS).contains(&parts.len()),
        "a set has 1 to 8 parts"
    );
    let parts = &parts[..parts.len().min(MAX_PARTS)];
    let Some(first) = parts.first() else {
        return Decision::deny(0, 0, Duration::ZERO, 0);
    };
    if let [only] = parts {
        return only.clone();
    }
    let allowed = parts.iter().all(|part| part.allowed);
    let mut stood: [Decision; MAX_PARTS] =
        std::array::from_fn(|i| parts.get(i).unwrap_or(first).clone());
    // The parts that speak for the request: all of them, or the denying ones.
    let speaks = |part: &Decision| allowed || !part.allowed;
    let mut bound = 0;
    let mut decision = first.clone();
    decision.allowed = allowed;
    decision.remaining = u64::MAX;
    decision.retry_after = Duration::ZERO;
    decision.reset_after = Duration::ZERO;
    decision.wait = Duration::ZERO;
    for (i, part) in stood[..parts.len()].iter_mut().enumerate() {
        if !allowed && part.allowed {
            // Nothing was counted: the part as it stands, without the request.
            *part = Decision::admit(
                part.limit,
                part.remaining.saturating_add(cost),
                part.time_us,
            )
            .with_reset_after(reset_as_it_stands(i))
            .with_source(part.source);
        }
        if speaks(part) {
            if part.remaining < decision.remaining {
                (decision.remaining, decision.limit, bound) = (part.remaining, part.limit, i);
            }
            decision.retry_after = decision.retry_after.max(part.retry_after);
        }
        decision.reset_after = decision.reset_after.max(part.reset_after);
        if allowed {
            decision.wait = decision.wait.max(part.wait);
        }
    }
    // At most MAX_PARTS (8) parts.
    decision.bound_by = u8::try_from(bound).unwrap_or(u8::MAX);
    decision.with_parts(&stood[..parts.len()])
}

/// Checks a request against every part of `policies` (docs/spec.md rules
/// 2.2 and 2.4, section 7), before any state is read: the first part's
/// error, in the set's order, is the request's.
#[inline]
pub fn check_policies(policies: &Policies, now_us: u64, cost: u64) -> Result<(), Error> {
    policies
        .iter()
        .try_for_each(|policy| check_request(policy, now_us, cost))
}

/// One key's state under a policy set: a [`KeyState`] per part, decided
/// together (docs/spec.md section 7). A backend keeps one per key, under
/// one lock, so that the conjunction is atomic.
///
/// ```
/// use limiter_core::backend::SetState;
/// use limiter_core::Policies;
///
/// let tiers: Policies = "sliding-log:2/1s;sliding-log:3/1m".parse()?;
/// let mut key = SetState::fresh(&tiers);
/// assert!(key.acquire(&tiers, 0, 1)?.allowed);
/// assert!(key.acquire(&tiers, 1, 1)?.allowed);
/// let denied = key.acquire(&tiers, 2, 1)?;
/// assert!(!denied.allowed && denied.bound_by == 0); // the second tier binds
/// assert!(key.acquire(&tiers, 1_000_000, 1)?.allowed);
/// let denied = key.acquire(&tiers, 1_500_000, 1)?;
/// assert!(!denied.allowed && denied.bound_by == 1); // now the minute binds
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetState {
    parts: Box<[KeyState]>,
}

impl SetState {
    /// The state of a key that has seen nothing, under `policies`.
    pub fn fresh(policies: &Policies) -> Self {
        Self {
            parts: policies.iter().map(KeyState::fresh).collect(),
        }
    }

    /// The state of these parts, one per policy of the set, in its order:
    /// for a backend that stores each part on its own (limiter-redis-module
    /// reads them to take a key over, docs/spec.md section 9).
    pub fn from_parts(parts: Box<[KeyState]>) -> Self {
        Self { parts }
    }

    /// Each part's state, to change them together.
    pub(crate) fn parts_mut(&mut self) -> &mut [KeyState] {
        &mut self.parts
    }

    /// Each part's state, in the set's order.
    pub fn parts(&self) -> &[KeyState] {
        &self.parts
    }

    /// The time (µs since the epoch) this state, as it stands, is back to
    /// its initial state if nothing arrives: the latest of its parts',
    /// each its stamp plus the ticks to its reset from there. After an
    /// admission it is that admission's `time_us + reset_after`; a backend
    /// may drop the state from then on (docs/spec.md rule 2.5).
    pub fn reset_at_us(&self, policies: &Policies) -> u64 {
        self.parts
            .iter()
            .zip(policies.iter())
            .map(|(part, policy)| part.reset_at_us(policy))
            .max()
            .unwrap_or(0)
    }

    /// Bytes this key's state takes in memory.
    pub fn size_bytes(&self) -> usize {
        self.parts
            .iter()
            .map(KeyState::size_bytes)
            .fold(std::mem::size_of::<Self>(), usize::saturating_add)
    }

    /// Decides a request of `cost` at `now_us` by every part and commits it
    /// in every part if every part admits (docs/spec.md section 7).
    ///
    /// The state must have been made for `policies`.
    pub fn acquire(
        &mut self,
        policies: &Policies,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        let (set, updates) = self.evaluate(policies, now_us, cost)?;
        if set.allowed {
            for (state, update) in self.parts.iter_mut().zip(updates) {
                if let Some(update) = update {
                    state.apply(update);
                }
            }
        }
        Ok(set)
    }

    /// Decides a request of `cost` at `now_us` by every part without writing.
    pub fn peek(&self, policies: &Policies, now_us: u64, cost: u64) -> Result<Decision, Error> {
        self.evaluate(policies, now_us, cost).map(|(set, _)| set)
    }

    /// [`peek`](Self::peek) on a key that has seen nothing
    /// (`SetState::fresh(policies).peek(…)`), without allocating its state:
    /// each part's fresh state is made on the stack. What a backend
    /// answers a peek on a key it does not hold.
    pub fn peek_fresh(policies: &Policies, now_us: u64, cost: u64) -> Result<Decision, Error> {
        let parts = policies.parts();
        let fresh: [KeyState; MAX_PARTS] =
            std::array::from_fn(|i| KeyState::fresh(parts.get(i).unwrap_or(&parts[0])));
        evaluate(&fresh[..parts.len()], policies, now_us, cost).map(|(set, _)| set)
    }

    #[inline]
    fn evaluate(
        &self,
        policies: &Policies,
        now_us: u64,
        cost: u64,
    ) -> Result<(Decision, [Option<KeyUpdate>; MAX_PARTS]), Error> {
        evaluate(&self.parts, policies, now_us, cost)
    }
}

/// A set of one policy's state.
impl From<KeyState> for SetState {
    fn from(state: KeyState) -> Self {
        Self {
            parts: Box::new([state]),
        }
    }
}

/// Decides a request of `cost` at `now_us` by every part of `parts` (one
/// per policy of `policies`), without writing: the set's decision and
/// each admitting part's update.
#[inline]
fn evaluate(
    parts: &[KeyState],
    policies: &Policies,
    now_us: u64,
    cost: u64,
) -> Result<(Decision, [Option<KeyUpdate>; MAX_PARTS]), Error> {
    check_policies(policies, now_us, cost)?;
    let mut decisions: [Decision; MAX_PARTS] =
        std::array::from_fn(|_| Decision::admit(0, 0, now_us));
    let mut t_effs = [0; MAX_PARTS];
    let mut updates = [None; MAX_PARTS];
    let mut len = 0;
    for (i, (state, policy)) in parts.iter().zip(policies.iter()).enumerate() {
        let (decision, t_eff, update) = state.evaluate(policy, now_us, cost)?;
        (decisions[i], t_effs[i], updates[i]) = (decision, t_eff, update);
        len = i + 1;
    }
    let set = all_of(&decisions[..len], cost, |i| {
        parts[i].reset_as_it_stands(&policies[i], t_effs[i], now_us)
    });
    Ok((set, updates))
}

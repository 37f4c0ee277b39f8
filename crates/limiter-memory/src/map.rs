//! The map's types: every key's state in one [`DashMap`] (typed by the
//! policy's algorithm, or a set's [`SetState`] per key), and what a key's
//! state decides under its shard lock ([`Stored`]).

use dashmap::DashMap;
use limiter_core::backend::{
    check_request, effective_tick, AlgorithmState, ForAlgorithm, InlineKey, KeyState, SetState,
    StateFamily, TickDecision,
};
use limiter_core::{Decision, Error, Policies, Policy};

use crate::compact_counter::CompactCounter;

/// The keys. Under one policy, one map typed by its algorithm, so each key
/// holds only its own algorithm's state (16 bytes for a bucket, not the 40
/// of [`KeyState`](limiter_core::backend::KeyState), which must fit a
/// sliding log); the core lists the algorithms. A sliding counter whose
/// limit fits in 32 bits keeps its state in 16 bytes too
/// ([`CompactCounter`]). Under a tiered set, one map of [`SetState`]s: all
/// the parts of a key under one entry and one lock, so the conjunction is
/// atomic (docs/spec.md section 7). Reach the map with [`with_map!`].
#[derive(Debug)]
pub(crate) enum Keys {
    One(ForAlgorithm<Maps>),
    Counter(Map<CompactCounter>),
    Set(Map<Tiered>),
}

impl Keys {
    /// The empty map for `policies`.
    pub(crate) fn new(policies: &Policies) -> Self {
        match policies.single() {
            Some(policy) if CompactCounter::fits(policy) => Self::Counter(DashMap::default()),
            Some(policy) => Self::One(ForAlgorithm::new(policy)),
            None => Self::Set(DashMap::default()),
        }
    }
}

/// Runs `$body` with `$map` bound to the [`Map`] of a single policy inside
/// [`Keys`] (the body is compiled once per stored type), or `$set_body`
/// with `$set` bound to a tiered set's.
macro_rules! with_single_map {
    ($keys:expr, $map:ident => $body:expr, $set:ident => $set_body:expr) => {
        match $keys {
            $crate::map::Keys::One(typed) => {
                limiter_core::backend::with_state!(typed, $map => $body)
            }
            $crate::map::Keys::Counter($map) => $body,
            $crate::map::Keys::Set($set) => $set_body,
        }
    };
}
pub(crate) use with_single_map;

/// Runs `$body` with `$map` bound to the [`Map`] inside [`Keys`], whatever
/// it stores (the body is compiled once per stored type).
macro_rules! with_map {
    ($keys:expr, $map:ident => $body:expr) => {
        $crate::map::with_single_map!($keys, $map => $body, $map => $body)
    };
}
pub(crate) use with_map;

/// A map of keys to what is stored per key: the state alone, no more (the
/// time a key may be dropped is read from its state, see
/// [`Stored::reset_time_us`]). Hashed with aHash under per-process random
/// keys: clients choose the keys (IPs, user ids), so the hash must resist
/// flooding, and aHash does so at about half the cost of SipHash. Looked up
/// by the key's bytes; a short key is stored inline (see [`Key`]).
pub(crate) type Map<S> = DashMap<Key, S, ahash::RandomState>;

/// A key as the map holds it: up to 22 bytes inline, so that the key is
/// the size of a `String` with no allocation behind it.
pub(crate) type Key = InlineKey<22>;

/// The [`StateFamily`] of [`Map`]s.
#[derive(Debug)]
pub(crate) struct Maps;

impl StateFamily for Maps {
    type Of<S: AlgorithmState> = Map<S>;

    fn make<S: AlgorithmState>(_: &Policy) -> Map<S> {
        DashMap::default()
    }
}

/// The policies a key's state is decided by: the set (a tiered set's
/// state reads every part) and its first part, at hand for the hot path
/// (a single policy's state reads it from this field, where the set's
/// first part is a pointer and a bounds check away).
#[derive(Debug)]
pub(crate) struct Rules {
    pub(crate) policies: Policies,
    /// Under one policy, the only one.
    pub(crate) first: Policy,
}

impl Rules {
    pub(crate) fn new(policies: Policies) -> Self {
        Self {
            first: policies[0].clone(),
            policies,
        }
    }
}

/// A key's state as a map stores it: one algorithm's state (one policy) or
/// a [`Tiered`] set's.
pub(crate) trait Stored: Send + Sync + Sized + 'static {
    /// A key that has seen nothing, under the policies.
    fn fresh(rules: &Rules) -> Self;

    /// What [`decide`](Self::decide) decides under the key's lock, before
    /// it is made the answer (outside the lock).
    type Raw;

    /// Checks the request (docs/spec.md rules 2.2 and 2.4) before the
    /// key's lock is taken, so that nothing under it can fail.
    fn check(rules: &Rules, now_us: u64, cost: u64) -> Result<(), Error>;

    /// Decides and commits if admitted, as far as the lock is needed, for
    /// a request [`check`](Self::check) passed.
    fn decide(&mut self, rules: &Rules, now_us: u64, cost: u64) -> Result<Self::Raw, Error>;

    /// Whether the request `raw` decides was admitted.
    fn allowed(raw: &Self::Raw) -> bool;

    /// The answer `raw` makes, for a request at `now_us`.
    fn answer(rules: &Rules, raw: Self::Raw, now_us: u64) -> Decision;

    /// Decides without writing.
    fn peek(&self, rules: &Rules, now_us: u64, cost: u64) -> Result<Decision, Error>;

    /// [`peek`](Self::peek) on a key not held: its fresh state's answer,
    /// without allocating it.
    #[inline]
    fn peek_fresh(rules: &Rules, now_us: u64, cost: u64) -> Result<Decision, Error> {
        Self::fresh(rules).peek(rules, now_us, cost)
    }

    /// The time (µs since the epoch) this key is back to its initial state
    /// if nothing else arrives: its last admission's `time_us +
    /// reset_after` (under a set, the latest of its parts'). Only admitted
    /// keys are stored, so there is a last admission.
    fn reset_time_us(&self, rules: &Rules) -> u64;

    /// Counts `units` after the fact (docs/spec.md section 10), for a time
    /// [`check`](Self::check) passed.
    fn charge(&mut self, rules: &Rules, now_us: u64, units: u64);

    /// This state as the core's [`SetState`] under the rules it was made
    /// under: what a change of policies takes over (docs/spec.md section 9).
    fn to_set(&self, rules: &Rules) -> SetState;

    /// The state `set`, made for `rules`, as stored.
    fn from_set(set: SetState, rules: &Rules) -> Self;
}

impl<S> Stored for S
where
    S: AlgorithmState + Into<KeyState> + TryFrom<KeyState>,
{
    #[inline]
    fn fresh(rules: &Rules) -> Self {
        S::fresh(&rules.first)
    }

    type Raw = TickDecision;

    #[inline]
    fn check(rules: &Rules, now_us: u64, cost: u64) -> Result<(), Error> {
        check_request(&rules.first, now_us, cost)
    }

    /// [`AlgorithmState::acquire`] up to the decision in ticks: its µs
    /// conversion ([`TickDecision::into_decision`]) is left to
    /// [`answer`](Stored::answer), out of the lock, and skipped by callers
    /// that only need `allowed`. Always inlined: out of line, its
    /// `Result` goes through memory (docs/benchmarks.md, "Where the time
    /// goes").
    #[inline(always)]
    fn decide(&mut self, rules: &Rules, now_us: u64, cost: u64) -> Result<TickDecision, Error> {
        let policy = &rules.first;
        let t_eff = effective_tick(policy, self.stamp(), now_us);
        let (mut decision, update) = self.evaluate(policy, t_eff, cost);
        if let Some(update) = update {
            self.apply(update);
        }
        decision.t_eff = t_eff;
        Ok(decision)
    }

    #[inline]
    fn allowed(raw: &TickDecision) -> bool {
        raw.allowed
    }

    #[inline]
    fn answer(rules: &Rules, raw: TickDecision, now_us: u64) -> Decision {
        raw.into_decision(&rules.first, now_us)
    }

    #[inline]
    fn peek(&self, rules: &Rules, now_us: u64, cost: u64) -> Result<Decision, Error> {
        AlgorithmState::peek(self, &rules.first, now_us, cost)
    }

    /// `(T_s + reset) * tick`, `reset` being the state's
    /// [`reset_as_it_stands`](AlgorithmState::reset_as_it_stands) at its own
    /// stamp `T_s`: an admission at `t_eff` leaves a state whose stamp is
    /// `t_eff` (or, for the windowed algorithms, the start of `t_eff`'s
    /// window, with the reset counted from there), so this is the
    /// admission's `(t_eff + reset_after) * tick`, i.e. its `time_us +
    /// reset_after` (`TickDecision::into_decision`); the test
    /// `the_reset_time_read_from_the_state_is_the_last_admissions` checks
    /// it against every admission.
    #[inline]
    fn reset_time_us(&self, rules: &Rules) -> u64 {
        let policy = &rules.first;
        let stamp = self.stamp();
        // Saturating, as a reset time beyond u64 µs is.
        stamp
            .saturating_add(self.reset_as_it_stands(policy, stamp))
            .saturating_mul(policy.tick_us())
    }

    /// The core's charge on the state as a [`KeyState`] (a charge is rare
    /// beside decisions: the copy is no concern).
    fn charge(&mut self, rules: &Rules, now_us: u64, units: u64) {
        let mut state: KeyState = self.clone().into();
        if state.charge(&rules.first, now_us, units).is_ok() {
            *self = Self::from_set(SetState::from(state), rules);
        }
    }

    fn to_set(&self, _: &Rules) -> SetState {
        SetState::from(self.clone().into())
    }

    /// The set's only part, of this algorithm (the core takes a state over
    /// into the algorithm of each policy).
    fn from_set(set: SetState, rules: &Rules) -> Self {
        let part = set.parts().first().cloned();
        part.and_then(|part| S::try_from(part).ok())
            .unwrap_or_else(|| {
                debug_assert!(false, "a set of one part of this algorithm");
                S::fresh(&rules.first)
            })
    }
}

/// A key's [`SetState`] under a tiered set (a type of this crate's, so
/// that it is not taken for an [`AlgorithmState`]), with its last
/// admission's reset time.
#[derive(Debug)]
pub(crate) struct Tiered {
    set: SetState,
    reset_time_us: u64,
}

impl Stored for Tiered {
    fn fresh(rules: &Rules) -> Self {
        Self {
            set: SetState::fresh(&rules.policies),
            reset_time_us: 0,
        }
    }

    /// Nothing: [`SetState::acquire`] checks the request against every
    /// part.
    #[inline]
    fn check(_: &Rules, _: u64, _: u64) -> Result<(), Error> {
        Ok(())
    }

    type Raw = Decision;

    #[inline]
    fn decide(&mut self, rules: &Rules, now_us: u64, cost: u64) -> Result<Decision, Error> {
        let answer = self.set.acquire(&rules.policies, now_us, cost)?;
        // A denial changes nothing, the reset time included (docs/spec.md rule 2.1).
        if answer.allowed {
            self.reset_time_us = reset_time_us(&answer);
        }
        Ok(answer)
    }

    #[inline]
    fn allowed(raw: &Decision) -> bool {
        raw.allowed
    }

    #[inline]
    fn answer(_: &Rules, raw: Decision, _: u64) -> Decision {
        raw
    }

    #[inline]
    fn peek(&self, rules: &Rules, now_us: u64, cost: u64) -> Result<Decision, Error> {
        self.set.peek(&rules.policies, now_us, cost)
    }

    /// Each part's fresh state on the stack (a fresh [`SetState`] boxes
    /// them).
    fn peek_fresh(rules: &Rules, now_us: u64, cost: u64) -> Result<Decision, Error> {
        SetState::peek_fresh(&rules.policies, now_us, cost)
    }

    fn reset_time_us(&self, _: &Rules) -> u64 {
        self.reset_time_us
    }

    fn charge(&mut self, rules: &Rules, now_us: u64, units: u64) {
        if self.set.charge(&rules.policies, now_us, units).is_ok() {
            self.reset_time_us = self.set.reset_at_us(&rules.policies);
        }
    }

    fn to_set(&self, _: &Rules) -> SetState {
        self.set.clone()
    }

    fn from_set(set: SetState, rules: &Rules) -> Self {
        Self {
            reset_time_us: set.reset_at_us(&rules.policies),
            set,
        }
    }
}

/// `time_us + reset_after`: the absolute time the key is back to its initial
/// state if nothing else arrives.
#[inline]
pub(crate) fn reset_time_us(decision: &Decision) -> u64 {
    // u64 arithmetic: `as_micros` works in u128.
    let reset_after = decision
        .reset_after
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(decision.reset_after.subsec_micros()));
    decision.time_us.saturating_add(reset_after)
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use limiter_core::backend::{
        FixedWindow, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
    };

    use super::*;

    #[test]
    fn entries_are_small() {
        // The key (24 bytes, its bytes inline up to 22) and the algorithm's
        // state: nothing else.
        assert_eq!(size_of::<Key>(), 24);
        assert_eq!(size_of::<(Key, FixedWindow)>(), 40);
        assert_eq!(size_of::<(Key, TokenBucket)>(), 40);
        assert_eq!(size_of::<(Key, LeakyBucket)>(), 40);
        assert_eq!(size_of::<(Key, SlidingCounter)>(), 48);
        assert_eq!(size_of::<(Key, CompactCounter)>(), 40);
        // The log's deque and running total: one cache line with the key.
        assert_eq!(size_of::<(Key, SlidingLog)>(), 64);
        // A tiered set: the boxed parts (each a KeyState on the heap) and
        // the reset time.
        assert_eq!(size_of::<(Key, Tiered)>(), 48);
    }
}

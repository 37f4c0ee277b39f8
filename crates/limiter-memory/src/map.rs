//! The map: every key's state in one [`DashMap`] (typed by the policy's
//! algorithm, or a set's [`SetState`] per key), and the decisions made in
//! it under the key's shard lock.

use std::sync::atomic::Ordering;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use limiter_core::backend::{check_policies, AlgorithmState, ForAlgorithm, SetState, StateFamily};
use limiter_core::{Decision, Error, Policy, SetDecision};

use crate::limiter::MemoryLimiter;

/// The keys. Under one policy, one map typed by its algorithm, so each key
/// holds only its own algorithm's state (16 bytes for a bucket, not the 40
/// of [`KeyState`](limiter_core::backend::KeyState), which must fit a
/// sliding log); the core lists the algorithms. Under a tiered set, one
/// map of [`SetState`]s: all the parts of a key under one entry and one
/// lock, so the conjunction is atomic (docs/spec.md section 7). Reach the
/// map with [`with_map!`].
#[derive(Debug)]
pub(crate) enum Keys {
    One(ForAlgorithm<Maps>),
    Set(Map<Tiered>),
}

impl Keys {
    /// The empty map for `limiter`'s policies.
    pub(crate) fn new(policies: &limiter_core::Policies) -> Self {
        match policies.single() {
            Some(policy) => Self::One(ForAlgorithm::new(policy)),
            None => Self::Set(DashMap::default()),
        }
    }
}

/// Runs `$body` with `$map` bound to the [`Map`] inside [`Keys`], whatever
/// it stores (the body is compiled once per stored type).
macro_rules! with_map {
    ($keys:expr, $map:ident => $body:expr) => {
        match $keys {
            $crate::map::Keys::One(typed) => {
                limiter_core::backend::with_state!(typed, $map => $body)
            }
            $crate::map::Keys::Set($map) => $body,
        }
    };
}
pub(crate) use with_map;

/// A map of keys to what is stored per key. Hashed with aHash under
/// per-process random keys: clients choose the keys (IPs, user ids), so
/// the hash must resist flooding, and aHash does so at about half the cost
/// of SipHash.
pub(crate) type Map<S> = DashMap<Box<str>, Slot<S>, ahash::RandomState>;

/// The [`StateFamily`] of [`Map`]s.
#[derive(Debug)]
pub(crate) struct Maps;

impl StateFamily for Maps {
    type Of<S: AlgorithmState> = Map<S>;

    fn make<S: AlgorithmState>(_: &Policy) -> Map<S> {
        DashMap::default()
    }
}

/// A key's state as a map stores it: one algorithm's state (one policy) or
/// a [`SetState`] (a tiered set).
pub(crate) trait Stored: Send + Sync + Sized + 'static {
    /// The answer to one request: a [`Decision`], or a [`SetDecision`].
    type Answer: Answer;

    /// A key that has seen nothing, under `limiter`'s policies.
    fn fresh(limiter: &MemoryLimiter) -> Self;

    /// Decides and commits if admitted.
    fn acquire(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<Self::Answer, Error>;

    /// Decides without writing.
    fn peek(&self, limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<Self::Answer, Error>;
}

/// A [`Decision`] or a [`SetDecision`].
pub(crate) trait Answer: Copy {
    /// The (combined) decision.
    fn decision(&self) -> &Decision;
}

impl Answer for Decision {
    #[inline]
    fn decision(&self) -> &Decision {
        self
    }
}

impl Answer for SetDecision {
    #[inline]
    fn decision(&self) -> &Decision {
        &self.decision
    }
}

impl<S: AlgorithmState> Stored for S {
    type Answer = Decision;

    #[inline]
    fn fresh(limiter: &MemoryLimiter) -> Self {
        S::fresh(&limiter.policy)
    }

    #[inline]
    fn acquire(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        AlgorithmState::acquire(self, &limiter.policy, now_us, cost)
    }

    #[inline]
    fn peek(&self, limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<Decision, Error> {
        AlgorithmState::peek(self, &limiter.policy, now_us, cost)
    }
}

/// A key's [`SetState`] under a tiered set (a type of this crate's, so
/// that it is not taken for an [`AlgorithmState`]).
#[derive(Debug)]
pub(crate) struct Tiered(SetState);

impl Stored for Tiered {
    type Answer = SetDecision;

    fn fresh(limiter: &MemoryLimiter) -> Self {
        Self(SetState::fresh(&limiter.policies))
    }

    #[inline]
    fn acquire(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<SetDecision, Error> {
        self.0.acquire(&limiter.policies, now_us, cost)
    }

    #[inline]
    fn peek(&self, limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<SetDecision, Error> {
        self.0.peek(&limiter.policies, now_us, cost)
    }
}

/// What is stored per key.
#[derive(Debug)]
pub(crate) struct Slot<S> {
    pub(crate) state: S,
    /// µs since the epoch from which the key may be dropped: the last
    /// admission's `time_us + reset_after` (under a set, the largest
    /// reset of its parts), plus the eviction delay.
    pub(crate) evict_at: u64,
}

impl<S: Stored> Slot<S> {
    #[inline]
    fn acquire(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<S::Answer, Error> {
        let answer = self.state.acquire(limiter, now_us, cost)?;
        let decision = answer.decision();
        if decision.allowed {
            // A denial changes nothing, the reset time included (docs/spec.md rule 2.1).
            self.evict_at = reset_time_us(decision).saturating_add(limiter.eviction_delay_us);
        }
        Ok(answer)
    }
}

/// `time_us + reset_after`: the absolute time the key is back to its initial
/// state if nothing else arrives.
#[inline]
fn reset_time_us(decision: &Decision) -> u64 {
    // u64 arithmetic: `as_micros` works in u128, slow on the hot path.
    let reset_after = decision
        .reset_after
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(decision.reset_after.subsec_micros()));
    decision.time_us.saturating_add(reset_after)
}

impl MemoryLimiter {
    /// [`try_peek`](Self::try_peek) in the map.
    pub(crate) fn peek_in<S: Stored>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<S::Answer, Error> {
        match map.get(key) {
            Some(slot) => slot.state.peek(self, now_us, cost),
            None => S::fresh(self).peek(self, now_us, cost),
        }
    }

    /// [`try_acquire`](Self::try_acquire) in the map.
    #[inline]
    pub(crate) fn acquire_in<S: Stored>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<S::Answer, Error> {
        if let Some(mut slot) = map.get_mut(key) {
            return slot.acquire(self, now_us, cost);
        }
        self.acquire_new_key(map, key, now_us, cost)
    }

    /// The slow path of [`try_acquire`](Self::try_acquire): `key` was not held.
    #[cold]
    #[inline(never)]
    fn acquire_new_key<S: Stored>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<S::Answer, Error> {
        // Requests that can never succeed neither allocate nor reserve.
        check_policies(&self.policies, now_us, cost)?;
        let requests = self.sweep.new_key_requests.fetch_add(1, Ordering::Relaxed) + 1;
        if requests >= self.sweep.interval.load(Ordering::Relaxed) {
            self.scheduled_sweep(now_us);
        }
        self.reserve_key(now_us)?;
        let decision = match map.entry(Box::from(key)) {
            Entry::Occupied(mut held) => {
                // Another request inserted the key since our lookup.
                self.release_keys(1);
                return held.get_mut().acquire(self, now_us, cost);
            }
            Entry::Vacant(vacant) => {
                let mut slot = Slot {
                    state: S::fresh(self),
                    evict_at: 0,
                };
                let decision = slot.acquire(self, now_us, cost);
                match decision {
                    // A fresh key admits every valid cost; should it ever
                    // not, a denial stores nothing (docs/spec.md rule 2.1).
                    Ok(answer) if answer.decision().allowed => {
                        let evict_at = slot.evict_at;
                        drop(vacant.insert(slot));
                        self.note_evict_at(evict_at);
                        return Ok(answer);
                    }
                    answer => answer,
                }
            }
        };
        self.release_keys(1);
        decision
    }
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
        // A boxed key (16 bytes), the algorithm's state, the eviction time.
        assert_eq!(size_of::<Box<str>>(), 16);
        assert_eq!(size_of::<(Box<str>, Slot<FixedWindow>)>(), 40);
        assert_eq!(size_of::<(Box<str>, Slot<TokenBucket>)>(), 40);
        assert_eq!(size_of::<(Box<str>, Slot<LeakyBucket>)>(), 40);
        assert_eq!(size_of::<(Box<str>, Slot<SlidingCounter>)>(), 48);
        // The log's deque and running total: one cache line with the key.
        assert_eq!(size_of::<(Box<str>, Slot<SlidingLog>)>(), 64);
        // A tiered set: the boxed parts (each a KeyState on the heap).
        assert_eq!(size_of::<(Box<str>, Slot<Tiered>)>(), 40);
    }
}

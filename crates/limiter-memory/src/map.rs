//! The map: every key's state in one [`DashMap`] typed by the policy's
//! algorithm, and the decisions made in it under the key's shard lock.

use std::sync::atomic::Ordering;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use limiter_core::backend::{check_request, AlgorithmState, ForAlgorithm, StateFamily};
use limiter_core::{Decision, Error, Policy};

use crate::limiter::MemoryLimiter;

/// The keys, in one map typed by the policy's algorithm, so each key holds
/// only its own algorithm's state (16 bytes for a bucket, not the 40 of
/// [`KeyState`](limiter_core::backend::KeyState), which must fit a sliding
/// log). The core lists the algorithms; reach the map with [`with_state!`].
pub(crate) type Keys = ForAlgorithm<Maps>;

/// A map of one algorithm's keys. Hashed with aHash under per-process random
/// keys: clients choose the keys (IPs, user ids), so the hash must resist
/// flooding, and aHash does so at about half the cost of SipHash.
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

/// What is stored per key.
#[derive(Debug)]
pub(crate) struct Slot<S> {
    pub(crate) state: S,
    /// µs since the epoch from which the key may be dropped: the last
    /// admission's `time_us + reset_after`, plus the eviction delay.
    pub(crate) evict_at: u64,
}

impl<S: AlgorithmState> Slot<S> {
    #[inline]
    fn acquire(
        &mut self,
        policy: &Policy,
        now_us: u64,
        cost: u64,
        eviction_delay_us: u64,
    ) -> Result<Decision, Error> {
        let decision = self.state.acquire(policy, now_us, cost)?;
        if decision.allowed {
            // A denial changes nothing, the reset time included (docs/spec.md rule 2.1).
            self.evict_at = reset_time_us(&decision).saturating_add(eviction_delay_us);
        }
        Ok(decision)
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
    /// [`try_peek`](Self::try_peek) in the algorithm's map.
    pub(crate) fn peek_in<S: AlgorithmState>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        match map.get(key) {
            Some(slot) => slot.state.peek(&self.policy, now_us, cost),
            None => S::fresh(&self.policy).peek(&self.policy, now_us, cost),
        }
    }

    /// [`try_acquire`](Self::try_acquire) in the algorithm's map.
    #[inline]
    pub(crate) fn acquire_in<S: AlgorithmState>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        if let Some(mut slot) = map.get_mut(key) {
            return slot.acquire(&self.policy, now_us, cost, self.eviction_delay_us);
        }
        self.acquire_new_key(map, key, now_us, cost)
    }

    /// The slow path of [`try_acquire`](Self::try_acquire): `key` was not held.
    #[cold]
    #[inline(never)]
    fn acquire_new_key<S: AlgorithmState>(
        &self,
        map: &Map<S>,
        key: &str,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        // Requests that can never succeed neither allocate nor reserve.
        check_request(&self.policy, now_us, cost)?;
        let requests = self.sweep.new_key_requests.fetch_add(1, Ordering::Relaxed) + 1;
        if requests >= self.sweep.interval.load(Ordering::Relaxed) {
            self.scheduled_sweep(now_us);
        }
        self.reserve_key(now_us)?;
        let decision = match map.entry(Box::from(key)) {
            Entry::Occupied(mut held) => {
                // Another request inserted the key since our lookup.
                self.release_keys(1);
                return held
                    .get_mut()
                    .acquire(&self.policy, now_us, cost, self.eviction_delay_us);
            }
            Entry::Vacant(vacant) => {
                let mut slot = Slot {
                    state: S::fresh(&self.policy),
                    evict_at: 0,
                };
                let decision = slot.acquire(&self.policy, now_us, cost, self.eviction_delay_us);
                match decision {
                    // A fresh key admits every valid cost; should it ever
                    // not, a denial stores nothing (docs/spec.md rule 2.1).
                    Ok(decision) if decision.allowed => {
                        let evict_at = slot.evict_at;
                        drop(vacant.insert(slot));
                        self.note_evict_at(evict_at);
                        return Ok(decision);
                    }
                    decision => decision,
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
    }
}

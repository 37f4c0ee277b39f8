//! The map: every key's state in one [`DashMap`] (typed by the policy's
//! algorithm, or a set's [`SetState`] per key), and the decisions made in
//! it under the key's shard lock.

use std::sync::atomic::Ordering;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use limiter_core::backend::{
    check_policies, check_request, effective_tick, AlgorithmState, ForAlgorithm, SetState,
    StateFamily, TickDecision,
};
use limiter_core::{Decision, Error, Policy};

use crate::compact_counter::CompactCounter;
use crate::key::{Key, StoredKey};
use crate::limiter::MemoryLimiter;

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
    /// The empty map for `limiter`'s policies.
    pub(crate) fn new(policies: &limiter_core::Policies) -> Self {
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
/// a [`Tiered`] set's.
pub(crate) trait Stored: Send + Sync + Sized + 'static {

    /// A key that has seen nothing, under `limiter`'s policies.
    fn fresh(limiter: &MemoryLimiter) -> Self;

    /// What [`acquire`](Self::acquire) decides under the key's lock,
    /// before it is made the answer (outside the lock).
    type Raw;

    /// Checks the request (docs/spec.md rules 2.2 and 2.4) before the
    /// key's lock is taken, so that nothing under it can fail.
    fn check(limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<(), Error>;

    /// Decides and commits if admitted, as far as the lock is needed, for
    /// a request [`check`](Self::check) passed.
    fn decide(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<Self::Raw, Error>;

    /// Whether the request `raw` decides was admitted.
    fn allowed(raw: &Self::Raw) -> bool;

    /// The answer `raw` makes, for a request at `now_us`.
    fn answer(limiter: &MemoryLimiter, raw: Self::Raw, now_us: u64) -> Decision;

    /// Decides and commits if admitted.
    #[inline]
    fn acquire(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        let raw = self.decide(limiter, now_us, cost)?;
        Ok(Self::answer(limiter, raw, now_us))
    }

    /// Decides without writing.
    fn peek(&self, limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<Decision, Error>;

    /// [`peek`](Self::peek) on a key not held: its fresh state's answer,
    /// without allocating it.
    #[inline]
    fn peek_fresh(limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<Decision, Error> {
        Self::fresh(limiter).peek(limiter, now_us, cost)
    }

    /// The time (µs since the epoch) this key is back to its initial state
    /// if nothing else arrives: its last admission's `time_us +
    /// reset_after` (under a set, the latest of its parts'). Only admitted
    /// keys are stored, so there is a last admission.
    fn reset_time_us(&self, limiter: &MemoryLimiter) -> u64;
}

impl<S: AlgorithmState> Stored for S {

    #[inline]
    fn fresh(limiter: &MemoryLimiter) -> Self {
        S::fresh(&limiter.policy)
    }

    type Raw = TickDecision;

    #[inline]
    fn check(limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<(), Error> {
        check_request(&limiter.policy, now_us, cost)
    }

    /// [`AlgorithmState::acquire`] up to the decision in ticks: its µs
    /// conversion ([`TickDecision::into_decision`]) is left to
    /// [`answer`](Stored::answer), out of the lock, and skipped by callers
    /// that only need `allowed`. Always inlined: out of line, its
    /// `Result` goes through memory (docs/benchmarks.md, "Where the time
    /// goes").
    #[inline(always)]
    fn decide(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<TickDecision, Error> {
        let policy = &limiter.policy;
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
    fn answer(limiter: &MemoryLimiter, raw: TickDecision, now_us: u64) -> Decision {
        raw.into_decision(&limiter.policy, now_us)
    }

    #[inline]
    fn peek(&self, limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<Decision, Error> {
        AlgorithmState::peek(self, &limiter.policy, now_us, cost)
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
    fn reset_time_us(&self, limiter: &MemoryLimiter) -> u64 {
        let policy = &limiter.policy;
        let stamp = self.stamp();
        // Saturating, as a reset time beyond u64 µs is.
        stamp
            .saturating_add(self.reset_as_it_stands(policy, stamp))
            .saturating_mul(policy.tick_us())
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

    fn fresh(limiter: &MemoryLimiter) -> Self {
        Self {
            set: SetState::fresh(&limiter.policies),
            reset_time_us: 0,
        }
    }

    /// Nothing: [`SetState::acquire`] checks the request against every
    /// part.
    #[inline]
    fn check(_: &MemoryLimiter, _: u64, _: u64) -> Result<(), Error> {
        Ok(())
    }

    type Raw = Decision;

    #[inline]
    fn decide(
        &mut self,
        limiter: &MemoryLimiter,
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        let answer = self.set.acquire(&limiter.policies, now_us, cost)?;
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
    fn answer(_: &MemoryLimiter, raw: Decision, _: u64) -> Decision {
        raw
    }

    #[inline]
    fn peek(&self, limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<Decision, Error> {
        self.set.peek(&limiter.policies, now_us, cost)
    }

    /// Each part's fresh state on the stack (a fresh [`SetState`] boxes
    /// them).
    fn peek_fresh(limiter: &MemoryLimiter, now_us: u64, cost: u64) -> Result<Decision, Error> {
        SetState::peek_fresh(&limiter.policies, now_us, cost)
    }

    fn reset_time_us(&self, _: &MemoryLimiter) -> u64 {
        self.reset_time_us
    }
}

/// `time_us + reset_after`: the absolute time the key is back to its initial
/// state if nothing else arrives.
#[inline]
fn reset_time_us(decision: &Decision) -> u64 {
    // u64 arithmetic: `as_micros` works in u128.
    let reset_after = decision
        .reset_after
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(decision.reset_after.subsec_micros()));
    decision.time_us.saturating_add(reset_after)
}

impl MemoryLimiter {
    /// The bytes `key` is stored and looked up under (see [`StoredKey`]).
    #[inline]
    pub(crate) fn stored_key<'a>(&self, key: &'a [u8]) -> StoredKey<'a> {
        StoredKey::of(key, self.max_key_bytes)
    }

    /// µs since the epoch from which `state`'s key may be dropped: its
    /// reset time plus the eviction delay.
    #[inline]
    pub(crate) fn evict_at<S: Stored>(&self, state: &S) -> u64 {
        state
            .reset_time_us(self)
            .saturating_add(self.eviction_delay_us)
    }

    /// [`try_peek`](Self::try_peek) in the map.
    pub(crate) fn peek_in<S: Stored>(
        &self,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        match map.get(self.stored_key(key).as_bytes()) {
            Some(state) => state.peek(self, now_us, cost),
            None => S::peek_fresh(self, now_us, cost),
        }
    }

    /// [`try_acquire`](Self::try_acquire) in the map, its clock read
    /// included: one function per stored type, out of line, so that a
    /// decision costs one call whether the caller inlines `try_acquire`
    /// (the map's dispatch) or not. Left to the compiler, a caller that
    /// did not inline it pays two calls and their frames (docs/benchmarks.md,
    /// "Where the time goes").
    #[inline(never)]
    pub(crate) fn try_acquire_in<S: Stored>(
        &self,
        map: &Map<S>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        let now_us = self.clock.now_us();
        self.acquire_in(map, key, now_us, cost)
    }

    /// [`try_acquire`](Self::try_acquire) in the map, at `now_us`.
    #[inline(always)]
    pub(crate) fn acquire_in<S: Stored>(
        &self,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        S::check(self, now_us, cost)?;
        let key = self.stored_key(key);
        // No closures: each is a function of its own the compiler may
        // leave out of line, a call per decision.
        let raw = match map.get_mut(key.as_bytes()) {
            Some(mut state) => {
                let raw = state.decide(self, now_us, cost);
                drop(state); // the answer is made out of the lock
                raw
            }
            None => return self.acquire_new_key(map, key.as_bytes(), now_us, cost),
        };
        match raw {
            Ok(raw) => Ok(S::answer(self, raw, now_us)),
            Err(error) => Err(error),
        }
    }

    /// [`try_acquire_allowed`](Self::try_acquire_allowed) in the map.
    #[inline]
    pub(crate) fn acquire_allowed_in<S: Stored>(
        &self,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<bool, Error> {
        S::check(self, now_us, cost)?;
        let key = self.stored_key(key);
        if let Some(mut state) = map.get_mut(key.as_bytes()) {
            return state.decide(self, now_us, cost).map(|raw| S::allowed(&raw));
        }
        self.acquire_new_key(map, key.as_bytes(), now_us, cost)
            .map(|answer| answer.allowed)
    }

    /// The slow path of [`try_acquire`](Self::try_acquire): `key` (its
    /// stored bytes) was not held.
    #[cold]
    #[inline(never)]
    fn acquire_new_key<S: Stored>(
        &self,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        // Requests that can never succeed neither allocate nor reserve.
        check_policies(&self.policies, now_us, cost)?;
        let requests = self.sweep.new_key_requests.fetch_add(1, Ordering::Relaxed) + 1;
        if requests >= self.sweep.interval.load(Ordering::Relaxed) {
            self.scheduled_sweep(now_us);
        }
        // Twice at most: once more after making room at the cap.
        for attempt in 0..2 {
            let vacant = match map.entry(Key::new(key)) {
                // Another request inserted the key since our lookup.
                Entry::Occupied(mut held) => return held.get_mut().acquire(self, now_us, cost),
                Entry::Vacant(vacant) => vacant,
            };
            if !self.try_reserve_key() {
                drop(vacant);
                if attempt == 0 {
                    self.sweep_if_due(now_us);
                }
                continue;
            }
            let mut state = S::fresh(self);
            let decision = state.acquire(self, now_us, cost);
            match decision {
                // A fresh key admits every valid cost; should it ever
                // not, a denial stores nothing (docs/spec.md rule 2.1).
                Ok(answer) if answer.allowed => {
                    let evict_at = self.evict_at(&state);
                    drop(vacant.insert(state));
                    self.note_evict_at(evict_at);
                    return Ok(answer);
                }
                answer => {
                    self.release_keys(1);
                    return answer;
                }
            }
        }
        self.note_refused();
        Err(self.key_limit_reached())
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;
    use std::time::Duration;

    use limiter_core::backend::{
        FixedWindow, LeakyBucket, SlidingCounter, SlidingLog, TokenBucket,
    };
    use limiter_core::{Algorithm, Clock, ManualClock, Rate};

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

    #[test]
    fn a_long_key_is_held_as_its_33_byte_digest() {
        let policy = Policy::fixed_window(Rate::per_hour(3)).unwrap();
        let limiter = MemoryLimiter::new(policy);
        let long = "k".repeat(1 << 20);
        let at_bound = "k".repeat(limiter.max_key_bytes());
        for key in [&long, &at_bound] {
            assert!(limiter.try_acquire(key.as_bytes(), 1).unwrap().allowed);
        }
        let mut held: Vec<usize> = with_single_map!(
            &limiter.keys,
            map => map.iter().map(|entry| entry.key().as_bytes().len()).collect(),
            _set => unreachable!("one policy")
        );
        held.sort_unstable();
        assert_eq!(held, [33, 256]);
    }

    /// The eviction time is read from the state (`reset_time_us`): after
    /// every admission it must be that admission's `time_us +
    /// reset_after`, for every algorithm, tick size and cost, at times
    /// before and after the stamp (docs/spec.md rule 2.3).
    #[test]
    fn the_reset_time_read_from_the_state_is_the_last_admissions() {
        let rates = [
            Rate::per_second(3),
            Rate::per_minute(7),
            Rate::new(5, Duration::from_micros(10)),
            // A million a day: a 100 µs tick.
            Rate::new(1_000_000, Duration::from_secs(86_400)),
        ];
        let mut admissions = 0;
        for algorithm in Algorithm::ALL {
            for rate in rates {
                let policy = Policy::new(algorithm, rate).unwrap();
                let clock = ManualClock::new(1_700_000_000_123_457);
                let limiter = MemoryLimiter::builder(policy.clone())
                    .clock(clock.clone())
                    .build();
                let mut seed = 0x9e37_79b9_7f4a_7c15u64;
                for _ in 0..300 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let key = ["a", "b", "c"][(seed % 3) as usize];
                    let cost = 1 + (seed >> 8) % policy.max_cost().min(3);
                    // Mostly forward, sometimes back (a request stamped
                    // before the key's last admission).
                    let step = (seed >> 16) % (2 * rate.window.as_micros() as u64 / 3 + 2);
                    if (seed >> 40).is_multiple_of(5) {
                        clock.set(clock.now_us().saturating_sub(step / 2));
                    } else {
                        clock.advance(Duration::from_micros(step));
                    }
                    let decision = limiter.try_acquire(key.as_bytes(), cost).unwrap();
                    if decision.allowed {
                        admissions += 1;
                        let held = with_single_map!(
                            &limiter.keys,
                            map => map.get(key.as_bytes()).unwrap().reset_time_us(&limiter),
                            _set => unreachable!("one policy")
                        );
                        assert_eq!(held, reset_time_us(&decision), "{policy} {decision:?}");
                    }
                }
            }
        }
        assert!(admissions > 1_000, "{admissions}");
    }
}

//! [`Store`]: the keys' states and everything deciding and evicting them
//! needs: the policies (which may change while it serves), the clock, the
//! bound on key bytes, the cap on keys, the eviction delay and the sweep's
//! schedule.

use std::sync::{Arc, Mutex, PoisonError, RwLockReadGuard};
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use limiter_core::backend::{check_policies, ClockSource, PolicyHistory, StoredKey};
use limiter_core::{Decision, Error, Policies};

use crate::generations::{Generation, Generations, InForce};
use crate::key_space::KeySpace;
use crate::map::{with_map, with_single_map, Key, Map, Stored};
use crate::memory_bound::{entry_bytes, max_bytes_per_key};
use crate::sweep::{Sweep, MIN_SWEEP_INTERVAL};

/// The keys' states, decided under each key's shard lock, and dropped
/// once expired (docs/spec.md rule 2.5): one limiter's face of its
/// [`KeySpace`], which other limiters (plans) may share.
pub(crate) struct Store {
    /// The keys, the clock and the bounds, shared with the other plans.
    space: Arc<KeySpace>,
    /// The keys under this limiter's policies in force and the other maps
    /// of its key space, read-locked for the whole of each request, so
    /// that a request is decided entirely under the policies in force when
    /// it began.
    generations: Arc<InForce>,
    /// The policies in force, lent by [`policies`](Self::policies).
    history: PolicyHistory,
    /// One change of policies at a time, so that the history and the
    /// generations change in the same order.
    changing: Mutex<()>,
}

impl Store {
    /// No key held.
    pub(crate) fn new(
        policies: Policies,
        clock: ClockSource,
        max_keys: Option<usize>,
        max_key_bytes: usize,
        eviction_delay_us: u64,
    ) -> Self {
        let space = KeySpace::new(clock, max_keys, max_key_bytes, eviction_delay_us);
        Self::in_space(Arc::new(space), policies)
    }

    /// A store deciding under `policies` on this store's keys.
    pub(crate) fn plan(&self, policies: Policies) -> Self {
        Self::in_space(Arc::clone(&self.space), policies)
    }

    fn in_space(space: Arc<KeySpace>, policies: Policies) -> Self {
        Self {
            history: PolicyHistory::new(policies.clone()),
            changing: Mutex::new(()),
            generations: space.limiter(policies),
            space,
        }
    }

    pub(crate) fn policies(&self) -> &Policies {
        self.history.in_force()
    }

    /// Puts `policies` in force for every later request; each key's state
    /// is taken over at its next request (docs/spec.md section 9). Waits
    /// for the requests being decided to finish.
    pub(crate) fn set_policies(&self, policies: Policies) {
        let _one_change_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        if self.space.change(&self.generations, policies.clone()) {
            self.history.put_in_force(&policies, || policies.clone());
        }
    }

    /// The generations, for the whole of one request.
    #[inline]
    fn generations(&self) -> RwLockReadGuard<'_, Arc<Generations>> {
        self.generations.read()
    }

    pub(crate) fn clock(&self) -> &ClockSource {
        &self.space.clock
    }

    pub(crate) fn max_keys(&self) -> Option<usize> {
        self.space.keys_held.max_keys()
    }

    pub(crate) fn max_key_bytes(&self) -> usize {
        self.space.max_key_bytes
    }

    pub(crate) fn eviction_delay(&self) -> Duration {
        Duration::from_micros(self.space.eviction_delay_us)
    }

    /// The number of keys held (expired keys count until a sweep drops them).
    pub(crate) fn len(&self) -> usize {
        self.space.keys_held.held()
    }

    /// The most bytes one key holds (see `memory_bound.rs`).
    /// Under the policies in force and any earlier ones still holding keys
    /// (a key taken over holds the new policies' state).
    pub(crate) fn max_bytes_per_key(&self) -> usize {
        let generations = self.generations();
        let per_key = |generation: &Generation| {
            let entry = with_map!(&generation.keys, map => entry_bytes(map));
            max_bytes_per_key(entry, self.space.max_key_bytes, &generation.rules.policies)
        };
        generations.all().map(per_key).max().unwrap_or(0)
    }

    /// Decides a request on `key` now and commits it if admitted.
    #[inline]
    pub(crate) fn try_acquire(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        let generations = self.generations();
        let gens: &Generations = &generations;
        with_single_map!(&gens.current.keys,
            map => self.try_acquire_in(gens, map, key, cost),
            set => self.try_acquire_in(gens, set, key, cost)
        )
    }

    /// [`try_acquire`](Self::try_acquire), answering only whether it was admitted.
    #[inline]
    pub(crate) fn try_acquire_allowed(&self, key: &[u8], cost: u64) -> Result<bool, Error> {
        let generations = self.generations();
        let gens: &Generations = &generations;
        let now_us = self.space.clock.now_us();
        with_map!(&gens.current.keys, map => self.acquire_allowed_in(gens, map, key, now_us, cost))
    }

    /// What [`try_acquire`](Self::try_acquire) would decide now, writing nothing.
    pub(crate) fn try_peek(&self, key: &[u8], cost: u64) -> Result<Decision, Error> {
        let generations = self.generations();
        let gens: &Generations = &generations;
        let now_us = self.space.clock.now_us();
        with_single_map!(&gens.current.keys,
            map => self.peek_in(gens, map, key, now_us, cost),
            set => self.peek_in(gens, set, key, now_us, cost)
        )
    }

    /// Counts `units` against `key` now, after the fact (docs/spec.md
    /// section 10). A key not held is taken over from earlier policies or
    /// stored fresh, then charged.
    pub(crate) fn charge(&self, key: &[u8], units: u64) -> Result<(), Error> {
        let generations = self.generations();
        let gens: &Generations = &generations;
        let now_us = self.space.clock.now_us();
        // The checks of a charge (docs/spec.md section 10), before any lock.
        check_policies(&gens.current.rules.policies, now_us, 1)?;
        if units == 0 {
            return Err(Error::ZeroCost);
        }
        with_map!(&gens.current.keys, map => self.charge_in(gens, map, key, now_us, units))
    }

    /// [`charge`](Self::charge) in the current map.
    fn charge_in<S: Stored>(
        &self,
        gens: &Generations,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        units: u64,
    ) -> Result<(), Error> {
        let (current, rules) = (&gens.current, &gens.current.rules);
        let key = self.stored_key(key);
        if let Some(mut state) = map.get_mut(key.as_bytes()) {
            // A later eviction time keeps the sweeper's bounds lower bounds.
            state.charge(rules, now_us, units);
            return Ok(());
        }
        let _moving = self.space.moving(gens);
        let vacant = match map.entry(Key::new(key.as_bytes())) {
            Entry::Occupied(mut held) => {
                held.get_mut().charge(rules, now_us, units);
                return Ok(());
            }
            Entry::Vacant(vacant) => vacant,
        };
        let mut state = match gens.take_over::<S>(key.as_bytes(), now_us) {
            Some(state) => state,
            None if self.space.keys_held.try_reserve() => S::fresh(rules),
            None => {
                self.space.sweeper.note_refused();
                return Err(self.space.keys_held.refusal());
            }
        };
        state.charge(rules, now_us, units);
        let evict_at = self.evict_at(current, &state);
        drop(vacant.insert(state));
        self.space.sweeper.note_evict_at(evict_at);
        Ok(())
    }

    /// Drops `key`'s state, under the policies in force or earlier ones;
    /// returns whether it was held.
    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        let key = self.stored_key(key);
        let generations = self.generations();
        let removed = generations
            .all()
            .filter(|generation| {
                with_map!(&generation.keys, map => map.remove(key.as_bytes()).is_some())
            })
            .count();
        self.space.keys_held.release(removed);
        removed > 0
    }

    /// Drops every key's state.
    pub(crate) fn clear(&self) {
        let mut removed = 0;
        for generation in self.generations().all() {
            with_map!(&generation.keys, map => map.retain(|_, _| {
                removed += 1;
                false
            }));
        }
        self.space.keys_held.release(removed);
    }

    /// Drops now every expired key; returns how many were dropped.
    pub(crate) fn sweep_expired(&self) -> usize {
        let generations = self.generations();
        let now_us = self.space.clock.now_us();
        self.sweep(
            &generations,
            self.space.sweeper.now(&self.space.keys_held),
            now_us,
        )
    }

    /// The bytes `key` is stored and looked up under (see [`StoredKey`]).
    #[inline]
    fn stored_key<'a>(&self, key: &'a [u8]) -> StoredKey<'a> {
        StoredKey::of(key, self.space.max_key_bytes)
    }

    /// µs since the epoch from which `state`'s key, held in `generation`,
    /// may be dropped: its reset time plus the eviction delay.
    #[inline]
    fn evict_at<S: Stored>(&self, generation: &Generation, state: &S) -> u64 {
        state
            .reset_time_us(&generation.rules)
            .saturating_add(self.space.eviction_delay_us)
    }

    /// [`try_peek`](Self::try_peek) in the current map.
    fn peek_in<S: Stored>(
        &self,
        gens: &Generations,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        let (key, rules) = (self.stored_key(key), &gens.current.rules);
        if let Some(state) = map.get(key.as_bytes()) {
            return state.peek(rules, now_us, cost);
        }
        match gens.peek_over::<S>(key.as_bytes(), now_us) {
            Some(state) => state.peek(rules, now_us, cost),
            None => S::peek_fresh(rules, now_us, cost),
        }
    }

    /// [`try_acquire`](Self::try_acquire) in the map, its clock read included: one
    /// function per stored type, out of line, so that a decision costs one
    /// call whether the caller inlines `try_acquire` (the map's dispatch) or
    /// not. Left to the compiler, a caller that did not inline it pays two
    /// calls and their frames (docs/benchmarks.md, "Where the time goes").
    #[inline(never)]
    fn try_acquire_in<S: Stored>(
        &self,
        gens: &Generations,
        map: &Map<S>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        let now_us = self.space.clock.now_us();
        self.acquire_in(gens, map, key, now_us, cost)
    }

    /// [`try_acquire`](Self::try_acquire) in the map, at `now_us`.
    #[inline(always)]
    fn acquire_in<S: Stored>(
        &self,
        gens: &Generations,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        let rules = &gens.current.rules;
        S::check(rules, now_us, cost)?;
        let key = self.stored_key(key);
        // No closures: each is a function of its own the compiler may
        // leave out of line, a call per decision.
        let raw = match map.get_mut(key.as_bytes()) {
            Some(mut state) => {
                let raw = state.decide(rules, now_us, cost);
                drop(state); // the answer is made out of the lock
                raw
            }
            // Its own return: merged into the held key's, the decision
            // goes through memory.
            None => {
                let raw = self.acquire_new_key(gens, map, key.as_bytes(), now_us, cost);
                return self.answer::<S>(gens, raw, now_us);
            }
        };
        self.answer::<S>(gens, raw, now_us)
    }

    /// The answer `raw` makes, for a request at `now_us`.
    #[inline(always)]
    fn answer<S: Stored>(
        &self,
        gens: &Generations,
        raw: Result<S::Raw, Error>,
        now_us: u64,
    ) -> Result<Decision, Error> {
        match raw {
            Ok(raw) => Ok(S::answer(&gens.current.rules, raw, now_us)),
            Err(error) => Err(error),
        }
    }

    /// [`try_acquire_allowed`](Self::try_acquire_allowed) in the map.
    #[inline]
    fn acquire_allowed_in<S: Stored>(
        &self,
        gens: &Generations,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<bool, Error> {
        let rules = &gens.current.rules;
        S::check(rules, now_us, cost)?;
        let key = self.stored_key(key);
        if let Some(mut state) = map.get_mut(key.as_bytes()) {
            return state
                .decide(rules, now_us, cost)
                .map(|raw| S::allowed(&raw));
        }
        self.acquire_new_key(gens, map, key.as_bytes(), now_us, cost)
            .map(|raw| S::allowed(&raw))
    }

    /// The slow path of [`try_acquire`](Self::try_acquire): `key` (its stored
    /// bytes) was not held in the current map. A key held under earlier
    /// policies is taken over (docs/spec.md section 9) and stored whatever
    /// the decision; any other is new.
    #[cold]
    #[inline(never)]
    fn acquire_new_key<S: Stored>(
        &self,
        gens: &Generations,
        map: &Map<S>,
        key: &[u8],
        now_us: u64,
        cost: u64,
    ) -> Result<S::Raw, Error> {
        let (current, rules) = (&gens.current, &gens.current.rules);
        // Requests that can never succeed neither allocate nor reserve.
        check_policies(&rules.policies, now_us, cost)?;
        if let Some(sweep) = self
            .space
            .sweeper
            .on_new_key_request(now_us, &self.space.keys_held)
        {
            self.sweep(gens, sweep, now_us);
        }
        let _moving = self.space.moving(gens);
        // Twice at most: once more after making room at the cap.
        for attempt in 0..2 {
            let vacant = match map.entry(Key::new(key)) {
                // Another request inserted the key since our lookup.
                Entry::Occupied(mut held) => return held.get_mut().decide(rules, now_us, cost),
                Entry::Vacant(vacant) => vacant,
            };
            // Under the vacant entry's lock: no other request takes it over.
            if let Some(mut state) = gens.take_over::<S>(key, now_us) {
                let raw = state.decide(rules, now_us, cost);
                let evict_at = self.evict_at(current, &state);
                drop(vacant.insert(state));
                self.space.sweeper.note_evict_at(evict_at);
                return raw;
            }
            if !self.space.keys_held.try_reserve() {
                drop(vacant);
                if attempt == 0 {
                    self.sweep_if_due(gens, now_us);
                }
                continue;
            }
            let mut state = S::fresh(rules);
            match state.decide(rules, now_us, cost) {
                // A fresh key admits every valid cost; should it ever
                // not, a denial stores nothing (docs/spec.md rule 2.1).
                Ok(raw) if S::allowed(&raw) => {
                    let evict_at = self.evict_at(current, &state);
                    drop(vacant.insert(state));
                    self.space.sweeper.note_evict_at(evict_at);
                    return Ok(raw);
                }
                raw => {
                    self.space.keys_held.release(1);
                    return raw;
                }
            }
        }
        self.space.sweeper.note_refused();
        Err(self.space.keys_held.refusal())
    }

    /// Sweeps if a sweep is due; returns how many keys it dropped. The
    /// caller holds no entry of the map.
    fn sweep_if_due(&self, gens: &Generations, now_us: u64) -> usize {
        match self.space.sweeper.due(now_us, &self.space.keys_held) {
            Some(sweep) => self.sweep(gens, sweep, now_us),
            None => 0,
        }
    }

    /// Drops the keys whose eviction time has passed, all of them, under
    /// the policies in force and earlier ones, in `sweep`; returns how many.
    fn sweep(&self, gens: &Generations, mut sweep: Sweep<'_>, now_us: u64) -> usize {
        let mut removed = 0;
        for generation in gens.all() {
            with_map!(&generation.keys, map => map.retain(|_, state| {
                let evict_at = self.evict_at(generation, state);
                if evict_at <= now_us {
                    removed += 1;
                    false
                } else {
                    sweep.keep(evict_at);
                    true
                }
            }));
        }
        if removed > 0 {
            self.space.keys_held.release(removed);
            // Give memory back after a burst of one-off keys, with enough
            // slack that a steady population does not shrink and regrow.
            let held = self.space.keys_held.held();
            for generation in gens.all() {
                with_map!(&generation.keys, map => {
                    if map.capacity() > 4 * held.max(MIN_SWEEP_INTERVAL) {
                        map.shrink_to_fit();
                    }
                });
            }
        }
        sweep.finish();
        removed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use limiter_core::{Algorithm, Clock, ManualClock, Policy, Rate};

    use super::*;
    use crate::map::reset_time_us;

    /// A store of `policy` on `clock`, uncapped, keys up to 256 bytes
    /// stored whole, dropped `eviction_delay_us` after their reset.
    fn store(policy: Policy, clock: &ManualClock, eviction_delay_us: u64) -> Store {
        let clock = ClockSource::Custom(Box::new(clock.clone()));
        Store::new(policy.into(), clock, None, 256, eviction_delay_us)
    }

    /// A sliding log of 3 a second on a clock at 0, keys dropped as soon
    /// as they expire.
    fn three_a_second() -> (Store, ManualClock) {
        let clock = ManualClock::new(0);
        let policy = Policy::sliding_log(Rate::per_second(3)).unwrap();
        (store(policy, &clock, 0), clock)
    }

    #[test]
    fn a_sweep_is_skipped_while_no_key_can_have_expired() {
        let (store, clock) = three_a_second();
        assert_eq!(store.space.sweeper.earliest_evict_at(), u64::MAX);
        store.try_acquire("a".as_bytes(), 1).unwrap();
        clock.set(500_000);
        store.try_acquire("b".as_bytes(), 1).unwrap();
        // "a" resets at 1 s, "b" at 1.5 s.
        assert_eq!(store.space.sweeper.earliest_evict_at(), 1_000_000);
        clock.set(999_999);
        assert_eq!(store.sweep_if_due(&store.generations(), clock.now_us()), 0);
        clock.set(1_000_000);
        assert_eq!(store.sweep_if_due(&store.generations(), clock.now_us()), 1);
        assert_eq!(store.space.sweeper.earliest_evict_at(), 1_500_000);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_sweep_waits_until_it_frees_a_batch() {
        // 1,280 keys, one admitted every µs: each resets 1 s after it.
        let (store, clock) = three_a_second();
        for k in 0..1_280u64 {
            clock.set(k);
            store.try_acquire(format!("k{k}").as_bytes(), 1).unwrap();
        }
        // The first key expires at 1 s: that sweep frees it alone, and the
        // next is put off until a 64th of the 1,279 it kept (19) have
        // expired.
        clock.set(1_000_000);
        assert_eq!(store.sweep_if_due(&store.generations(), clock.now_us()), 1);
        assert_eq!(store.space.sweeper.earliest_evict_at(), 1_000_019);
        clock.set(1_000_018);
        assert_eq!(
            store.sweep_if_due(&store.generations(), clock.now_us()),
            0,
            "fewer than a batch: skipped"
        );
        clock.set(1_000_019);
        assert_eq!(store.sweep_if_due(&store.generations(), clock.now_us()), 19);
    }

    #[test]
    fn a_long_key_is_held_as_its_33_byte_digest() {
        let policy = Policy::fixed_window(Rate::per_hour(3)).unwrap();
        let store = store(policy, &ManualClock::new(0), 0);
        let long = "k".repeat(1 << 20);
        let at_bound = "k".repeat(store.max_key_bytes());
        for key in [&long, &at_bound] {
            assert!(store.try_acquire(key.as_bytes(), 1).unwrap().allowed);
        }
        let mut held: Vec<usize> = with_single_map!(
            &store.generations().current.keys,
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
                let store = store(policy.clone(), &clock, 1_000_000);
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
                    let decision = store.try_acquire(key.as_bytes(), cost).unwrap();
                    if decision.allowed {
                        admissions += 1;
                        let generations = store.generations();
                        let current = &generations.current;
                        let held = with_single_map!(
                            &current.keys,
                            map => map.get(key.as_bytes()).unwrap().reset_time_us(&current.rules),
                            _set => unreachable!("one policy")
                        );
                        assert_eq!(held, reset_time_us(&decision), "{policy} {decision:?}");
                    }
                }
            }
        }
        assert!(admissions > 1_000, "{admissions}");
    }

    #[test]
    fn the_count_of_keys_held_matches_the_map_after_concurrent_churn() {
        let clock = ManualClock::new(0);
        let policy = Policy::fixed_window(Rate::per_second(3)).unwrap();
        let store = Arc::new(store(policy, &clock, 0));
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let store = Arc::clone(&store);
                let clock = clock.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000u64 {
                        let key = format!("k{}", (i * 7 + thread) % 3_000);
                        store.try_acquire(key.as_bytes(), 1).unwrap();
                        if i % 97 == 0 {
                            store.remove(key.as_bytes());
                        }
                        if thread == 0 && i % 1_000 == 0 {
                            clock.advance(Duration::from_millis(700));
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let map_len = || with_map!(&store.generations().current.keys, map => map.len());
        assert_eq!(store.len(), map_len());
        clock.advance(Duration::from_secs(2));
        store.sweep_expired();
        assert_eq!(store.len(), 0);
        assert_eq!(map_len(), 0);
    }
}

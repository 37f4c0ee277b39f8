//! [`Generations`]: the keys decided under the policies in force and,
//! until each is taken over or expires, the keys of earlier policies
//! (docs/spec.md section 9).

use std::iter;

use limiter_core::Policies;

use crate::map::{with_map, Keys, Rules, Stored};

/// The keys of one policy set: a map typed by it, as `map.rs` describes.
#[derive(Debug)]
pub(crate) struct Generation {
    pub(crate) rules: Rules,
    pub(crate) keys: Keys,
}

impl Generation {
    /// No key held under `policies`.
    pub(crate) fn new(policies: Policies) -> Self {
        Self {
            keys: Keys::new(&policies),
            rules: Rules::new(policies),
        }
    }

    fn is_empty(&self) -> bool {
        with_map!(&self.keys, map => map.is_empty())
    }
}

/// The policies in force with their keys, and the earlier policies whose
/// keys have not all been taken over yet: a key moves to the current
/// generation at its first request after a change, its state taken over by
/// the core's rule at that request's time, and a key left in an earlier
/// generation expires there by that generation's policies, as it would
/// have (a state the old policies have reset is taken over as fresh, so
/// dropping it changes nothing).
#[derive(Debug)]
pub(crate) struct Generations {
    pub(crate) current: Generation,
    /// Oldest first.
    earlier: Vec<Generation>,
}

impl Generations {
    /// Only `current`.
    pub(crate) fn new(current: Generation) -> Self {
        Self {
            current,
            earlier: Vec::new(),
        }
    }

    /// Every generation, the current one first.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Generation> {
        iter::once(&self.current).chain(&self.earlier)
    }

    /// Puts `policies` in force; the current keys become an earlier
    /// generation, and earlier generations left with no key are dropped.
    /// Returns whether anything changed (not for policies equal to those
    /// in force: a change to equal policies changes no decision).
    pub(crate) fn change(&mut self, policies: Policies) -> bool {
        if policies == self.current.rules.policies {
            return false;
        }
        let earlier = std::mem::replace(&mut self.current, Generation::new(policies));
        self.earlier.retain(|generation| !generation.is_empty());
        if !earlier.is_empty() {
            self.earlier.push(earlier);
        }
        true
    }

    /// `key`'s state in an earlier generation (the newest holding it),
    /// removed from it and taken over by the current policies at `now_us`.
    /// The caller holds the key's entry in the current map, so no other
    /// request takes it over too.
    pub(crate) fn take_over<S: Stored>(&self, key: &[u8], now_us: u64) -> Option<S> {
        self.earlier.iter().rev().find_map(|generation| {
            let held = with_map!(&generation.keys, map => map
                .remove(key)
                .map(|(_, state)| state.to_set(&generation.rules)))?;
            Some(self.taken_over(generation, held, now_us))
        })
    }

    /// What [`take_over`](Self::take_over) would take, leaving it where it
    /// is: for a peek, which writes nothing.
    pub(crate) fn peek_over<S: Stored>(&self, key: &[u8], now_us: u64) -> Option<S> {
        self.earlier.iter().rev().find_map(|generation| {
            let held = with_map!(&generation.keys, map => map
                .get(key)
                .map(|state| state.to_set(&generation.rules)))?;
            Some(self.taken_over(generation, held, now_us))
        })
    }

    fn taken_over<S: Stored>(
        &self,
        generation: &Generation,
        held: limiter_core::backend::SetState,
        now_us: u64,
    ) -> S {
        let rules = &self.current.rules;
        let set = held.change_policies(&generation.rules.policies, &rules.policies, now_us);
        S::from_set(set, rules)
    }
}

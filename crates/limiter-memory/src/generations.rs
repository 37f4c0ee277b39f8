//! [`Generations`]: the keys decided under the policies in force and,
//! until each is taken over or expires, the keys of earlier policies
//! (docs/spec.md section 9).

use std::iter;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

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
/// dropping it changes nothing). A snapshot: a change makes a new one.
#[derive(Debug)]
pub(crate) struct Generations {
    pub(crate) current: Arc<Generation>,
    /// Oldest first.
    earlier: Vec<Arc<Generation>>,
}

impl Generations {
    /// Only `current`.
    pub(crate) fn new(current: Generation) -> Self {
        Self {
            current: Arc::new(current),
            earlier: Vec::new(),
        }
    }

    /// The generations with `policies` in force: the current keys become
    /// an earlier generation, and earlier generations left with no key are
    /// dropped. `None` for the policies in force (a change to equal
    /// policies changes no decision).
    fn changed(&self, policies: Policies) -> Option<Self> {
        if policies == self.current.rules.policies {
            return None;
        }
        let earlier = self.earlier.iter().chain([&self.current]);
        Some(Self {
            current: Arc::new(Generation::new(policies)),
            earlier: earlier.filter(|g| !g.is_empty()).cloned().collect(),
        })
    }

    /// Every generation, the current one first.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Generation> {
        iter::once(&*self.current).chain(self.earlier.iter().map(|g| &**g))
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

/// The generations each request decides under, behind one read-write lock
/// per thread group rather than one for all: a request read-locks its
/// thread's lock for its whole decision, so it sees one snapshot from
/// beginning to end, and requests of different threads touch different
/// cache lines. A change write-locks every lock in turn (waiting for the
/// requests being decided), puts the new snapshot behind each, and lets
/// go: no request is decided under a mix of two.
#[derive(Debug)]
pub(crate) struct InForce {
    locks: Box<[PaddedLock]>,
}

/// A lock on its own cache line (two, against the adjacent-line prefetch).
#[derive(Debug)]
#[repr(align(128))]
struct PaddedLock(RwLock<Arc<Generations>>);

/// How many locks: threads beyond share them.
const LOCKS: usize = 16;

impl InForce {
    pub(crate) fn new(generations: Generations) -> Self {
        let generations = Arc::new(generations);
        Self {
            locks: (0..LOCKS)
                .map(|_| PaddedLock(RwLock::new(Arc::clone(&generations))))
                .collect(),
        }
    }

    /// The snapshot in force, read-locked until the guard is dropped.
    #[inline]
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Arc<Generations>> {
        let lock = &self.locks[thread_lock() % LOCKS].0;
        lock.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `policies` in force for every request that begins from now
    /// on; returns whether they differ from those in force.
    pub(crate) fn change(&self, policies: Policies) -> bool {
        let mut guards: Vec<_> = self
            .locks
            .iter()
            .map(|lock| lock.0.write().unwrap_or_else(PoisonError::into_inner))
            .collect();
        let Some(changed) = guards[0].changed(policies) else {
            return false;
        };
        let changed = Arc::new(changed);
        for guard in &mut guards {
            **guard = Arc::clone(&changed);
        }
        true
    }
}

/// This thread's lock, given out in turn as threads first ask.
#[inline]
fn thread_lock() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LOCK: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    LOCK.with(|lock| *lock)
}

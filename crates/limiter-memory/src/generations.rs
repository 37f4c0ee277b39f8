//! [`Generations`]: the keys decided under a limiter's policies in force
//! and, until each is taken over or expires, the keys of earlier policies
//! and of other limiters on the same keys (docs/spec.md section 9).

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

    pub(crate) fn is_empty(&self) -> bool {
        with_map!(&self.keys, map => map.is_empty())
    }
}

/// The policies a limiter decides under with their keys, and the other
/// maps of its key space (docs: `key_space.rs`): those of earlier policies
/// whose keys have not all been taken over yet, and those of the other
/// limiters on the same keys (one per plan). A key moves to the current
/// map at its first request there, its state taken over by the core's rule
/// at that request's time, and a key left in an earlier generation expires
/// there by that generation's policies, as it would have (a state the old
/// policies have reset is taken over as fresh, so dropping it changes
/// nothing). A snapshot: a change makes a new one.
#[derive(Debug)]
pub(crate) struct Generations {
    pub(crate) current: Arc<Generation>,
    /// The other maps, which hold no key the current one holds.
    others: Vec<Arc<Generation>>,
    /// Whether another limiter inserts keys into one of `others`.
    others_in_force: bool,
}

impl Generations {
    /// Only `current`.
    pub(crate) fn new(current: Arc<Generation>) -> Self {
        Self::with_others(current, Vec::new(), false)
    }

    /// `current`, taking keys over from `others`, of which another
    /// limiter inserts into one if `others_in_force`.
    pub(crate) fn with_others(
        current: Arc<Generation>,
        others: Vec<Arc<Generation>>,
        others_in_force: bool,
    ) -> Self {
        Self {
            current,
            others,
            others_in_force,
        }
    }

    /// Whether a request moving a key into the current map must hold the
    /// key space's lock on moves (see `key_space.rs`).
    pub(crate) fn moves_between_limiters(&self) -> bool {
        self.others_in_force
    }

    /// Every generation, the current one first.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Generation> {
        iter::once(&*self.current).chain(self.others.iter().map(|g| &**g))
    }

    /// `key`'s state in another map (at most one holds it), removed from
    /// it and taken over by the current policies at `now_us`.
    /// The caller holds the key's entry in the current map, so no other
    /// request takes it over too.
    pub(crate) fn take_over<S: Stored>(&self, key: &[u8], now_us: u64) -> Option<S> {
        self.others.iter().find_map(|generation| {
            let held = with_map!(&generation.keys, map => map
                .remove(key)
                .map(|(_, state)| state.to_set(&generation.rules)))?;
            Some(self.taken_over(generation, held, now_us))
        })
    }

    /// What [`take_over`](Self::take_over) would take, leaving it where it
    /// is: for a peek, which writes nothing.
    pub(crate) fn peek_over<S: Stored>(&self, key: &[u8], now_us: u64) -> Option<S> {
        self.others.iter().find_map(|generation| {
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

    /// Puts `generations` in force for every request that begins from now
    /// on, once the requests being decided have finished.
    pub(crate) fn put(&self, generations: Generations) {
        let mut guards: Vec<_> = self
            .locks
            .iter()
            .map(|lock| lock.0.write().unwrap_or_else(PoisonError::into_inner))
            .collect();
        let generations = Arc::new(generations);
        for guard in &mut guards {
            **guard = Arc::clone(&generations);
        }
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

//! [`KeySpace`]: what every limiter over the same keys shares (the keys
//! under each policy set, the clock, the bounds on keys and the sweep), so
//! that a key moving between them, a client changing plans, keeps what it
//! used (docs/spec.md section 9).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use limiter_core::backend::ClockSource;
use limiter_core::Policies;

use crate::generations::{Generation, Generations, InForce};
use crate::key_cap::KeyCap;
use crate::sweep::Sweeper;

/// The keys of the limiters made from one builder (one per plan, by
/// [`MemoryLimiter::plan`](crate::MemoryLimiter::plan)): one map per
/// policy set in force in one of them or still holding keys, a key in at
/// most one of them. A request on a key its limiter's map does not hold
/// takes it over from whichever map does.
#[derive(Debug)]
pub(crate) struct KeySpace {
    /// Read once per request, and by the sweep.
    pub(crate) clock: ClockSource,
    /// A longer key is stored as its digest.
    pub(crate) max_key_bytes: usize,
    /// How long past its reset time a key is kept.
    pub(crate) eviction_delay_us: u64,
    /// The count of keys held, and its cap, over every map.
    pub(crate) keys_held: KeyCap,
    /// When to sweep: only new keys and sweeps touch it.
    pub(crate) sweeper: Sweeper,
    /// The limiters and the maps, changed one at a time.
    registry: Mutex<Registry>,
    /// Held by a request moving a key into its map while two maps are in
    /// force: it removes the key from another map while it holds its own
    /// map's entry, so without it two such requests, each holding an entry
    /// the other removes from, could wait for each other forever.
    moving: Mutex<()>,
}

/// Each limiter's policies in force (behind its [`InForce`]) and the maps.
#[derive(Debug, Default)]
struct Registry {
    limiters: Vec<Weak<InForce>>,
    generations: Vec<Arc<Generation>>,
}

impl KeySpace {
    pub(crate) fn new(
        clock: ClockSource,
        max_keys: Option<usize>,
        max_key_bytes: usize,
        eviction_delay_us: u64,
    ) -> Self {
        Self {
            clock,
            max_key_bytes,
            eviction_delay_us,
            keys_held: KeyCap::new(max_keys),
            sweeper: Sweeper::new(),
            registry: Mutex::default(),
            moving: Mutex::new(()),
        }
    }

    /// A limiter's policies in force, deciding under `policies` on these keys.
    pub(crate) fn limiter(&self, policies: Policies) -> Arc<InForce> {
        let mut registry = self.registry();
        let current = registry.generation_of(policies);
        let in_force = Arc::new(InForce::new(Generations::new(current)));
        registry.limiters.push(Arc::downgrade(&in_force));
        registry.refresh(None);
        in_force
    }

    /// Puts `policies` in force in the limiter of `in_force`, waiting for
    /// the requests being decided; returns whether they differ from those
    /// in force.
    pub(crate) fn change(&self, in_force: &InForce, policies: Policies) -> bool {
        let mut registry = self.registry();
        if in_force.read().current.rules.policies == policies {
            return false;
        }
        // Put in force with every other map at once: a snapshot of the
        // new map alone would take a key held in the old one for new.
        let current = registry.generation_of(policies);
        registry.refresh(Some((in_force, current)));
        true
    }

    /// The lock a request moving a key between maps holds, when more than
    /// one map is in force.
    pub(crate) fn moving(&self, generations: &Generations) -> Option<MutexGuard<'_, ()>> {
        generations
            .moves_between_limiters()
            .then(|| self.moving.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Registry {
    /// The map of `policies`, made if no limiter has it.
    fn generation_of(&mut self, policies: Policies) -> Arc<Generation> {
        if let Some(found) = self
            .generations
            .iter()
            .find(|g| g.rules.policies == policies)
        {
            return Arc::clone(found);
        }
        let made = Arc::new(Generation::new(policies));
        self.generations.push(Arc::clone(&made));
        made
    }

    /// Drops the limiters gone and the maps no limiter decides under that
    /// hold no key, then gives each limiter every other map to take keys
    /// over from; `changed`, a limiter and the map it decides under from
    /// now on.
    ///
    /// A map a limiter decided under until now is kept until every
    /// limiter has its new snapshot, even if it looks empty: a request
    /// still being decided under it may be moving a key into it (taken out
    /// of another map, not put in yet). Once the snapshots are in force no
    /// request puts a key into a map in force for no limiter, so such a
    /// map found empty then is dropped for good.
    fn refresh(&mut self, changed: Option<(&InForce, Arc<Generation>)>) {
        let limiters: Vec<Arc<InForce>> = self.limiters.iter().filter_map(Weak::upgrade).collect();
        self.limiters = limiters.iter().map(Arc::downgrade).collect();
        let previous: Vec<Arc<Generation>> = (limiters.iter())
            .map(|limiter| Arc::clone(&limiter.read().current))
            .collect();
        let currents: Vec<Arc<Generation>> = (limiters.iter().zip(&previous))
            .map(|(limiter, was)| match &changed {
                Some((in_force, current)) if std::ptr::eq(&**limiter, *in_force) => {
                    Arc::clone(current)
                }
                _ => Arc::clone(was),
            })
            .collect();
        let in_force = |g: &Arc<Generation>| currents.iter().any(|c| Arc::ptr_eq(c, g));
        let was_in_force = |g: &Arc<Generation>| previous.iter().any(|c| Arc::ptr_eq(c, g));
        self.generations
            .retain(|g| in_force(g) || was_in_force(g) || !g.is_empty());
        self.put_snapshots(&limiters, &currents);
        let before = self.generations.len();
        self.generations.retain(|g| in_force(g) || !g.is_empty());
        if self.generations.len() < before {
            self.put_snapshots(&limiters, &currents);
        }
    }

    /// Puts each of `limiters` in force with its map of `currents` and
    /// every other map.
    fn put_snapshots(&self, limiters: &[Arc<InForce>], currents: &[Arc<Generation>]) {
        let in_force = |g: &Arc<Generation>| currents.iter().any(|c| Arc::ptr_eq(c, g));
        let maps_in_force = self.generations.iter().filter(|g| in_force(g)).count();
        for (limiter, current) in limiters.iter().zip(currents) {
            let others = (self.generations.iter())
                .filter(|g| !Arc::ptr_eq(g, current))
                .cloned()
                .collect();
            limiter.put(Generations::with_others(
                Arc::clone(current),
                others,
                maps_in_force > 1,
            ));
        }
    }
}

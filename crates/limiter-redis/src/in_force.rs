//! [`InForce`]: the decider of every distinct policy set a limiter has
//! had, so that [`RedisLimiter::policies`](crate::RedisLimiter) can lend
//! the set in force while it changes, and each request is decided
//! entirely under the set in force when it began (docs/spec.md rule 9.1).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use limiter_core::Policies;

use crate::protocol::batch::Decider;

/// The deciders, in the order first put in force, each kept for the
/// limiter's life (a reference to one stays valid across changes), and
/// which one is in force. A set put in force again is found, not added.
pub(crate) struct InForce {
    first: Node,
    in_force: AtomicUsize,
    /// One change at a time.
    changing: Mutex<()>,
}

struct Node {
    decider: Arc<Decider>,
    next: OnceLock<Box<Node>>,
}

impl InForce {
    pub(crate) fn new(decider: Decider) -> Self {
        Self {
            first: Node {
                decider: Arc::new(decider),
                next: OnceLock::new(),
            },
            in_force: AtomicUsize::new(0),
            changing: Mutex::new(()),
        }
    }

    /// The decider in force.
    pub(crate) fn get(&self) -> &Arc<Decider> {
        let index = self.in_force.load(Ordering::Acquire);
        &self.nodes().nth(index).unwrap_or(&self.first).decider
    }

    /// Puts `policies` in force: their decider if they had one, else the
    /// one `make` builds.
    pub(crate) fn put(&self, policies: &Policies, make: impl FnOnce() -> Decider) {
        let _one_change_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let found = self
            .nodes()
            .position(|node| node.decider.policies == *policies);
        let index = found.unwrap_or_else(|| {
            let (count, last) = self.nodes().enumerate().last().unwrap_or((0, &self.first));
            let node = Node {
                decider: Arc::new(make()),
                next: OnceLock::new(),
            };
            // One writer at a time: the last node has no successor yet.
            let _ = last.next.set(Box::new(node));
            count + 1
        });
        self.in_force.store(index, Ordering::Release);
    }

    fn nodes(&self) -> impl Iterator<Item = &Node> {
        std::iter::successors(Some(&self.first), |node| {
            node.next.get().map(|next| &**next)
        })
    }
}

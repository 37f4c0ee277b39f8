//! [`PolicyHistory`]: every distinct policy set a limiter has had, so that
//! `MemoryLimiter::policies` can lend the one in force while it changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use limiter_core::Policies;

/// The distinct policy sets, in the order first put in force, each kept for
/// the limiter's life (a reference to one stays valid across changes), and
/// which one is in force. A set put in force again is found, not added, so
/// it holds as many sets as were ever distinct.
#[derive(Debug)]
pub(crate) struct PolicyHistory {
    first: Node,
    in_force: AtomicUsize,
}

#[derive(Debug)]
struct Node {
    policies: Policies,
    next: OnceLock<Box<Node>>,
}

impl PolicyHistory {
    pub(crate) fn new(policies: Policies) -> Self {
        Self {
            first: Node {
                policies,
                next: OnceLock::new(),
            },
            in_force: AtomicUsize::new(0),
        }
    }

    /// The set in force.
    pub(crate) fn in_force(&self) -> &Policies {
        let index = self.in_force.load(Ordering::Acquire);
        &self.nodes().nth(index).unwrap_or(&self.first).policies
    }

    /// Puts `policies` in force. Called by one thread at a time.
    pub(crate) fn put_in_force(&self, policies: &Policies) {
        let found = self.nodes().position(|node| node.policies == *policies);
        let index = found.unwrap_or_else(|| {
            let (count, last) = self.nodes().enumerate().last().unwrap_or((0, &self.first));
            let node = Node {
                policies: policies.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_put_in_force_again_is_found_not_added() {
        let set = |text: &str| text.parse::<Policies>().unwrap();
        let history = PolicyHistory::new(set("sliding-log:5/1s"));
        let first: *const Policies = history.in_force();
        history.put_in_force(&set("sliding-log:9/1s"));
        assert_eq!(history.in_force(), &set("sliding-log:9/1s"));
        history.put_in_force(&set("sliding-log:5/1s"));
        assert_eq!(history.in_force() as *const Policies, first);
        history.put_in_force(&set("sliding-log:9/1s"));
        assert_eq!(history.nodes().count(), 2);
    }
}

//! [`PolicyHistory`]: every distinct policy set a limiter has had, so that
//! [`Limiter::policies`](crate::Limiter::policies) can lend the one in
//! force while it changes, and a request keeps the one in force when it
//! began (docs/spec.md rule 9.1).

use std::borrow::Borrow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::Policies;

/// The distinct policy sets a limiter has had, in the order first put in
/// force, and which one is in force. Each is kept as a `T`: the set itself,
/// or what a backend builds to decide under it (which borrows as the set).
///
/// Each entry is kept for the limiter's life, so a reference to one stays
/// valid across changes and reading the one in force takes no lock. A set
/// put in force again is found, not added: the history holds as many
/// entries as there were ever distinct sets.
#[derive(Debug)]
pub struct PolicyHistory<T = Policies> {
    first: Node<T>,
    in_force: AtomicUsize,
    /// One change at a time: only the last entry gains a successor.
    changing: Mutex<()>,
}

#[derive(Debug)]
struct Node<T> {
    entry: Arc<T>,
    next: OnceLock<Box<Node<T>>>,
}

impl<T: Borrow<Policies>> PolicyHistory<T> {
    /// A history of one entry, in force.
    pub fn new(first: T) -> Self {
        Self {
            first: Node::new(first),
            in_force: AtomicUsize::new(0),
            changing: Mutex::new(()),
        }
    }

    /// The entry in force.
    pub fn in_force(&self) -> &Arc<T> {
        let index = self.in_force.load(Ordering::Acquire);
        &self.nodes().nth(index).unwrap_or(&self.first).entry
    }

    /// Puts `policies` in force: their entry if they had one, else the one
    /// `make` builds (called only then).
    pub fn put_in_force(&self, policies: &Policies, make: impl FnOnce() -> T) {
        let _one_change_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        let found = self
            .nodes()
            .position(|node| (*node.entry).borrow() == policies);
        let index = found.unwrap_or_else(|| {
            let (count, last) = self.nodes().enumerate().last().unwrap_or((0, &self.first));
            // Under the lock, the last node has no successor yet.
            let _ = last.next.set(Box::new(Node::new(make())));
            count + 1
        });
        self.in_force.store(index, Ordering::Release);
    }

    fn nodes(&self) -> impl Iterator<Item = &Node<T>> {
        std::iter::successors(Some(&self.first), |node| {
            node.next.get().map(|next| &**next)
        })
    }
}

impl<T> Node<T> {
    fn new(entry: T) -> Self {
        Self {
            entry: Arc::new(entry),
            next: OnceLock::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> Policies {
        text.parse().unwrap()
    }

    #[test]
    fn a_set_put_in_force_again_is_found_not_added() {
        let history = PolicyHistory::new(set("sliding-log:5/1s"));
        let first: *const Policies = &**history.in_force();
        history.put_in_force(&set("sliding-log:9/1s"), || set("sliding-log:9/1s"));
        assert_eq!(**history.in_force(), set("sliding-log:9/1s"));
        history.put_in_force(&set("sliding-log:5/1s"), || unreachable!("found"));
        assert_eq!(&**history.in_force() as *const Policies, first);
        history.put_in_force(&set("sliding-log:9/1s"), || unreachable!("found"));
        assert_eq!(history.nodes().count(), 2);
    }

    #[test]
    fn an_entry_lent_stays_valid_across_changes() {
        let history = PolicyHistory::new(set("fixed-window:3/1s"));
        let lent = history.in_force();
        for limit in 4..20 {
            let next = set(&format!("fixed-window:{limit}/1s"));
            history.put_in_force(&next, || next.clone());
        }
        assert_eq!(**lent, set("fixed-window:3/1s"));
        assert_eq!(**history.in_force(), set("fixed-window:19/1s"));
        assert_eq!(history.nodes().count(), 17);
    }
}

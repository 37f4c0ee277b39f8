//! Faults: a primary crashed (and its replica's failover awaited), a whole
//! shard lost, a node hung and resumed.

use super::node::{lock, ClusterNode, Node};
use super::{Killed, RedisCluster, SETTLE_TIMEOUT};

impl RedisCluster {
    /// Kills the `index`th of the [`primaries`](Self::primaries) with
    /// `SIGKILL`, as a crash (when this returns, it has exited), and
    /// returns it. Its replica takes over within about two
    /// [`NODE_TIMEOUT_MS`](super::NODE_TIMEOUT_MS): see
    /// [`wait_for_failover`](Self::wait_for_failover). A killed node stays
    /// down.
    ///
    /// # Panics
    ///
    /// If there is no such primary.
    pub fn kill_primary(&self, index: usize) -> ClusterNode {
        let primaries = self.primaries();
        let victim = primaries
            .get(index)
            .unwrap_or_else(|| panic!("kill_primary({index}): only {} primaries", primaries.len()))
            .clone();
        let slots = self.slots_of(&victim);
        *lock(&self.last_killed) = Some(Killed {
            node: victim.clone(),
            slots,
        });
        lock(&self.server_of(&victim).server).kill();
        victim
    }

    /// Kills the `index`th of the [`primaries`](Self::primaries) and every
    /// replica of it with `SIGKILL`, as the loss of a whole shard: no node
    /// is left to serve its slots, and no failover brings them back.
    /// Returns the killed nodes, the primary first.
    ///
    /// # Panics
    ///
    /// If there is no such primary.
    pub fn kill_shard(&self, index: usize) -> Vec<ClusterNode> {
        let primaries = self.primaries();
        let primary = primaries
            .get(index)
            .unwrap_or_else(|| panic!("kill_shard({index}): only {} primaries", primaries.len()))
            .clone();
        let mut shard = vec![primary.clone()];
        shard.extend(self.replicas_of(&primary));
        // Its replicas first: none of them can start a failover after.
        for node in shard.iter().rev() {
            lock(&self.server_of(node).server).kill();
        }
        shard
    }

    /// The process behind `node`.
    fn server_of(&self, node: &ClusterNode) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == node.id)
            .unwrap_or_else(|| panic!("{node:?} is not one of the cluster's nodes"))
    }

    /// Suspends `node` with `SIGSTOP`, as a hung node: it accepts
    /// connections and answers nothing until [`resume`](Self::resume). Held
    /// for less than [`NODE_TIMEOUT_MS`](super::NODE_TIMEOUT_MS), no
    /// failover starts.
    ///
    /// # Panics
    ///
    /// If `node` is not one of the cluster's nodes.
    pub fn pause(&self, node: &ClusterNode) {
        lock(&self.server_of(node).server).pause();
    }

    /// Resumes a node [`pause`](Self::pause)d with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// If `node` is not one of the cluster's nodes.
    pub fn resume(&self, node: &ClusterNode) {
        lock(&self.server_of(node).server).resume();
    }

    /// Waits until the slots of the primary [`kill_primary`](Self::kill_primary)
    /// killed last are served by another node (its replica, promoted) and
    /// the cluster is healthy again (as after [`start`](Self::start), the
    /// killed node apart), and returns the new primary.
    ///
    /// # Panics
    ///
    /// If no primary was killed, or if the cluster does not settle within
    /// 30 seconds (with every node's view).
    pub fn wait_for_failover(&self) -> ClusterNode {
        let Killed {
            node: killed,
            slots,
        } = lock(&self.last_killed)
            .clone()
            .expect("wait_for_failover: no primary was killed");
        let first = slots.first().expect("the killed primary served slots").0;
        self.wait_until(SETTLE_TIMEOUT, "a replica to take over", || {
            self.try_view_of(&self.any_live()).is_some_and(|view| {
                view.iter().any(|n| {
                    n.id != killed.id
                        && n.is_primary()
                        && n.slots.iter().any(|&(a, b)| a <= first && first <= b)
                })
            })
        });
        self.wait_until_healthy();
        self.node_of_slot(first)
    }
}

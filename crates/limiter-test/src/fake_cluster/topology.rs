//! Which fake node serves each slot: what `CLUSTER SLOTS` answers, and
//! what makes a node answer `MOVED`.

use std::sync::{Mutex, PoisonError};

use crate::redis_cluster::SLOTS;

/// Every node's port and each slot's owner, by node index.
#[derive(Debug)]
pub(super) struct Topology {
    ports: Vec<u16>,
    owners: Mutex<Vec<usize>>,
}

impl Topology {
    /// The slots split evenly over the nodes at `ports`, in order.
    pub(super) fn even(ports: Vec<u16>) -> Self {
        let nodes = ports.len();
        let owners = (0..usize::from(SLOTS))
            .map(|slot| slot * nodes / usize::from(SLOTS))
            .collect();
        Self {
            ports,
            owners: Mutex::new(owners),
        }
    }

    pub(super) fn port(&self, node: usize) -> u16 {
        self.ports[node]
    }

    pub(super) fn owner(&self, slot: u16) -> usize {
        self.lock()[usize::from(slot)]
    }

    pub(super) fn assign(&self, slot: u16, node: usize) {
        assert!(node < self.ports.len(), "no node {node}");
        self.lock()[usize::from(slot)] = node;
    }

    /// The `CLUSTER SLOTS` reply: each run of slots of one owner, with the
    /// owner's address and id (no replicas).
    pub(super) fn cluster_slots(&self) -> Vec<u8> {
        let owners = self.lock().clone();
        let mut ranges = Vec::new();
        let mut start = 0;
        for slot in 1..=owners.len() {
            if slot == owners.len() || owners[slot] != owners[start] {
                ranges.push((start, slot - 1, self.ports[owners[start]]));
                start = slot;
            }
        }
        let mut reply = format!("*{}\r\n", ranges.len());
        for (first, last, port) in ranges {
            let id = format!("{port:040}");
            reply.push_str(&format!(
                "*3\r\n:{first}\r\n:{last}\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$40\r\n{id}\r\n"
            ));
        }
        reply.into_bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_slots_names_each_run_of_slots() {
        let topology = Topology::even(vec![7000, 7001]);
        assert_eq!(topology.owner(8191), 0);
        assert_eq!(topology.owner(8192), 1);
        topology.assign(0, 1);
        let reply = String::from_utf8(topology.cluster_slots()).unwrap();
        assert!(reply.starts_with("*3\r\n*3\r\n:0\r\n:0\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n"));
        assert!(reply.contains(":1\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n"));
        assert!(reply.contains(":8192\r\n:16383\r\n"));
    }
}

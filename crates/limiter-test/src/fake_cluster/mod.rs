//! [`FakeCluster`]: Redis Cluster nodes played by this process in front of
//! one real `redis-server`, for the redirect sequences a real cluster
//! cannot produce on demand (`MOVED`, `ASK` and `TRYAGAIN` in a given order,
//! or without end).
//!
//! Each [`FakeNode`] listens on a free loopback port and speaks RESP2. It
//! answers `CLUSTER SLOTS` from the fake topology (the slots split evenly
//! over the nodes, moved with [`FakeCluster::assign`]) and `ASKING` itself;
//! a command with keys is answered from the node's script first
//! ([`FakeNode::refuse`]), then with `MOVED` if the topology gives its slot
//! to another node (unless `ASKING` came just before it); every other
//! command is forwarded to the real server, on a connection of its own per
//! client connection. So the decisions are real, whichever node serves
//! them (they all share the one server's keys), and only the redirects are
//! scripted. Each node records the commands it saw and how it answered
//! them ([`FakeNode::seen`]).
//!
//! The nodes run on the Tokio runtime that started them.
//!
//! ```no_run
//! use limiter_test::fake_cluster::{slot_of, FakeCluster};
//! use limiter_test::redis_server::RedisServer;
//!
//! # async fn run() {
//! let server = RedisServer::start();
//! let cluster = FakeCluster::start(server.port(), 2).await;
//! let slot = slot_of("{user:1}");
//! cluster.node(0).refuse(2, format!("TRYAGAIN slot {slot} is being moved"));
//! println!("seeds: {:?}", cluster.seed_urls());
//! # }
//! ```

mod connection;
mod frame;
mod node;
mod slot;
mod topology;

use std::sync::Arc;

use tokio::net::TcpListener;

use self::node::NodeState;
use self::topology::Topology;

pub use self::node::{Answer, FakeNode, Seen};
pub use self::slot::slot_of;

/// Fake nodes sharing one topology, in front of one real server.
#[derive(Debug)]
pub struct FakeCluster {
    nodes: Vec<FakeNode>,
    topology: Arc<Topology>,
}

impl FakeCluster {
    /// Starts `nodes` fake nodes forwarding to the server on
    /// `127.0.0.1:server_port`, the slots split evenly over them in order.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub async fn start(server_port: u16, nodes: usize) -> Self {
        let mut listeners = Vec::new();
        for _ in 0..nodes {
            let listener = TcpListener::bind(("127.0.0.1", 0))
                .await
                .expect("binding a loopback port for a fake node");
            listeners.push(listener);
        }
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().expect("a bound port").port())
            .collect();
        let topology = Arc::new(Topology::even(ports));
        let nodes = listeners
            .into_iter()
            .enumerate()
            .map(|(index, listener)| {
                let state = NodeState::new(index, Arc::clone(&topology), server_port);
                FakeNode::start(listener, state)
            })
            .collect();
        Self { nodes, topology }
    }

    /// Node `index`, in the order of their slots.
    pub fn node(&self, index: usize) -> &FakeNode {
        &self.nodes[index]
    }

    /// Every node's URL, as seeds.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(FakeNode::url).collect()
    }

    /// The index of the node that serves `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        self.topology.owner(slot)
    }

    /// Node `node` serves `slot` from now on: `CLUSTER SLOTS` says so, and
    /// the other nodes answer `MOVED` for it.
    ///
    /// # Panics
    ///
    /// If there is no node `node`.
    pub fn assign(&self, slot: u16, node: usize) {
        self.topology.assign(slot, node);
    }
}

//! [`FakeNode`]: one node of a [`FakeCluster`](super::FakeCluster), its
//! script of refusals, and what it saw.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use super::connection::serve_connection;
use super::topology::Topology;

/// One fake node on `127.0.0.1`: serves the slots the cluster's topology
/// gives it (forwarding their commands to the real server), answers `MOVED`
/// for the others, and answers the next commands for a slot (its own or
/// not) from its script first. Stops listening when dropped.
#[derive(Debug)]
pub struct FakeNode {
    pub(super) state: Arc<NodeState>,
    accept: JoinHandle<()>,
}

/// A command the node received, and how it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Which of the node's connections it came on, numbered from 0.
    pub connection: u64,
    /// Its arguments, the name first (binary ones lossily).
    pub args: Vec<String>,
    /// The slot of its first key, for a command with keys.
    pub slot: Option<u16>,
    /// Whether `ASKING` came just before it on its connection.
    pub after_asking: bool,
    /// How the node answered it.
    pub answer: Answer,
}

impl Seen {
    /// Whether this is the command `name` (any case).
    pub fn is(&self, name: &str) -> bool {
        self.args
            .first()
            .is_some_and(|first| first.eq_ignore_ascii_case(name))
    }
}

/// How a fake node answered a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The real server's reply, the command forwarded to it.
    Served,
    /// This error (without its `-`): scripted, or a `MOVED` for a slot
    /// the node does not serve.
    Refused(String),
    /// The node's own reply: `CLUSTER SLOTS` from the topology, `+OK` to
    /// `ASKING`.
    Own,
}

/// What a node's connections share.
#[derive(Debug)]
pub(super) struct NodeState {
    pub(super) index: usize,
    pub(super) topology: Arc<Topology>,
    /// The real server every served command goes to.
    pub(super) server_port: u16,
    script: Mutex<VecDeque<Refusal>>,
    seen: Mutex<Vec<Seen>>,
    connections: AtomicU64,
}

/// The next `times` commands with keys get `error`.
#[derive(Debug)]
struct Refusal {
    error: String,
    times: usize,
}

impl FakeNode {
    pub(super) fn start(listener: TcpListener, state: NodeState) -> Self {
        let state = Arc::new(state);
        let shared = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            // Dropped with the accept loop: every connection ends with it.
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let id = shared.connections.fetch_add(1, Ordering::SeqCst);
                connections.spawn(serve_connection(Arc::clone(&shared), client, id));
            }
        });
        Self { state, accept }
    }

    /// The node's port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.state.topology.port(self.state.index)
    }

    /// `127.0.0.1:PORT`, as a redirect names the node.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// The node's URL, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.address())
    }

    /// The next `times` commands with keys that reach the node are
    /// answered `-error` (e.g. `TRYAGAIN ...`, `ASK 42 127.0.0.1:7001`),
    /// after any refusals scripted before; later ones as the topology says.
    pub fn refuse(&self, times: usize, error: impl Into<String>) {
        let error = error.into();
        self.lock_script().push_back(Refusal { error, times });
    }

    /// Every command with keys that reaches the node is answered `-error`,
    /// after any refusals scripted before, until [`serve`](Self::serve).
    pub fn refuse_always(&self, error: impl Into<String>) {
        self.refuse(usize::MAX, error);
    }

    /// Forgets the script: commands are answered as the topology says.
    pub fn serve(&self) {
        self.lock_script().clear();
    }

    /// Every command the node received so far, in the order it answered them.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock_seen().clone()
    }

    /// The commands with keys among [`seen`](Self::seen).
    pub fn keyed(&self) -> Vec<Seen> {
        let seen = self.state.lock_seen();
        seen.iter().filter(|s| s.slot.is_some()).cloned().collect()
    }

    fn lock_script(&self) -> MutexGuard<'_, VecDeque<Refusal>> {
        self.state.lock_script()
    }
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl NodeState {
    pub(super) fn new(index: usize, topology: Arc<Topology>, server_port: u16) -> Self {
        Self {
            index,
            topology,
            server_port,
            script: Mutex::default(),
            seen: Mutex::default(),
            connections: AtomicU64::new(0),
        }
    }

    /// The error a command for `slot` gets instead of being served: the
    /// script's next, else `MOVED` when the topology gives the slot to
    /// another node and the command does not come after `ASKING`.
    pub(super) fn refusal(&self, slot: u16, after_asking: bool) -> Option<String> {
        if let Some(error) = self.next_scripted() {
            return Some(error);
        }
        let owner = self.topology.owner(slot);
        (owner != self.index && !after_asking)
            .then(|| format!("MOVED {slot} 127.0.0.1:{}", self.topology.port(owner)))
    }

    fn next_scripted(&self) -> Option<String> {
        let mut script = self.lock_script();
        let next = script.front_mut()?;
        let error = next.error.clone();
        next.times -= 1;
        if next.times == 0 {
            script.pop_front();
        }
        Some(error)
    }

    pub(super) fn record(&self, seen: Seen) {
        self.lock_seen().push(seen);
    }

    fn lock_script(&self) -> MutexGuard<'_, VecDeque<Refusal>> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_seen(&self) -> MutexGuard<'_, Vec<Seen>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

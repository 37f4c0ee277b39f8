//! Commands on a Redis Cluster, routed by this crate: the slot map (read
//! with `CLUSTER SLOTS`), one multiplexed connection per primary, and the
//! cluster's redirects and "not now"s followed until the command timeout.
//!
//! Why not redis-rs's cluster connection: under live resharding its
//! slot-map refresh after a `MOVED` can stall, and every command on that
//! connection then waits out its timeout (docs/backends.md, "Redis
//! Cluster"). Here a `MOVED` moves its slot in the map at once and the
//! whole map is read again in the background; only a command sent back to
//! a node it left (the nodes disagree for a moment on who serves its slot)
//! waits, for them to agree. An `ASK` sends `ASKING` and the command
//! together, as one write, so no other command on the connection can come
//! between them.
//!
//! `route` says where a command goes; `send` follows its redirects and
//! "not now"s until its deadline, and `out_of_time` words the error of a
//! command past it; `node` holds each node's connection, `probe` a node
//! known to be down, `map` the slot map read again, and `client` how a
//! node is reached.

mod client;
mod map;
mod node;
mod out_of_time;
mod probe;
mod route;
mod send;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use futures_util::future::join_all;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};

use self::client::read_slot_map;
use self::node::{is_connection_error, Node};
use self::route::{route, Route};
use crate::connection::library::Library;
use crate::connection::slot_map::{Address, SlotMap};
use crate::connection::watched::Watched;

pub(crate) use self::client::ClusterClient;
pub(crate) use self::out_of_time::is_cluster_down;

/// The function libraries to load on every new node connection, shared with
/// the backend, which registers them.
pub(crate) type Functions = Arc<Mutex<Vec<Library>>>;

/// A connection to a whole cluster: cheap to clone (clones share it).
#[derive(Clone)]
pub(crate) struct ClusterConnection {
    inner: Arc<Inner>,
}

struct Inner {
    client: Arc<ClusterClient>,
    functions: Functions,
    /// The commands the backend watches for, asked on each new node
    /// connection.
    watched: Watched,
    map: RwLock<SlotMap>,
    nodes: Mutex<HashMap<Address, Arc<Node>>>,
    /// When the slot map was last read: one read at a time.
    last_refresh: tokio::sync::Mutex<Option<Instant>>,
}

/// Whether a command follows an `ASK` (a slot half-way through a
/// migration) to the slot's new node, sent there after `ASKING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    Follow,
    /// The `ASK` is the caller's answer: for a call whose other keys lie in
    /// other slots, which `ASKING` would let the new node take as its own
    /// while they still live on their old one.
    Refuse,
}

impl ClusterConnection {
    /// Reads the slot map from a seed, then connects to every primary
    /// (loading `functions` on each, and asking for every command in
    /// `watched`); a primary that cannot be reached now is tried again by
    /// the first command for its slots.
    pub(crate) async fn connect(
        client: Arc<ClusterClient>,
        functions: Functions,
        watched: Watched,
    ) -> RedisResult<Self> {
        let mut last_error = None;
        let mut map = None;
        for seed in client.seed_addresses() {
            match read_slot_map(&client, &seed).await {
                Ok(read) => {
                    map = Some(read);
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let Some(map) = map else {
            return Err(last_error.unwrap_or_else(|| {
                RedisError::from((ErrorKind::InvalidClientConfig, "no TCP seed node"))
            }));
        };
        let primaries = map.primaries.clone();
        let conn = Self {
            inner: Arc::new(Inner {
                client,
                functions,
                watched,
                map: RwLock::new(map),
                nodes: Mutex::new(HashMap::new()),
                last_refresh: tokio::sync::Mutex::new(Some(Instant::now())),
            }),
        };
        // A primary that fails now is marked down, and its probe takes over.
        let _ = join_all(primaries.iter().map(|p| conn.inner.connection(p))).await;
        Ok(conn)
    }

    /// Which primary serves `slot` now, as an index that names it while the
    /// slot map stands ([`u16::MAX`] when none does).
    pub(crate) fn node_of(&self, slot: u16) -> u16 {
        self.inner.read_map().owner_index(slot)
    }

    /// The error of a command on `slot` while the node that serves it is
    /// known to be down (its circuit is open); `None` otherwise.
    pub(crate) fn node_down(&self, slot: u16) -> Option<RedisError> {
        let node = self.inner.read_map().owner(slot).cloned()?;
        let state = self.inner.known_node(&node)?;
        state
            .circuit
            .is_open()
            .then(|| self.inner.down(&node, &state))
    }

    /// Sends `cmd` to the node of its first key (`FCALL`: of its first
    /// key argument), following redirects (an `ASK` as `ask` says) and
    /// loading the registered libraries again on a node that lost them; a
    /// keyless command in [`KEYLESS`](route::KEYLESS) goes to every primary.
    pub(crate) async fn send(&self, cmd: &Cmd, ask: Ask) -> RedisResult<Value> {
        match route(cmd) {
            Route::Slot(slot) => self.inner.send_to_slot(slot, cmd, ask).await,
            Route::Primaries => self.inner.send_to_primaries(cmd).await,
        }
    }
}

impl Inner {
    /// Every primary of the map gets `cmd`; the first reply is the answer,
    /// or the first error when none answers.
    async fn send_to_primaries(self: &Arc<Self>, cmd: &Cmd) -> RedisResult<Value> {
        let primaries = self.read_map().primaries.clone();
        let sends = primaries.iter().map(|p| self.send_to(p, cmd, false, None));
        let mut first_error = None;
        let mut first_reply = None;
        for result in join_all(sends).await {
            match result {
                Ok(reply) => {
                    first_reply.get_or_insert(reply);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (first_reply, first_error) {
            // Every primary needs a library: a failed load is an error.
            (_, Some(e)) if is_function_load(cmd) && !is_connection_error(&e) => Err(e),
            (Some(reply), _) => Ok(reply),
            (None, Some(e)) => Err(e),
            (None, None) => Err(RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "the slot map names no primary",
            ))),
        }
    }
}

fn is_function_load(cmd: &Cmd) -> bool {
    cmd.args_iter().next().is_some_and(
        |arg| matches!(arg, redis::Arg::Simple(name) if name.eq_ignore_ascii_case(b"FUNCTION")),
    )
}

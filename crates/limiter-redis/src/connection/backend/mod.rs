//! [`RedisBackend`]: the connection layer every limiter of an application
//! shares.
//!
//! A few multiplexed connections (one by default) carry every decision:
//! each pipelines any number of in-flight requests on one socket, so no
//! caller ever waits for another caller's connection, and a healthy server
//! answers each within its command latency. A [`Circuit`] answers every
//! caller at once while the server is known to be down; one background
//! probe at a time brings the backend back.
//!
//! `query` is a command's path (its attempts, a lost connection replaced,
//! a missing library loaded again); `connection_slot` holds each
//! connection, `open` makes one, and `probe` ends an outage.

mod connection_slot;
mod open;
mod probe;
mod query;
mod watched_command;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redis::{AsyncConnectionConfig, Client};

use self::connection_slot::{Connection, ConnectionSlot};
use crate::connection::circuit::Circuit;
use crate::connection::cluster::{ClusterClient, Functions};
use crate::connection::library::Library;
use crate::connection::runtime::Runtime;
use crate::connection::watched::{Watched, WatchedCommand};
use crate::error::{BackendError, BackendErrorKind};

/// A handle on one Redis server, shared by every [`RedisLimiter`](crate::RedisLimiter)
/// of an application: build it once, clone it freely (clones share the
/// connections).
///
/// ```no_run
/// use limiter_core::{Policy, Rate};
/// use limiter_redis::{RedisBackend, RedisLimiter};
///
/// # async fn run() -> Result<(), limiter_core::Error> {
/// let redis = RedisBackend::builder("redis://127.0.0.1:6379/").build().await?;
/// let login = RedisLimiter::builder(&redis, Policy::sliding_log(Rate::per_minute(10))?)
///     .build()
///     .await?;
/// let api = RedisLimiter::builder(&redis, Policy::token_bucket(Rate::per_second(100))?)
///     .build()
///     .await?;
/// # let _ = (login, api);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    shared: Arc<Shared>,
}

/// What every clone of a [`RedisBackend`] shares.
pub(crate) struct Shared {
    connector: Connector,
    /// The URL without its password, for messages.
    url: String,
    connection_timeout: Duration,
    command_timeout: Duration,
    probe_interval: Duration,
    connection_slots: Box<[ConnectionSlot]>,
    next_socket: AtomicUsize,
    next_connection_id: AtomicU64,
    circuit: Circuit,
    /// Set once the server turns out to be a Redis Cluster node, which a
    /// single-server backend must not use (it would be redirected for most
    /// keys): every call then fails at once with this configuration error,
    /// for the backend's life.
    refusal: OnceLock<BackendError>,
    /// Every function library a limiter of this backend uses: loaded on each new
    /// connection, since a new connection often means a restarted server
    /// (on a cluster: on each new node connection).
    functions: Functions,
    /// The commands limiters watch for, asked on each new connection (on
    /// a cluster: on each new node connection).
    watched: Watched,
    /// Where calls from outside any Tokio runtime run.
    runtime: Runtime,
}

/// How connections are made: to one server, or to a cluster.
#[allow(clippy::large_enum_variant)] // one per backend, built once, never moved after
pub(crate) enum Connector {
    /// One server (or a proxy in front of several).
    Server {
        client: Client,
        config: AsyncConnectionConfig,
    },
    /// A Redis Cluster: one connection per primary, commands routed by
    /// their key's slot, `MOVED`/`ASK`/`TRYAGAIN`/`CLUSTERDOWN` followed
    /// until the command timeout (see `cluster/send.rs`).
    Cluster(Arc<ClusterClient>),
}

/// What a [`RedisBackend`] keeps of its builder's options.
pub(crate) struct BackendOptions {
    pub(crate) connections: usize,
    pub(crate) connection_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) probe_interval: Duration,
}

impl RedisBackend {
    /// The backend of `connector`, `url` (without its password) for
    /// messages, with `options`.
    pub(crate) fn new(connector: Connector, url: String, options: BackendOptions) -> Self {
        let connection_slots = (0..options.connections)
            .map(|_| ConnectionSlot {
                current: Mutex::new(None),
                reconnecting: tokio::sync::Mutex::new(()),
            })
            .collect();
        Self {
            shared: Arc::new(Shared {
                connector,
                url,
                connection_timeout: options.connection_timeout,
                command_timeout: options.command_timeout,
                probe_interval: options.probe_interval,
                connection_slots,
                next_socket: AtomicUsize::new(0),
                next_connection_id: AtomicU64::new(0),
                circuit: Circuit::default(),
                refusal: OnceLock::new(),
                functions: Functions::default(),
                watched: Watched::default(),
                runtime: Runtime::new(),
            }),
        }
    }

    /// The server's URL, without its password.
    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// Whether this is a Redis Cluster backend ([`RedisBackend::cluster`]).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.shared.connector, Connector::Cluster(_))
    }

    /// On a cluster, which primary serves `slot` now, as an index that names
    /// it while the backend's slot map stands; `None` on one server, or
    /// before the cluster is connected. A hint for grouping decisions: a
    /// command that reaches the wrong node is redirected.
    pub(crate) fn node_of(&self, slot: u16) -> Option<u16> {
        match self.shared.connection_slots.first()?.current()?.conn {
            Connection::Cluster(conn) => Some(conn.node_of(slot)),
            Connection::Server(_) => None,
        }
    }

    /// The answer a decision on `slot` gets at once, with no round trip,
    /// while its server is known to be down (the circuit is open; on a
    /// cluster, the circuit of the node that serves `slot`) or the backend
    /// refuses to serve; `None` while it may be sent.
    pub(crate) fn known_down(&self, slot: u16) -> Option<BackendError> {
        if let Some(answer) = self.shared.answer_at_once() {
            return Some(answer);
        }
        match self.shared.connection_slots.first()?.current()?.conn {
            Connection::Cluster(conn) => conn.node_down(slot).map(|e| self.shared.failed(e)),
            Connection::Server(_) => None,
        }
    }

    /// Whether the backend is serving decisions: `false` while Redis is
    /// known to be down (every decision then fails at once, and a probe
    /// checks the server every [`probe_interval`](crate::RedisBackendBuilder::probe_interval)).
    pub fn is_available(&self) -> bool {
        !self.shared.circuit.is_open()
    }

    /// Checks that Redis answers (`PING`), within the timeouts.
    pub async fn ping(&self) -> Result<(), limiter_core::Error> {
        self.query(&redis::cmd("PING"), None)
            .await
            .map(drop)
            .map_err(Into::into)
    }

    /// Opens every connection now, within the timeouts (each connection:
    /// the connection timeout plus the command timeout), so that the first
    /// decisions do not pay for it; fails if Redis cannot be reached.
    /// [`RedisBackendBuilder::build`](crate::RedisBackendBuilder::build) does this; a backend from
    /// [`build_lazy`](crate::RedisBackendBuilder::build_lazy) connects on first
    /// use otherwise.
    pub async fn connect(&self) -> Result<(), limiter_core::Error> {
        if self.shared.runtime.is_here() {
            return Ok(self.connect_here().await?);
        }
        let backend = self.clone();
        let call = self
            .shared
            .runtime
            .spawn(async move { backend.connect_here().await })?;
        Ok(call.await.unwrap_or_else(|_| Err(Runtime::gone()))?)
    }

    /// [`connect`](Self::connect), on the caller's runtime.
    async fn connect_here(&self) -> Result<(), BackendError> {
        for connection_slot in self.shared.connection_slots.iter() {
            connection_slot.live(&self.shared, None).await?;
        }
        Ok(())
    }

    /// The budget of one command ([`RedisBackendBuilder::command_timeout`](crate::RedisBackendBuilder::command_timeout)).
    pub(crate) fn command_timeout(&self) -> Duration {
        self.shared.command_timeout
    }

    /// Where calls from outside any Tokio runtime run.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.shared.runtime
    }

    /// Adds `function` to the libraries loaded on every new connection,
    /// without loading it now: the first call that finds it missing loads
    /// it (a limiter's policies changed while it serves).
    pub(crate) fn remember(&self, function: &Library) {
        let mut functions = self.shared.lock_functions();
        if !functions.iter().any(|f| f.name() == function.name()) {
            functions.push(function.clone());
        }
    }

    /// Adds `function` to the libraries loaded on every new connection, and
    /// loads it now unless Redis is down (libraries are server-wide: one load
    /// serves every connection to the server). Fails only if Redis refuses
    /// the library (e.g. a server older than Redis 7.0, which has no
    /// `FUNCTION LOAD`) or the backend's configuration (its credentials):
    /// then it is not kept either.
    pub(crate) async fn register(&self, function: &Library) -> Result<(), BackendError> {
        {
            let mut functions = self.shared.lock_functions();
            if functions.iter().any(|f| f.name() == function.name()) {
                return Ok(());
            }
            functions.push(function.clone());
        }
        match self.query(&function.load_command(), None).await {
            Ok(_) => Ok(()),
            // Redis is down, or full: the connection that ends the outage,
            // or the first call that finds the function missing, loads it.
            Err(e) if e.is_outage() || e.is_out_of_memory() => Ok(()),
            Err(e) => {
                self.shared
                    .lock_functions()
                    .retain(|f| f.name() != function.name());
                if e.kind() == BackendErrorKind::Config {
                    // Not a refusal of the library: of the backend's
                    // credentials, or nothing could ask (no runtime).
                    return Err(e);
                }
                Err(e.with_message(format!(
                    "Redis at {} refused the limiter's function library (FUNCTION LOAD; \
                     limiter-redis needs Redis 7.0 or later, and an ACL allowing FUNCTION \
                     and FCALL)",
                    self.shared.url
                )))
            }
        }
    }
}

impl Shared {
    /// The configuration error of a single-server backend pointed at a
    /// Redis Cluster node, which told so by `evidence`.
    fn cluster_node(&self, evidence: &str) -> BackendError {
        BackendError::config(format!(
            "Redis at {} is a Redis Cluster node ({evidence}): a single-server backend would \
             be redirected (MOVED) for the keys of every other node; build the backend with \
             RedisBackend::cluster([seed URLs]) instead",
            self.url
        ))
    }

    /// Keeps `refusal` (the first one) as every later call's answer, and
    /// returns it.
    fn refuse(&self, refusal: BackendError) -> BackendError {
        self.refusal.get_or_init(|| refusal).clone()
    }

    /// The connection slot for the next command, by its index: round robin.
    fn pick(&self) -> usize {
        match self.connection_slots.len() {
            1 => 0,
            n => self.next_socket.fetch_add(1, Ordering::Relaxed) % n,
        }
    }

    fn lock_functions(&self) -> std::sync::MutexGuard<'_, Vec<Library>> {
        self.functions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_watched(&self) -> std::sync::MutexGuard<'_, Vec<WatchedCommand>> {
        self.watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What went wrong, for the circuit's messages (which name the server
/// already): the client's own error when there is one.
fn cause(error: &BackendError) -> String {
    use std::error::Error as _;
    match error.source() {
        Some(source) => source.to_string(),
        None => error.to_string(),
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = &self.shared;
        f.debug_struct("RedisBackend")
            .field("url", &shared.url)
            .field("connections", &shared.connection_slots.len())
            .field("connection_timeout", &shared.connection_timeout)
            .field("command_timeout", &shared.command_timeout)
            .field("probe_interval", &shared.probe_interval)
            .field("available", &!shared.circuit.is_open())
            .finish_non_exhaustive()
    }
}

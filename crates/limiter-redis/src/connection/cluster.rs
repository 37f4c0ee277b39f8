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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::{ConnectionLike as _, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError,
    RedisResult, RetryMethod, Value,
};

use crate::connection::circuit::{Circuit, ProbeTurn};
use crate::connection::library::Library;
use crate::connection::runtime::within;
use crate::connection::slot_map::{slot_of, Address, SlotMap};
use crate::error::is_out_of_memory;

/// The first wait before a command goes again to a node it went to
/// already (the cluster refused it for now, `TRYAGAIN` or `CLUSTERDOWN`, or
/// its nodes sent it back and forth), doubling each time up to sixteen
/// times this, until the command's deadline.
const RETRY_WAIT: Duration = Duration::from_millis(10);

/// Commands whose first argument is not a key: sent to every primary (the
/// first reply is the answer), such as `FUNCTION LOAD`, which each
/// primary needs. (A command without arguments goes to every primary too.)
const KEYLESS: [&str; 3] = ["PING", "FUNCTION", "SCRIPT"];

/// The function libraries to load on every new node connection, shared with
/// the backend, which registers them.
pub(crate) type Functions = Arc<Mutex<Vec<Library>>>;

/// How to reach the cluster's nodes: the seeds, and the settings of every
/// node's connection (user, password, TLS, timeouts) taken from them.
pub(crate) struct ClusterClient {
    seeds: Vec<ConnectionInfo>,
    config: AsyncConnectionConfig,
    /// How often the slot map is read again at most after a node failed.
    refresh_interval: Duration,
    /// The budget of one command, its retries included.
    command_timeout: Duration,
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    tls: Option<redis::TlsCertificates>,
}

impl ClusterClient {
    pub(crate) fn new(
        seeds: Vec<ConnectionInfo>,
        config: AsyncConnectionConfig,
        refresh_interval: Duration,
        command_timeout: Duration,
    ) -> Self {
        Self {
            seeds,
            config,
            refresh_interval,
            command_timeout,
            #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
            tls: None,
        }
    }

    /// Connections to every node trust `root` (PEM) instead of the platform's roots.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn with_tls(mut self, certificates: redis::TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
    }

    /// A client for the node at `host:port`, with the seeds' settings.
    fn node_client(&self, host: &str, port: u16) -> RedisResult<Client> {
        let template = &self.seeds[0];
        let addr = match template.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let info = template.clone().set_addr(addr);
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        if let Some(certificates) = &self.tls {
            return Client::build_with_tls(info, certificates.clone());
        }
        Client::open(info)
    }

    /// Each seed's `host:port`.
    fn seed_addresses(&self) -> Vec<Address> {
        self.seeds
            .iter()
            .filter_map(|seed| match seed.addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    Some(Address::new(host, *port))
                }
                _ => None,
            })
            .collect()
    }
}

/// One node's connection, made by one caller at a time.
#[derive(Default)]
struct Node {
    /// The connection and its number (so that a failure forgets only the
    /// connection it happened on, never its replacement).
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Connections made so far: the next one's number.
    made: std::sync::atomic::AtomicU64,
    connecting: tokio::sync::Mutex<()>,
    /// Open while the node is known to be down (it timed out, or could
    /// not be reached): its commands then fail at once, and one background
    /// probe checks it every refresh interval. The backend's own circuit,
    /// per node.
    circuit: Circuit,
}

/// A connection to a whole cluster: cheap to clone (clones share it).
#[derive(Clone)]
pub(crate) struct ClusterConnection {
    inner: Arc<Inner>,
}

struct Inner {
    client: Arc<ClusterClient>,
    functions: Functions,
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

/// Who waits for a node's connection while another caller makes it.
#[derive(Debug, Clone, Copy)]
enum Waiter {
    /// A command, until `deadline` if it has one; it fails at once if the
    /// node was found down meanwhile (connecting again would only wait on
    /// the node once more).
    Command { deadline: Option<Instant> },
    /// The probe, a slot-map read, the first connections: as long as the
    /// connection takes, even to a node known to be down.
    Connector,
}

/// Where the next attempt of a command goes.
enum Target {
    /// The slot's primary in the map.
    Owner,
    /// `ASK`: the node the slot is migrating to, for this one command.
    Asking(Address),
}

impl ClusterConnection {
    /// Reads the slot map from a seed, then connects to every primary
    /// (loading `functions` on each); a primary that cannot be reached now
    /// is tried again by the first command for its slots.
    pub(crate) async fn connect(
        client: Arc<ClusterClient>,
        functions: Functions,
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

    /// Sends `cmd` to the node of its first key (`FCALL`: of its first
    /// key argument), following redirects (an `ASK` as `ask` says); a
    /// keyless command in [`KEYLESS`] goes to every primary.
    pub(crate) async fn send(&self, cmd: &Cmd, ask: Ask) -> RedisResult<Value> {
        match route(cmd) {
            Route::Slot(slot) => self.inner.send_to_slot(slot, cmd, ask).await,
            Route::Primaries => self.inner.send_to_primaries(cmd).await,
        }
    }
}

impl Inner {
    /// Sends `cmd` to `slot`'s primary, following the cluster's redirects
    /// and waiting out its "not now"s until the command's deadline (its
    /// start plus the command timeout), which ends the command whatever
    /// the cluster answers.
    async fn send_to_slot(self: &Arc<Self>, slot: u16, cmd: &Cmd, ask: Ask) -> RedisResult<Value> {
        let timeout = self.client.command_timeout;
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::until(deadline);
        let mut target = Target::Owner;
        let mut reconnected = false;
        // The nodes this command went to: one it goes back to waits first.
        let mut tried: Vec<Address> = Vec::new();
        loop {
            let node = match &target {
                Target::Owner => match self.owner(slot) {
                    Ok(owner) => owner,
                    Err(error) => {
                        // No primary served the slot when the map was read
                        // (a cluster still being created, slots being
                        // covered again): read it again, in the background,
                        // at most once per refresh interval; without this
                        // the slot failed until the process restarted.
                        self.refresh_in_background();
                        return Err(error);
                    }
                },
                Target::Asking(node) => node.clone(),
            };
            let asking = matches!(target, Target::Asking(_));
            let sent = if tried.is_empty() && self.answers_at_once(&node) {
                // Its connection's own timeout is the command's.
                self.send_to(&node, cmd, asking, Some(deadline)).await
            } else {
                // A later attempt, or one that must connect first.
                self.retry_within(deadline, &node, cmd, asking).await
            };
            let error = match sent {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            if !tried.contains(&node) {
                tried.push(node.clone());
            }
            let redirect = error
                .redirect_node()
                .and_then(|(address, _)| Address::parse(address));
            let method = error.retry_method();
            if matches!(method, RetryMethod::AskRedirect) && ask == Ask::Refuse {
                return Err(error);
            }
            if Instant::now() >= deadline {
                return Err(out_of_time(timeout, error));
            }
            target = match (method, redirect) {
                (RetryMethod::MovedRedirect, Some(owner)) => {
                    let bounced = tried.contains(&owner);
                    self.write_map().assign(slot, owner);
                    if bounced {
                        // Sent back to a node it left: the nodes disagree
                        // on who serves the slot (a migration's last step
                        // reaches them one at a time). Wait for them to
                        // agree, as for `TRYAGAIN`, then read the map.
                        if !backoff.wait().await || !self.refresh_within(deadline).await {
                            return Err(out_of_time(timeout, error));
                        }
                    } else {
                        self.refresh_in_background();
                    }
                    Target::Owner
                }
                (RetryMethod::AskRedirect, Some(node)) => {
                    if tried.contains(&node) && !backoff.wait().await {
                        return Err(out_of_time(timeout, error));
                    }
                    Target::Asking(node)
                }
                (RetryMethod::WaitAndRetry, _) => {
                    if !backoff.wait().await {
                        return Err(out_of_time(timeout, error));
                    }
                    Target::Owner
                }
                (RetryMethod::RefreshSlotsAndRetry, _) => {
                    if !self.refresh_within(deadline).await
                        || (self.owner(slot).ok().as_ref() == Some(&node) && !backoff.wait().await)
                    {
                        return Err(out_of_time(timeout, error));
                    }
                    Target::Owner
                }
                _ if error.is_timeout() => {
                    // A hung node (now marked down by `send_to`): a
                    // failover may be under way.
                    self.refresh_in_background();
                    return Err(error);
                }
                _ if is_connection_error(&error) => {
                    // A dropped connection to a live node (dropped by
                    // `send_to`): once more on a new one. A node that
                    // refuses: the map may have moved on (a failover),
                    // else the error is the caller's.
                    if !reconnected && error.is_connection_dropped() {
                        reconnected = true;
                    } else {
                        if !self.refresh_within(deadline).await {
                            return Err(error);
                        }
                        let owner = self.owner(slot).ok();
                        if owner.as_ref() == Some(&node) {
                            return Err(error);
                        }
                        let back = owner.is_some_and(|owner| tried.contains(&owner));
                        if back && !backoff.wait().await {
                            return Err(error);
                        }
                    }
                    Target::Owner
                }
                _ => return Err(error),
            };
        }
    }

    /// Whether a command's first attempt on `node` needs no connection made
    /// for it: the node has one, or is known to be down (answered at once).
    fn answers_at_once(&self, node: &Address) -> bool {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes
            .get(node)
            .is_some_and(|state| state.circuit.is_open() || state.current().is_some())
    }

    /// A retry of `cmd` on `node`, waited for until `deadline` (the first
    /// attempt's start plus the command timeout). A retry starts late, so
    /// its connection's own timeout would run past the deadline; it runs on
    /// a task of its own instead, and past the deadline the caller is told
    /// of a timeout while the attempt goes on to its own timeout, which
    /// marks a hung node down as a first attempt's does (cancelling it
    /// would not).
    async fn retry_within(
        self: &Arc<Self>,
        deadline: Instant,
        node: &Address,
        cmd: &Cmd,
        asking: bool,
    ) -> RedisResult<Value> {
        let (inner, node, cmd) = (Arc::clone(self), node.clone(), cmd.clone());
        let attempt = async move { inner.send_to(&node, &cmd, asking, None).await };
        within(deadline, attempt)
            .await
            .unwrap_or_else(|| Err(past_deadline(self.client.command_timeout)))
    }

    /// [`refresh`](Self::refresh) for a command's retry, waited for until
    /// `deadline` (it goes on past it in the background); whether it was done.
    async fn refresh_within(self: &Arc<Self>, deadline: Instant) -> bool {
        let inner = Arc::clone(self);
        within(deadline, async move { inner.refresh().await })
            .await
            .is_some()
    }

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

    /// One attempt on `node`, after `ASKING` when `asking` (sent together);
    /// at once an error while the node is known to be down. A wait for
    /// another caller's connection to the node ends at `deadline`, if given.
    async fn send_to(
        self: &Arc<Self>,
        node: &Address,
        cmd: &Cmd,
        asking: bool,
        deadline: Option<Instant>,
    ) -> RedisResult<Value> {
        let state = self.node(node);
        if state.circuit.is_open() {
            return Err(self.down(node, &state));
        }
        let mut used = None;
        let result = async {
            let waiter = Waiter::Command { deadline };
            let (id, mut conn) = self.numbered_connection(node, waiter).await?;
            used = Some(id);
            let reply = if asking {
                let mut pipeline = redis::pipe();
                pipeline.cmd("ASKING").add_command(cmd.clone());
                conn.req_packed_commands(&pipeline, 1, 1)
                    .await?
                    .pop()
                    .unwrap_or(Value::Nil)
            } else {
                conn.req_packed_command(cmd).await?
            };
            reply.extract_error()
        }
        .await;
        if let (Err(e), Some(id)) = (&result, used) {
            self.failed_on(node, &state, id, e);
        }
        result
    }

    /// After `error` on `node`'s connection `id`: a lost or hung connection
    /// is dropped if it is still the current one, and a hung one marks the
    /// node down. A connection already replaced says nothing of the node
    /// now (a late timeout after the probe's new connection).
    fn failed_on(self: &Arc<Self>, node: &Address, state: &Node, id: u64, error: &RedisError) {
        if (error.is_timeout() || is_connection_error(error))
            && self.forget_if(node, id)
            && error.is_timeout()
        {
            self.mark_down(node, state, error);
        }
    }

    /// The error of a command to `node` while it is known to be down, with
    /// its probe made sure of.
    fn down(self: &Arc<Self>, node: &Address, state: &Node) -> RedisError {
        self.ensure_probe(node, state);
        let (ago, cause) = state
            .circuit
            .outage()
            .map(|o| (o.since.elapsed(), o.cause))
            .unwrap_or_default();
        RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!(
                "Redis Cluster node {}:{} down for {}ms ({cause}); probing every {:?}",
                node.host,
                node.port,
                ago.as_millis(),
                self.client.refresh_interval
            ),
        ))
    }

    /// `node`'s state, made on first use.
    fn node(&self, node: &Address) -> Arc<Node> {
        Arc::clone(
            self.nodes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(node.clone())
                .or_default(),
        )
    }

    /// `node`'s connection, made now if there is none: connected, and
    /// every registered library loaded, within the client's timeouts. A
    /// node that cannot be reached is marked down.
    async fn connection(self: &Arc<Self>, node: &Address) -> RedisResult<MultiplexedConnection> {
        self.numbered_connection(node, Waiter::Connector)
            .await
            .map(|(_, conn)| conn)
    }

    /// [`connection`](Self::connection), with its number.
    async fn numbered_connection(
        self: &Arc<Self>,
        node: &Address,
        waiter: Waiter,
    ) -> RedisResult<(u64, MultiplexedConnection)> {
        let state = self.node(node);
        if let Some(conn) = state.current() {
            return Ok(conn);
        }
        let turn = state.connecting.lock();
        let _turn = match waiter {
            Waiter::Command {
                deadline: Some(deadline),
            } => tokio::time::timeout_at(deadline.into(), turn)
                .await
                .map_err(|_| past_deadline(self.client.command_timeout))?,
            _ => turn.await,
        };
        if let Some(conn) = state.current() {
            return Ok(conn);
        }
        if matches!(waiter, Waiter::Command { .. }) && state.circuit.is_open() {
            return Err(self.down(node, &state));
        }
        let opened = async {
            let client = self.client.node_client(&node.host, node.port)?;
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&self.client.config)
                .await?;
            let functions = self
                .functions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            for function in &functions {
                let loaded = conn
                    .req_packed_command(&function.load_command())
                    .await?
                    .extract_error();
                match loaded {
                    // A full node refuses the load, but answers (see
                    // `backend.rs`): a call that finds it missing loads it.
                    Err(e) if is_out_of_memory(&e) => {}
                    loaded => drop(loaded?),
                }
            }
            Ok::<_, RedisError>(conn)
        }
        .await;
        match opened {
            Ok(conn) => {
                let id = state
                    .made
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                *state.current.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((id, conn.clone()));
                Ok((id, conn))
            }
            Err(e) => {
                if e.is_timeout() || is_connection_error(&e) {
                    self.mark_down(node, &state, &e);
                }
                Err(e)
            }
        }
    }

    /// Marks `node` down because of `cause`, and starts its probe unless
    /// it was down already.
    fn mark_down(self: &Arc<Self>, node: &Address, state: &Node, cause: &RedisError) {
        if state.circuit.trip(cause.to_string()) {
            tracing::warn!(
                cause = %cause,
                node = %format!("{}:{}", node.host, node.port),
                "Redis Cluster node unavailable: its commands fail at once until a probe succeeds"
            );
        }
        self.ensure_probe(node, state);
    }

    /// Starts `node`'s probe unless one runs: at a trip, and whenever a
    /// command finds the node down, so that a probe lost with its runtime
    /// is replaced.
    fn ensure_probe(self: &Arc<Self>, node: &Address, state: &Node) {
        if let Some(turn) = state.circuit.probe_turn() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(probe(Arc::downgrade(self), node.clone(), turn))),
                // No runtime to probe on: the next command tries the node.
                Err(_) => drop(state.circuit.close()),
            }
        }
    }

    /// Drops `node`'s connection `id` if it is still the current one;
    /// returns whether it was.
    fn forget_if(&self, node: &Address, id: u64) -> bool {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(slot) = nodes.get(node) else {
            return false;
        };
        let mut current = slot.current.lock().unwrap_or_else(PoisonError::into_inner);
        let is_current = current.as_ref().is_some_and(|(held, _)| *held == id);
        if is_current {
            *current = None;
        }
        is_current
    }

    fn forget(&self, node: &Address) {
        if let Some(slot) = self
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
        {
            *slot.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }

    fn owner(&self, slot: u16) -> RedisResult<Address> {
        self.read_map().owner(slot).cloned().ok_or_else(|| {
            RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "no primary serves the slot",
                format!("slot {slot}"),
            ))
        })
    }

    /// Reads the slot map again unless it was read within the refresh
    /// interval (or another caller is reading it: this one then waits for
    /// that read), bounded by the command timeout.
    async fn refresh(self: &Arc<Self>) {
        let mut last = self.last_refresh.lock().await;
        if last.is_some_and(|at| at.elapsed() < self.client.refresh_interval) {
            return;
        }
        let read = tokio::time::timeout(self.client.command_timeout, self.read_slot_map()).await;
        if let Ok(Some(map)) = read {
            *self.write_map() = map;
            tracing::debug!("Redis Cluster slot map read again");
        }
        *last = Some(Instant::now());
    }

    /// [`refresh`](Self::refresh) on a task of its own, unless one is
    /// already reading the map: no caller waits for it.
    fn refresh_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.last_refresh.try_lock().is_err() {
            return;
        }
        let inner = Arc::clone(self);
        drop(runtime.spawn(async move { inner.refresh().await }));
    }

    /// The slot map from the first node that gives it: the known primaries
    /// first, then the seeds.
    async fn read_slot_map(self: &Arc<Self>) -> Option<SlotMap> {
        let mut candidates = self.read_map().primaries.clone();
        candidates.extend(self.client.seed_addresses());
        // A node known to be down would hold the read up (a hung one for
        // the timeouts): asked last.
        candidates.sort_by_key(|n| self.node(n).circuit.is_open());
        for node in candidates {
            let Ok((id, mut conn)) = self.numbered_connection(&node, Waiter::Connector).await
            else {
                continue;
            };
            let reply = conn
                .req_packed_command(redis::cmd("CLUSTER").arg("SLOTS"))
                .await
                .and_then(Value::extract_error);
            match reply {
                Ok(reply) => {
                    if let Some(map) = SlotMap::parse(&reply, &node) {
                        return Some(map);
                    }
                }
                // A hung node is marked down as a command's timeout marks
                // it: this read may be the only call that met it.
                Err(e) => self.failed_on(&node, &self.node(&node), id, &e),
            }
        }
        None
    }

    fn read_map(&self) -> std::sync::RwLockReadGuard<'_, SlotMap> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_map(&self) -> std::sync::RwLockWriteGuard<'_, SlotMap> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How a failure says the cluster as a whole refuses commands (a shard lost
/// under `cluster-require-full-coverage yes`): the failure reaches every
/// key, not one node's.
const CLUSTER_DOWN: &str = "CLUSTERDOWN";

/// Whether `error` says the whole cluster is down ([`CLUSTER_DOWN`]): the
/// server's refusal, or a command that ran out of time on it.
pub(crate) fn is_cluster_down(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(redis::ServerErrorKind::ClusterDown)
    ) || (error.is_timeout() && error.to_string().contains(CLUSTER_DOWN))
}

/// A command's deadline passed: a timeout, its retries included.
fn past_deadline(timeout: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within the command timeout ({timeout:?}), retries included"),
    ))
}

/// A command's deadline passed while the cluster redirected it or refused
/// it for now (`last`, a redirect or a "not now"): a timeout, as for a node
/// that does not answer, since no node decided it in time. Any other error
/// is told as it is.
fn out_of_time(timeout: Duration, last: RedisError) -> RedisError {
    if is_cluster_down(&last) {
        return RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer within the command timeout ({timeout:?}), retries included; \
                 {CLUSTER_DOWN}: the cluster refuses every key ({last})"
            ),
        ));
    }
    match last.retry_method() {
        RetryMethod::MovedRedirect
        | RetryMethod::AskRedirect
        | RetryMethod::WaitAndRetry
        | RetryMethod::RefreshSlotsAndRetry => RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer within the command timeout ({timeout:?}), retries included; the \
                 cluster's last: {last}"
            ),
        )),
        _ => last,
    }
}

/// The waits between a command's attempts on a node it went to already:
/// [`RETRY_WAIT`], doubling up to sixteen times that, cut at the deadline.
struct Backoff {
    next: Duration,
    deadline: Instant,
}

impl Backoff {
    fn until(deadline: Instant) -> Self {
        Self {
            next: RETRY_WAIT,
            deadline,
        }
    }

    /// Waits the next wait; whether the deadline is still ahead.
    async fn wait(&mut self) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(self.next.min(left)).await;
        self.next = (self.next * 2).min(RETRY_WAIT * 16);
        Instant::now() < self.deadline
    }
}

impl Node {
    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The background probe of a node that is down: one `PING` per refresh
/// interval, each bounded by the timeouts (a hung node costs the probe one
/// command timeout, never a caller). Ends when the node answers, when the
/// slot map no longer names it (it was failed over and is gone), or with
/// the connection.
async fn probe(inner: std::sync::Weak<Inner>, node: Address, _turn: ProbeTurn) {
    loop {
        let Some(interval) = inner.upgrade().map(|i| i.client.refresh_interval) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let state = inner.node(&node);
        let answered = match inner.connection(&node).await {
            Ok(mut conn) => conn
                .req_packed_command(&redis::cmd("PING"))
                .await
                .and_then(Value::extract_error)
                .is_ok(),
            Err(_) => false,
        };
        if answered {
            let lasted = state.circuit.close().unwrap_or_default();
            tracing::info!(
                node = %format!("{}:{}", node.host, node.port),
                outage_ms = lasted.as_millis() as u64,
                "Redis Cluster node available again"
            );
            return;
        }
        inner.forget(&node);
        if !inner.read_map().primaries.contains(&node) {
            inner
                .nodes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&node);
            return;
        }
    }
}

/// The slot map as `seed` gives it, on a connection of its own (closed after).
async fn read_slot_map(client: &ClusterClient, seed: &Address) -> RedisResult<SlotMap> {
    let mut conn = client
        .node_client(&seed.host, seed.port)?
        .get_multiplexed_async_connection_with_config(&client.config)
        .await?;
    let reply = conn
        .req_packed_command(redis::cmd("CLUSTER").arg("SLOTS"))
        .await?
        .extract_error()?;
    SlotMap::parse(&reply, seed).ok_or_else(|| {
        RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "unexpected CLUSTER SLOTS reply",
            format!("{reply:?}"),
        ))
    })
}

/// Where a command goes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Slot(u16),
    Primaries,
}

/// A command's route: `FCALL`, `EVALSHA` and `EVAL` by their first key
/// (keyless ones to every primary, like [`KEYLESS`]), any other command by
/// its first argument.
fn route(cmd: &Cmd) -> Route {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let Some(name) = args.next() else {
        return Route::Primaries;
    };
    let is = |names: &[&str]| {
        names
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
    };
    if is(&KEYLESS) {
        return Route::Primaries;
    }
    let key = if is(&["FCALL", "FCALL_RO", "EVALSHA", "EVAL"]) {
        let _script = args.next();
        let keys = args
            .next()
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok());
        match keys {
            Some(1..) => args.next(),
            _ => None,
        }
    } else {
        args.next()
    };
    match key {
        Some(key) => Route::Slot(slot_of(key)),
        None => Route::Primaries,
    }
}

/// The node is unreachable or its connection is gone.
fn is_connection_error(error: &RedisError) -> bool {
    error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_io_error()
        || error.is_unrecoverable_error()
}

fn is_function_load(cmd: &Cmd) -> bool {
    cmd.args_iter().next().is_some_and(
        |arg| matches!(arg, redis::Arg::Simple(name) if name.eq_ignore_ascii_case(b"FUNCTION")),
    )
}

#[cfg(test)]
mod tests {
    use redis::ServerErrorKind;

    use super::*;

    #[test]
    fn commands_go_to_their_first_key() {
        let mut fcall = redis::cmd("FCALL");
        fcall
            .arg("limiter_x")
            .arg(2)
            .arg("p:{u}:tb")
            .arg("p:{u}:fw")
            .arg("acquire");
        assert_eq!(route(&fcall), Route::Slot(slot_of(b"u")));
        assert_eq!(
            route(redis::cmd("SET").arg("ban:{k}").arg(1)),
            Route::Slot(slot_of(b"k"))
        );
        assert_eq!(route(redis::cmd("FCALL").arg("f").arg(0)), Route::Primaries);
        assert_eq!(route(redis::cmd("FUNCTION").arg("LOAD")), Route::Primaries);
        assert_eq!(route(&redis::cmd("PING")), Route::Primaries);
    }

    #[test]
    fn a_command_out_of_time_while_redirected_or_refused_for_now_is_a_timeout() {
        let timeout = Duration::from_millis(300);
        for kind in [ServerErrorKind::ClusterDown, ServerErrorKind::Moved] {
            let last = RedisError::from((ErrorKind::Server(kind), "the cluster's answer"));
            assert!(!last.is_timeout());
            let told = out_of_time(timeout, last);
            assert!(told.is_timeout(), "{told}");
            assert!(told.to_string().contains("the cluster's answer"), "{told}");
            assert_eq!(
                is_cluster_down(&told),
                kind == ServerErrorKind::ClusterDown,
                "{told}"
            );
        }
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let told = out_of_time(timeout, refused);
        assert!(told.is_connection_refusal() && !told.is_timeout(), "{told}");
    }
}

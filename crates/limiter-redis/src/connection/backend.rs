//! [`RedisBackend`]: the connection layer every limiter of an application
//! shares.
//!
//! A few multiplexed connections (one by default) carry every decision:
//! each pipelines any number of in-flight requests on one socket, so no
//! caller ever waits for another caller's connection, and a healthy server
//! answers each within its command latency. A [`Circuit`] answers every
//! caller at once while the server is known to be down; one background
//! probe at a time brings the backend back.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RetryMethod, Value};

use crate::connection::backend_builder::RedisBackendBuilder;
use crate::connection::circuit::{Circuit, ProbeTurn};
use crate::connection::cluster::{Ask, ClusterClient, ClusterConnection, Functions};
use crate::connection::library::Library;
use crate::connection::runtime::{within, Runtime};
use crate::error::{is_out_of_memory, BackendError, BackendErrorKind};

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
    /// Where calls from outside any Tokio runtime run.
    runtime: Runtime,
}

/// One multiplexed connection slot: the live connection, if any, and a
/// lock so that one caller at a time reconnects it.
struct ConnectionSlot {
    current: Mutex<Option<Live>>,
    reconnecting: tokio::sync::Mutex<()>,
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
    /// until the command timeout (see `cluster.rs`).
    Cluster(Arc<ClusterClient>),
}

/// A live connection and its id (so a failure retires only the connection
/// it happened on, never its replacement).
#[derive(Clone)]
struct Live {
    id: u64,
    conn: Connection,
}

/// A multiplexed connection to one server, or a cluster connection (which
/// multiplexes a connection per node). Both are cheap to clone.
#[derive(Clone)]
enum Connection {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Connection {
    async fn send(&mut self, cmd: &Cmd, ask: Ask) -> Result<Value, RedisError> {
        match self {
            Self::Server(conn) => conn.send_packed_command(cmd).await?.extract_error(),
            Self::Cluster(conn) => conn.send(cmd, ask).await,
        }
    }

    /// Whether a failed command says the connection (not one node of a
    /// cluster) is gone. A cluster connection holds one connection per node
    /// and replaces a node's by itself, reading the slot map anew after a
    /// node failed: it is never retired, and a failure of one node does not
    /// mark the whole cluster down.
    fn outlives_failures(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

impl RedisBackend {
    /// Starts building a backend for the server at `url`
    /// (`redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS
    /// with the `tls-rustls` or `tls-native-tls` feature). A Redis Cluster
    /// node there is refused as a configuration error: see
    /// [`cluster`](Self::cluster).
    pub fn builder(url: impl Into<String>) -> RedisBackendBuilder {
        RedisBackendBuilder::from_url(url.into())
    }

    /// Starts building a backend on an existing [`redis::Client`] (for
    /// connection settings this builder does not offer).
    pub fn from_client(client: Client) -> RedisBackendBuilder {
        RedisBackendBuilder::from_client(client)
    }

    /// Starts building a backend on a Redis Cluster, found from one or more
    /// seed nodes (`redis://host:port/` each; all share one user and
    /// password). Every key of a decision sits in one slot (the user key
    /// is a hash tag), so decisions are as atomic as on one server. This
    /// crate routes the commands (one connection per primary, redirects
    /// followed; see docs/backends.md, "Redis Cluster"), and loads the
    /// function libraries on each node connection as it is made.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), limiter_core::Error> {
    /// let redis = limiter_redis::RedisBackend::cluster([
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    /// ])
    /// .build()
    /// .await?;
    /// # let _ = redis;
    /// # Ok(()) }
    /// ```
    pub fn cluster<I, S>(seeds: I) -> RedisBackendBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisBackendBuilder::cluster(seeds.into_iter().map(Into::into).collect())
    }

    pub(crate) fn new(connector: Connector, url: String, options: &RedisBackendBuilder) -> Self {
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

    /// Whether the backend is serving decisions: `false` while Redis is
    /// known to be down (every decision then fails at once, and a probe
    /// checks the server every [`probe_interval`](RedisBackendBuilder::probe_interval)).
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
    /// [`RedisBackendBuilder::build`] does this; a backend from
    /// [`build_lazy`](RedisBackendBuilder::build_lazy) connects on first
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

    /// The budget of one command ([`RedisBackendBuilder::command_timeout`]).
    pub(crate) fn command_timeout(&self) -> Duration {
        self.shared.command_timeout
    }

    /// Where calls from outside any Tokio runtime run.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.shared.runtime
    }

    /// Adds `function` to the libraries loaded on every new connection, and
    /// loads it now unless Redis is down (libraries are server-wide: one load
    /// serves every connection to the server). Fails only if Redis refuses
    /// the library: then it is not kept either (e.g. a server older than
    /// Redis 7.0, which has no `FUNCTION LOAD`).
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
                    // Not Redis's refusal: nothing could ask it (no runtime).
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

    /// Runs `cmd` (an `FCALL` of `function`, if given: loaded again and
    /// retried when Redis answers that the function is not found, after a
    /// `FUNCTION FLUSH` or a restart without persistence).
    ///
    /// Fails at once while the circuit is open. A connection that turns out
    /// dead (the server restarted) is replaced and the command retried once
    /// on the new one: a restart costs no decision when the server is back
    /// by then and the reconnection and retry fit in what is left of the
    /// command timeout (else the caller is told of a timeout, and the retry
    /// goes on: see [`query_here`](Self::query_here)). A retried acquire may have reached the old server before it
    /// died; it then counts twice, which can only deny, never over-admit.
    pub(crate) async fn query(
        &self,
        cmd: &Cmd,
        function: Option<&Library>,
    ) -> Result<Value, BackendError> {
        self.query_with(cmd, function, Ask::Follow).await
    }

    /// [`query`](Self::query), on a cluster following an `ASK` as `ask`
    /// says (a refused one is the error).
    pub(crate) async fn query_with(
        &self,
        cmd: &Cmd,
        function: Option<&Library>,
        ask: Ask,
    ) -> Result<Value, BackendError> {
        if self.shared.runtime.is_here() {
            return self.query_here(cmd, function, ask).await;
        }
        let (backend, cmd, function) = (self.clone(), cmd.clone(), function.cloned());
        let call = self
            .shared
            .runtime
            .spawn(async move { backend.query_here(&cmd, function.as_ref(), ask).await })?;
        call.await.unwrap_or_else(|_| Err(Runtime::gone()))
    }

    /// [`query_with`](Self::query_with), on the caller's runtime: for a
    /// call task (`batch.rs`), always on one, which so skips the check.
    ///
    /// The deadline is the call's start plus the command timeout. The first
    /// attempt's wait for another call's connection ends at it, and its
    /// command is bound by the command timeout; a connection it has to make
    /// itself (its connection slot has none: a lazy backend's first call,
    /// a slot the probe did not refill, one whose reconnection was never started)
    /// takes up to the connection timeout and a command timeout more
    /// (docs/backends.md, under the failure table). What follows a lost
    /// connection or a missing function (a new connection and the command
    /// once more, or the library loaded and the command once more) is
    /// waited for until the deadline and goes on past it in the background
    /// ([`within`]): so a caller on a connected backend waits about one
    /// command timeout at most.
    pub(crate) async fn query_here(
        &self,
        cmd: &Cmd,
        function: Option<&Library>,
        ask: Ask,
    ) -> Result<Value, BackendError> {
        let deadline = Instant::now() + self.shared.command_timeout;
        let connection_slot = self.shared.pick();
        let first = self
            .attempt(connection_slot, cmd, function, ask, deadline, false)
            .await;
        if let Attempt::Done(result) = first {
            return result;
        }
        let (backend, cmd, function) = (self.clone(), cmd.clone(), function.cloned());
        let rest = async move {
            let function = function.as_ref();
            backend
                .finish(connection_slot, first, &cmd, function, ask, deadline)
                .await
        };
        within(deadline, rest).await.unwrap_or_else(|| {
            Err(BackendError::new(
                BackendErrorKind::Timeout,
                format!(
                    "Redis at {}: no answer within {:?}, a reconnection or reload included",
                    self.shared.url, self.shared.command_timeout
                ),
            ))
        })
    }

    /// One attempt of `cmd` on connection slot `connection_slot`
    /// (connecting it if it has no connection): done, or what to do next. A lost connection is tried
    /// again once on a new one, unless `reconnected` already.
    async fn attempt(
        &self,
        connection_slot: usize,
        cmd: &Cmd,
        function: Option<&Library>,
        ask: Ask,
        deadline: Instant,
        reconnected: bool,
    ) -> Attempt {
        let shared = &self.shared;
        if let Some(refusal) = shared.refusal.get() {
            return Attempt::Done(Err(refusal.clone()));
        }
        if shared.circuit.is_open() {
            shared.ensure_probe();
            return Attempt::Done(Err(shared.unavailable()));
        }
        let mut live = match shared.connection_slots[connection_slot]
            .live(shared, Some(deadline))
            .await
        {
            Ok(live) => live,
            Err(e) => return Attempt::Done(Err(e)),
        };
        let error = match live.conn.send(cmd, ask).await {
            Ok(reply) => return Attempt::Done(Ok(reply)),
            Err(e) => e,
        };
        if is_function_missing(&error) {
            if let Some(function) = function {
                return Attempt::Reload(live, function.clone());
            }
        }
        if live.conn.outlives_failures() {
            return Attempt::Done(Err(shared.failed(error)));
        }
        if is_redirect(&error) {
            // Only a Redis Cluster node redirects: the wrong backend for it.
            let evidence = format!("it answered {error}");
            return Attempt::Done(Err(shared.refuse(shared.cluster_node(&evidence))));
        }
        let connection_slot = &shared.connection_slots[connection_slot];
        if is_timeout(&error) {
            // A connection already replaced (the probe's, after an earlier
            // timeout) says nothing of the server now.
            if connection_slot.retire(live.id) {
                shared.trip(&format!("no answer within {:?}", shared.command_timeout));
            }
            return Attempt::Done(Err(BackendError::new(
                BackendErrorKind::Timeout,
                format!(
                    "Redis at {}: no answer within {:?}",
                    shared.url, shared.command_timeout
                ),
            )
            .with_source(error)));
        }
        if is_broken_connection(&error) {
            connection_slot.retire(live.id);
            if !reconnected {
                return Attempt::Reconnect;
            }
            shared.trip(&error.to_string());
            return Attempt::Done(Err(BackendError::new(
                BackendErrorKind::Connect,
                format!("Redis at {}: connection lost", shared.url),
            )
            .with_source(error)));
        }
        Attempt::Done(Err(BackendError::new(
            BackendErrorKind::Redis,
            format!("Redis at {}: command failed", shared.url),
        )
        .with_source(error)))
    }

    /// What follows a first attempt that was not done, to the end.
    async fn finish(
        &self,
        connection_slot: usize,
        mut next: Attempt,
        cmd: &Cmd,
        function: Option<&Library>,
        ask: Ask,
        deadline: Instant,
    ) -> Result<Value, BackendError> {
        loop {
            next = match next {
                Attempt::Done(result) => return result,
                Attempt::Reload(mut live, function) => {
                    let connection_slot = &self.shared.connection_slots[connection_slot];
                    return self
                        .shared
                        .reload_and_retry(
                            &mut live.conn,
                            live.id,
                            connection_slot,
                            cmd,
                            &function,
                            ask,
                        )
                        .await;
                }
                // The new connection is this step's own: made within its
                // timeouts, however late (the caller stopped waiting at
                // the deadline).
                Attempt::Reconnect => {
                    let far =
                        deadline + self.shared.connection_timeout + self.shared.command_timeout;
                    self.attempt(connection_slot, cmd, function, ask, far, true)
                        .await
                }
            };
        }
    }
}

/// Where a command stands after an attempt.
enum Attempt {
    Done(Result<Value, BackendError>),
    /// The connection was lost (and retired): once more on a new one.
    Reconnect,
    /// The function library is missing on this connection: load it there,
    /// and run the command once more.
    Reload(Live, Library),
}

impl Shared {
    /// A failed command, classified, with nothing retired or tripped (a
    /// cluster's: it outlives one node's failure, and reaches that node's
    /// keys alone, unless the cluster refuses every key, `CLUSTERDOWN`).
    fn failed(&self, error: RedisError) -> BackendError {
        let (kind, what) = if is_timeout(&error) {
            (BackendErrorKind::Timeout, "no answer in time")
        } else if is_broken_connection(&error) {
            (BackendErrorKind::Connect, "connection lost")
        } else {
            (BackendErrorKind::Redis, "command failed")
        };
        let whole_cluster = crate::connection::cluster::is_cluster_down(&error);
        let failed =
            BackendError::new(kind, format!("Redis at {}: {what}", self.url)).with_source(error);
        match whole_cluster {
            true => failed,
            false => failed.on_node(),
        }
    }

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

    /// The answer while the circuit is open: at once, no round trip.
    fn unavailable(&self) -> BackendError {
        let (ago, cause) = self
            .circuit
            .outage()
            .map(|o| (o.since.elapsed(), o.cause))
            .unwrap_or_default();
        BackendError::new(
            BackendErrorKind::Unavailable,
            format!(
                "Redis at {} unavailable for {}ms ({cause}); probing every {:?}",
                self.url,
                ago.as_millis(),
                self.probe_interval
            ),
        )
    }

    /// Opens the circuit and retires every connection, and makes sure a
    /// probe runs.
    fn trip(self: &Arc<Self>, cause: &str) {
        for connection_slot in self.connection_slots.iter() {
            connection_slot.clear();
        }
        if self.circuit.trip(cause) {
            tracing::warn!(
                url = %self.url,
                cause,
                "Redis unavailable: decisions fail at once until a probe succeeds"
            );
        }
        self.ensure_probe();
    }

    /// Starts the probe unless one runs: at a trip, and whenever a caller
    /// finds the circuit open, so that a probe lost with its runtime (shut
    /// down while Redis was down) is replaced by the next caller's.
    #[inline]
    fn ensure_probe(self: &Arc<Self>) {
        if let Some(turn) = self.circuit.probe_turn() {
            // Without a runtime the probe (and its turn) is dropped: the
            // next caller on one starts it.
            let _ = self.runtime.spawn(probe(Arc::downgrade(self), turn));
        }
    }

    /// Connects, checks the server answers and is no Redis Cluster node
    /// (one is a configuration error: see [`Shared::refusal`]), and loads
    /// every registered function library, all within the connection
    /// timeout plus the command timeout. A cluster connection is up once
    /// it has the slot map: it loads the libraries on every primary it
    /// reaches, and on the others when it reaches them, so a node down now
    /// does not keep it from serving the others.
    async fn open_connection(&self) -> Result<Connection, BackendError> {
        let connect = async {
            match &self.connector {
                Connector::Server { client, config } => {
                    let mut conn = client
                        .get_multiplexed_async_connection_with_config(config)
                        .await?;
                    conn.send_packed_command(&redis::cmd("PING"))
                        .await?
                        .extract_error()?;
                    if is_cluster_node(&mut conn).await? {
                        return Ok(None);
                    }
                    let functions = self.lock_functions().clone();
                    for function in &functions {
                        let loaded = conn
                            .send_packed_command(&function.load_command())
                            .await?
                            .extract_error();
                        match loaded {
                            // A full server refuses the load, but answers:
                            // the connection serves, and a call that finds
                            // the function missing loads it then.
                            Err(e) if is_out_of_memory(&e) => {}
                            loaded => drop(loaded?),
                        }
                    }
                    Ok::<_, RedisError>(Some(Connection::Server(conn)))
                }
                Connector::Cluster(client) => {
                    ClusterConnection::connect(Arc::clone(client), Arc::clone(&self.functions))
                        .await
                        .map(|conn| Some(Connection::Cluster(conn)))
                }
            }
        };
        match tokio::time::timeout(self.connection_timeout + self.command_timeout, connect).await {
            Ok(Ok(Some(conn))) => Ok(conn),
            Ok(Ok(None)) => Err(self.cluster_node("INFO cluster says cluster_enabled:1")),
            Ok(Err(e)) => Err(BackendError::new(
                BackendErrorKind::Connect,
                format!("Redis at {}: cannot connect", self.url),
            )
            .with_source(e)),
            Err(_) => Err(BackendError::new(
                BackendErrorKind::Connect,
                format!(
                    "Redis at {}: no connection within {:?}",
                    self.url,
                    self.connection_timeout + self.command_timeout
                ),
            )),
        }
    }

    /// After "function not found": loads the library on the same connection and runs
    /// the command once more.
    async fn reload_and_retry(
        self: &Arc<Self>,
        conn: &mut Connection,
        id: u64,
        connection_slot: &ConnectionSlot,
        cmd: &Cmd,
        function: &Library,
        ask: Ask,
    ) -> Result<Value, BackendError> {
        // A flush can land between the load and the run (a test flushes in
        // a loop): load again, a few times.
        let result = async {
            let mut tries = 0;
            loop {
                conn.send(&function.load_command(), Ask::Follow).await?;
                match conn.send(cmd, ask).await {
                    Err(e) if is_function_missing(&e) && tries < FUNCTION_RELOADS => {
                        tries += 1;
                    }
                    result => return result,
                }
            }
        }
        .await;
        result.map_err(|e| {
            if !conn.outlives_failures()
                && (is_timeout(&e) || is_broken_connection(&e))
                && connection_slot.retire(id)
            {
                self.trip(&e.to_string());
            }
            // Classified as any command's failure (a timeout is a timeout),
            // told as what was being done.
            let message = format!("Redis at {}: reloading the function failed", self.url);
            self.failed(e).with_message(message)
        })
    }
}

impl ConnectionSlot {
    fn current(&self) -> Option<Live> {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The live connection, connecting first if there is none (one caller
    /// connects; the others wait for it, bounded by its timeouts, and by
    /// `deadline` if given: a command's, past which the wait is a timeout).
    async fn live(
        &self,
        shared: &Arc<Shared>,
        deadline: Option<Instant>,
    ) -> Result<Live, BackendError> {
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let turn = self.reconnecting.lock();
        let _turn = match deadline {
            None => turn.await,
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), turn).await {
                Ok(turn) => turn,
                Err(_) => {
                    return Err(BackendError::new(
                        BackendErrorKind::Timeout,
                        format!(
                            "Redis at {}: no connection within {:?} (another call is connecting)",
                            shared.url, shared.command_timeout
                        ),
                    ))
                }
            },
        };
        if let Some(live) = self.current() {
            return Ok(live);
        }
        if let Some(refusal) = shared.refusal.get() {
            return Err(refusal.clone());
        }
        if shared.circuit.is_open() {
            shared.ensure_probe();
            return Err(shared.unavailable());
        }
        match shared.open_connection().await {
            Ok(conn) => Ok(self.install(shared, conn)),
            // The wrong server, not a down one: no failure policy answers it.
            Err(e) if e.kind() == BackendErrorKind::Config => Err(shared.refuse(e)),
            Err(e) => {
                shared.trip(&cause(&e));
                Err(e)
            }
        }
    }

    fn install(&self, shared: &Shared, conn: Connection) -> Live {
        let live = Live {
            id: shared.next_connection_id.fetch_add(1, Ordering::Relaxed),
            conn,
        };
        *self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(live.clone());
        live
    }

    /// Drops connection `id` if it is still the current one; returns
    /// whether it was.
    fn retire(&self, id: u64) -> bool {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let is_current = current.as_ref().is_some_and(|live| live.id == id);
        if is_current {
            *current = None;
        }
        is_current
    }

    fn clear(&self) {
        *self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }
}

/// The background probe of an outage: one attempt per interval, each
/// bounded by the timeouts; on success the connection serves connection
/// slot 0 and the circuit closes. Ends with the outage or with the backend.
async fn probe(shared: Weak<Shared>, _turn: ProbeTurn) {
    loop {
        let Some(interval) = shared.upgrade().map(|s| s.probe_interval) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match shared.open_connection().await {
            Ok(conn) => {
                shared.connection_slots[0].install(&shared, conn);
                let lasted = shared.circuit.close().unwrap_or_default();
                tracing::info!(
                    url = %shared.url,
                    outage_ms = lasted.as_millis() as u64,
                    "Redis available again"
                );
                return;
            }
            Err(e) if e.kind() == BackendErrorKind::Config => {
                // Back as a Redis Cluster node: every call is refused, at once.
                shared.refuse(e);
                shared.circuit.close();
                return;
            }
            Err(e) => {
                shared.circuit.trip(cause(&e));
                tracing::debug!(url = %shared.url, error = %limiter_core::ErrorChain(&e), "Redis probe failed");
            }
        }
    }
}

/// How many times a library is loaded again when "function not found" answers the run
/// that follows a load.
const FUNCTION_RELOADS: u32 = 3;

/// What went wrong, for the circuit's messages (which name the server
/// already): the client's own error when there is one.
fn cause(error: &BackendError) -> String {
    use std::error::Error as _;
    match error.source() {
        Some(source) => source.to_string(),
        None => error.to_string(),
    }
}

/// Whether the server is a Redis Cluster node (`INFO cluster` says
/// `cluster_enabled:1`). A server that refuses `INFO` (an ACL, a proxy)
/// is taken as one server.
async fn is_cluster_node(conn: &mut MultiplexedConnection) -> Result<bool, RedisError> {
    let Ok(info) = conn
        .send_packed_command(redis::cmd("INFO").arg("cluster"))
        .await?
        .extract_error()
    else {
        return Ok(false);
    };
    let text = match &info {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes),
        Value::VerbatimString { text, .. } => text.into(),
        _ => return Ok(false),
    };
    Ok(text.lines().any(|line| line.trim() == "cluster_enabled:1"))
}

/// A Redis Cluster redirect (`MOVED`, `ASK`).
fn is_redirect(error: &RedisError) -> bool {
    matches!(
        error.retry_method(),
        RetryMethod::MovedRedirect | RetryMethod::AskRedirect
    )
}

/// The server did not answer in time (the response timeout of the
/// connection, which is the command timeout).
fn is_timeout(error: &RedisError) -> bool {
    error.is_timeout()
}

/// `FCALL` of a function the server does not have (flushed, or lost in a
/// restart without persistence): load it and call again.
fn is_function_missing(error: &RedisError) -> bool {
    error.code() == Some("ERR")
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// The connection is dead: the command can be retried on a new one.
fn is_broken_connection(error: &RedisError) -> bool {
    error.is_connection_dropped() || error.is_io_error() || error.is_unrecoverable_error()
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

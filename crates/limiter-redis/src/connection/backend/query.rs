//! A command's path through the backend: its attempts on a connection
//! slot, a lost connection replaced and a missing function library loaded
//! again, each failure classified, all within the command's deadline.

use std::sync::Arc;
use std::time::Instant;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, RedisError, RetryMethod, Value};

use super::connection_slot::{Connection, ConnectionSlot};
use super::open::CREDENTIALS_FIX;
use super::{Connector, RedisBackend, Shared};
use crate::connection::cluster::Ask;
use crate::connection::library::{is_function_missing, Library};
use crate::connection::runtime::{within, Runtime};
use crate::error::{is_not_serving, is_refused_credentials, BackendError, BackendErrorKind};

impl RedisBackend {
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
        if let Some(answer) = shared.answer_at_once() {
            return Attempt::Done(Err(answer));
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
        let server = match &live.conn {
            // A cluster connection loads a node's lost libraries again and
            // replaces a node's connection by itself: it is never retired,
            // and a failure of one node does not mark the cluster down.
            Connection::Cluster(_) => return Attempt::Done(Err(shared.failed(error))),
            Connection::Server(server) => server,
        };
        if is_function_missing(&error) {
            if let Some(function) = function {
                return Attempt::Reload {
                    conn: server.clone(),
                    id: live.id,
                    function: function.clone(),
                };
            }
        }
        if is_redirect(&error) {
            // Only a Redis Cluster node redirects: the wrong backend for it.
            let evidence = format!("it answered {error}");
            return Attempt::Done(Err(shared.refuse(shared.cluster_node(&evidence))));
        }
        let connection_slot = &shared.connection_slots[connection_slot];
        if is_not_serving(&error) {
            // A replica (a demoted primary) or a server loading its data
            // answers every decision so: an outage, which the probe's new
            // connection ends once the address serves a writable primary.
            // The trip retires the connection after opening the circuit,
            // so a caller that finds it retired answers with the circuit
            // open.
            if connection_slot.is_current(live.id) {
                shared.trip(&error.to_string());
            }
            return Attempt::Done(Err(BackendError::new(
                BackendErrorKind::Redis,
                format!(
                    "Redis at {}: the server serves no decisions now",
                    shared.url
                ),
            )
            .with_source(error)));
        }
        if is_timeout(&error) {
            // A connection already replaced (the probe's, after an earlier
            // timeout) says nothing of the server now.
            if connection_slot.is_current(live.id) {
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
                Attempt::Reload {
                    mut conn,
                    id,
                    function,
                } => {
                    let connection_slot = &self.shared.connection_slots[connection_slot];
                    return self
                        .shared
                        .reload_and_retry(&mut conn, id, connection_slot, cmd, &function)
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
    /// The function library is missing on the server of connection `id`:
    /// load it there, and run the command once more.
    Reload {
        conn: MultiplexedConnection,
        id: u64,
        function: Library,
    },
}

impl Shared {
    /// A failed command, classified, with nothing retired or tripped. On a
    /// cluster it reaches one node's keys alone (the connection outlives
    /// one node's failure), unless the cluster refuses every key
    /// (`CLUSTERDOWN`); a node that refuses the credentials is a
    /// configuration error.
    pub(super) fn failed(&self, error: RedisError) -> BackendError {
        if is_refused_credentials(&error) {
            return BackendError::config(format!(
                "Redis at {}: a node refuses the backend's credentials: {CREDENTIALS_FIX}",
                self.url
            ))
            .with_source(error);
        }
        let (kind, what) = if is_timeout(&error) {
            (BackendErrorKind::Timeout, "no answer in time")
        } else if is_broken_connection(&error) {
            (BackendErrorKind::Connect, "connection lost")
        } else {
            (BackendErrorKind::Redis, "command failed")
        };
        let one_node = matches!(self.connector, Connector::Cluster(_))
            && !crate::connection::cluster::is_cluster_down(&error);
        let failed =
            BackendError::new(kind, format!("Redis at {}: {what}", self.url)).with_source(error);
        match one_node {
            true => failed.on_node(),
            false => failed,
        }
    }

    /// After "function not found": loads the library on the same
    /// connection and runs the command once more (a cluster connection
    /// does so on the node that answered, by itself).
    async fn reload_and_retry(
        self: &Arc<Self>,
        conn: &mut MultiplexedConnection,
        id: u64,
        connection_slot: &ConnectionSlot,
        cmd: &Cmd,
        function: &Library,
    ) -> Result<Value, BackendError> {
        // A flush can land between the load and the run (a test flushes in
        // a loop): load again, a few times.
        let result = async {
            let mut tries = 0;
            loop {
                conn.send_packed_command(&function.load_command())
                    .await?
                    .extract_error()?;
                match conn.send_packed_command(cmd).await?.extract_error() {
                    Err(e) if is_function_missing(&e) && tries < FUNCTION_RELOADS => {
                        tries += 1;
                    }
                    result => return result,
                }
            }
        }
        .await;
        result.map_err(|e| {
            if (is_timeout(&e) || is_broken_connection(&e) || is_not_serving(&e))
                && connection_slot.is_current(id)
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

/// How many times a library is loaded again when "function not found" answers the run
/// that follows a load.
const FUNCTION_RELOADS: u32 = 3;

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

/// The connection is dead: the command can be retried on a new one.
fn is_broken_connection(error: &RedisError) -> bool {
    error.is_connection_dropped() || error.is_io_error() || error.is_unrecoverable_error()
}

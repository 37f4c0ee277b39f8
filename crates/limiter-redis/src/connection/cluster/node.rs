//! One node's connection: made by one caller at a time, with the function
//! libraries loaded on it, dropped when it fails, and one attempt of a
//! command on it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use redis::aio::{ConnectionLike as _, MultiplexedConnection};
use redis::{Cmd, RedisError, RedisResult, Value};

use super::out_of_time::past_deadline;
use super::Inner;
use crate::connection::circuit::Circuit;
use crate::connection::library::Library;
use crate::connection::slot_map::Address;
use crate::connection::watched::ask_watched;
use crate::error::{is_out_of_memory, is_refused_credentials};

/// One node's connection, made by one caller at a time.
#[derive(Default)]
pub(super) struct Node {
    /// The connection and its number (so that a failure forgets only the
    /// connection it happened on, never its replacement).
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Connections made so far: the next one's number.
    made: std::sync::atomic::AtomicU64,
    connecting: tokio::sync::Mutex<()>,
    /// Open while the node is known to be down (it timed out, or could
    /// not be reached) or refuses the credentials: its commands then fail
    /// at once, and one background probe checks it every refresh
    /// interval. The backend's own circuit, per node.
    pub(super) circuit: Circuit,
}

/// Who waits for a node's connection while another caller makes it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Waiter {
    /// A command, until `deadline` if it has one; it fails at once if the
    /// node was found down meanwhile (connecting again would only wait on
    /// the node once more).
    Command { deadline: Option<Instant> },
    /// The probe, a slot-map read, the first connections: as long as the
    /// connection takes, even to a node known to be down.
    Connector,
}

impl Node {
    pub(super) fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Inner {
    /// One attempt on `node`, after `ASKING` when `asking` (sent together);
    /// at once an error while the node is known to be down. A wait for
    /// another caller's connection to the node ends at `deadline`, if given.
    pub(super) async fn send_to(
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
    /// node down first, so that a caller that finds the connection dropped
    /// answers with the node's circuit open. A connection already replaced
    /// says nothing of the node now (a late timeout after the probe's new
    /// connection).
    pub(super) fn failed_on(
        self: &Arc<Self>,
        node: &Address,
        state: &Node,
        id: u64,
        error: &RedisError,
    ) {
        if error.is_timeout() {
            if self.is_current(node, id) {
                self.mark_down(node, state, error);
                self.forget_if(node, id);
            }
        } else if is_connection_error(error) {
            self.forget_if(node, id);
        }
    }

    /// `node`'s state, made on first use.
    pub(super) fn node(&self, node: &Address) -> Arc<Node> {
        Arc::clone(
            self.nodes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(node.clone())
                .or_default(),
        )
    }

    /// `node`'s state, if a command has gone to it.
    pub(super) fn known_node(&self, node: &Address) -> Option<Arc<Node>> {
        self.nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
            .cloned()
    }

    /// `node`'s connection, made now if there is none: connected, and
    /// every registered library loaded, within the client's timeouts. A
    /// node that cannot be reached is marked down.
    pub(super) async fn connection(
        self: &Arc<Self>,
        node: &Address,
    ) -> RedisResult<MultiplexedConnection> {
        self.numbered_connection(node, Waiter::Connector)
            .await
            .map(|(_, conn)| conn)
    }

    /// [`connection`](Self::connection), with its number.
    pub(super) async fn numbered_connection(
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
            for function in &self.registered_functions() {
                let loaded = conn
                    .req_packed_command(&function.load_command())
                    .await?
                    .extract_error();
                match loaded {
                    // A full node refuses the load, but answers (see
                    // `backend/open.rs`): a call that finds it missing loads it.
                    Err(e) if is_out_of_memory(&e) => {}
                    loaded => drop(loaded?),
                }
            }
            ask_watched(&self.watched, &mut conn).await;
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
                if is_refused_credentials(&e) {
                    self.mark_misconfigured(node, &state, &e);
                } else if e.is_timeout() || is_connection_error(&e) {
                    self.mark_down(node, &state, &e);
                }
                Err(e)
            }
        }
    }

    /// Whether `node`'s connection `id` is still the current one.
    fn is_current(&self, node: &Address, id: u64) -> bool {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes.get(node).is_some_and(|slot| {
            slot.current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(|(held, _)| *held == id)
        })
    }

    /// The libraries a node connection loads, as registered now.
    pub(super) fn registered_functions(&self) -> Vec<Library> {
        self.functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Drops `node`'s connection `id` if it is still the current one.
    fn forget_if(&self, node: &Address, id: u64) {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(slot) = nodes.get(node) else {
            return;
        };
        let mut current = slot.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|(held, _)| *held == id) {
            *current = None;
        }
    }

    pub(super) fn forget(&self, node: &Address) {
        if let Some(slot) = self
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(node)
        {
            *slot.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
}

/// The node is unreachable or its connection is gone.
pub(super) fn is_connection_error(error: &RedisError) -> bool {
    error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_io_error()
        || error.is_unrecoverable_error()
}

//! A connection slot: the live connection of one of the backend's
//! multiplexed connections, if any, reconnected by one caller at a time.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, RedisError, Value};

use super::{cause, Shared};
use crate::connection::cluster::{Ask, ClusterConnection};
use crate::error::{BackendError, BackendErrorKind};

/// One multiplexed connection slot: the live connection, if any, and a
/// lock so that one caller at a time reconnects it.
pub(super) struct ConnectionSlot {
    pub(super) current: Mutex<Option<Live>>,
    pub(super) reconnecting: tokio::sync::Mutex<()>,
}

/// A live connection and its id (so a failure retires only the connection
/// it happened on, never its replacement).
#[derive(Clone)]
pub(super) struct Live {
    pub(super) id: u64,
    pub(super) conn: Connection,
}

/// A multiplexed connection to one server, or a cluster connection (which
/// multiplexes a connection per node). Both are cheap to clone.
#[derive(Clone)]
pub(super) enum Connection {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Connection {
    pub(super) async fn send(&mut self, cmd: &Cmd, ask: Ask) -> Result<Value, RedisError> {
        match self {
            Self::Server(conn) => conn.send_packed_command(cmd).await?.extract_error(),
            Self::Cluster(conn) => conn.send(cmd, ask).await,
        }
    }
}

impl ConnectionSlot {
    pub(super) fn current(&self) -> Option<Live> {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The live connection, connecting first if there is none (one caller
    /// connects; the others wait for it, bounded by its timeouts, and by
    /// `deadline` if given: a command's, past which the wait is a timeout).
    pub(super) async fn live(
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
        if let Some(answer) = shared.answer_at_once() {
            return Err(answer);
        }
        match shared.open_connection().await {
            Ok(conn) => Ok(self.install(shared, conn)),
            // The wrong credentials, not a down server: no failure policy
            // answers it, and the probe finds when the server takes them.
            Err(e) if e.is_refused_credentials() => {
                shared.trip_misconfigured(&e);
                Err(e)
            }
            // The wrong server, not a down one: no failure policy answers it.
            Err(e) if e.kind() == BackendErrorKind::Config => Err(shared.refuse(e)),
            Err(e) => {
                shared.trip(&cause(&e));
                Err(e)
            }
        }
    }

    pub(super) fn install(&self, shared: &Shared, conn: Connection) -> Live {
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

    /// Whether connection `id` is still the current one: a failure on it
    /// says something of the server now, one on a connection already
    /// replaced does not.
    pub(super) fn is_current(&self, id: u64) -> bool {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .is_some_and(|live| live.id == id)
    }

    /// Drops connection `id` if it is still the current one; returns
    /// whether it was.
    pub(super) fn retire(&self, id: u64) -> bool {
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

    pub(super) fn clear(&self) {
        *self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }
}

//! Commands a backend watches for: whether the server has each (a module's
//! command, say), asked when first watched and again on every new
//! connection, since a new connection often means a restarted server,
//! which may come back with the module or without it. On a cluster every
//! new node connection asks, and the answer is the last node's asked: a
//! cluster whose nodes were all restarted with the module is decided on
//! by it again, and a node answering a call without it turns the command
//! absent until the next node connection (that call, and each one like
//! it, goes again to the Lua functions).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::MultiplexedConnection;
use redis::Value;

/// A command watched, and whether the server has it now.
#[derive(Debug, Clone)]
pub(crate) struct WatchedCommand {
    name: &'static str,
    present: Arc<AtomicBool>,
}

/// The commands a backend watches for, shared with its cluster
/// connection's nodes.
pub(crate) type Watched = Arc<Mutex<Vec<WatchedCommand>>>;

impl WatchedCommand {
    /// `name`, not known present until asked.
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            present: Arc::default(),
        }
    }

    /// The command's name.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the server had the command when last asked (or did not
    /// answer without it since).
    pub(crate) fn is_present(&self) -> bool {
        self.present.load(Ordering::Relaxed)
    }

    /// Notes the server's answer to [`command_info`].
    pub(crate) fn set_present(&self, present: bool) {
        self.present.store(present, Ordering::Relaxed);
    }

    /// The server answered a call that it has no such command: absent
    /// until a new connection finds it again.
    pub(crate) fn gone(&self) {
        self.set_present(false);
    }
}

/// `COMMAND INFO name`: the command's entry, or nil when the server has
/// none.
pub(crate) fn command_info(name: &str) -> redis::Cmd {
    let mut info = redis::cmd("COMMAND");
    info.arg("INFO").arg(name);
    info
}

/// Whether a `COMMAND INFO` reply names a command.
pub(crate) fn names_a_command(reply: &[Value]) -> bool {
    !matches!(reply.first(), Some(Value::Nil) | None)
}

/// Asks the server (or node) behind a new connection for every command in
/// `watched`.
pub(crate) async fn ask_watched(watched: &Watched, conn: &mut MultiplexedConnection) {
    let watched = watched
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for command in watched {
        let reply = conn.send_packed_command(&command_info(command.name)).await;
        command.set_present(matches!(reply, Ok(Value::Array(reply)) if names_a_command(&reply)));
    }
}

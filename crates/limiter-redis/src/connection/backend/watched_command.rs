//! Commands a backend watches for: whether the server has each (a module's
//! command, say), asked when first watched and again on every new
//! connection to one server, since a new connection often means a
//! restarted server, which may come back with the module or without it.
//! On a cluster the answer is the node's that is asked when watching
//! starts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::Value;

use super::{RedisBackend, Shared};

/// A command watched, and whether the server has it now.
#[derive(Debug, Clone)]
pub(crate) struct WatchedCommand {
    name: &'static str,
    present: Arc<AtomicBool>,
}

impl WatchedCommand {
    /// Whether the server had the command when last asked (or did not
    /// answer without it since).
    pub(crate) fn is_present(&self) -> bool {
        self.present.load(Ordering::Relaxed)
    }

    /// The server answered a call that it has no such command: absent
    /// until a new connection finds it again.
    pub(crate) fn gone(&self) {
        self.present.store(false, Ordering::Relaxed);
    }
}

/// `COMMAND INFO name`: the command's entry, or nil when the server has
/// none.
fn command_info(name: &str) -> redis::Cmd {
    let mut info = redis::cmd("COMMAND");
    info.arg("INFO").arg(name);
    info
}

/// Whether a `COMMAND INFO` reply names a command.
fn names_a_command(reply: &[Value]) -> bool {
    !matches!(reply.first(), Some(Value::Nil) | None)
}

impl RedisBackend {
    /// Watches for the command `name`, asking the server now: a server
    /// that cannot be asked (down, or an ACL without `COMMAND`) counts as
    /// one without it.
    pub(crate) async fn watch_command(&self, name: &'static str) -> WatchedCommand {
        let existing = self
            .shared
            .lock_watched()
            .iter()
            .find(|watched| watched.name == name)
            .cloned();
        let watched = existing.unwrap_or_else(|| {
            let watched = WatchedCommand {
                name,
                present: Arc::default(),
            };
            self.shared.lock_watched().push(watched.clone());
            watched
        });
        let present = self
            .command::<Vec<Value>>(&command_info(name))
            .await
            .is_ok_and(|reply| names_a_command(&reply));
        watched.present.store(present, Ordering::Relaxed);
        watched
    }
}

impl Shared {
    /// Asks the server behind a new connection for every watched command.
    pub(super) async fn ask_watched(&self, conn: &mut MultiplexedConnection) {
        let watched = self.lock_watched().clone();
        for command in watched {
            let reply = conn.send_packed_command(&command_info(command.name)).await;
            let present = match reply {
                Ok(Value::Array(reply)) => names_a_command(&reply),
                _ => false,
            };
            command.present.store(present, Ordering::Relaxed);
        }
    }
}

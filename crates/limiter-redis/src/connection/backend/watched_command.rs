//! Watching for a command ([`crate::connection::watched`]) from a backend:
//! asked now, and on every new connection.

use redis::aio::MultiplexedConnection;
use redis::Value;

use super::{RedisBackend, Shared};
use crate::connection::watched::{ask_watched, command_info, names_a_command, WatchedCommand};

impl RedisBackend {
    /// Watches for the command `name`, asking the server now: a server
    /// that cannot be asked (down, or an ACL without `COMMAND`) counts as
    /// one without it.
    pub(crate) async fn watch_command(&self, name: &'static str) -> WatchedCommand {
        let existing = self
            .shared
            .lock_watched()
            .iter()
            .find(|watched| watched.name() == name)
            .cloned();
        let watched = existing.unwrap_or_else(|| {
            let watched = WatchedCommand::new(name);
            self.shared.lock_watched().push(watched.clone());
            watched
        });
        let present = self
            .command::<Vec<Value>>(&command_info(name))
            .await
            .is_ok_and(|reply| names_a_command(&reply));
        watched.set_present(present);
        watched
    }
}

impl Shared {
    /// Asks the server behind a new connection for every watched command.
    pub(super) async fn ask_watched(&self, conn: &mut MultiplexedConnection) {
        ask_watched(&self.watched, conn).await;
    }
}

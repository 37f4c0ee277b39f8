//! Opening a connection: to the server (checked to answer and to be no
//! Redis Cluster node) or to the cluster, with every function library
//! loaded, within the timeouts.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};

use super::connection_slot::Connection;
use super::{Connector, Shared};
use crate::connection::cluster::ClusterConnection;
use crate::error::{is_out_of_memory, is_refused_credentials, BackendError, BackendErrorKind};

impl Shared {
    /// Connects, checks the server answers and is no Redis Cluster node
    /// (one is a configuration error: see [`Shared::refusal`]; so are
    /// credentials the server refuses), loads every registered function
    /// library and asks for every watched command, all within the connection
    /// timeout plus the command timeout. A cluster connection is up once
    /// it has the slot map: it loads the libraries on every primary it
    /// reaches, and on the others when it reaches them, so a node down now
    /// does not keep it from serving the others.
    pub(super) async fn open_connection(&self) -> Result<Connection, BackendError> {
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
                    self.ask_watched(&mut conn).await;
                    Ok::<_, RedisError>(Some(Connection::Server(conn)))
                }
                Connector::Cluster(client) => ClusterConnection::connect(
                    Arc::clone(client),
                    Arc::clone(&self.functions),
                    Arc::clone(&self.watched),
                )
                .await
                .map(|conn| Some(Connection::Cluster(conn))),
            }
        };
        match tokio::time::timeout(self.connection_timeout + self.command_timeout, connect).await {
            Ok(Ok(Some(conn))) => Ok(conn),
            Ok(Ok(None)) => Err(self.cluster_node("INFO cluster says cluster_enabled:1")),
            Ok(Err(e)) if is_refused_credentials(&e) => Err(self.refused_credentials(e)),
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

    /// The configuration error of credentials the server refused
    /// (`error`), with what to fix.
    fn refused_credentials(&self, error: RedisError) -> BackendError {
        BackendError::config(format!(
            "Redis at {} refuses the backend's credentials: {CREDENTIALS_FIX}",
            self.url
        ))
        .with_source(error)
    }
}

/// What to do about credentials the server refuses.
pub(super) const CREDENTIALS_FIX: &str = "set the user and password the server expects, in the \
     URL (redis://user:password@host:port/) or with .username() and .password() on the builder";

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

//! The connection pool: bb8 over multiplexed Redis connections, with
//! broken-connection tracking that costs no round trip.
//!
//! `bb8-redis`'s manager checks a connection with a `PING` on every checkout
//! (two round trips per decision) or, without it, never notices a dead
//! connection. This manager instead marks a connection broken when a command
//! on it fails with an I/O error or a timeout; bb8 then drops it and opens a
//! fresh one, so a restarted server is picked up by the next decision.
//!
//! It also remembers the last failed connection attempt: while no
//! connection is open and an attempt failed less than [`PROBE_INTERVAL`]
//! ago, a checkout fails at once instead of waiting out the connection
//! timeout, so an outage costs one slow decision per interval, not one per
//! request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};

use crate::error::{BackendError, BackendErrorKind};

/// While Redis is unreachable, how often a checkout tries to connect again.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// A pooled connection and whether a command on it has failed.
pub(crate) struct Connection {
    pub(crate) inner: MultiplexedConnection,
    broken: bool,
}

impl Connection {
    /// Records a failure of a command on this connection: an I/O error, a
    /// dropped connection or a timeout retires it.
    pub(crate) fn record(&mut self, error: &RedisError) {
        if error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_unrecoverable_error()
        {
            self.broken = true;
        }
    }

    /// Retires this connection (its command timed out).
    pub(crate) fn mark_broken(&mut self) {
        self.broken = true;
    }
}

/// The last failed connection attempt: when, and why.
type LastFailure = Arc<Mutex<Option<(Instant, String)>>>;

/// Makes connections for bb8.
#[derive(Clone)]
pub(crate) struct Manager {
    client: Client,
    config: AsyncConnectionConfig,
    last_failure: LastFailure,
}

impl Manager {
    pub(crate) fn new(
        client: Client,
        connection_timeout: Duration,
        command_timeout: Duration,
    ) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connection_timeout))
            .set_response_timeout(Some(command_timeout));
        Self {
            client,
            config,
            last_failure: LastFailure::default(),
        }
    }

    fn record(&self, result: &Result<Connection, RedisError>) {
        let mut last = self
            .last_failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *last = match result {
            Ok(_) => None,
            Err(e) => Some((Instant::now(), e.to_string())),
        };
    }

    /// Why the last connection attempt failed, if it did.
    pub(crate) fn last_failure(&self) -> Option<(Instant, String)> {
        self.last_failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = Connection;
    type Error = RedisError;

    async fn connect(&self) -> Result<Connection, RedisError> {
        let result = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
            .map(|inner| Connection {
                inner,
                broken: false,
            });
        self.record(&result);
        result
    }

    async fn is_valid(&self, conn: &mut Connection) -> Result<(), RedisError> {
        if conn.broken {
            Err(RedisError::from((
                redis::ErrorKind::Io,
                "connection retired after a failed command",
            )))
        } else {
            Ok(())
        }
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.broken
    }
}

/// The pool and its manager (for the last connection failure).
#[derive(Clone)]
pub(crate) struct Pool {
    pool: bb8::Pool<Manager>,
    manager: Manager,
    connection_timeout: Duration,
}

impl Pool {
    /// A pool of at most `size` connections that connects lazily.
    pub(crate) fn new(manager: Manager, size: u32, connection_timeout: Duration) -> Self {
        let pool = bb8::Pool::builder()
            .max_size(size)
            .connection_timeout(connection_timeout)
            .test_on_check_out(true) // free: `is_valid` reads the broken flag
            .retry_connection(false)
            .build_unchecked(manager.clone());
        Self {
            pool,
            manager,
            connection_timeout,
        }
    }

    /// Opens one connection now, bounded by the connection timeout, and
    /// hands it to the pool.
    pub(crate) async fn connect_now(
        &self,
    ) -> Result<bb8::PooledConnection<'_, Manager>, BackendError> {
        use bb8::ManageConnection as _;
        let connect = self.manager.connect();
        let conn = match tokio::time::timeout(self.connection_timeout, connect).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                return Err(
                    BackendError::new(BackendErrorKind::Connect, "cannot connect").with_source(e),
                )
            }
            Err(_) => {
                return Err(BackendError::new(
                    BackendErrorKind::Connect,
                    format!("no connection within {:?}", self.connection_timeout),
                ))
            }
        };
        let _ = self.pool.add(conn);
        self.get().await
    }

    /// A connection, or a [`Connect`](BackendErrorKind::Connect) error
    /// within the connection timeout (at once while Redis is known to be
    /// down).
    pub(crate) async fn get(&self) -> Result<bb8::PooledConnection<'_, Manager>, BackendError> {
        if self.pool.state().connections == 0 {
            if let Some((at, why)) = self.manager.last_failure() {
                let ago = at.elapsed();
                if ago < PROBE_INTERVAL {
                    return Err(BackendError::new(
                        BackendErrorKind::Connect,
                        format!(
                            "unreachable: the last connection attempt, {}ms ago, failed: {why}",
                            ago.as_millis()
                        ),
                    ));
                }
            }
        }
        self.pool.get().await.map_err(|e| {
            let why = match (e, self.manager.last_failure()) {
                (bb8::RunError::User(e), _) => e.to_string(),
                (bb8::RunError::TimedOut, Some((_, why))) => why,
                (bb8::RunError::TimedOut, None) => "all connections busy".to_owned(),
            };
            BackendError::new(
                BackendErrorKind::Connect,
                format!("no connection within {:?}: {why}", self.connection_timeout),
            )
        })
    }
}

//! [`RedisBackend::command`]: plain commands on the shared connections, for
//! what an application keeps in Redis beside its limits (an HTTP layer's
//! ban list, say) without a second connection layer.

use redis::{Cmd, FromRedisValue};

use crate::connection::backend::RedisBackend;
use crate::error::{BackendError, BackendErrorKind};

impl RedisBackend {
    /// Runs `cmd`, one plain Redis command (`SET k v PX 5000`, `PTTL k`,
    /// `DEL k`; not a script), on the backend's shared connections, and
    /// converts the reply to `T`.
    ///
    /// The command gets what a decision gets: the command timeout, a dead
    /// connection replaced and the command retried once (within the
    /// timeout, counted from the call's start), and while Redis is known
    /// to be down an [`Error::Backend`](limiter_core::Error::Backend) at
    /// once, without a round trip. A write answered by a timeout may still
    /// have been applied: the retry goes on past the caller's deadline, and
    /// a timed-out command may have reached Redis. On a cluster it goes to the node of
    /// its first key; `PING`, `FUNCTION …`, `SCRIPT …` and commands without
    /// arguments go to every primary, and the first reply is the answer. A
    /// reply of another type is an `Error::Backend` too.
    ///
    /// ```no_run
    /// # async fn run(redis: limiter_redis::RedisBackend) -> Result<(), limiter_core::Error> {
    /// let mut set = redis::cmd("SET");
    /// set.arg("ban:ip:203.0.113.7").arg(1).arg("PX").arg(60_000);
    /// redis.command::<()>(&set).await?;
    /// let ttl_ms: i64 = redis.command(redis::cmd("PTTL").arg("ban:ip:203.0.113.7")).await?;
    /// # let _ = ttl_ms;
    /// # Ok(()) }
    /// ```
    pub async fn command<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, limiter_core::Error> {
        let reply = self.query(cmd, None).await?;
        redis::from_redis_value(reply).map_err(|e| {
            BackendError::new(
                BackendErrorKind::Redis,
                format!("Redis at {}: unexpected reply: {e}", self.url()),
            )
            .into()
        })
    }
}

//! What the Redis server itself reports of a run: the CPU it spent
//! (`INFO cpu`) and the decision commands it ran (`INFO commandstats`),
//! read through the ceiling's plain connection on one server (a cluster's
//! nodes are not summed).

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// The server's CPU time so far, user and system; `None` when it does not
/// say.
pub(super) async fn server_cpu(conn: &mut MultiplexedConnection) -> Option<Duration> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.ok()?;
    let mut seconds = 0.0;
    for name in ["used_cpu_user:", "used_cpu_sys:"] {
        let value = info.lines().find_map(|line| line.strip_prefix(name))?;
        seconds += value.trim().parse::<f64>().ok()?;
    }
    Some(Duration::from_secs_f64(seconds))
}

/// The decision calls the server has run so far: `FCALL`s (the Lua
/// functions) and limiter-redis-module's `LIMITER.DECIDE` and
/// `LIMITER.PEEK`; `None` when it does not say.
pub(super) async fn decision_calls(conn: &mut MultiplexedConnection) -> Option<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .ok()?;
    let mut calls = 0;
    for name in [
        "cmdstat_fcall:calls=",
        "cmdstat_limiter.decide:calls=",
        "cmdstat_limiter.peek:calls=",
    ] {
        // A command never run has no line.
        if let Some(rest) = info.lines().find_map(|line| line.strip_prefix(name)) {
            calls += rest.split(',').next()?.parse::<u64>().ok()?;
        }
    }
    Some(calls)
}

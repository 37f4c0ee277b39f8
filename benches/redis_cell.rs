//! redis-cell (`CL.THROTTLE`, brandur/redis-cell's GCRA module), a peer
//! measured beside the Redis backend on the same server through the same
//! client. Debian does not package it: `scripts/redis-cell` builds it from
//! its crates.io source and prints the module's path, which
//! `REDIS_CELL_MODULE` names.

use limiter_test::redis_server::RedisServer;
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

/// The environment variable naming the module to load.
const MODULE: &str = "REDIS_CELL_MODULE";

/// A redis-server started with `args` and redis-cell loaded, or without
/// it (and `false`, said on stderr with the command that builds it) when
/// `REDIS_CELL_MODULE` is not set.
pub(crate) fn server(args: &[&str]) -> (RedisServer, bool) {
    match std::env::var(MODULE) {
        Ok(path) if !path.is_empty() => {
            let mut all = vec!["--loadmodule", path.as_str()];
            all.extend_from_slice(args);
            (RedisServer::start_with_args(&all), true)
        }
        _ => {
            eprintln!(
                "{MODULE} is not set: redis-cell is not measured. Run \
                 `{MODULE}=$(scripts/redis-cell) cargo bench ...` to measure it"
            );
            (RedisServer::start_with_args(args), false)
        }
    }
}

/// One `CL.THROTTLE key burst count period 1` through `conn`: whether it
/// admitted (the reply's first element is 0 when it did).
pub(crate) async fn throttle(
    conn: &mut MultiplexedConnection,
    key: &str,
    burst: u64,
    count: u64,
    period_s: u64,
) -> bool {
    let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg(key)
        .arg(burst)
        .arg(count)
        .arg(period_s)
        .arg(1)
        .query_async(conn)
        .await
        .expect("CL.THROTTLE answers");
    reply.first() == Some(&0)
}

/// A redis-rs multiplexed connection to `url`, as a redis-cell user holds
/// one, with no response timeout (redis-rs's default is 500 ms): on a busy
/// machine one late reply is a slow decision, not a failed bench.
pub(crate) async fn connect(url: &str) -> MultiplexedConnection {
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)
        .expect("a Redis URL")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a connection to Redis")
}

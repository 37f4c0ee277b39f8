//! The Redis ceiling: what the same client and server give a trivial
//! script (`return 1`) per call, beside the limiter's decisions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use limiter_redis::RedisBackend;

use super::args::BenchArgs;
use super::phase::{phase, Phase, Tally};
use crate::backend;
use crate::failure::Failure;

/// The ceiling's script.
const CEILING_SCRIPT: &str = "return 1";

/// The ceiling's calls go through the client the limiter's own calls use,
/// so that the ratio compares the decisions with what that same client
/// and server give a trivial script: a comparison through a slower client
/// would flatter the limiter (redis-rs's cluster connection gives fewer
/// calls a second than this crate's cluster routing, docs/benchmarks.md,
/// "Redis Cluster beside one server").
#[derive(Clone)]
pub(super) enum CeilingClient {
    /// One server: one multiplexed redis-rs connection, as the backend's.
    Server(redis::aio::MultiplexedConnection),
    /// A cluster: the backend's own routing ([`RedisBackend::command`]).
    Cluster(RedisBackend),
}

impl CeilingClient {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        match self {
            Self::Server(connection) => {
                cmd.query_async(connection).await.map_err(|e| e.to_string())
            }
            Self::Cluster(backend) => backend.command(cmd).await.map_err(|e| backend::reason(&e)),
        }
    }
}

/// The ceiling's key for `key`: in the same slot on a cluster (its hash
/// tag is the user key, as in the limiter's state keys).
pub(super) fn ceiling_key(key: &str) -> String {
    format!("{{{key}}}:ceiling")
}

/// A slice of the ceiling: EVALSHA of `return 1` in a loop on clones of
/// `client`, over `keys` as the decisions go over theirs (so a cluster
/// routes each call to the node of the decision it stands for). A node
/// without the script (the first call on each of a cluster's primaries)
/// is sent it with EVAL, which caches it there. A call is "admitted" when
/// it answers 1.
pub(super) async fn ceiling(
    client: CeilingClient,
    keys: &Arc<[String]>,
    args: &BenchArgs,
    duration: Duration,
) -> Result<Phase, Failure> {
    let sha: Arc<str> = redis::Script::new(CEILING_SCRIPT).get_hash().into();
    let concurrency = args.concurrency as usize;
    phase(args.concurrency, duration, |first, deadline| {
        let (mut client, sha, keys) = (client.clone(), Arc::clone(&sha), Arc::clone(keys));
        async move {
            let mut tally = Tally::new();
            let count = keys.len();
            let step = concurrency % count;
            let mut index = first % count;
            loop {
                let started = Instant::now();
                if started >= deadline {
                    break;
                }
                let key = keys[index].as_str();
                index += step;
                if index >= count {
                    index -= count;
                }
                let mut call = redis::cmd("EVALSHA");
                call.arg(&*sha).arg(1).arg(key);
                let mut result: Result<i64, String> = client.query(&call).await;
                // "NOSCRIPT …" from the server, "NoScript: …" as redis-rs
                // writes it.
                if matches!(&result, Err(e) if e.to_ascii_lowercase().contains("noscript")) {
                    let mut eval = redis::cmd("EVAL");
                    eval.arg(CEILING_SCRIPT).arg(1).arg(key);
                    result = client.query(&eval).await;
                }
                tally.latency.record(started.elapsed());
                match result {
                    Ok(1) => tally.admitted += 1,
                    Ok(other) => tally.error(|| format!("`return 1` answered {other}")),
                    Err(e) => tally.error(|| e),
                }
            }
            tally
        }
    })
    .await
}

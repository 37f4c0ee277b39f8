//! What state a policy keeps on Redis: a string (read up front with one
//! `MGET`, written with `SET`) or, for a sliding log of a large limit, a
//! sorted set (read as its request is decided). The key layout and the Lua
//! program both follow from it.

use limiter_core::{Algorithm, Policy};

/// The sliding log of a limit up to this many units keeps its log in one
/// string (`scripts/packed_log.lua`: one command per decision, at most
/// this many 14-byte records and the edge's); a larger one in a sorted set
/// (`scripts/sliding_log.lua`: O(log L) commands, whatever the length).
/// Measured side by side, the string wins up to this length
/// (docs/benchmarks.md, "Why 128"), where Redis's own flat encoding of
/// sorted sets stops too (`zset-max-listpack-entries`). Part of the state
/// encoding a key's record names (limiter-core's `POLICY_RECORD_VERSION`),
/// and written in scripts/policy_change.lua, which reads the states of
/// any policy.
pub(crate) const PACKED_LOG_MAX: u64 = 128;

/// Whether `policy` is a sliding log kept in one string.
pub(crate) fn keeps_packed_log(policy: &Policy) -> bool {
    policy.algorithm() == Algorithm::SlidingLog && policy.limit() <= PACKED_LOG_MAX
}

/// Whether `policy` keeps a string state (every algorithm's but a sliding
/// log's kept in a sorted set), which `start` reads up front with one
/// `MGET`.
pub(crate) fn keeps_string(policy: &Policy) -> bool {
    policy.algorithm() != Algorithm::SlidingLog || keeps_packed_log(policy)
}

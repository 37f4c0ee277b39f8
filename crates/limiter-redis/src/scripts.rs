//! The Lua scripts, one per policy, and their calling convention.
//!
//! Every script takes the same `KEYS`/`ARGV` and returns the same reply (see
//! the comment block opening each `.lua` file): Rust passes the request in
//! microseconds and the policy in ticks; the script answers in ticks with
//! `t_eff` and the request time it used, and Rust converts with
//! [`TickDecision::into_decision`], the single place where the µs
//! conversion of docs/spec.md section 5 lives.

use std::sync::Arc;

use limiter_core::backend::{PerAlgorithm, TickDecision};
use limiter_core::{Algorithm, Decision, Policy};
use redis::Cmd;

/// The prelude every script starts with (argument parsing, time, expiry).
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// The Lua of each algorithm, following the prelude.
const ALGORITHM_SOURCES: PerAlgorithm<&str> = PerAlgorithm {
    fixed_window: include_str!("scripts/fixed_window.lua"),
    sliding_log: include_str!("scripts/sliding_log.lua"),
    sliding_counter: include_str!("scripts/sliding_counter.lua"),
    token_bucket: include_str!("scripts/token_bucket.lua"),
    leaky_bucket: include_str!("scripts/leaky_bucket.lua"),
};

/// The Lua of one algorithm, following the prelude.
fn algorithm_source(algorithm: Algorithm) -> &'static str {
    ALGORITHM_SOURCES[algorithm]
}

/// A script's source and SHA1, as `EVALSHA` and `SCRIPT LOAD` need them.
#[derive(Debug, Clone)]
pub(crate) struct LuaScript {
    hash: Arc<str>,
    source: Arc<str>,
}

impl LuaScript {
    fn new(source: String) -> Self {
        let hash = redis::Script::new(&source).get_hash().into();
        Self {
            hash,
            source: source.into(),
        }
    }

    /// The script deciding `policy`: its constants (every one below 2^53,
    /// so exact as a Lua number literal), the prelude, the algorithm.
    pub(crate) fn for_policy(policy: &Policy, ttl_floor_ms: u64) -> Self {
        let constants = format!(
            "local tick, W, L, M, ttl_floor = {}, {}, {}, {}, {}\n",
            policy.tick_us(),
            policy.window_ticks(),
            policy.limit(),
            policy.max_cost(),
            ttl_floor_ms,
        );
        Self::new([&constants, PRELUDE, algorithm_source(policy.algorithm())].concat())
    }

    /// The SHA1 of the source, as `EVALSHA` names the script.
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }

    /// `SCRIPT LOAD source`.
    pub(crate) fn load_command(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(&*self.source);
        cmd
    }

    /// `EVALSHA` of one decision on `key`, with the `ARGV` every script
    /// reads: the mode, the cost, the request time in µs ("" for Redis
    /// `TIME`).
    pub(crate) fn decide(&self, key: &str, mode: Mode, cost: u64, time_us: Option<u64>) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&*self.hash)
            .arg(1)
            .arg(key)
            .arg(mode.as_arg())
            .arg(cost);
        match time_us {
            Some(t) => cmd.arg(t),
            None => cmd.arg(""),
        };
        cmd
    }
}

/// Whether a script commits an admitted request (`ARGV[1]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Acquire,
    Peek,
}

impl Mode {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Peek => "peek",
        }
    }
}

/// Reads a script's reply `{allowed, remaining, retry_after, reset_after,
/// wait, t_eff, time_us}` into a decision; `None` if it has another shape.
pub(crate) fn decision(policy: &Policy, reply: &redis::Value) -> Option<Decision> {
    let redis::Value::Array(fields) = reply else {
        return None;
    };
    let mut numbers = [0u64; 7];
    if fields.len() != numbers.len() {
        return None;
    }
    for (number, field) in numbers.iter_mut().zip(fields) {
        let redis::Value::Int(value) = field else {
            return None;
        };
        *number = u64::try_from(*value).ok()?;
    }
    let [allowed, remaining, retry_after, reset_after, wait, t_eff, time_us] = numbers;
    if allowed > 1 || time_us / policy.tick_us() > t_eff {
        return None;
    }
    let ticks = TickDecision {
        allowed: allowed == 1,
        remaining,
        retry_after,
        reset_after,
        wait,
        t_eff,
    };
    Some(ticks.into_decision(policy, time_us))
}

//! The five Lua scripts and their shared calling convention.
//!
//! Every script takes the same `KEYS`/`ARGV` and returns the same reply (see
//! the comment block opening each `.lua` file): Rust passes the request in
//! microseconds and the policy in ticks; the script answers in ticks with
//! `t_eff` and the request time it used, and Rust converts with
//! [`TickDecision::into_decision`], the single place where docs/spec.md section 5's
//! µs conversion lives.

use limiter_core::{Algorithm, Decision, Policy, TickDecision};
use redis::Script;

/// The prelude every script starts with (argument parsing, time, expiry).
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// The Lua of one algorithm, following the prelude.
fn algorithm_source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => include_str!("scripts/fixed_window.lua"),
        Algorithm::SlidingLog => include_str!("scripts/sliding_log.lua"),
        Algorithm::SlidingCounter => include_str!("scripts/sliding_counter.lua"),
        Algorithm::TokenBucket => include_str!("scripts/token_bucket.lua"),
        Algorithm::LeakyBucket => include_str!("scripts/leaky_bucket.lua"),
    }
}

/// The script deciding `policy`: its constants (every one below 2^53, so
/// exact as a Lua number literal), the prelude, the algorithm.
pub(crate) fn script(policy: &Policy, ttl_floor_ms: u64) -> Script {
    let constants = format!(
        "local tick, W, L, M, ttl_floor = {}, {}, {}, {}, {}\n",
        policy.tick_us(),
        policy.window_ticks(),
        policy.limit(),
        policy.max_cost(),
        ttl_floor_ms,
    );
    Script::new(&[&constants, PRELUDE, algorithm_source(policy.algorithm())].concat())
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

/// The `ARGV` of one decision, in the order every script reads them.
pub(crate) fn args(mode: Mode, cost: u64, time_us: Option<u64>) -> [String; 3] {
    [
        mode.as_arg().to_owned(),
        cost.to_string(),
        time_us.map(|t| t.to_string()).unwrap_or_default(),
    ]
}

/// Reads a script's reply `{allowed, remaining, retry_after, reset_after,
/// wait, t_eff, time_us}` into a decision; `None` if it has another shape.
pub(crate) fn decision(policy: &Policy, reply: &[u64]) -> Option<Decision> {
    let &[allowed, remaining, retry_after, reset_after, wait, t_eff, time_us] = reply else {
        return None;
    };
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

//! The five Lua scripts and their shared calling convention.
//!
//! Every script takes the same `KEYS`/`ARGV` and returns the same reply (see
//! the comment block opening each `.lua` file): Rust passes the request in
//! microseconds and the policy in ticks; the script answers in ticks with
//! `t_eff` and the request time it used, and Rust converts with
//! [`TickDecision::into_decision`], the single place where SPEC section 5's
//! µs conversion lives.

use std::sync::LazyLock;

use limiter_core::{Algorithm, Decision, Policy, TickDecision};
use redis::Script;

/// One algorithm's script: the shared prelude (argument parsing, time,
/// expiry), then the algorithm's own file.
macro_rules! with_prelude {
    ($file:literal) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            include_str!(concat!("scripts/", $file))
        )
    };
}

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("fixed_window.lua")));
static SLIDING_LOG: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("sliding_log.lua")));
static SLIDING_COUNTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("sliding_counter.lua")));
static TOKEN_BUCKET: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("token_bucket.lua")));
static LEAKY_BUCKET: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_prelude!("leaky_bucket.lua")));

/// The script deciding `algorithm`.
pub(crate) fn script(algorithm: Algorithm) -> &'static Script {
    match algorithm {
        Algorithm::FixedWindow => &FIXED_WINDOW,
        Algorithm::SlidingLog => &SLIDING_LOG,
        Algorithm::SlidingCounter => &SLIDING_COUNTER,
        Algorithm::TokenBucket => &TOKEN_BUCKET,
        Algorithm::LeakyBucket => &LEAKY_BUCKET,
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

/// The `ARGV` of one decision, in the order every script reads them.
pub(crate) fn args(
    policy: &Policy,
    mode: Mode,
    cost: u64,
    time_us: Option<u64>,
    ttl_floor_ms: u64,
) -> [String; 8] {
    [
        mode.as_arg().to_owned(),
        cost.to_string(),
        time_us.map(|t| t.to_string()).unwrap_or_default(),
        policy.tick_us().to_string(),
        policy.window_ticks().to_string(),
        policy.limit().to_string(),
        policy.max_cost().to_string(),
        ttl_floor_ms.to_string(),
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

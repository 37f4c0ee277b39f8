//! The Lua scripts, one per policy (or policy set), and their calling
//! convention.
//!
//! Each algorithm's `.lua` file defines one function that decides a request
//! on one key without writing (see the comment block opening each file and
//! `prelude.lua`). A script is the prelude, the functions its policies use,
//! and an epilogue written here: it calls each policy's function on its
//! key, with the policy's constants written in, commits every part only if
//! every part admits (docs/spec.md section 7; one part is one policy), and
//! replies in ticks. Rust converts each part with
//! [`TickDecision::into_decision`], the single place where the µs
//! conversion of docs/spec.md section 5 lives.

use std::fmt::Write as _;
use std::sync::Arc;

use limiter_core::backend::{PerAlgorithm, TickDecision};
use limiter_core::{Decision, Policy};
use redis::Cmd;

/// The prelude every script starts with (argument parsing, time, expiry).
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// Each algorithm's Lua, and the name of the function it defines.
const ALGORITHMS: PerAlgorithm<(&str, &str)> = PerAlgorithm {
    fixed_window: (include_str!("scripts/fixed_window.lua"), "fixed_window"),
    sliding_log: (include_str!("scripts/sliding_log.lua"), "sliding_log"),
    sliding_counter: (
        include_str!("scripts/sliding_counter.lua"),
        "sliding_counter",
    ),
    token_bucket: (include_str!("scripts/token_bucket.lua"), "token_bucket"),
    leaky_bucket: (include_str!("scripts/leaky_bucket.lua"), "leaky_bucket"),
};

/// Numbers per part in a reply: allowed, remaining, retry_after,
/// reset_after, reset_now, wait, t_eff.
const PART_FIELDS: usize = 7;

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

    /// The script deciding `parts` (one policy, or every policy of a
    /// set) on `KEYS[1..=parts.len()]`: the TTL floor, the prelude, each
    /// algorithm used once, and the epilogue with each part's constants
    /// (every one below 2^53, so exact as a Lua number literal).
    pub(crate) fn for_parts(parts: &[Policy], ttl_floor_ms: u64) -> Self {
        let mut source = format!("local ttl_floor = {ttl_floor_ms}\n{PRELUDE}");
        let mut included = PerAlgorithm::from_fn(|_| false);
        for policy in parts {
            let algorithm = policy.algorithm();
            if !std::mem::replace(&mut included[algorithm], true) {
                source.push_str(ALGORITHMS[algorithm].0);
            }
        }
        for (i, policy) in parts.iter().enumerate() {
            let p = i + 1;
            let _ = writeln!(
                source,
                "local a{p}, r{p}, ra{p}, rs{p}, rn{p}, w{p}, te{p}, x{p} = {}(KEYS[{p}], {}, {}, {}, {})",
                ALGORITHMS[policy.algorithm()].1,
                policy.tick_us(),
                policy.window_ticks(),
                policy.limit(),
                policy.max_cost(),
            );
        }
        let all = (1..=parts.len())
            .map(|p| format!("a{p}"))
            .collect::<Vec<_>>();
        let commits = (1..=parts.len())
            .map(|p| format!("x{p}()"))
            .collect::<Vec<_>>();
        let _ = writeln!(
            source,
            "if acquire and {} then {} end",
            all.join(" and "),
            commits.join(" ")
        );
        source
            .push_str("local function bit(a) if a then return 1 end return 0 end\nreturn {time_us");
        for p in 1..=parts.len() {
            let _ = write!(
                source,
                ", bit(a{p}), r{p}, ra{p}, rs{p}, rn{p}, w{p}, te{p}"
            );
        }
        source.push_str("}\n");
        Self::new(source)
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

    /// `EVALSHA` of one decision on `keys` (one per part), with the `ARGV`
    /// every script reads: the mode, the cost, the request time in µs (""
    /// for Redis `TIME`).
    pub(crate) fn decide<K: redis::ToRedisArgs>(
        &self,
        keys: &[K],
        mode: Mode,
        cost: u64,
        time_us: Option<u64>,
    ) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&*self.hash).arg(keys.len());
        for key in keys {
            cmd.arg(key);
        }
        cmd.arg(mode.as_arg()).arg(cost);
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

/// One part's answer in a script's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartReply {
    /// The part's decision; `reset_after` is the reset after the commit
    /// when the part admits.
    pub(crate) decision: Decision,
    /// The reset of the part's state as it stands (equal to the decision's
    /// when the part denies).
    pub(crate) reset_now: std::time::Duration,
}

/// Reads a script's reply `{time_us, then per part: allowed, remaining,
/// retry_after, reset_after, reset_now, wait, t_eff}` for `parts`, calling
/// `each` with every part's answer in order; `None` if the reply has
/// another shape.
pub(crate) fn read_reply(
    parts: &[Policy],
    reply: &redis::Value,
    mut each: impl FnMut(PartReply),
) -> Option<()> {
    let redis::Value::Array(fields) = reply else {
        return None;
    };
    if fields.len() != 1 + PART_FIELDS * parts.len() {
        return None;
    }
    let number = |field: &redis::Value| match field {
        redis::Value::Int(value) => u64::try_from(*value).ok(),
        _ => None,
    };
    let time_us = number(&fields[0])?;
    for (policy, part) in parts.iter().zip(fields[1..].chunks_exact(PART_FIELDS)) {
        let mut numbers = [0u64; PART_FIELDS];
        for (n, field) in numbers.iter_mut().zip(part) {
            *n = number(field)?;
        }
        let [allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff] = numbers;
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
        let now = TickDecision {
            reset_after: reset_now,
            ..ticks
        };
        each(PartReply {
            decision: ticks.into_decision(policy, time_us),
            reset_now: now.into_decision(policy, time_us).reset_after,
        });
    }
    Some(())
}

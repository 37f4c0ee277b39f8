//! The Lua code, one Redis Functions library per policy (or policy set),
//! and its calling convention.
//!
//! Each algorithm's `.lua` file defines one function that decides a request
//! on one key without writing (see the comment block opening each file and
//! `prelude.lua`). A library is the prelude, the functions its policies
//! use, and one registered function written here: it calls each policy's
//! function on its key, with the policy's constants written in, commits
//! every part only if every part admits (docs/spec.md section 7; one part
//! is one policy), and replies in ticks. Rust converts each part with
//! [`TickDecision::into_decision`], the single place where the µs
//! conversion of docs/spec.md section 5 lives.

use std::fmt::Write as _;
use std::sync::Arc;

use limiter_core::backend::{PerAlgorithm, TickDecision};
use limiter_core::{Algorithm, Decision, Policy};
use redis::Cmd;

use crate::keys::KeyLayout;

/// The prelude every library starts with (arguments, time, helpers).
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

/// A Redis Functions library deciding one policy (or policy set): its
/// source, for `FUNCTION LOAD`, and the name of the one function it
/// registers, for `FCALL`.
///
/// Functions rather than `EVALSHA` scripts: a library's top level runs once
/// at load, so the helpers and algorithm functions are not created again
/// on every call (about 1.5 µs of the server's time per decision, measured
/// with `redis-benchmark` on Redis 7.0). Needs Redis 7.0 or later.
#[derive(Debug, Clone)]
pub(crate) struct LuaFunction {
    name: Arc<str>,
    source: Arc<str>,
}

impl LuaFunction {
    /// The library deciding `parts` (one policy, or every policy of a set)
    /// on `KEYS[1..=parts.len()]`: the TTL floor, the prelude, each
    /// algorithm used once, and the function with each part's constants
    /// (every one below 2^53, so exact as a Lua number literal). Library
    /// and function are both named `limiter_` and 64 bits of the SHA1 of
    /// the code, so one policy set on many app instances loads one
    /// library, and two sets never collide.
    pub(crate) fn for_parts(parts: &[Policy], ttl_floor_ms: u64) -> Self {
        let mut code = format!("local ttl_floor = {ttl_floor_ms}\n{PRELUDE}");
        let mut included = PerAlgorithm::from_fn(|_| false);
        for policy in parts {
            let algorithm = policy.algorithm();
            if !std::mem::replace(&mut included[algorithm], true) {
                code.push_str(ALGORITHMS[algorithm].0);
            }
        }
        // Every algorithm but the sliding log (a sorted set) keeps its
        // state in a string, which `start` reads up front with one MGET.
        let prefetch = parts
            .iter()
            .any(|policy| policy.algorithm() != Algorithm::SlidingLog);
        let _ = write!(
            code,
            "local function decide(KEYS, ARGV)\n  start(KEYS, ARGV, {prefetch})\n  \
             local replies = {{}}\n  for r = 1, requests do\n    \
             begin(r)\n    local k = {} * (r - 1)\n",
            parts.len()
        );
        for (i, policy) in parts.iter().enumerate() {
            let p = i + 1;
            let _ = writeln!(
                code,
                "    local a{p}, r{p}, ra{p}, rs{p}, rn{p}, w{p}, te{p}, x{p}, y{p}, z{p}, v{p}, \
                 u{p}, o{p}, s{p} = \
                 {}(KEYS[k + {p}], {}, {}, {}, {})",
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
            .map(|p| format!("x{p}(y{p}, z{p}, v{p}, u{p}, o{p}, s{p})"))
            .collect::<Vec<_>>();
        let _ = writeln!(
            code,
            "    if acquire and {} then {} end",
            all.join(" and "),
            commits.join(" ")
        );
        let _ = write!(
            code,
            "    replies[r] = pack('<{}', time_us",
            "d".repeat(1 + PART_FIELDS * parts.len())
        );
        for p in 1..=parts.len() {
            let _ = write!(code, ", bit(a{p}), r{p}, ra{p}, rs{p}, rn{p}, w{p}, te{p}");
        }
        code.push_str(")\n  end\n  return concat(replies)\nend\n");
        let digest = redis::Script::new(&code).get_hash().to_owned();
        let name = format!("limiter_{}", &digest[..16]);
        let _ = writeln!(
            code,
            "redis.register_function{{function_name = '{name}', callback = decide}}"
        );
        Self {
            source: format!("#!lua name={name}\n{code}").into(),
            name: name.into(),
        }
    }

    /// The library's and its function's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `FUNCTION LOAD REPLACE source`: idempotent, so every app instance
    /// may load it at connect (the code under one name never differs).
    pub(crate) fn load_command(&self) -> Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(&*self.source);
        cmd
    }

    /// `FCALL` deciding `requests` in order, one after the other (see
    /// `prelude.lua`): each request's keys (one per part, laid out by
    /// `layouts`), then one argument packing every request's mode, cost
    /// and time in µs (-1 for Redis `TIME`) as three little-endian
    /// doubles (each an integer below 2^53, exact). Sized up front: one
    /// allocation per buffer.
    pub(crate) fn decide<'r>(
        &self,
        layouts: &[KeyLayout],
        requests: impl Iterator<Item = &'r Request> + Clone,
    ) -> Cmd {
        let count = requests.clone().count();
        let key_bytes: usize = requests
            .clone()
            .map(|r| layouts.iter().map(|l| l.len(&r.key)).sum::<usize>())
            .sum();
        let keys = count * layouts.len();
        let mut cmd = Cmd::with_capacity(
            4 + keys,
            32 + self.name.len() + key_bytes + REQUEST_ARG_BYTES * count,
        );
        cmd.arg("FCALL").arg(&*self.name).arg(keys);
        let mut packed = Vec::with_capacity(REQUEST_ARG_BYTES * count);
        for request in requests {
            for layout in layouts {
                cmd.arg(layout.arg(&request.key));
            }
            let mode = match request.mode {
                Mode::Acquire => 1.0,
                Mode::Peek => 0.0,
            };
            let time = request.time_us.map_or(-1.0, |t| t as f64);
            for field in [mode, request.cost as f64, time] {
                packed.extend_from_slice(&field.to_le_bytes());
            }
        }
        cmd.arg(packed);
        cmd
    }
}

/// Bytes of one request's packed arguments: mode, cost, time.
const REQUEST_ARG_BYTES: usize = 24;

/// One decision to make: the user key, the cost, the mode, and the request
/// time in µs (`None` for Redis `TIME`).
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) key: Box<str>,
    pub(crate) cost: u64,
    pub(crate) mode: Mode,
    pub(crate) time_us: Option<u64>,
}

/// Whether a decision commits an admitted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Acquire,
    Peek,
}

/// One part's answer in a function's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartReply {
    /// The part's decision; `reset_after` is the reset after the commit
    /// when the part admits.
    pub(crate) decision: Decision,
    /// The reset of the part's state as it stands (equal to the decision's
    /// when the part denies).
    pub(crate) reset_now: std::time::Duration,
}

/// Splits a function's reply to `count` requests into each request's
/// part of it (read with [`read_reply`]); `None` if the reply has another
/// shape.
///
/// The reply is one string of little-endian doubles (every number is an
/// integer up to 2^53, exact as a double): one bulk string costs Redis and
/// the client less than an array of integers, each its own RESP value.
pub(crate) fn split_reply<'a>(
    parts: &[Policy],
    reply: &'a redis::Value,
    count: usize,
) -> Option<std::slice::ChunksExact<'a, u8>> {
    let redis::Value::BulkString(bytes) = reply else {
        return None;
    };
    let each = 8 * (1 + PART_FIELDS * parts.len());
    (bytes.len() == each * count).then(|| bytes.chunks_exact(each))
}

/// Reads one request's reply `{time_us, then per part: allowed,
/// remaining, retry_after, reset_after, reset_now, wait, t_eff}` for
/// `parts`, calling `each` with every part's answer in order; `None` if the
/// reply has another shape.
pub(crate) fn read_reply(
    parts: &[Policy],
    bytes: &[u8],
    mut each: impl FnMut(PartReply),
) -> Option<()> {
    if bytes.len() != 8 * (1 + PART_FIELDS * parts.len()) {
        return None;
    }
    let mut numbers = bytes.chunks_exact(8).map(|field| {
        let value = f64::from_le_bytes(field.try_into().ok()?);
        // Integral, non-negative and at most 2^53: the cast is exact.
        ((0.0..=9_007_199_254_740_992.0).contains(&value) && value.fract() == 0.0)
            .then_some(value as u64)
    });
    let time_us = numbers.next()??;
    for policy in parts {
        let mut fields = [0u64; PART_FIELDS];
        for field in &mut fields {
            *field = numbers.next()??;
        }
        let [allowed, remaining, retry_after, reset_after, reset_now, wait, t_eff] = fields;
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

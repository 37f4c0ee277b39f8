//! The Lua code, one Redis Functions library per policy (or policy set),
//! and its calling convention.
//!
//! Each algorithm's `.lua` file defines one function that decides a request
//! on one key without writing (see the comment block opening each file and
//! `prelude.lua`). A library is the prelude, the functions its policies
//! use, and one registered function generated here ([`decide_function`];
//! examples checked in under `scripts/generated/`): it calls each policy's
//! function on its key, with the policy's constants written in, commits
//! every part only if every part admits (docs/spec.md section 7; one part
//! is one policy), and replies in ticks. Rust converts each part with
//! [`TickDecision::into_decision`], the single place where the µs
//! conversion of docs/spec.md section 5 lives.
//!
//! # Wire format
//!
//! One `FCALL` decides R requests in order, each on P parts. Every number
//! is an integer below 2^53, sent and answered as a little-endian double
//! (`<d`, exact): one packed string costs Redis and the client less than
//! an argument or a RESP integer per number.
//!
//! | what | layout |
//! |---|---|
//! | keys, one server or one slot | `KEYS[(r-1)*P + i]`: request r's state key under part i ([`Keys::Declared`]) |
//! | keys, a hot key's batch | `KEYS[1..=P]` once, when every request is on the same key with the same arguments |
//! | keys, several slots of one cluster node | `KEYS[1..=P]` the first request's (it routes the call), and every request's P keys in `ARGV[2..]`, laid out as above ([`Keys::AcrossSlots`]) |
//! | `ARGV[1]`, per request | `<ddd`, 24 bytes: mode (1 acquire, 0 peek), cost, time in µs (-1 for Redis `TIME`) |
//! | `ARGV[1]`, uniform batch | `<ddd` once, when every request has the same three |
//! | `ARGV[1]`, hot key's batch | `<dddd`: the three, then R |
//! | reply | `<d` the call's Redis `TIME` in µs (0 when no request read it), then R records |
//! | record | per part: allowed (0/1), remaining, retry_after, reset_after, t_eff (ticks); then reset_now when P > 1; then wait for a leaky bucket ([`part_fields`]) |
//! | record, a key of another type | some part's t_eff is -1: its sorted set's key holds another type (`WRONGTYPE`); the request is not decided and nothing of it is written ([`holds_another_type`]) |
//! | reply, a cross-slot batch one of whose keys the node does not serve now | the integer 0, nothing written ([`is_elsewhere`]) |

use std::fmt::Write as _;
use std::sync::Arc;

use limiter_core::backend::{PerAlgorithm, TickDecision};
use limiter_core::{Algorithm, Decision, Policy};
use redis::Cmd;

use crate::connection::library::Library;
use crate::protocol::keys::KeyLayout;
use crate::protocol::state::{keeps_packed_log, keeps_string};

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

/// The sliding log in one string (see [`PACKED_LOG_MAX`](super::state::PACKED_LOG_MAX)).
const PACKED_LOG: (&str, &str) = (include_str!("scripts/packed_log.lua"), "packed_log");

/// The Lua deciding `policy`, and the name of the function it defines.
fn script(policy: &Policy) -> (&'static str, &'static str) {
    if keeps_packed_log(policy) {
        PACKED_LOG
    } else {
        ALGORITHMS[policy.algorithm()]
    }
}

/// Numbers in one part's answer (the wire format's record). Each number a
/// reply leaves out is less for Redis to `pack` per decision, and a field
/// less for the client to read (docs/benchmarks.md, "Server time per
/// decision").
fn part_fields(policy: &Policy, parts: usize) -> usize {
    5 + usize::from(parts > 1) + usize::from(policy.algorithm() == Algorithm::LeakyBucket)
}

/// Numbers in one request's answer: every part's.
fn record_fields(parts: &[Policy]) -> usize {
    parts.iter().map(|p| part_fields(p, parts.len())).sum()
}

/// A Redis Functions library deciding one policy (or policy set): its
/// source, for `FUNCTION LOAD`, and the names of the two functions it
/// registers, for `FCALL`: one that may write, and the same code
/// registered `no-writes` for calls that only peek, which Redis then runs
/// when it is full (`maxmemory` reached: a function that may write is
/// refused before it runs) and refuses to let write.
///
/// Functions rather than `EVALSHA` scripts: a library's top level runs once
/// at load, so the helpers and algorithm functions are not created again
/// on every call (docs/benchmarks.md, "Server time per decision"). Needs
/// Redis 7.0 or later.
#[derive(Debug, Clone)]
pub(crate) struct LuaFunction {
    /// The library, named as its function.
    library: Library,
    /// The function registered `no-writes`, for calls that only peek.
    peek_name: Arc<str>,
    /// Whether every part keeps a string state, which one call can read up
    /// front over several slots of a cluster's node (see
    /// [`decide`](Self::decide)); a sorted set (the sliding log of a large
    /// limit) is read as it is decided.
    across_slots: bool,
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
        for file in included_scripts(parts) {
            code.push_str(file.0);
        }
        code.push_str(&decide_function(parts));
        // The registrations are not in the digest: named in this line, they
        // are, so a library of an older release (one function, same code)
        // keeps another name and is not replaced by this one, nor this by it.
        code.push_str("-- registered twice: as is, and no-writes for peeks ('_peek')\n");
        let digest = redis::Script::new(&code).get_hash().to_owned();
        let name = format!("limiter_{}", &digest[..16]);
        let peek_name = format!("{name}_peek");
        let _ = writeln!(
            code,
            "redis.register_function{{function_name = '{name}', callback = decide, \
             flags = {{'allow-cross-slot-keys'}}}}\n\
             redis.register_function{{function_name = '{peek_name}', callback = decide, \
             flags = {{'no-writes', 'allow-cross-slot-keys'}}}}"
        );
        Self {
            library: Library::new(format!("#!lua name={name}\n{code}").into(), name.into()),
            peek_name: peek_name.into(),
            across_slots: parts.iter().all(keeps_string),
        }
    }

    /// Whether one call may decide requests whose keys lie in different
    /// slots of one cluster node ([`Keys::AcrossSlots`]).
    pub(crate) fn decides_across_slots(&self) -> bool {
        self.across_slots
    }

    /// The library, for the connection layer to load.
    pub(crate) fn library(&self) -> &Library {
        &self.library
    }

    /// `FCALL` deciding `requests` in order, one after the other, their
    /// keys (one per part, laid out by `layouts`) passed as `keys` says,
    /// in the wire format of this module's doc. Sized up front: one
    /// allocation per buffer.
    pub(crate) fn decide<'r>(
        &self,
        layouts: &[KeyLayout],
        requests: impl Iterator<Item = &'r Request> + Clone,
        keys: Keys,
    ) -> Cmd {
        let count = requests.clone().count();
        // Peeks alone go to the no-writes function, which a full Redis
        // still runs.
        let name = match requests.clone().all(|r| r.mode == Mode::Peek) {
            true => &*self.peek_name,
            false => self.library.name(),
        };
        let key_bytes = |r: &Request| layouts.iter().map(|l| l.len(&r.key)).sum::<usize>();
        let all_key_bytes: usize = requests.clone().map(key_bytes).sum();
        let first = requests.clone().next();
        let first_arguments = first.map(Request::arguments);
        let uniform = requests
            .clone()
            .all(|r| Some(r.arguments()) == first_arguments);
        let one_key = keys == Keys::Declared
            && uniform
            && count > 1
            && requests
                .clone()
                .all(|r| first.is_some_and(|f| f.key == r.key));
        let (declared, declared_bytes) = match keys {
            Keys::Declared if one_key => (layouts.len(), first.map_or(0, key_bytes)),
            Keys::Declared => (count * layouts.len(), all_key_bytes),
            Keys::AcrossSlots => (layouts.len(), first.map_or(0, key_bytes)),
        };
        let spread = usize::from(keys == Keys::AcrossSlots);
        let mut cmd = Cmd::with_capacity(
            4 + declared + spread * count * layouts.len(),
            32 + name.len() + declared_bytes + spread * all_key_bytes + REQUEST_ARG_BYTES * count,
        );
        cmd.arg("FCALL").arg(name).arg(declared);
        let mut packed = Vec::with_capacity(REQUEST_ARG_BYTES * count);
        for (i, request) in requests.clone().enumerate() {
            if (keys == Keys::Declared && !one_key) || i == 0 {
                for layout in layouts {
                    cmd.arg(layout.arg(&request.key));
                }
            }
            if i == 0 || !uniform {
                for field in request.arguments() {
                    packed.extend_from_slice(&field.to_le_bytes());
                }
            }
        }
        if one_key {
            packed.extend_from_slice(&(count as f64).to_le_bytes());
        }
        cmd.arg(packed);
        if keys == Keys::AcrossSlots {
            for request in requests {
                for layout in layouts {
                    cmd.arg(layout.arg(&request.key));
                }
            }
        }
        cmd
    }
}

/// The algorithm files `parts` need, each once, in order of first use.
fn included_scripts(parts: &[Policy]) -> Vec<(&'static str, &'static str)> {
    let mut included: Vec<(&str, &str)> = Vec::new();
    for policy in parts {
        let file = script(policy);
        if !included.iter().any(|(_, name)| *name == file.1) {
            included.push(file);
        }
    }
    included
}

/// The values each algorithm's function returns (see `prelude.lua`), as
/// the generated code names them for part `p`: `allowed_1`, `write_1`…
const PART_VALUES: [&str; 14] = [
    "allowed",
    "remaining",
    "retry_after",
    "reset_after",
    "reset_now",
    "wait",
    "t_eff",
    "write",
    "write_a",
    "write_b",
    "write_c",
    "write_d",
    "write_e",
    "write_f",
];

/// Part `p`'s local holding `value`, e.g. `allowed_1`.
fn part_local(value: &str, p: usize) -> String {
    format!("{value}_{p}")
}

/// The code generated for `parts`: the registered function `decide`, which
/// calls each part's algorithm with the part's constants written in
/// (every one below 2^53, so exact as a Lua number literal), commits every
/// part only if every part admits, and packs the reply (the wire format
/// of this module's doc).
/// Checked in for a few policy sets under `scripts/generated/` (a test
/// compares).
fn decide_function(parts: &[Policy]) -> String {
    let prefetch = parts.iter().any(keeps_string);
    let mut code = format!(
        "local function decide(KEYS, ARGV)\n  \
         local keys, base, step = start(KEYS, ARGV, {parts}, {prefetch})\n  \
         if not keys then return 0 end\n  \
         local replies = {{}}\n  for r = 1, requests do\n    \
         if r == 1 or not uniform then begin(r) end\n    \
         local k = base + step * (r - 1)\n",
        parts = parts.len()
    );
    for (i, policy) in parts.iter().enumerate() {
        let p = i + 1;
        let locals = PART_VALUES.map(|value| part_local(value, p)).join(", ");
        let _ = writeln!(
            code,
            "    local {locals} =\n      {}(keys[k + {p}], {}, {}, {}, {}, {})",
            script(policy).1,
            policy.tick_us(),
            policy.window_ticks(),
            policy.limit(),
            policy.max_cost(),
            policy.fill_ticks(),
        );
    }
    let all = (1..=parts.len())
        .map(|p| part_local("allowed", p))
        .collect::<Vec<_>>();
    // A policy repeated in a set keeps one state under one key (its tag),
    // decided alike for every repetition: committed once. Twice, the
    // sliding log's string, which a commit edits as it then stands, would
    // hold each admission twice and lose its edge record.
    let commits = (1..=parts.len())
        .filter(|&p| !parts[..p - 1].contains(&parts[p - 1]))
        .map(|p| {
            let arguments = PART_VALUES[8..]
                .iter()
                .map(|value| part_local(value, p))
                .collect::<Vec<_>>()
                .join(", ");
            format!("{}({arguments})", part_local("write", p))
        })
        .collect::<Vec<_>>();
    let _ = writeln!(
        code,
        "    if acquire and {} then\n      {}\n    end",
        all.join(" and "),
        commits.join("\n      ")
    );
    let mut fields = Vec::new();
    for (i, policy) in parts.iter().enumerate() {
        let p = i + 1;
        // `allowed` as 0 or 1, written out rather than called: each Lua
        // call costs Redis more than the test it makes.
        fields.push(format!("{} and 1 or 0", part_local("allowed", p)));
        for value in ["remaining", "retry_after", "reset_after", "t_eff"] {
            fields.push(part_local(value, p));
        }
        if parts.len() > 1 {
            fields.push(part_local("reset_now", p));
        }
        if policy.algorithm() == Algorithm::LeakyBucket {
            fields.push(part_local("wait", p));
        }
    }
    debug_assert_eq!(fields.len(), record_fields(parts));
    // The call's Redis TIME (0 when no request read it) once, first.
    let _ = write!(
        code,
        "    replies[r + 1] = pack('<{}',\n      {})\n  end\n  \
         flush()\n  replies[1] = pack('<d', server_us or 0)\n  return concat(replies)\nend\n",
        "d".repeat(fields.len()),
        fields.join(", ")
    );
    code
}

/// Where an `FCALL` passes its requests' keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// All as the call's keys: one server, or one slot of a cluster.
    Declared,
    /// On a cluster, for requests in several slots of one node: the first
    /// request's as the call's keys (its slot routes the call), and every
    /// request's after the packed arguments. A cluster checks that a
    /// call's keys share a slot; the library, registered with
    /// `allow-cross-slot-keys`, reads every key first and answers 0,
    /// writing nothing, when one is not this node's to serve now
    /// ([`is_elsewhere`]).
    AcrossSlots,
}

/// Whether a reply says the call decided nothing because some of its keys
/// are not served by the node it reached ([`Keys::AcrossSlots`]).
pub(crate) fn is_elsewhere(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::Int(0))
}

/// Bytes of one request's packed arguments: mode, cost, time.
const REQUEST_ARG_BYTES: usize = 24;

/// One decision to make: the user key, the cost, the mode, and the request
/// time in µs (`None` for Redis `TIME`).
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) key: Box<[u8]>,
    pub(crate) cost: u64,
    pub(crate) mode: Mode,
    pub(crate) time_us: Option<u64>,
}

impl Request {
    /// Its arguments as the function reads them: the mode (1 to acquire,
    /// 0 to peek), the cost, and the time in µs (-1 for Redis `TIME`).
    fn arguments(&self) -> [f64; 3] {
        let mode = match self.mode {
            Mode::Acquire => 1.0,
            Mode::Peek => 0.0,
        };
        let time = self.time_us.map_or(-1.0, |t| t as f64);
        [mode, self.cost as f64, time]
    }
}

/// Whether a decision commits an admitted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Acquire,
    Peek,
}

/// One part's answer in a function's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartReply {
    /// The part's decision; `reset_after` is the reset after the commit
    /// when the part admits.
    pub(crate) decision: Decision,
    /// The reset of the part's state as it stands (equal to the decision's
    /// when the part denies).
    pub(crate) reset_now: std::time::Duration,
}

/// Splits a function's reply to `count` requests into the call's Redis
/// `TIME` in µs (0 when no request read it) and each request's record
/// (read with [`read_reply`]); `None` if the reply has another shape (the
/// wire format of this module's doc).
pub(crate) fn split_reply<'a>(
    parts: &[Policy],
    reply: &'a redis::Value,
    count: usize,
) -> Option<(u64, std::slice::ChunksExact<'a, u8>)> {
    let redis::Value::BulkString(bytes) = reply else {
        return None;
    };
    let each = 8 * record_fields(parts);
    if bytes.len() != 8 + each * count {
        return None;
    }
    let (time, records) = bytes.split_at(8);
    Some((whole(time)?, records.chunks_exact(each)))
}

/// An 8-byte little-endian double holding an integer in [0, 2^53].
fn whole(field: &[u8]) -> Option<u64> {
    let value = f64::from_le_bytes(field.try_into().ok()?);
    // Non-negative, at most 2^53, and integral: the cast is exact, and
    // casting back is the integral test (`fract` calls libm's `trunc`).
    ((0.0..=9_007_199_254_740_992.0).contains(&value) && value as u64 as f64 == value)
        .then_some(value as u64)
}

/// Whether a request's record says some part's key holds another type than
/// its state (`t_eff` of -1: the request was not decided, nothing written).
pub(crate) fn holds_another_type(parts: &[Policy], record: &[u8]) -> bool {
    let mut at = 0;
    parts.iter().any(|policy| {
        let t_eff = record.get(8 * (at + 4)..8 * (at + 5));
        at += part_fields(policy, parts.len());
        t_eff.is_some_and(|bytes| bytes == (-1.0f64).to_le_bytes())
    })
}

/// Reads one request's record, decided at `time_us`, for `parts`, calling
/// `each` with every part's answer in order; `None` if the record has
/// another shape (the wire format of this module's doc).
pub(crate) fn read_reply(
    parts: &[Policy],
    bytes: &[u8],
    time_us: u64,
    mut each: impl FnMut(PartReply),
) -> Option<()> {
    if bytes.len() != 8 * record_fields(parts) {
        return None;
    }
    let mut numbers = bytes.chunks_exact(8).map(whole);
    for policy in parts {
        let mut next = || numbers.next().flatten();
        let [allowed, remaining, retry_after, reset_after, t_eff] =
            [next()?, next()?, next()?, next()?, next()?];
        let reset_now = if parts.len() > 1 {
            next()?
        } else {
            reset_after
        };
        let wait = if policy.algorithm() == Algorithm::LeakyBucket {
            next()?
        } else {
            0
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
        let decision = ticks.into_decision(policy, time_us);
        let reset_now = if parts.len() > 1 {
            let now = TickDecision {
                reset_after: reset_now,
                ..ticks
            };
            now.into_decision(policy, time_us).reset_after
        } else {
            decision.reset_after
        };
        each(PartReply {
            decision,
            reset_now,
        });
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use limiter_core::Rate;

    use super::*;

    fn request(key: &str, mode: Mode, cost: u64) -> Request {
        Request {
            key: key.as_bytes().into(),
            cost,
            mode,
            time_us: None,
        }
    }

    /// The arguments of the `FCALL` deciding `requests` under one token
    /// bucket, its keys passed as `keys` says, and the keys' layout.
    fn fcall_arguments(requests: &[Request], keys: Keys) -> (Vec<Vec<u8>>, KeyLayout) {
        let policy = Policy::token_bucket(Rate::new(10, Duration::from_secs(1))).unwrap();
        let function = LuaFunction::for_parts(std::slice::from_ref(&policy), 0);
        let layouts = [KeyLayout::new("test", &policy)];
        let cmd = function.decide(&layouts, requests.iter(), keys);
        let args = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => unreachable!("an FCALL has plain arguments only"),
            })
            .collect();
        let [layout] = layouts;
        (args, layout)
    }

    /// The packed argument (the last) of the `FCALL` deciding `requests`.
    fn packed_argument(requests: &[Request]) -> Vec<u8> {
        let (args, _) = fcall_arguments(requests, Keys::Declared);
        assert_eq!(
            args.len(),
            3 + requests.len() + 1,
            "FCALL, name, count, keys, one argument"
        );
        args.last().unwrap().clone()
    }

    #[test]
    fn a_batch_across_slots_declares_its_first_key_and_passes_every_key_after_the_arguments() {
        let requests = [
            request("a", Mode::Acquire, 1),
            request("b", Mode::Acquire, 1),
            request("c", Mode::Acquire, 1),
        ];
        let (args, layout) = fcall_arguments(&requests, Keys::AcrossSlots);
        let key = |k: &str| layout.state_key(k.as_bytes());
        assert_eq!(args[0], b"FCALL");
        assert_eq!(args[2], b"1", "one key declared: the first request's");
        assert_eq!(args[3], key("a"));
        assert_eq!(
            args[4].len(),
            REQUEST_ARG_BYTES,
            "uniform: the arguments once"
        );
        assert_eq!(args[5..], [key("a"), key("b"), key("c")]);
    }

    /// The little-endian f64 fields of a packed argument.
    fn fields(packed: &[u8]) -> Vec<f64> {
        packed
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn a_uniform_batch_on_one_key_sends_the_key_once_and_the_number_of_requests() {
        let hot = [
            request("a", Mode::Acquire, 1),
            request("a", Mode::Acquire, 1),
            request("a", Mode::Acquire, 1),
        ];
        let (args, layout) = fcall_arguments(&hot, Keys::Declared);
        assert_eq!(args[2], b"1", "one key declared");
        assert_eq!(args[3], layout.state_key(b"a"));
        assert_eq!(
            fields(&args[4]),
            [1.0, 1.0, -1.0, 3.0],
            "the arguments, then R"
        );
        assert_eq!(args.len(), 5);

        // Not uniform, or alone: every request's key.
        let mixed = [request("a", Mode::Acquire, 1), request("a", Mode::Peek, 1)];
        assert_eq!(fcall_arguments(&mixed, Keys::Declared).0.len(), 3 + 2 + 1);
        let alone = [request("a", Mode::Acquire, 1)];
        assert_eq!(packed_argument(&alone).len(), REQUEST_ARG_BYTES);
    }

    /// A call of peeks only goes to the no-writes function (which a full
    /// Redis runs); a call with any acquire, to the one that may write.
    #[test]
    fn peeks_alone_call_the_no_writes_function() {
        let name = |requests: &[Request]| {
            String::from_utf8(fcall_arguments(requests, Keys::Declared).0[1].clone()).unwrap()
        };
        let peeks = name(&[request("a", Mode::Peek, 1), request("b", Mode::Peek, 1)]);
        let acquire = name(&[request("a", Mode::Acquire, 1)]);
        let mixed = name(&[request("a", Mode::Peek, 1), request("b", Mode::Acquire, 1)]);
        assert_eq!(peeks, format!("{acquire}_peek"));
        assert_eq!(mixed, acquire);
        let policy = Policy::token_bucket(Rate::new(10, Duration::from_secs(1))).unwrap();
        let function = LuaFunction::for_parts(&[policy], 0);
        let source = function.library().source();
        assert!(
            source.contains(&format!(
                "function_name = '{peeks}', callback = decide, flags = {{'no-writes'"
            )),
            "{source}"
        );
    }

    /// Where the generated examples are checked in.
    const GENERATED: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/protocol/scripts/generated"
    );

    /// `actual` against the checked-in `file`, or written there when
    /// `LIMITER_BLESS` is set.
    fn check_generated(file: &str, actual: &str) {
        let path = format!("{GENERATED}/{file}");
        if std::env::var_os("LIMITER_BLESS").is_some() {
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            expected == actual,
            "{path} differs from the code generated now; if the change is meant, write it \
             anew with LIMITER_BLESS=1 cargo test -p limiter-redis --lib generated, and read \
             the diff:\n{actual}"
        );
    }

    /// The generated part of a library (the registered function), with a
    /// header naming the policies and the files it follows.
    #[test]
    fn generated_functions_match_the_checked_in_files() {
        for (file, policies) in [
            ("one_policy.lua", "token-bucket:10/1s,capacity=20"),
            (
                "tiered_set.lua",
                "sliding-counter:5/1s;leaky-bucket:100/1m,queue=10",
            ),
            ("packed_log.lua", "sliding-log:10/1m"),
            ("sorted_set_log.lua", "sliding-log:1000/1h"),
        ] {
            let policies: limiter_core::Policies = policies.parse().unwrap();
            let files = included_scripts(&policies)
                .iter()
                .map(|(_, name)| format!("{name}.lua"))
                .collect::<Vec<_>>()
                .join(", ");
            let generated = format!(
                "-- Generated by scripts.rs (decide_function) for {policies}: the code\n\
                 -- that follows `local ttl_floor = <ms>`, prelude.lua and {files} in\n\
                 -- the library, before its two registrations. A test compares this\n\
                 -- file with the code generated now.\n\n{}",
                decide_function(&policies)
            );
            check_generated(file, &generated);
        }
    }

    /// The arguments of an `FCALL` deciding three requests in three slots
    /// of one cluster node, one per line: text as it is, the packed
    /// arguments as their numbers.
    #[test]
    fn a_generated_cross_slot_call_matches_the_checked_in_file() {
        let requests = [
            request("a", Mode::Acquire, 1),
            request("b", Mode::Acquire, 1),
            request("c", Mode::Acquire, 1),
        ];
        let (args, _) = fcall_arguments(&requests, Keys::AcrossSlots);
        let mut lines = vec![
            "# The FCALL deciding requests on keys a, b and c (one node, three".to_owned(),
            "# slots) under token-bucket:10/1s, one argument per line; the packed".to_owned(),
            "# argument as its little-endian doubles. A test compares.".to_owned(),
        ];
        for (i, arg) in args.iter().enumerate() {
            lines.push(match i {
                1 => "<the library's function name>".to_owned(),
                4 => format!("<ddd> {:?}", fields(arg)),
                _ => String::from_utf8(arg.clone()).unwrap(),
            });
        }
        check_generated("cross_slot_batch.txt", &(lines.join("\n") + "\n"));
    }

    #[test]
    fn a_uniform_batch_sends_its_arguments_once_and_a_mixed_one_per_request() {
        let same = [
            request("a", Mode::Acquire, 1),
            request("b", Mode::Acquire, 1),
            request("a", Mode::Acquire, 1),
        ];
        assert_eq!(
            fields(&packed_argument(&same)),
            [1.0, 1.0, -1.0],
            "mode acquire, cost 1, Redis TIME, once"
        );

        let mixed = [
            request("a", Mode::Acquire, 1),
            request("b", Mode::Peek, 1),
            request("c", Mode::Acquire, 2),
        ];
        let each = packed_argument(&mixed);
        assert_eq!(each.len(), 3 * REQUEST_ARG_BYTES);
        assert_eq!(
            fields(&each),
            [1.0, 1.0, -1.0, 0.0, 1.0, -1.0, 1.0, 2.0, -1.0]
        );
    }
}

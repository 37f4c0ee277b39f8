//! The Lua program: one Redis Functions library per policy (or policy
//! set). Its calls and replies are `wire.rs`'s.
//!
//! Each algorithm's `.lua` file defines one function that decides a request
//! on one key without writing (see the comment block opening each file and
//! `prelude.lua`). A library is the prelude, the functions its policies
//! use, and one registered function generated here ([`decide_function`];
//! examples checked in under `scripts/generated/`): it calls each policy's
//! function on its key, with the policy's constants written in, commits
//! every part only if every part admits (docs/spec.md section 7; one part
//! is one policy), and replies in ticks.

use std::fmt::Write as _;
use std::sync::Arc;

use limiter_core::backend::{encode_policy_record, policy_record_tag, PerAlgorithm};
use limiter_core::{Algorithm, Policy};
use redis::Cmd;

use crate::connection::library::Library;
use crate::connection::watched::WatchedCommand;
use crate::protocol::keys::KeyLayout;
use crate::protocol::state::{keeps_packed_log, keeps_string};
use crate::protocol::wire::{self, record_fields, Keys, Request, Target};

/// The prelude every library starts with (arguments, time, helpers).
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// The taking over of a state made under another policy set (docs/spec.md
/// section 9), which every library has after its algorithms.
const POLICY_CHANGE: &str = include_str!("scripts/policy_change.lua");

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
    /// When limiter-redis-module decides instead of the library.
    module: Option<ModuleHead>,
}

/// What a call to limiter-redis-module sends before its packed argument,
/// and, when the engine was detected, whether the server has the module.
#[derive(Debug, Clone)]
struct ModuleHead {
    /// The policies as text.
    policies: Arc<str>,
    /// The TTL floor in ms.
    ttl_floor_ms: u64,
    /// The module's command as the backend watches for it, when the
    /// engine was detected (the library decides while the server has it
    /// not); `None` when the module was asked for.
    detected: Option<WatchedCommand>,
}

impl LuaFunction {
    /// The library deciding `parts` (one policy, or every policy of a set)
    /// on `KEYS[1..=parts.len()]`: the TTL floor, the tag its states end
    /// with (limiter-core's `policy_record_tag`), the prelude, each
    /// algorithm used once, and the function with each part's constants
    /// (every one below 2^53, so exact as a Lua number literal). Library
    /// and function are both named `limiter_` and 64 bits of the SHA1 of
    /// the code, so one policy set on many app instances loads one
    /// library, and two sets never collide.
    pub(crate) fn for_parts(parts: &[Policy], ttl_floor_ms: u64) -> Self {
        let tag = lua_bytes(&policy_record_tag(&encode_policy_record(parts)));
        let mut code = format!("local ttl_floor = {ttl_floor_ms}\nlocal TAG = '{tag}'\n{PRELUDE}");
        for file in included_scripts(parts) {
            code.push_str(file.0);
        }
        code.push_str(POLICY_CHANGE);
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
            module: None,
        }
    }

    /// The same decisions, made by limiter-redis-module's command rather
    /// than the library's function: the same keys, state and reply.
    /// `detected`: the module's command as the backend watches for it,
    /// when the module was detected rather than asked for: the library
    /// decides while the server has it not
    /// ([`leave_module`](Self::leave_module)).
    pub(crate) fn on_module(
        self,
        parts: &[Policy],
        ttl_floor_ms: u64,
        detected: Option<WatchedCommand>,
    ) -> Self {
        let policies = parts
            .iter()
            .map(Policy::to_string)
            .collect::<Vec<_>>()
            .join(";");
        Self {
            module: Some(ModuleHead {
                policies: policies.into(),
                ttl_floor_ms,
                detected,
            }),
            ..self
        }
    }

    /// The same decisions for other `parts`, on the engine `current` was
    /// given (the module, asked for or detected, or the library).
    pub(crate) fn on_engine_of(self, current: &Self, parts: &[Policy]) -> Self {
        match &current.module {
            Some(head) => self.on_module(parts, head.ttl_floor_ms, head.detected.clone()),
            None => self,
        }
    }

    /// The module's head while it decides.
    fn module(&self) -> Option<&ModuleHead> {
        self.module.as_ref().filter(|head| {
            head.detected
                .as_ref()
                .is_none_or(WatchedCommand::is_present)
        })
    }

    /// Whether limiter-redis-module decides.
    pub(crate) fn is_on_module(&self) -> bool {
        self.module().is_some()
    }

    /// After a server answered that it has no module: whether the library
    /// decides until a new connection finds the module again (the module
    /// was detected, whether or not a concurrent call already found it
    /// gone), so that the call may go again to it. A call the module's
    /// command never reached decided nothing.
    pub(crate) fn leave_module(&self) -> bool {
        match self.module.as_ref().and_then(|head| head.detected.as_ref()) {
            Some(watched) => {
                watched.gone();
                true
            }
            None => false,
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

    /// `FCALL` deciding `requests` in order, their keys (one per part,
    /// laid out by `layouts`) passed as `keys` says ([`wire::call`]), to
    /// the library's function or the module's command.
    pub(crate) fn decide<'r>(
        &self,
        layouts: &[KeyLayout],
        requests: impl Iterator<Item = &'r Request> + Clone,
        keys: Keys,
    ) -> Cmd {
        let target = match self.module() {
            Some(head) => Target::Module {
                policies: &head.policies,
                ttl_floor_ms: head.ttl_floor_ms,
            },
            None => Target::Lua {
                function: self.library.name(),
                peek_function: &self.peek_name,
            },
        };
        wire::call(&target, layouts, requests, keys)
    }
}

/// The algorithm files `parts` need, each once, in order of first use;
/// the packed log first when a part keeps a sorted set, whose state a peek
/// takes over from other policies is decided in packed form (it writes
/// nothing, so no sorted set holds it: see policy_change.lua).
fn included_scripts(parts: &[Policy]) -> Vec<(&'static str, &'static str)> {
    let mut included: Vec<(&str, &str)> = Vec::new();
    if !parts.iter().all(keeps_string) {
        included.push(PACKED_LOG);
    }
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

/// `bytes` as the text of a Lua string literal: each byte a decimal escape.
fn lua_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("\\{byte:03}")).collect()
}

/// The code generated for `parts`: the registered function `decide`, which
/// calls each part's algorithm with the part's constants written in
/// (every one below 2^53, so exact as a Lua number literal), commits every
/// part only if every part admits, and packs the reply (`wire.rs`'s
/// table).
/// Checked in for a few policy sets under `scripts/generated/` (a test
/// compares).
fn decide_function(parts: &[Policy]) -> String {
    let record = lua_bytes(&encode_policy_record(parts));
    // The record's key is each request's last (keys.rs), a string: read
    // up front with the others. Its checks are written out: a Lua call
    // per request costs Redis more than the comparison it makes. When
    // every part keeps a string, the first part's state decides, with the
    // record, whether the request takes a state over (policy_change.lua,
    // `foreign`): as limiter-redis-module decides without reading the
    // record when that state ends with the set's tag.
    let mut code = format!(
        "local RECORD = '{record}'\n\
         local function decide(KEYS, ARGV)\n  \
         local keys, base, step = start(KEYS, ARGV, {keys}, true)\n  \
         if not keys then return 0 end\n  \
         local replies = {{}}\n  for r = 1, requests do\n    \
         if r == 1 or not uniform then begin(r) end\n    \
         local k = base + step * (r - 1)\n    \
         local record = keys[k + {keys}]\n    \
         local undo, held = nil, states[record]\n    \
         if {taken} then undo = take_over(RECORD, record) end\n    \
         if charging then charge(RECORD, record) end\n",
        keys = parts.len() + 1,
        taken = if parts.iter().all(keeps_string) {
            "held ~= RECORD and foreign(keys[k + 1], held)"
        } else {
            "held and held ~= RECORD"
        },
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
        "    if acquire and {} then\n      {}\n    end\n    \
         if record_ms > 0 then note_record(record, RECORD) end\n    \
         if undo then restore(undo) end",
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

/// Where the generated examples are checked in.
#[cfg(test)]
const GENERATED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/src/protocol/scripts/generated"
);

/// `actual` against the checked-in `file` of generated examples, or
/// written there when `LIMITER_BLESS` is set.
#[cfg(test)]
pub(crate) fn check_generated(file: &str, actual: &str) {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use limiter_core::Rate;

    use super::*;
    use crate::protocol::wire::Mode;

    /// The function a call of requests in `modes` names: a call of peeks
    /// only, the one registered no-writes (which a full Redis runs); a call
    /// with any acquire, the one that may write.
    #[test]
    fn peeks_alone_call_the_function_registered_no_writes() {
        let policy = Policy::token_bucket(Rate::new(10, Duration::from_secs(1))).unwrap();
        let function = LuaFunction::for_parts(std::slice::from_ref(&policy), 0);
        let layouts = [KeyLayout::for_set("test", &policy.clone().into())[0].clone()];
        let name = |modes: &[Mode]| {
            let requests: Vec<Request> = modes
                .iter()
                .map(|&mode| Request {
                    key: b"a"[..].into(),
                    cost: 1,
                    mode,
                    time_us: None,
                })
                .collect();
            let cmd = function.decide(&layouts, requests.iter(), Keys::Declared);
            let name = match cmd.args_iter().nth(1) {
                Some(redis::Arg::Simple(name)) => String::from_utf8(name.to_vec()).unwrap(),
                _ => unreachable!("an FCALL names its function second"),
            };
            name
        };
        let peeks = name(&[Mode::Peek, Mode::Peek]);
        let acquire = name(&[Mode::Acquire]);
        assert_eq!(acquire, function.library().name());
        assert_eq!(peeks, format!("{acquire}_peek"));
        assert_eq!(name(&[Mode::Peek, Mode::Acquire]), acquire);
        let source = function.library().source();
        assert!(
            source.contains(&format!(
                "function_name = '{peeks}', callback = decide, flags = {{'no-writes'"
            )),
            "{source}"
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
                 -- that follows the library's first lines (`ttl_floor`, `TAG`),\n\
                 -- prelude.lua and {files} in\n\
                 -- the library, before its two registrations. A test compares this\n\
                 -- file with the code generated now.\n\n{}",
                decide_function(&policies)
            );
            check_generated(file, &generated);
        }
    }
}

//! The wire format between a library (`scripts.rs`) and its caller: what
//! one `FCALL` sends and what its reply holds, in one table, with the code
//! that writes the call ([`call`]) and reads the reply ([`split_reply`],
//! [`read_reply`]). Rust converts each part with
//! [`TickDecision::into_decision`], the single place where the µs
//! conversion of docs/spec.md section 5 lives. limiter-redis-module's
//! `LIMITER.DECIDE` takes the same keys, packed argument and reply, after
//! the policies and the TTL floor the library has in its text
//! ([`Target::Module`]), and a batch across slots as
//! `LIMITER.DECIDE_ACROSS`.
//!
//! One `FCALL` decides R requests in order, each on P parts. Every number
//! is an integer below 2^53, sent and answered as a little-endian double
//! (`<d`, exact): one packed string costs Redis and the client less than
//! an argument or a RESP integer per number.
//!
//! | what | layout |
//! |---|---|
//! | keys, one server or one slot | `KEYS[(r-1)*(P+1) + i]`: request r's state key under part i, then (i = P+1) its record's, of the policies the state was made under ([`Keys::Declared`]) |
//! | keys, a hot key's batch | `KEYS[1..=P+1]` once, when every request is on the same key with the same arguments |
//! | keys, several slots of one cluster node | `KEYS[1..=P+1]` the first request's (it routes the call), and every request's P+1 keys in `ARGV[2..]`, laid out as above ([`Keys::AcrossSlots`]) |
//! | `ARGV[1]`, per request | `<ddd`, 24 bytes: mode (1 acquire, 0 peek, 2 charge: cost is then any number of units, and the record a peek of 1 after it), cost, time in µs (-1 for Redis `TIME`) |
//! | `ARGV[1]`, uniform batch | `<ddd` once, when every request has the same three |
//! | `ARGV[1]`, hot key's batch | `<dddd`: the three, then R |
//! | reply | `<d` the call's Redis `TIME` in µs (0 when no request read it), then R records |
//! | record | per part: allowed (0/1), remaining, retry_after, reset_after, t_eff (ticks); then reset_now when P > 1; then wait for a leaky bucket ([`part_fields`]) |
//! | record, a key of another type | some part's t_eff is -1: its sorted set's key holds another type (`WRONGTYPE`); the request is not decided and nothing of it is written ([`holds_another_type`]) |
//! | reply, a cross-slot batch one of whose keys the node does not serve now | the integer 0, nothing written ([`is_elsewhere`]) |

use limiter_core::backend::{whole_double, TickDecision};
use limiter_core::{Algorithm, Decision, Policy};
use redis::Cmd;

use crate::protocol::keys::KeyLayout;

/// Numbers in one part's answer (a record of the table above). Each number a
/// reply leaves out is less for Redis to `pack` per decision, and a field
/// less for the client to read (docs/benchmarks.md, "Server time per
/// decision").
fn part_fields(policy: &Policy, parts: usize) -> usize {
    5 + usize::from(parts > 1) + usize::from(policy.algorithm() == Algorithm::LeakyBucket)
}

/// Numbers in one request's answer: every part's.
pub(crate) fn record_fields(parts: &[Policy]) -> usize {
    parts.iter().map(|p| part_fields(p, parts.len())).sum()
}

/// The call deciding `requests` in order, one after the other, their
/// keys (one per part, laid out by `layouts`) passed as `keys` says, in
/// the format of this module's table, to `target`; a call whose every
/// request only peeks goes to its read-only twin (the Lua
/// function registered `no-writes`, or `LIMITER.PEEK`), which a full Redis
/// still runs. Sized up front: one allocation per buffer.
pub(crate) fn call<'r>(
    target: &Target<'_>,
    layouts: &[KeyLayout],
    requests: impl Iterator<Item = &'r Request> + Clone,
    keys: Keys,
) -> Cmd {
    let count = requests.clone().count();
    let peeks = requests.clone().all(|r| r.mode == Mode::Peek);
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
    let mut packed = Vec::with_capacity(REQUEST_ARG_BYTES * count);
    for (i, request) in requests.clone().enumerate() {
        if i == 0 || !uniform {
            for field in request.arguments() {
                packed.extend_from_slice(&field.to_le_bytes());
            }
        }
    }
    if one_key {
        packed.extend_from_slice(&(count as f64).to_le_bytes());
    }
    let mut cmd = Cmd::with_capacity(
        4 + declared + spread * count * layouts.len(),
        64 + target.head_bytes()
            + declared_bytes
            + spread * all_key_bytes
            + REQUEST_ARG_BYTES * count,
    );
    let declare = |cmd: &mut Cmd| {
        for (i, request) in requests.clone().enumerate() {
            if (keys == Keys::Declared && !one_key) || i == 0 {
                for layout in layouts {
                    cmd.arg(layout.arg(&request.key));
                }
            }
        }
    };
    match *target {
        Target::Lua {
            function,
            peek_function,
        } => {
            let name = if peeks { peek_function } else { function };
            cmd.arg("FCALL").arg(name).arg(declared);
            declare(&mut cmd);
            cmd.arg(packed);
        }
        Target::Module {
            policies,
            ttl_floor_ms,
        } => {
            let name = match (peeks, keys) {
                (false, Keys::Declared) => MODULE_DECIDE,
                (true, Keys::Declared) => MODULE_PEEK,
                (false, Keys::AcrossSlots) => MODULE_DECIDE_ACROSS,
                (true, Keys::AcrossSlots) => MODULE_PEEK_ACROSS,
            };
            cmd.arg(name).arg(policies).arg(ttl_floor_ms).arg(packed);
            declare(&mut cmd);
        }
    }
    if keys == Keys::AcrossSlots {
        for request in requests {
            for layout in layouts {
                cmd.arg(layout.arg(&request.key));
            }
        }
    }
    cmd
}

/// The module's command that decides (limiter-redis-module).
pub(crate) const MODULE_DECIDE: &str = "LIMITER.DECIDE";
/// The module's read-only command, for calls that only peek.
const MODULE_PEEK: &str = "LIMITER.PEEK";
/// The module's command deciding a batch across slots of one node.
const MODULE_DECIDE_ACROSS: &str = "LIMITER.DECIDE_ACROSS";
/// Its read-only twin.
const MODULE_PEEK_ACROSS: &str = "LIMITER.PEEK_ACROSS";
/// Every command of the module: each routed by its fourth argument.
pub(crate) const MODULE_COMMANDS: [&str; 4] = [
    MODULE_DECIDE,
    MODULE_PEEK,
    MODULE_DECIDE_ACROSS,
    MODULE_PEEK_ACROSS,
];

/// What a call runs on the server, and the head of its command: the
/// arguments before the packed arguments and the keys.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// `FCALL function numkeys KEYS… ARGV[1]` of a Lua library's function
    /// (`peek_function` when every request peeks), the policies' constants
    /// in its text.
    Lua {
        function: &'a str,
        peek_function: &'a str,
    },
    /// `LIMITER.DECIDE policies ttl_floor_ms ARGV[1] KEYS…` (`LIMITER.PEEK`
    /// when every request peeks) of limiter-redis-module: the policies
    /// as their text, the keys last (the command declares them so). A
    /// batch across slots goes to `LIMITER.DECIDE_ACROSS` (or
    /// `LIMITER.PEEK_ACROSS`), whose one declared key is the first, and
    /// which checks every other key's slot as the library's function does.
    Module {
        policies: &'a str,
        ttl_floor_ms: u64,
    },
}

impl Target<'_> {
    /// Bytes of the head's arguments, to size the command.
    fn head_bytes(&self) -> usize {
        match self {
            Self::Lua { function, .. } => function.len() + 5,
            Self::Module { policies, .. } => policies.len() + MODULE_DECIDE_ACROSS.len() + 20,
        }
    }
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
            Mode::Charge => 2.0,
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
    /// A charge after the fact of `cost` units (docs/spec.md section 10),
    /// answered as a peek of 1 on the state it leaves.
    Charge,
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
/// (read with [`read_reply`]); `None` if the reply has another shape (this
/// module's table).
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
    whole_double(f64::from_le_bytes(field.try_into().ok()?))
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
/// another shape (this module's table).
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
    use crate::protocol::scripts::check_generated;

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
        let layouts = [KeyLayout::for_set("test", &policy.clone().into())[0].clone()];
        let target = Target::Lua {
            function: "decide",
            peek_function: "decide_peek",
        };
        let cmd = call(&target, &layouts, requests.iter(), keys);
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
    fn peeks_alone_call_the_peek_function() {
        let name = |requests: &[Request]| {
            String::from_utf8(fcall_arguments(requests, Keys::Declared).0[1].clone()).unwrap()
        };
        let peeks = [request("a", Mode::Peek, 1), request("b", Mode::Peek, 1)];
        let mixed = [request("a", Mode::Peek, 1), request("b", Mode::Acquire, 1)];
        assert_eq!(name(&peeks), "decide_peek");
        assert_eq!(name(&mixed), "decide");
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

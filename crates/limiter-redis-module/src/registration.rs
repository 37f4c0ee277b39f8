//! The entry points Redis calls: the module's load function and its four
//! commands, registered by `redis_module!` (redis-module's code, which
//! holds the FFI's `unsafe`; the crate's own is in `open_key.rs` alone).

use std::panic::{catch_unwind, AssertUnwindSafe};

use limiter_core::backend::cluster_slot;
use redis_module::{redis_module, Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::call::Call;
use crate::decide::decide;
use crate::server::Server;

/// What a command's name says of its call.
#[derive(Debug, Clone, Copy)]
struct Command {
    /// Registered read-only: every request must be a peek.
    peeks_only: bool,
    /// Its keys lie in several slots of the node ([`Call::parse_across_slots`]).
    across_slots: bool,
}

/// `LIMITER.DECIDE policies ttl_floor_ms packed key...`: decides and
/// commits (the Lua library's function).
fn decide_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(
        ctx,
        &args,
        Command {
            peeks_only: false,
            across_slots: false,
        },
    )
}

/// `LIMITER.PEEK …`: the same, registered read-only (the Lua library's
/// `_peek` function, `no-writes`), for calls whose every request peeks,
/// which a full Redis still runs. A peek writes nothing.
fn peek_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(
        ctx,
        &args,
        Command {
            peeks_only: true,
            across_slots: false,
        },
    )
}

/// `LIMITER.DECIDE_ACROSS policies ttl_floor_ms packed routing... key...`:
/// decides requests of several slots of one cluster node (the library's
/// function with a batch across slots).
fn decide_across_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(
        ctx,
        &args,
        Command {
            peeks_only: false,
            across_slots: true,
        },
    )
}

/// `LIMITER.PEEK_ACROSS …`: the same, read-only, for peeks.
fn peek_across_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(
        ctx,
        &args,
        Command {
            peeks_only: true,
            across_slots: true,
        },
    )
}

fn run(ctx: &Context, args: &[RedisString], command: Command) -> RedisResult {
    let raw: Vec<&[u8]> = args.iter().skip(1).map(RedisString::as_slice).collect();
    let call = match command.across_slots {
        true => Call::parse_across_slots(&raw),
        false => Call::parse(&raw),
    }
    .map_err(RedisError::String)?;
    if command.peeks_only && call.requests.iter().any(|r| r.acquire || r.charge) {
        return Err(RedisError::Str(
            "ERR limiter: LIMITER.PEEK and LIMITER.PEEK_ACROSS decide peeks only",
        ));
    }
    let writes = call.requests.iter().any(|r| r.acquire || r.charge);
    let server = &mut Server::new(ctx, writes, &args[4.min(args.len())..]);
    if command.across_slots && !serves_every_key(server, &call) {
        // As the library's function: nothing written, and the caller
        // decides each request alone, following the cluster's redirects.
        return Ok(RedisValue::Integer(0));
    }
    // A panic must not cross into Redis (it would abort the server): it
    // is answered as an error.
    let reply = catch_unwind(AssertUnwindSafe(|| decide(&call, server)))
        .unwrap_or_else(|_| Err("ERR limiter: the module failed deciding this call".to_owned()))
        .map_err(RedisError::String)?;
    Ok(RedisValue::StringBuffer(reply))
}

/// Whether the node serves, now, every key of `call`: the cluster checked
/// only the one key the command declares. The keys of each slot are
/// checked together, before any is read, as a command naming them all
/// would be: a slot migrating away from the node is served only while
/// every key named in it is still here.
fn serves_every_key(server: &Server<'_>, call: &Call<'_>) -> bool {
    let mut by_slot: Vec<(u16, &[u8])> = call
        .keys
        .iter()
        .map(|&key| (cluster_slot(key), key))
        .collect();
    by_slot.sort_unstable_by_key(|&(slot, _)| slot);
    by_slot
        .chunk_by(|a, b| a.0 == b.0)
        .all(|slot| server.serves(slot.iter().map(|&(_, key)| key)))
}

redis_module! {
    name: "limiter",
    version: 1,
    allocator: (std::alloc::System, std::alloc::System),
    data_types: [],
    commands: [
        // The keys: every argument from the fourth on.
        ["limiter.decide", decide_command, "write deny-oom", 4, -1, 1, ""],
        ["limiter.peek", peek_command, "readonly", 4, -1, 1, ""],
        // The key: the fourth argument, which routes the call; the module
        // checks every key (`serves_every_key`).
        ["limiter.decide_across", decide_across_command, "write deny-oom", 4, 4, 1, ""],
        ["limiter.peek_across", peek_across_command, "readonly", 4, 4, 1, ""],
    ],
}

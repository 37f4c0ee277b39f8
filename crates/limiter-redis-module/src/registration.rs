//! The entry points Redis calls: the module's load function and its two
//! commands, registered by `redis_module!` (redis-module's code, which
//! holds the FFI's `unsafe`; the crate's own is in `open_key.rs` alone).

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{redis_module, Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::call::Call;
use crate::decide::decide;
use crate::server::Server;

/// `LIMITER.DECIDE policies ttl_floor_ms packed key...`: decides and
/// commits (the Lua library's function).
fn decide_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, &args)
}

/// `LIMITER.PEEK …`: the same, registered read-only (the Lua library's
/// `_peek` function, `no-writes`), for calls whose every request peeks,
/// which a full Redis still runs. A peek writes nothing.
fn peek_command(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    run(ctx, &args)
}

fn run(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let raw: Vec<&[u8]> = args.iter().skip(1).map(RedisString::as_slice).collect();
    let call = Call::parse(&raw).map_err(RedisError::String)?;
    if args[0].as_slice().eq_ignore_ascii_case(b"limiter.peek")
        && call.requests.iter().any(|r| r.acquire)
    {
        return Err(RedisError::Str(
            "ERR limiter: LIMITER.PEEK decides peeks only",
        ));
    }
    // A panic must not cross into Redis (it would abort the server): it
    // is answered as an error.
    let writes = call.requests.iter().any(|r| r.acquire || r.charge);
    let reply = catch_unwind(AssertUnwindSafe(|| {
        decide(
            &call,
            &mut Server::new(ctx, writes, &args[4.min(args.len())..]),
        )
    }))
    .unwrap_or_else(|_| Err("ERR limiter: the module failed deciding this call".to_owned()))
    .map_err(RedisError::String)?;
    Ok(RedisValue::StringBuffer(reply))
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
    ],
}

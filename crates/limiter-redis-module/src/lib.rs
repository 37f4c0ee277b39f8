//! A Redis module deciding limiter-core's rules inside Redis: the Lua
//! functions of limiter-redis, as limiter-core's own state machines.
//!
//! `redis-server --loadmodule …/liblimiter_redis_module.so` (or `MODULE
//! LOAD`) registers `LIMITER.DECIDE` and `LIMITER.PEEK`, and
//! `LIMITER.DECIDE_ACROSS` and `LIMITER.PEEK_ACROSS` for a cluster's batches
//! across slots. They take the Lua
//! library's wire format (limiter-redis's `protocol/wire.rs`: its `KEYS`
//! layout, packed `ARGV[1]` and packed reply), after the policies and the
//! TTL floor the library has in its text ([`call`]), and read and write
//! each algorithm's state in the bytes and with the TTLs the Lua functions
//! use (`string_state.rs`, and the sorted set of a large sliding log), so a
//! key moves from one engine to the other with no reset. They decide with
//! `limiter_core::backend`'s states: the code the memory backend runs.
//!
//! docs/backends.md says when to load it.

pub mod call;
mod decide;
mod log;
mod open_key;
mod registration;
mod server;
mod string_state;

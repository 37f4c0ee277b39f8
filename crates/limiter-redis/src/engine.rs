//! [`Engine`]: what decides on the server.

/// What decides on the server, chosen with
/// [`RedisLimiterBuilder::engine`](crate::RedisLimiterBuilder::engine).
/// Both decide alike, on the same keys in the same bytes: a fleet moves
/// from one to the other with no reset (docs/backends.md, "The Redis
/// module").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Engine {
    /// The module while the server has it, else the Lua functions: asked
    /// at build and on every new connection to one server (a restarted
    /// server may come back with the module or without it); a server that
    /// answers a call without the module sends the limiter back to the Lua
    /// functions, the same call included, until a new connection finds it.
    #[default]
    Detect,
    /// The Lua functions (Redis Functions, Redis 7.0 or later), loaded by
    /// the limiter: any Redis, managed services included.
    Lua,
    /// limiter-redis-module's `LIMITER.DECIDE`, limiter-core's own state
    /// machines compiled into Redis: less server CPU per decision. The
    /// server must load it (`redis-server --loadmodule
    /// …/liblimiter_redis_module.so`, or `MODULE LOAD`); a server without
    /// it fails the decisions.
    Module,
}

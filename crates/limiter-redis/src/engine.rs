//! [`Engine`]: what decides on the server.

/// What decides on the server, chosen with
/// [`RedisLimiterBuilder::engine`](crate::RedisLimiterBuilder::engine).
/// Both decide alike, on the same keys in the same bytes: a fleet moves
/// from one to the other with no reset (docs/backends.md, "The Redis
/// module").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Engine {
    /// The module when the server has it at build, else the Lua
    /// functions; a server that then answers without the module (restarted
    /// without it) sends the limiter back to the Lua functions, for good.
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

//! The shared conformance suite (`limiter-test`) on Redis: every case runs
//! against the test binary's `redis-server` (limiter-redis-module loaded),
//! each limiter under a fresh key prefix with the case's manual clock
//! passed to the server, its calls taken in turn by the Lua functions and
//! by the module, on the same keys.

mod common;

use common::RedisHarness;

limiter_test::conformance_suite!(RedisHarness);

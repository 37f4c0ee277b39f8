//! The shared conformance suite (`limiter-test`) on Redis: every case runs
//! against the test binary's `redis-server`, each limiter under a fresh key
//! prefix with the case's manual clock passed to the scripts.

mod common;

use common::RedisHarness;

limiter_test::conformance_suite!(RedisHarness);

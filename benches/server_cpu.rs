//! The CPU a redis-server has used, as `INFO cpu` reports it: a bench's
//! measure of what its decisions cost the server.

use std::time::Duration;

use limiter_test::redis_server::RedisServer;

/// The server's CPU time so far, user and system.
pub(crate) fn redis_cpu(server: &RedisServer) -> Duration {
    let seconds: f64 = server
        .query("INFO cpu")
        .lines()
        .filter(|line| line.starts_with("used_cpu_sys:") || line.starts_with("used_cpu_user:"))
        .filter_map(|line| line.split(':').nth(1))
        .map(|value| value.trim().parse::<f64>().expect("CPU seconds"))
        .sum();
    Duration::from_secs_f64(seconds)
}

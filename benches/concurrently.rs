//! Operations from many tokio tasks at once: the load of the Redis
//! benches (`limiter.rs`) and of the client's instruction count
//! (`redis_instructions.rs`).

use std::time::{Duration, Instant};

/// Runs `total` operations from `concurrency` tasks at once and returns the
/// wall time.
pub(crate) async fn run_concurrently<F, Fut>(concurrency: u64, total: u64, op: F) -> Duration
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let per_task = total.div_ceil(concurrency);
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let op = op.clone();
            tokio::spawn(async move {
                for i in 0..per_task {
                    op(task * per_task + i).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}
